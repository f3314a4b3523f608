# services.vllm-station.host: opt-in host tuning, each setting on its own.
{ lib, h }:
let
  serve = {
    services.vllm-station.serve = {
      enable = true;
      model = "org/model";
      allowHubDownload = true;
      image = h.image;
    };
  };
  hostOn = {
    services.vllm-station.host.enable = true;
  };
  argv = config: h.argv (h.unit config).serviceConfig.ExecStart;
in
{
  off-by-default = h.check [ serve ] (
    config:
    h.eq "sysctl" (config.boot.kernel.sysctl or { }) { }
    ++ h.eq "kernelParams" (config.boot.kernelParams or [ ]) [ ]
    ++ h.eq "modprobe" config.boot.extraModprobeConfig ""
    ++ h.eq "LimitMEMLOCK" ((h.unit config).serviceConfig.LimitMEMLOCK or null) null
  );

  enabled-defaults = h.check [
    serve
    hostOn
  ] (
    config:
    h.eq "CDMM" config.boot.extraModprobeConfig "options nvidia NVreg_CoherentGPUMemoryMode=driver\n"
    ++ h.eq "zone_reclaim_mode" config.boot.kernel.sysctl."vm.zone_reclaim_mode" 1
    ++ h.eq "numa_balancing" config.boot.kernel.sysctl."kernel.numa_balancing" 0
    ++ h.eq "kernelParams" config.boot.kernelParams [ "init_on_alloc=0" ]
    ++ h.eq "LimitMEMLOCK" (h.unit config).serviceConfig.LimitMEMLOCK "infinity"
    ++ h.contains "container follows the unit's memlock" (argv config) "--ulimit=memlock=-1:-1"
  );

  each-setting-off = h.check [
    serve
    {
      services.vllm-station.host = {
        enable = true;
        driverManagedCoherentMemory = false;
        zoneReclaimMode = null;
        numaBalancing = null;
        initOnAlloc = null;
        unlimitedMemlock = false;
      };
    }
  ] (
    config:
    h.eq "sysctl" (config.boot.kernel.sysctl or { }) { }
    ++ h.eq "kernelParams" (config.boot.kernelParams or [ ]) [ ]
    ++ h.eq "modprobe" config.boot.extraModprobeConfig ""
    ++ h.eq "LimitMEMLOCK" ((h.unit config).serviceConfig.LimitMEMLOCK or null) null
    ++ h.lacks "no container memlock" (argv config) "--ulimit=memlock=-1:-1"
  );

  host-without-serve = h.check [ hostOn ] (
    config:
    h.eq "no unit created by the memlock setting" (config.systemd.services ? vllm-station) false
    ++ h.eq "sysctl still applied" config.boot.kernel.sysctl."kernel.numa_balancing" 0
  );


  native-backend-no-container-options = h.check [
    serve
    hostOn
    { services.vllm-station.serve.backend = "native"; }
  ] (
    config:
    h.eq "LimitMEMLOCK" (h.unit config).serviceConfig.LimitMEMLOCK "infinity"
    ++ h.eq "containerOptions" config.services.vllm-station.serve.containerOptions [ ]
    ++ h.eq "warnings" (h.warningsBut "(allowHubDownload)" config) [ ]
  );
}
