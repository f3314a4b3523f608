# services.vllm-station.host: kernel and driver settings for a DGX Station GB300 serving vLLM.
# Opt-in (`enable`); each setting can be turned off or changed on its own. They take effect
# after a reboot (kernel parameters, module options) or at the next `nixos-rebuild switch` (sysctls).
{
  config,
  lib,
  ...
}:
let
  inherit (lib) mkOption mkEnableOption types;
  cfg = config.services.vllm-station.host;
in
{
  options.services.vllm-station.host = {
    enable = mkEnableOption "GB300 host tuning for vllm-station (NUMA, page cache, NVIDIA driver memory mode)";

    driverManagedCoherentMemory = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Coherent driver-based memory management (CDMM): adds
        `options nvidia NVreg_CoherentGPUMemoryMode=driver` to `boot.extraModprobeConfig`, so the
        driver manages the GPU's HBM instead of handing it to the kernel as NUMA node 1, where the
        page cache of bulk I/O would otherwise land. Needs a driver that knows the parameter.
      '';
    };

    zoneReclaimMode = mkOption {
      type = types.nullOr (types.ints.between 0 7);
      default = 1;
      description = ''
        `vm.zone_reclaim_mode` (`boot.kernel.sysctl`). 1: reclaim page cache on the local node
        before allocating on another one, which keeps file pages of node-0 I/O from spilling into
        the GPU's node. null: leave the kernel's value.
      '';
    };

    numaBalancing = mkOption {
      type = types.nullOr types.bool;
      default = false;
      description = ''
        `kernel.numa_balancing` (`boot.kernel.sysctl`). false (0): no automatic page migration
        between CPU memory and HBM behind vLLM's back. null: leave the kernel's value.
      '';
    };

    initOnAlloc = mkOption {
      type = types.nullOr types.bool;
      default = false;
      description = ''
        Kernel parameter `init_on_alloc=` (`boot.kernelParams`). false (0): do not zero every page on
        allocation, which costs seconds when vLLM pins hundreds of GiB. null: the kernel's default.
      '';
    };

    unlimitedMemlock = mkOption {
      type = types.bool;
      default = true;
      description = ''
        `LimitMEMLOCK=infinity` on `vllm-station.service` (and `--ulimit memlock=-1:-1` on its
        container): RDMA registers pinned memory and fails under the default limit.
      '';
    };
  };

  config = lib.mkIf cfg.enable (
    lib.mkMerge [
      (lib.mkIf cfg.driverManagedCoherentMemory {
        boot.extraModprobeConfig = ''
          options nvidia NVreg_CoherentGPUMemoryMode=driver
        '';
      })
      (lib.mkIf (cfg.zoneReclaimMode != null) {
        boot.kernel.sysctl."vm.zone_reclaim_mode" = cfg.zoneReclaimMode;
      })
      (lib.mkIf (cfg.numaBalancing != null) {
        boot.kernel.sysctl."kernel.numa_balancing" = if cfg.numaBalancing then 1 else 0;
      })
      (lib.mkIf (cfg.initOnAlloc != null) {
        boot.kernelParams = [ "init_on_alloc=${if cfg.initOnAlloc then "1" else "0"}" ];
      })
      (lib.mkIf cfg.unlimitedMemlock {
        # The serving unit renders it (and its container's `--ulimit`): see serve.nix's inputs.
        services.vllm-station.serve.inputs.unlimitedMemlock = true;
      })
    ]
  );
}
