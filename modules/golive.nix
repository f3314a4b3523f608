# services.vllm-station.golive: `station golive` as its own oneshot unit, `vllm-station-golive`, after a
# switch: smoke, the tool-call and agent batteries, long-context needles and a bench sweep against the
# serving unit, judged by the thresholds (docs/golive.md). Off by default: it loads the GPU for minutes.
#
# The unit starts after `vllm-station.service` is up (its start includes wait-ready) and is wanted by
# multi-user.target. It stays active after a pass (RemainAfterExit), so a switch reruns it only when its
# text changes: when what is served changed (`serve.served`: the image, the vLLM flags, the model and its
# revision, the environment, the devices — its restart triggers, with the config file it reads) or its
# own settings did. Not when only the `station` tools changed: it runs them through the same stable link
# as the serving unit (contract.stationAt; serve.nix's header says why), and the next run uses the new
# ones. A switch waits for it and reports it failed on a no-go.
# This module reads the serving options; it never edits `systemd.services.vllm-station`.
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
    types
    literalExpression
    optionalAttrs
    optionalString
    ;

  top = config.services.vllm-station;
  cfg = top.golive;
  serve = top.serve;
  contract = import ./lib/contract.nix;
  hardening = import ./lib/hardening.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };

  unitName = contract.goliveUnit;
  stateDir = "/var/lib/${unitName}";
  cacheDir = "/var/cache/${unitName}";
  # The run's settings and the station's record, for `station golive --config` (keys: docs/golive.md).
  configPath = "${contract.etcDir}/golive.json";
  gates = [
    "smoke"
    "tools"
    "agent"
    "needle"
    "bench"
  ];

  settings = {
    inherit (cfg) baseUrl expect skip;
    model = cfg.model;
    timeout = cfg.requestTimeout;
    outDir = stateDir;
    agent.repeats = cfg.agentRepeats;
    needle = {
      inherit (cfg.needle) lengths depths;
      calibrationCache = "${cacheDir}/needle-calibration.json";
    };
    bench = {
      inherit (cfg.bench) concurrency requests outputLen;
    };
    station = {
      inherit (serve) preset image;
      revision = serve.inputs.checkpoint.revision;
      vllmArgs = serve.vllmArgs;
    };
  };
  settingsText = builtins.toJSON settings;

  # vLLM's key, loaded at each run (a oneshot): a run after a rotation sends the new one.
  apiKey = unit.vllmApiKey serve unitName;
  keyCheck = apiKey.checkUnits;
  # The stable link, not the package's store path: a new package must not re-run the gates.
  station = contract.stationAt;
  execStart = unit.execLine (
    [
      station
      "golive"
      "--config"
      configPath
    ]
    ++ cfg.extraFlags
    ++ apiKey.args
  );
in
{
  options.services.vllm-station.golive = {
    enable = mkEnableOption ''
      `station golive` as the oneshot unit `vllm-station-golive` after a switch (it loads the GPU for
      minutes: a bench sweep and needles up to ~90 % of the context)'';

    baseUrl = mkOption {
      type = types.str;
      default = serve.clientUrl;
      defaultText = literalExpression "config.services.vllm-station.serve.clientUrl";
      description = "Where the gates reach vLLM: by default the serving unit's address as a client on this host reaches it.";
    };

    model = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "The served model name to test; null: the only model the server lists.";
    };

    expect = mkOption {
      type = types.listOf types.str;
      default = [ "c1.tok_s>=${toString top.monitoring.thresholds.tokensPerSecond}" ];
      defaultText = literalExpression ''[ "c1.tok_s>=''${toString config.services.vllm-station.monitoring.thresholds.tokensPerSecond}" ]'';
      example = [
        "c1.tok_s>=100"
        "c32.ttft_p50<=1.5"
      ];
      description = ''
        The bench sweep's thresholds (`station bench --expect` syntax); `failures==0` always applies. The
        default is the recipe's one-user floor, the same figure the probe's alert uses.
      '';
    };

    skip = mkOption {
      type = types.listOf (types.enum gates);
      default = [ ];
      description = "Gates to leave out.";
    };

    requestTimeout = mkOption {
      type = types.ints.positive;
      default = 900;
      description = "Seconds allowed for one request (a needle near full context takes tens of seconds).";
    };

    agentRepeats = mkOption {
      type = types.ints.positive;
      default = 1;
      description = "Trials per agent task (pass^k is reported for k up to this).";
    };

    needle = {
      lengths = mkOption {
        type = types.str;
        default = "25%,50%,90%";
        description = "Needle prompt lengths: `N%` of max_model_len, `Nk` (× 1024) or token counts.";
      };
      depths = mkOption {
        type = types.str;
        default = "0,50,100";
        description = "Needle depths, in percent of the prompt.";
      };
    };

    bench = {
      concurrency = mkOption {
        type = types.listOf types.ints.positive;
        default = [
          1
          32
        ];
        description = "Concurrency levels of the sweep (the recipe's record: 1 and 32 users).";
      };
      requests = mkOption {
        type = types.str;
        default = "2x";
        description = "Measured requests per level: N, or Nx (× the concurrency).";
      };
      outputLen = mkOption {
        type = types.ints.positive;
        default = 256;
        description = "Tokens per answer (the recipe's burst test: 256).";
      };
    };

    timeoutSeconds = mkOption {
      type = types.ints.positive;
      default = 4 * 3600;
      description = "`TimeoutStartSec` of the unit: the whole run, every gate included.";
    };

    extraFlags = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "--agent-repeats" "3" ];
      description = "More `station golive` arguments.";
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = serve.enable && !serve.headless;
        message = "services.vllm-station.golive: it tests this station's API; enable services.vllm-station.serve (not a headless worker) or leave golive.enable = false.";
      }
    ];

    environment.etc."${lib.removePrefix "/etc/" configPath}".text = settingsText;

    # The key's check before each run: modules/secrets.nix.
    services.vllm-station.secrets.units = apiKey.secrets;
    systemd.services.${unitName} = {
      description = "station golive: quality gates and a bench sweep after a switch";
      wantedBy = [ "multi-user.target" ];
      wants = [ "${contract.unit}.service" ];
      after = [ "${contract.unit}.service" ] ++ keyCheck;
      requires = keyCheck;
      # Skipped with the serving unit while its checkpoint is not stamped yet (the first switch of a new
      # station, a new revision being fetched): the download unit starts both when it is done.
      unitConfig = optionalAttrs ((serve.startCondition or null) != null) {
        ConditionPathExists = serve.startCondition;
      };
      # What is served changed (or what the run checks): run the gates again.
      restartTriggers = [
        settingsText
        serve.served
      ];
      environment.MPLCONFIGDIR = "${cacheDir}/matplotlib";
      serviceConfig =
        hardening.for [ ]
        // {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = execStart;
          DynamicUser = true;
          StateDirectory = unitName;
          CacheDirectory = unitName;
          TimeoutStartSec = cfg.timeoutSeconds;
        }
        // optionalAttrs (serve.apiKeyFile != null) { LoadCredential = unit.loadCredential apiKey.credentials; };
    };
  };
}
