# The day2 station's monitoring as NixOS renders it (checks/test_day2.py runs it with Debian's Prometheus,
# Alertmanager and node_exporter inside the station's machine). Builds nothing; evaluate with
# --read-write-mode (the Python side reads the derivation holding prometheus.yml, as
# checks/monitoring/rendered.py does for monitored-station).
#
#   nix-instantiate --eval --read-write-mode --strict --json checks/day2/monitoring.nix --argstr nixosTree "$NIXOS_TREE"
#
# Result: prometheusDrvs, alertmanagerConfig (alertmanager.yml as JSON), nodeExporterArgs, units (the
# nixpkgs units those programs run under on a station, for the record).
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
}:
let
  inherit (import ../nixos/eval.nix { inherit nixosTree; }) lib evalExample;
  config = (evalExample [ ./station.nix ] "x86_64-linux").config;
  failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  promText = config.systemd.units."prometheus.service".text;
  nodeExec = config.systemd.services.prometheus-node-exporter.serviceConfig.ExecStart;
  noContext = builtins.unsafeDiscardStringContext;
in
if failed != [ ] then
  throw "assertions failed:\n${lib.concatStringsSep "\n" failed}"
else
  {
    prometheusDrvs = lib.attrNames (lib.filterAttrs (_: c: c ? outputs) (builtins.getContext promText));
    alertmanagerConfig = builtins.toJSON config.services.prometheus.alertmanager.configuration;
    nodeExporterArgs = lib.filter (a: a != "" && a != "\\") (
      lib.splitString " " (lib.replaceStrings [ "\n" ] [ " " ] (noContext nodeExec))
    );
    units = lib.genAttrs [
      "prometheus.service"
      "alertmanager.service"
      "prometheus-node-exporter.service"
      "nginx.service"
      "vllm-station-gateway-keys.service"
    ] (name: noContext (config.systemd.units.${name}.text or ""));
  }
