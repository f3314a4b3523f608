{
  description = "vllm-station install path: the DGX Station disk layout (disko) and nixos-anywhere targets";

  # A flake of its own, so that the main flake keeps one public input (nixpkgs): only installing a
  # station needs disko (docs/install.md, "Why a second flake"). Needs Nix >= 2.26 (relative path input).
  inputs = {
    vllm-station.url = "path:..";
    nixpkgs.follows = "vllm-station/nixpkgs";
    disko.url = "github:nix-community/disko/v1.13.0";
    disko.inputs.nixpkgs.follows = "nixpkgs";
  };

  outputs =
    {
      self,
      vllm-station,
      nixpkgs,
      disko,
    }:
    let
      inherit (nixpkgs) lib;

      # Each station's NVMe devices, by id (`ls -l /dev/disk/by-id/ | grep nvme` on the station):
      # replace the placeholders before installing (docs/install.md, step 2). A placeholder names no
      # device, so disko stops before writing anything.
      disks = {
        flash-station = {
          systemDisk = "/dev/disk/by-id/nvme-REPLACE-WITH-THE-SYSTEM-NVME";
        };
        station-a = {
          systemDisk = "/dev/disk/by-id/nvme-REPLACE-WITH-THE-SYSTEM-NVME";
          modelsDisk = "/dev/disk/by-id/nvme-REPLACE-WITH-THE-MODELS-NVME";
        };
        station-b = {
          systemDisk = "/dev/disk/by-id/nvme-REPLACE-WITH-THE-SYSTEM-NVME";
          modelsDisk = "/dev/disk/by-id/nvme-REPLACE-WITH-THE-MODELS-NVME";
        };
      };

      # The flake's example station, unchanged, plus the disk layout and the DGX Station settings.
      # The examples' placeholder root filesystem gives way to the layout's root partition.
      target =
        station: devices:
        vllm-station.nixosConfigurations.${station}.extendModules {
          modules = [
            disko.nixosModules.disko
            (import ./disko.nix devices)
            ./dgx-station.nix
            (
              { config, ... }:
              {
                fileSystems."/".device = lib.mkOverride 90 config.disko.devices.disk.system.content.partitions.root.device;
              }
            )
          ];
        };
    in
    {
      # For your own station flake: `imports = [ disko.nixosModules.disko (vllm-station-install.lib.diskLayout { … }) vllm-station-install.nixosModules.dgx-station ]`.
      nixosModules.dgx-station = ./dgx-station.nix;
      lib.diskLayout = import ./disko.nix;

      # `nix run github:nix-community/disko -- --mode … --flake ./install#<station>`
      diskoConfigurations = lib.mapAttrs (_: devices: import ./disko.nix devices) disks;

      # `nixos-anywhere --flake ./install#<station> --target-host root@<station>`
      nixosConfigurations = lib.mapAttrs target disks;
    };
}
