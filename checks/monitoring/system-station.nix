# The system tier's station (checks/test_system_monitoring.py): checks/examples/monitored-station.nix
# with a faster watchdog, so that a wedge is restarted within 8 s instead of 110 s. Nothing else
# differs; checks/system/render.nix adds its own stated test-only definitions (the image, no GPU device).
{ ... }:
{
  imports = [ ../examples/monitored-station.nix ];
  services.vllm-station.monitoring.watchdog = {
    interval = 3;
    probeTimeout = 2;
    wedgeVerdicts = 2;
  };
}
