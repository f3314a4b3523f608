# The DGX Station disk layout, for disko (docs/install.md). A function of the station's NVMe devices:
#
#   import ./disko.nix { systemDisk = "/dev/disk/by-id/nvme-…"; }                   # one NVMe
#   import ./disko.nix { systemDisk = "/dev/disk/by-id/nvme-…"; modelsDisk = "…"; } # weights on a second
#
# or from the disko command line: `disko --mode … install/disko.nix --argstr systemDisk /dev/disk/by-id/…`.
# Use /dev/disk/by-id paths: /dev/nvmeXnY numbering can change between boots.
#
# The model directory (/var/lib/vllm-station-models) is its own filesystem, on its own partition or
# disk, so that a reinstall keeps the weights: disko's `format` creates only what is missing and
# `mount` mounts what exists (docs/install.md, "Reinstall, keeping the weights"). Only the first
# install's destroy step wipes it.
{
  systemDisk,
  modelsDisk ? null,
  # With one NVMe: the root filesystem's share of it (/nix/store, /var/lib/docker with the serving
  # image, logs); the model filesystem takes the rest. Ignored with a models disk (root takes all).
  rootSize ? "512G",
  espSize ? "2G",
}:
let
  modelsDir = (import ../modules/lib/contract.nix).modelsRoot; # /var/lib/vllm-station-models
  shared = modelsDisk == null;

  esp = {
    size = espSize;
    type = "EF00";
    content = {
      type = "filesystem";
      format = "vfat";
      mountpoint = "/boot";
      mountOptions = [ "umask=0077" ];
    };
  };
  ext4 = mountpoint: {
    type = "filesystem";
    format = "ext4";
    inherit mountpoint;
    mountOptions = [ "noatime" ];
  };
  models = {
    size = "100%";
    content = ext4 modelsDir // {
      # no reserved blocks: nothing but the checkpoints lives here
      extraArgs = [
        "-m"
        "0"
        "-L"
        "vllm-models"
      ];
    };
  };
in
{
  disko.devices.disk =
    {
      system = {
        type = "disk";
        device = systemDisk;
        content = {
          type = "gpt";
          partitions =
            {
              ESP = esp // {
                priority = 1;
              };
              root = {
                size = if shared then rootSize else "100%";
                priority = 2;
                content = ext4 "/" // {
                  extraArgs = [
                    "-L"
                    "nixos"
                  ];
                };
              };
            }
            // (
              if shared then
                {
                  models = models // {
                    priority = 3;
                  };
                }
              else
                { }
            );
        };
      };
    }
    // (
      if shared then
        { }
      else
        {
          models = {
            type = "disk";
            device = modelsDisk;
            content = {
              type = "gpt";
              partitions.models = models;
            };
          };
        }
    );
}
