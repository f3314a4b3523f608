# services.vllm-station.monitoring: what catches what /health misses, on nixpkgs' own modules.
#
#   services.prometheus            scrapes vLLM's /metrics, node_exporter (and DCGM, the gateway's nginx),
#                                  with the alert rules of ./monitoring/rules.nix (thresholds below)
#   services.prometheus.exporters  node: the systemd collector (restart and start-time metrics), NUMA
#                                  meminfo, and the textfile collector reading `textfileDir`
#   vllm-station-probe.timer       `station probe` every few minutes: 1-user tok/s, TTFT, a tool call
#   vllm-station-watchdog.service  `station watchdog`: a wedged engine (health 200, no progress, failed
#                                  probes) is restarted through systemd, counted by the start limit
#   services.grafana.provision     the dashboard ./monitoring/dashboards/vllm-station.json (optional)
#   services.prometheus.alertmanager  where the alerts go: webhooks and/or e-mail (`alertmanager.*`)
#
# The textfile directory is written by the probe, the watchdog, and the serving unit's prestart and
# preflight steps (their page-cache figures: they write only where this module made the directory).
# This module owns the units above; it never edits `vllm-station.service`.
{
  config,
  lib,
  utils,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    mkIf
    mkMerge
    mkDefault
    types
    literalExpression
    optional
    optionals
    optionalAttrs
    optionalString
    mkRenamedOptionModule
    ;

  cfg = config.services.vllm-station.monitoring;
  serve = config.services.vllm-station.serve;
  contract = import ./lib/contract.nix;
  hardening = import ./lib/hardening.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };
  rules = import ./monitoring/rules.nix;
  station = lib.getExe config.services.vllm-station.package;

  servingUnit = "${contract.unit}.service";
  probeUnit = "${contract.unit}-probe";
  watchdogUnit = "${contract.unit}-watchdog";
  metricsGroup = "vllm-station-metrics";
  inherit (contract) textfileDir;

  # Prometheus job names (the rules select on them).
  jobs = {
    vllm = "vllm-station";
    node = "node";
    dcgm = "dcgm";
    gateway = "vllm-station-gateway";
  };

  baseUrl = "http://${cfg.vllmAddress}";
  servedName = if serve.servedModelName != null then serve.servedModelName else serve.model;

  # vLLM's key as a credential (modules/lib/unit.nix); each unit that loads it starts after its check.
  apiKey = unit.vllmApiKey serve;
  withKey = unitName: args: unit.execLine (args ++ (apiKey unitName).args);
  keyCredential = unitName: optionalAttrs (serve.apiKeyFile != null) {
    LoadCredential = unit.loadCredential (apiKey unitName).credentials;
  };
  keySecrets = unitName: (apiKey unitName).secrets;
  keyCheck = unitName: (apiKey unitName).checkUnits;

  probeArgs = [
    station
    "probe"
    "--base-url"
    baseUrl
    "--max-tokens"
    (toString cfg.probe.maxTokens)
    "--timeout"
    (toString cfg.probe.timeout)
    "--tool-choice"
    cfg.probe.toolChoice
    "--textfile-dir"
    textfileDir
  ] ++ optionals (servedName != null) [
    "--model"
    servedName
  ];

  # The worker's beacon the head's start waits for (pair.nix fills it on the pair's head only).
  pairWorker = serve.inputs.waitForWorker;

  watchdogArgs = [
    station
    "watchdog"
    "--base-url"
    baseUrl
  ]
  # A wedge restart kills the container once systemd has the restart: the unit's graceful stop would
  # wait out vLLM's --shutdown-timeout for requests a wedged engine never finishes.
  ++ unit.restartArgs {
    systemd = config.systemd.package;
    runtime = serve.preflight.settings.runtime or null;
  }
  ++ [
    "--interval"
    (toString cfg.watchdog.interval)
    "--probe-timeout"
    (toString cfg.watchdog.probeTimeout)
    "--wedge-verdicts"
    (toString cfg.watchdog.wedgeVerdicts)
    "--textfile-dir"
    textfileDir
  ] ++ optionals (servedName != null) [
    "--model"
    servedName
  ]
  # The file itself, not a credential (a copy made at the unit's start): the watchdog reads it again
  # when it changes, so a rotation needs no restart of the watchdog (docs/secrets.md). It runs as root.
  ++ optionals (serve.apiKeyFile != null) [
    "--api-key-file"
    serve.apiKeyFile
  ]
  # The pair's head: a wedge restarts the pair in the recipe's order (stop the head; the worker's own
  # rejoin unit restarts the worker; start the head), waiting for the worker as the head's start does.
  ++ optionals (pairWorker != null) [
    "--pair-worker"
    pairWorker.url
    "--pair-wait"
    (toString pairWorker.timeout)
  ];

  gatewayOn = config.services.vllm-station.gateway.enable or false;
  node = config.services.prometheus.exporters.node;
  nginxExporter = config.services.prometheus.exporters.nginx;

  target = address: [ { targets = [ address ]; } ];
  # A headless pair worker (station B) serves no API: no vLLM scrape, probe or watchdog there; node_exporter,
  # the unit's restart and page-cache alerts and its weights check, through this same module.
  api = !serve.headless;
  inherit (serve) weightsCheckUnit;
  scrapeConfigs =
    optional api {
      job_name = jobs.vllm;
      scrape_interval = cfg.scrapeInterval;
      static_configs = target cfg.vllmAddress;
    }
    ++ [
      {
        job_name = jobs.node;
        scrape_interval = cfg.scrapeInterval;
        static_configs = target "127.0.0.1:${toString node.port}";
      }
    ]
    ++ optional cfg.dcgm.enable {
      job_name = jobs.dcgm;
      scrape_interval = cfg.scrapeInterval;
      static_configs = target cfg.dcgm.address;
    }
    ++ optional cfg.gateway.enable {
      job_name = jobs.gateway;
      scrape_interval = cfg.scrapeInterval;
      static_configs = target "127.0.0.1:${toString nginxExporter.port}";
    };

  renderedRules = rules.render {
    inherit (cfg) thresholds;
    inherit servingUnit;
    vllmJob = jobs.vllm;
    nodeJob = jobs.node;
    scrapeJobs = map (sc: sc.job_name) scrapeConfigs;
    probe = cfg.probe.enable;
    probeIntervalSeconds = cfg.probe.interval;
    watchdog = cfg.watchdog.enable;
    watchdogIntervalSeconds = cfg.watchdog.interval;
    wedgeVerdicts = cfg.watchdog.wedgeVerdicts;
    pair = config.services.vllm-station.pair.enable && config.services.vllm-station.pair.role == "head";
    inherit api weightsCheckUnit;
  };

  # ---- the Alertmanager (`alertmanager.*`): one receiver with every declared webhook and e-mail ----
  am = cfg.alertmanager;
  email = am.receivers.email;
  webhooks = am.receivers.webhook.url;
  # The SMTP password reaches alertmanager through nixpkgs' own `environmentFile` (systemd reads it as
  # root at start; nixpkgs' start step puts `$VAR`s into the configuration): never in the store, and
  # nixpkgs' unit is configured through its options, not edited.
  smtpPasswordVariable = "VLLM_STATION_SMTP_PASSWORD";
  receiverName = "vllm-station";
  alertmanagerConfig = {
    route = {
      receiver = receiverName;
      group_by = [
        "alertname"
        "instance"
      ];
      group_wait = "30s";
      group_interval = "5m";
      repeat_interval = am.repeatInterval;
    };
    receivers = [
      (
        { name = receiverName; }
        // optionalAttrs (webhooks != [ ]) {
          webhook_configs = map (url: {
            inherit url;
            send_resolved = true;
          }) webhooks;
        }
        // optionalAttrs (email.to != null) {
          email_configs = [
            (
              {
                inherit (email) to from smarthost;
                send_resolved = true;
              }
              // optionalAttrs (email.authPasswordEnvironmentFile != null) {
                auth_username = if email.authUsername != null then email.authUsername else email.from;
                auth_password = "\${${smtpPasswordVariable}}";
              }
            )
          ];
        }
      )
    ];
  };
  amClientHost = contract.clientHost config.services.prometheus.alertmanager.listenAddress;
  hasReceiver = webhooks != [ ] || email.to != null;

  threshold =
    type: default: description:
    mkOption {
      inherit type default description;
    };
  d = rules.defaults;
in
{
  imports = [
    # The TTFT alert judges the probe's short prompt, not vLLM's p99 over every prompt length.
    (mkRenamedOptionModule
      [ "services" "vllm-station" "monitoring" "thresholds" "ttftP99Seconds" ]
      [ "services" "vllm-station" "monitoring" "thresholds" "ttftSeconds" ]
    )
  ];

  options.services.vllm-station.monitoring = {
    enable = mkEnableOption ''
      monitoring of the serving unit: Prometheus (scrape and alert rules), node_exporter, the synthetic
      probe and the engine watchdog'';

    vllmAddress = mkOption {
      type = types.str;
      default = lib.removePrefix "http://" serve.clientUrl;
      defaultText = literalExpression ''lib.removePrefix "http://" config.services.vllm-station.serve.clientUrl'';
      description = "`host:port` of vLLM as scraped (`/metrics`), probed and watched; by default `serve.clientUrl`'s.";
    };

    scrapeInterval = mkOption {
      type = types.str;
      default = "15s";
      description = "Prometheus' scrape interval for the station's jobs.";
    };

    prometheus.enable = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Run `services.prometheus` here with the station's scrape jobs and alert rules (on loopback by
        default). False: only the exporters, probe and watchdog; a central Prometheus scrapes them and
        loads the flake's `prometheusRules`.
      '';
    };

    thresholds = {
      tokensPerSecond = threshold types.number d.tokensPerSecond ''
        Alert when the probe's one-user decode rate stays below this (tok/s). The recipe: "alert when token
        throughput drops below 100 tok/s for one user" (145.9 expected).'';
      kvCacheUsage = threshold (types.numbers.between 0 1) d.kvCacheUsage "KV-cache use (0–1) that alerts after `kvCacheMinutes`.";
      kvCacheMinutes = threshold types.ints.positive d.kvCacheMinutes "Minutes above `kvCacheUsage` before the alert.";
      waitingRequests = threshold types.ints.unsigned d.waitingRequests ''
        Requests waiting (beyond `--max-num-seqs`, 256 in the recipe) that alert after `waitingMinutes`.'';
      waitingMinutes = threshold types.ints.positive d.waitingMinutes "Minutes above `waitingRequests` before the alert.";
      preemptions = threshold types.ints.unsigned d.preemptions "Preemptions in 5 minutes above which to alert.";
      ttftSeconds = threshold types.number d.ttftSeconds ''
        Time to first token of the synthetic probe's short prompt (seconds) that alerts in two probes in
        a row. The seed: 0.061 s for one user, a median of 0.985 s at 32 users. vLLM's own TTFT histogram is
        not judged: it mixes every prompt length (the 1M-context needles take 33.5–37 s).'';
      overloadedMinutes = threshold types.ints.positive d.overloadedMinutes ''
        Minutes of the watchdog's probe answered 429/503 (a rate limit, a full queue) before the alert.'';
      restartsPerHour = threshold types.ints.positive d.restartsPerHour ''
        Restarts (systemd's after a crash, the watchdog's after a wedge) within an hour that alert: "alert
        on unexpected restart events", "monitor the restart count to catch a loop early".'';
      stallMinutes = threshold types.ints.positive d.stallMinutes ''
        Minutes of requests waiting with no token generated or prefilled and no KV-cache change.'';
      pageCacheGiB = threshold types.number d.pageCacheGiB ''
        FilePages on the GPU's NUMA node (GiB) at prestart/preflight above which to alert (the recipe:
        "if it's not close to zero, you've got stale page cache in HBM"; prestart refuses at
        `serve.prestart.maxFilePagesGiB`).'';
    };

    probe = {
      enable = mkOption {
        type = types.bool;
        default = !serve.headless;
        defaultText = literalExpression "!config.services.vllm-station.serve.headless";
        description = "Run `station probe` from a timer (1 user: tok/s, TTFT, a tool call). Not on a headless pair worker (no API).";
      };
      interval = mkOption {
        type = types.ints.between 30 86400;
        default = 300;
        description = "Seconds between probes (the throughput alert waits for two in a row).";
      };
      maxTokens = mkOption {
        type = types.ints.between 2 4096;
        default = 64;
        description = "Fixed length of the probe's generation (tokens).";
      };
      toolChoice = mkOption {
        type = types.enum [
          "auto"
          "required"
          "none"
        ];
        default = "auto";
        description = "`tool_choice` of the probe's get_weather call (`none`: no tool call).";
      };
      timeout = mkOption {
        type = types.ints.between 5 3600;
        default = 120;
        description = "Seconds allowed for each of the probe's requests.";
      };
    };

    watchdog =
      let
        looks = unit.restarterOptions {
          interval = 30;
          intervalDescription = "Seconds between looks.";
          verdicts = 3;
          verdictsDescription = ''
            Consecutive wedge verdicts that restart the unit. A wedge is restarted within
            `wedgeVerdicts × interval + probeTimeout` seconds (110 s with the defaults).
          '';
        };
      in
      {
        enable = mkOption {
          type = types.bool;
          default = !serve.headless;
          defaultText = literalExpression "!config.services.vllm-station.serve.headless";
          description = ''
            Not on a headless pair worker (no API: the head's watchdog restarts the pair, the worker's
            `vllm-station-pair-rejoin` unit its own side).
            Run `station watchdog`: restart the serving unit (through systemd, so the start limit counts it)
            after `wedgeVerdicts` looks in a row that find the 1-token probe failing and vLLM's /metrics
            without progress. A slow probe during a long prefill is not a wedge: the KV cache still moves.
          '';
        };
        inherit (looks) interval;
        probeTimeout = mkOption {
          type = types.ints.between 1 3600;
          default = 20;
          description = "Deadline of the 1-token probe (seconds, at most `interval`).";
        };
        wedgeVerdicts = looks.verdicts;
      };

    dcgm = {
      enable = mkEnableOption ''
        scraping NVIDIA's DCGM exporter (GPU memory, utilisation, temperatures, XID errors), which runs
        separately (NVIDIA's dcgm-exporter container; nixpkgs has no module for it)'';
      address = mkOption {
        type = types.str;
        default = "127.0.0.1:9400";
        description = "`host:port` of the DCGM exporter.";
      };
    };

    gateway.enable = mkOption {
      type = types.bool;
      default = gatewayOn;
      defaultText = literalExpression "config.services.vllm-station.gateway.enable";
      description = "Scrape the gateway's nginx status (nginx's stub_status through nixpkgs' nginx exporter).";
    };

    grafana.provision = mkOption {
      type = types.bool;
      default = true;
      description = ''
        When `services.grafana.enable` is set: provision a Prometheus data source and the station's
        dashboard (tok/s, TTFT/ITL percentiles, running/waiting, KV use, restarts, probe results).
      '';
    };

    alertmanager = {
      enable = mkEnableOption ''
        nixpkgs' `services.prometheus.alertmanager` (on loopback) with one receiver made of the webhooks
        and the e-mail below, and `services.prometheus.alertmanagers` pointing at it: without it (or
        another Alertmanager) the alert rules fire into the void'';
      port = mkOption {
        type = types.port;
        default = 9093;
        description = "Port of the Alertmanager (`services.prometheus.alertmanager.port`).";
      };
      repeatInterval = mkOption {
        type = types.str;
        default = "4h";
        description = "How often a still-firing alert is sent again (Alertmanager's `repeat_interval`).";
      };
      receivers.webhook.url = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "https://hooks.example.com/vllm-station" ];
        description = ''
          Webhook URLs that receive every alert (Alertmanager's JSON webhook format), firing and resolved.
          A URL is written into the Nix store: put no secret in it.
        '';
      };
      receivers.email = {
        to = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "oncall@example.com";
          description = "Address that receives every alert by e-mail (null: no e-mail).";
        };
        from = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "station@example.com";
          description = "Sender address (required with `to`).";
        };
        smarthost = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "smtp.example.com:587";
          description = "SMTP server as `host:port` (required with `to`).";
        };
        authUsername = mkOption {
          type = types.nullOr types.str;
          default = null;
          defaultText = literalExpression "from";
          description = "SMTP user name (null: the `from` address), used with `authPasswordEnvironmentFile`.";
        };
        authPasswordEnvironmentFile = mkOption {
          type = types.nullOr types.str;
          default = null;
          example = "${contract.secretsDir}/alertmanager-smtp.env";
          description = ''
            File holding one line `VLLM_STATION_SMTP_PASSWORD=<the SMTP password>`: nixpkgs' alertmanager
            unit reads it as its `EnvironmentFile=` at each start (as root, before it drops to its dynamic
            user), and its start step puts the value into the configuration it runs. The password never
            enters the Nix store or the rendered configuration (null: no SMTP auth).
          '';
        };
      };
    };

    rules = mkOption {
      type = types.attrs;
      readOnly = true;
      internal = true;
      default = renderedRules;
      defaultText = literalExpression "import ./monitoring/rules.nix rendered with the thresholds";
      description = "The alert rule file as data (tests; `services.prometheus.rules` gets its JSON).";
    };
  };

  config = mkIf cfg.enable (mkMerge [
    {
      assertions = [
        {
          assertion = serve.enable;
          message = "services.vllm-station.monitoring: needs the serving unit: set services.vllm-station.serve.enable = true.";
        }
        {
          assertion = api || !cfg.probe.enable;
          message = "services.vllm-station.monitoring.probe.enable: a headless pair worker has no API to probe; set it to false (the head's probe covers the pair).";
        }
        {
          assertion = api || !cfg.watchdog.enable;
          message = "services.vllm-station.monitoring.watchdog.enable: a headless pair worker has no API to watch; set it to false (the head's watchdog restarts the pair, the worker's vllm-station-pair-rejoin unit its side).";
        }
        {
          assertion = !am.enable || hasReceiver;
          message = "services.vllm-station.monitoring.alertmanager: enabled without a receiver: set receivers.webhook.url = [ \"https://…\" ] or receivers.email.to (with from and smarthost).";
        }
        {
          assertion = email.to == null || (email.from != null && email.smarthost != null);
          message = "services.vllm-station.monitoring.alertmanager.receivers.email: `to` needs `from` and `smarthost` (host:port) too.";
        }
        {
          assertion = unit.isSecretPath email.authPasswordEnvironmentFile;
          message = "services.vllm-station.monitoring.alertmanager.receivers.email.authPasswordEnvironmentFile: must be an absolute path outside the Nix store (e.g. ${contract.secretsDir}/alertmanager-smtp.env), got ${toString email.authPasswordEnvironmentFile}.";
        }
        {
          assertion = cfg.watchdog.probeTimeout <= cfg.watchdog.interval;
          message = "services.vllm-station.monitoring.watchdog: `probeTimeout` (${toString cfg.watchdog.probeTimeout}) must not exceed `interval` (${toString cfg.watchdog.interval}).";
        }
      ];

      warnings = lib.optional (cfg.prometheus.enable && config.services.prometheus.alertmanagers == [ ]) "services.vllm-station.monitoring: the alert rules reach no one (services.prometheus.alertmanagers is empty): set services.vllm-station.monitoring.alertmanager.enable = true with receivers.webhook.url or receivers.email, or point services.prometheus.alertmanagers at your own Alertmanager.";

      users.groups.${metricsGroup} = { };
      # root writes (prestart, preflight, watchdog), the probe through its group; node_exporter reads.
      systemd.tmpfiles.rules = [ "d ${textfileDir} 0775 root ${metricsGroup} - -" ];

      services.prometheus.exporters.node = {
        enable = true;
        listenAddress = mkDefault "127.0.0.1";
        enabledCollectors = [
          "systemd"
          "meminfo_numa" # node_memory_numa_FilePages: the page cache per NUMA node, live
        ];
        extraFlags = [
          "--collector.textfile.directory=${textfileDir}"
          "--collector.systemd.enable-restarts-metrics" # node_systemd_service_restart_total (NRestarts)
          "--collector.systemd.enable-start-time-metrics"
        ];
      };
    }

    (mkIf cfg.prometheus.enable {
      services.prometheus = {
        enable = true;
        listenAddress = mkDefault "127.0.0.1";
        inherit scrapeConfigs;
        # JSON is YAML: Prometheus (and promtool) read it as a rule file.
        rules = [ (builtins.toJSON cfg.rules) ];
      };
    })

    (mkIf am.enable {
      services.prometheus.alertmanager = {
        enable = true;
        listenAddress = mkDefault "127.0.0.1";
        inherit (am) port;
        configuration = alertmanagerConfig;
        environmentFile = email.authPasswordEnvironmentFile;
      };
      services.prometheus.alertmanagers = [
        { static_configs = target "${amClientHost}:${toString am.port}"; }
      ];
    })

    (mkIf cfg.probe.enable {
      services.vllm-station.secrets.units = keySecrets probeUnit;
      systemd.services.${probeUnit} = {
        description = "vllm-station synthetic probe (1 user: tok/s, TTFT, a tool call) for Prometheus";
        # Each run loads the key anew: after a rotation the next run sends the new one.
        after = [ servingUnit ] ++ keyCheck probeUnit;
        requires = keyCheck probeUnit;
        serviceConfig =
          hardening.for [ ]
          // {
            Type = "oneshot";
            ExecStart = withKey probeUnit probeArgs;
            DynamicUser = true;
            SupplementaryGroups = [ metricsGroup ]; # writes station-probe.prom into the textfile directory
            # `-`: a missing directory (tmpfiles not run yet) fails the export, not the unit's start
            ReadWritePaths = [ "-${textfileDir}" ];
            TimeoutStartSec = 3 * cfg.probe.timeout;
          }
          // keyCredential probeUnit;
      };
      systemd.timers.${probeUnit} = {
        description = "vllm-station synthetic probe, every ${toString cfg.probe.interval} s";
        wantedBy = [ "timers.target" ];
        timerConfig = {
          OnBootSec = cfg.probe.interval;
          OnUnitActiveSec = cfg.probe.interval;
        };
      };
    })

    (mkIf cfg.watchdog.enable {
      services.vllm-station.secrets.units = keySecrets watchdogUnit;
      # root, bounded restarts, the textfile directory (as the probe's): modules/lib/unit.nix's restarter
      systemd.services.${watchdogUnit} = unit.restarter {
        description = "vllm-station watchdog: restarts a wedged vLLM engine through systemd";
        execStart = watchdogArgs;
        after = [ servingUnit ] ++ keyCheck watchdogUnit;
        requires = keyCheck watchdogUnit;
        inherit textfileDir;
      };
    })

    (mkIf cfg.gateway.enable {
      services.nginx.statusPage = true;
      # nixpkgs' status page server listens on every address by default (and answers nginx's welcome
      # page at /): it is the exporter's alone.
      services.nginx.virtualHosts.localhost.listenAddresses = [
        "127.0.0.1"
      ] ++ lib.optional config.networking.enableIPv6 "[::1]";
      services.prometheus.exporters.nginx = {
        enable = true;
        listenAddress = mkDefault "127.0.0.1";
      };
    })

    (mkIf (cfg.grafana.provision && config.services.grafana.enable) {
      services.grafana.provision = {
        enable = true;
        datasources.settings.datasources = [
          {
            name = "vllm-station";
            uid = "vllm-station-prometheus"; # the dashboard's panels name this uid
            type = "prometheus";
            url = "http://${config.services.prometheus.listenAddress}:${toString config.services.prometheus.port}";
          }
        ];
        dashboards.settings.providers = [
          {
            name = "vllm-station";
            options.path = ./monitoring/dashboards;
          }
        ];
      };
    })
  ]);
}
