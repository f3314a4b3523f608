# What NixOS renders for monitoring, as plain data, for the real programs in checks/test_monitoring_*.py.
# Builds nothing. Evaluate with --read-write-mode: the Python side reads the derivations that hold the
# Prometheus configuration (`nix derivation show`), exactly as services.prometheus generates it.
#
#   nix-instantiate --eval --read-write-mode --strict --json checks/monitoring/render.nix \
#     --argstr nixosTree "$NIXOS_TREE"
#
# Result:
#   prometheusDrvs  the derivations the prometheus unit's text names (its configuration among them)
#   rulesOption     services.prometheus.rules, as the module got it (the Python side compares it with the
#                   rule file inside the rendered configuration)
#   units           { "<name>" = text; } prometheus, node exporter, probe (+ timer), watchdog
#   nodeExporterArgs  the node exporter's ExecStart, split into arguments
#   dashboardsPath  what Grafana's provider is told to read; datasourceUid the data source's uid
#   pairRules       the rule file of a pair's head (station-a with monitoring on): the NCCL alert
#   pairHeadWatchdog  the pair head's watchdog unit (a wedge restarts the pair in the recipe's order)
#   worker          station-b with monitoring on: its rule file, scrape jobs, node exporter, units, the
#                   weights-check unit; head: station-a's node exporter (the same module's)
#   textfileDir     the contract's directory
#   alertmanagerConfig  alertmanager.yml as nixpkgs' module writes it (builtins.toJSON of its `configuration`)
#   warnings        monitored-station's warnings (none) and, per variant, the warnings or failed assertions
#                   of a variation of it (`variants`: alertmanager off, no receiver, …)
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
}:
let
  inherit (import ../nixos/eval.nix { inherit nixosTree; }) lib evalExample;
  contract = import ../../modules/lib/contract.nix;
  config = (evalExample [ ../examples/monitored-station.nix ] "x86_64-linux").config;
  pairHead =
    (evalExample [
      ../examples/station-a.nix
      { services.vllm-station.monitoring.enable = true; } # the only difference from the example
    ] "aarch64-linux").config;
  # Station B with monitoring on, through the same module: a headless worker (no API).
  pairWorker =
    (evalExample [
      ../examples/station-b.nix
      { services.vllm-station.monitoring.enable = true; } # the only difference from the example
    ] "aarch64-linux").config;
  workerFailed = map (a: a.message) (lib.filter (a: !a.assertion) pairWorker.assertions);
  text = name: builtins.unsafeDiscardStringContext config.systemd.units.${name}.text;
  failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  promText = config.systemd.units."prometheus.service".text;
  nodeExec = config.systemd.services.prometheus-node-exporter.serviceConfig.ExecStart;
  provider = builtins.head config.services.grafana.provision.dashboards.settings.providers;
  # monitored-station changed by one definition: its warnings and its failed assertions' messages
  variant =
    extra:
    let
      c = (evalExample [ ../examples/monitored-station.nix extra ] "x86_64-linux").config;
    in
    {
      warnings = c.warnings;
      assertions = map (a: a.message) (lib.filter (a: !a.assertion) c.assertions);
    };
in
if failed != [ ] then
  throw "assertions failed:\n${lib.concatStringsSep "\n" failed}"
else if workerFailed != [ ] then
  throw "station-b with monitoring: assertions failed:\n${lib.concatStringsSep "\n" workerFailed}"
else
  {
    prometheusDrvs = lib.attrNames (lib.filterAttrs (_: c: c ? outputs) (builtins.getContext promText));
    rulesOption = map builtins.unsafeDiscardStringContext config.services.prometheus.rules;
    units = lib.genAttrs [
      "prometheus.service"
      "prometheus-node-exporter.service"
      "vllm-station-probe.service"
      "vllm-station-probe.timer"
      "vllm-station-watchdog.service"
      "alertmanager.service"
    ] text;
    nodeExporterArgs = lib.filter (a: a != "" && a != "\\") (
      lib.splitString " " (lib.replaceStrings [ "\n" ] [ " " ] (builtins.unsafeDiscardStringContext nodeExec))
    );
    dashboardsPath = builtins.unsafeDiscardStringContext "${provider.options.path}";
    datasourceUid = (builtins.head config.services.grafana.provision.datasources.settings.datasources).uid;
    pairRules = pairHead.services.vllm-station.monitoring.rules;
    worker = {
      rules = pairWorker.services.vllm-station.monitoring.rules;
      scrapeJobs = map (c: c.job_name) pairWorker.services.prometheus.scrapeConfigs;
      nodeExporter = pairWorker.services.prometheus.exporters.node.enable;
      nodeExporterFlags = pairWorker.services.prometheus.exporters.node.extraFlags;
      nodeExporterCollectors = pairWorker.services.prometheus.exporters.node.enabledCollectors;
      units = lib.attrNames (lib.filterAttrs (n: u: lib.hasPrefix "vllm-station" n && u.enable) pairWorker.systemd.units);
      weightsCheck = builtins.unsafeDiscardStringContext pairWorker.systemd.units."vllm-station-weights-check.service".text;
      rejoin = builtins.unsafeDiscardStringContext pairWorker.systemd.units."vllm-station-pair-rejoin.service".text;
      warnings = pairWorker.warnings;
    };
    head = {
      nodeExporterFlags = pairHead.services.prometheus.exporters.node.extraFlags;
      nodeExporterCollectors = pairHead.services.prometheus.exporters.node.enabledCollectors;
    };
    pairHeadWatchdog = builtins.unsafeDiscardStringContext pairHead.systemd.units."vllm-station-watchdog.service".text;
    inherit (contract) textfileDir;
    alertmanagerConfig = builtins.toJSON config.services.prometheus.alertmanager.configuration;
    warnings = config.warnings;
    variants = {
      alertmanager-off = variant { services.vllm-station.monitoring.alertmanager.enable = lib.mkForce false; };
      own-alertmanager = variant {
        services.vllm-station.monitoring.alertmanager.enable = lib.mkForce false;
        services.prometheus.alertmanagers = [ { static_configs = [ { targets = [ "am.example.com:9093" ]; } ]; } ];
      };
      no-receiver = variant {
        services.vllm-station.monitoring.alertmanager.receivers = {
          webhook.url = lib.mkForce [ ];
          email.to = lib.mkForce null;
        };
      };
      email-without-smarthost = variant {
        services.vllm-station.monitoring.alertmanager.receivers.email.smarthost = lib.mkForce null;
      };
      password-in-store = variant {
        services.vllm-station.monitoring.alertmanager.receivers.email.authPasswordEnvironmentFile =
          lib.mkForce "/nix/store/00000000000000000000000000000000-smtp.env";
      };
      webhook-only = variant {
        services.vllm-station.monitoring.alertmanager.receivers.email.to = lib.mkForce null;
      };
    };
  }
