# What a fresh NixOS install on an NVIDIA DGX Station GB300 needs beyond the serving configuration
# (docs/install.md): UEFI boot from the disk layout's ESP and the GPU driver. Import it next to
# disko's module and ./disko.nix; the hardware scan (nixos-anywhere --generate-hardware-config)
# adds the kernel modules the station's own devices need.
{ lib, ... }:
{
  # UEFI (aarch64): systemd-boot on the ESP that ./disko.nix mounts at /boot. It is unsigned:
  # with the firmware's Secure Boot on, the station will not boot it (docs/install.md).
  boot.loader.systemd-boot.enable = true;
  boot.loader.efi.canTouchEfiVariables = true;
  boot.loader.grub.enable = false;
  # The root filesystem is on NVMe: its driver in the initrd, whatever the hardware scan finds.
  boot.initrd.availableKernelModules = [ "nvme" ];
  hardware.enableRedistributableFirmware = true;

  # Blackwell (GB300) needs NVIDIA's open kernel modules; the driver backs the CDI spec that the
  # serving container's GPUs come from (`hardware.nvidia-container-toolkit`).
  hardware.nvidia.open = true;
  services.xserver.videoDrivers = lib.mkDefault [ "nvidia" ]; # selects the driver; starts no X server
  nixpkgs.config.allowUnfree = true; # the NVIDIA driver's licence
}
