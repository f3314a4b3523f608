# services.vllm-station.serve: defaults, the preset, overrides, rendering, every assertion.
{ lib, h }:
let
  base = {
    services.vllm-station.serve = {
      enable = true;
      model = lib.mkDefault "org/model";
      allowHubDownload = lib.mkDefault true; # the unit's rendering, not the checkpoint path, is tested here
      image = lib.mkDefault h.image;
    };
  };
  flash = {
    services.vllm-station.serve = {
      enable = true;
      preset = "glm53-flash";
      image = h.image;
    };
  };
  flashDir = "/var/lib/vllm-station-models/glm53-flash";
  with' = extra: [
    base
    { services.vllm-station.serve = extra; }
  ];

  sc = config: (h.unit config).serviceConfig;
  start = config: h.argv (sc config).ExecStart;
  # vLLM's arguments: whatever follows the image in the container command line.
  afterImage =
    config:
    let
      argv = start config;
      idx = lib.lists.findFirstIndex (a: a == h.image) null argv;
    in
    if idx == null then [ "<image not in ExecStart>" ] else lib.drop (idx + 1) argv;
  waitReady =
    config:
    h.argv (lib.removeSuffix " \"--api-key-file\" \"/run/secrets/vllm-api-key\"" (builtins.head (sc config).ExecStartPost));
  # The step of the start sequence whose verb (argv[1]) is `verb`.
  step = verb: list: lib.findFirst (a: builtins.elemAt a 1 == verb) null (map h.argv list);
  prestart = config: step "prestart" (sc config).ExecStartPre;
  inherit (h) flagValue;
  envFlags =
    config:
    let
      argv = start config;
    in
    lib.concatLists (
      lib.imap0 (i: a: lib.optional (a == "--env" && i + 1 < lib.length argv) (builtins.elemAt argv (i + 1))) argv
    );
  inherit (h) preflightJson;

  flashArgs = import ../../glm53-flash-flags.nix "127.0.0.1";
in
{
  # ---- turning nothing on ----
  import-enables-nothing = h.check [ ] (
    config:
    h.eq "units" (lib.attrNames config.systemd.services) [ ]
    ++ h.eq "etc" (config.environment.etc or { }) { }
    ++ h.eq "docker" (config.virtualisation.docker.enable or false) false
  );

  preset-does-not-enable = h.check [ { services.vllm-station.serve.preset = "glm53-flash"; } ] (
    config:
    h.eq "units" (config.systemd.services ? vllm-station) false
    ++ h.eq "preset value still visible" config.services.vllm-station.serve.maxModelLen 1048576
  );

  # ---- defaults ----
  defaults = h.check [ base ] (
    config:
    let
      unit = h.unit config;
      s = sc config;
      argv = start config;
    in
    h.eq "vllmArgs" config.services.vllm-station.serve.vllmArgs [
      "org/model"
      "--host"
      "127.0.0.1"
      "--port"
      "8000"
      "--shutdown-timeout"
      "600"
    ]
    ++ h.eq "ExecStart runtime" (lib.take 4 argv) [
      "${h.fake.docker}/bin/docker"
      "run"
      "--name"
      "vllm-station"
    ]
    ++ h.eq "container args end" (afterImage config) [
      "org/model"
      "--host"
      "127.0.0.1"
      "--port"
      "8000"
      "--shutdown-timeout"
      "600"
    ]
    ++ h.lacks "ExecStart" argv "--rm"
    ++ h.ok "no --restart flag in ExecStart: ${s.ExecStart}" (!lib.hasInfix "--restart" s.ExecStart)
    ++ h.contains "ExecStart" argv "nvidia.com/gpu=all"
    ++ h.contains "cache volume" argv "/var/cache/vllm-station:/var/cache/vllm-station"
    ++ h.contains "state volume" argv "/var/lib/vllm-station:/var/lib/vllm-station:ro"
    ++ h.lacks "ExecStart (no memlock without the host module)" argv "memlock=-1:-1"
    ++ h.eq "Restart" s.Restart "always"
    ++ h.eq "RestartSec" s.RestartSec 60
    ++ h.eq "startLimitBurst (top level: renders under [Unit])" unit.startLimitBurst 3
    ++ h.eq "startLimitIntervalSec" unit.startLimitIntervalSec 3600
    ++ h.eq "no StartLimit* in serviceConfig" (lib.filter (lib.hasPrefix "StartLimit") (lib.attrNames s)) [ ]
    ++ h.eq "TimeoutStartSec" s.TimeoutStartSec 900
    ++ h.eq "Type" s.Type "exec"
    ++ h.eq "one ExecStartPre" (lib.length s.ExecStartPre) 1
    ++ h.ok "ExecStartPre is privileged (+)" (lib.hasPrefix "+" (builtins.head s.ExecStartPre))
    ++ h.eq "prestart argv" (prestart config) [
      "/run/vllm-station-tools/bin/station"
      "prestart"
      "--gpu-node"
      "1"
      "--max-file-pages-gib"
      "4"
      "--settle-seconds"
      "2"
      "--runtime"
      "${h.fake.docker}/bin/docker" # absolute: the unit's PATH lacks the runtime
      "--container"
      "vllm-station"
      "--log-dir"
      "/var/log/vllm-station"
      "--keep-logs"
      "20"
    ]
    ++ h.eq "wait-ready argv" (waitReady config) [
      "/run/vllm-station-tools/bin/station"
      "wait-ready"
      "--base-url"
      "http://127.0.0.1:8000"
      "--model"
      "org/model"
      "--timeout"
      "840"
    ]
    # The stop: drain first (the gateways stop sending), then SIGTERM with room for --shutdown-timeout
    # (600 s without maxOutputTokens): the container's stop timeout + 30 s, systemd's + 60 s.
    ++ h.eq "ExecStop" (map h.argv s.ExecStop) [
      [
        "/run/vllm-station-tools/bin/station"
        "drain"
        "--stopping"
      ]
      [
        "${h.fake.docker}/bin/docker"
        "stop"
        "-t"
        "630"
        "vllm-station"
      ]
    ]
    ++ h.ok "drain privileged (+)" (lib.hasPrefix "+" (builtins.head s.ExecStop))
    ++ h.ok "the container's stop ignores failure (-)" (lib.hasPrefix "-" (lib.last s.ExecStop))
    ++ h.eq "TimeoutStopSec above the container's stop" s.TimeoutStopSec 660
    ++ h.contains "engine-ready timeout follows startTimeout" (envFlags config) "VLLM_ENGINE_READY_TIMEOUT_S=900"
    ++ h.contains "persistent compile cache" (envFlags config) "VLLM_CACHE_ROOT=/var/cache/vllm-station/vllm"
    ++ h.contains "persistent inductor cache" (envFlags config) "TORCHINDUCTOR_CACHE_DIR=/var/cache/vllm-station/inductor"
    ++ h.contains "persistent HF cache" (envFlags config) "HF_HOME=/var/cache/vllm-station/huggingface"
    ++ h.eq "directories" [
      s.StateDirectory
      s.CacheDirectory
      s.LogsDirectory
    ] [ "vllm-station" "vllm-station" "vllm-station" ]
    ++ h.eq "DynamicUser (container backend runs the client as root)" (s.DynamicUser or false) false
    ++ h.eq "PrivateUsers relaxed for the docker socket" s.PrivateUsers false
    ++ h.eq "ProtectSystem" s.ProtectSystem "strict"
    ++ h.eq "NoNewPrivileges" s.NoNewPrivileges true
    ++ h.eq "CapabilityBoundingSet" s.CapabilityBoundingSet [ "" ]
    ++ h.eq "no LoadCredential without apiKeyFile" (s ? LoadCredential) false
    ++ h.eq "docker enabled" config.virtualisation.docker.enable true
    ++ h.eq "CDI generator enabled" config.hardware.nvidia-container-toolkit.enable true
    ++ h.eq "firewall untouched" (config.networking.firewall.allowedTCPPorts or [ ]) [ ]
    ++ h.eq "warnings" (h.warningsBut "(allowHubDownload)" config) [ ]
    ++ h.contains "after docker" unit.after "docker.service"
    ++ h.contains "requires docker" unit.requires "docker.service"
    ++ h.contains "station on PATH" config.environment.systemPackages h.fake.station
  );

  # A new `station` package is a new link target, not a new unit: switch does not restart the engine.
  tools-through-the-stable-link = h.check [ flash ] (
    config:
    let
      execLines = s: lib.concatLists (map (k: lib.toList (s.${k} or [ ])) [ "ExecStartPre" "ExecStart" "ExecStartPost" "ExecStop" ]);
      changed = h.fake.station // {
        outPath = "/nix/store/11111111111111111111111111111111-vllm-station-0.2.0";
      };
      other = (h.eval [ flash { services.vllm-station.package = changed; } ]).config;
    in
    h.eq "the link, to the configured package" (lib.head config.systemd.tmpfiles.rules) "L+ /run/vllm-station-tools - - - - ${h.fake.station}"
    ++ h.eq "the link follows the package" (lib.head other.systemd.tmpfiles.rules) "L+ /run/vllm-station-tools - - - - ${changed}"
    ++ h.eq "no Exec line names the package" (lib.filter (lib.hasInfix "${h.fake.station}") (execLines (sc config))) [ ]
    ++ h.eq "the unit is the same with another package" (sc other) (sc config)
  );

  # ---- the preset ----
  preset-flash-flags = h.check [ flash ] (
    config:
    h.eq "vLLM flags after the image" (afterImage config) flashArgs
    ++ h.eq "vllmArgs" config.services.vllm-station.serve.vllmArgs flashArgs
    ++ h.eq "wait-ready model" (flagValue "--model" (waitReady config)) "glm-5.3-flash"
    ++ h.eq "wait-ready url" (flagValue "--base-url" (waitReady config)) "http://127.0.0.1:8888"
  );

  preset-overrides = h.check [
    flash
    {
      services.vllm-station.serve = {
        maxModelLen = 131072;
        port = 9000;
        enablePrefixCaching = false;
        extraFlags = [
          "--max-num-batched-tokens"
          "16384"
        ];
      };
    }
  ] (
    config:
    let
      args = afterImage config;
    in
    h.eq "overridden --max-model-len" (flagValue "--max-model-len" args) "131072"
    ++ h.eq "overridden --port" (flagValue "--port" args) "9000"
    ++ h.contains "prefix caching turned off" args "--no-enable-prefix-caching"
    ++ h.lacks "prefix caching turned off" args "--enable-prefix-caching"
    ++ h.eq "preset value kept" (flagValue "--tool-call-parser" args) "glm47"
    ++ h.eq "extraFlags last" (lib.drop (lib.length args - 2) args) [
      "--max-num-batched-tokens"
      "16384"
    ]
  );

  preset-unknown-name = h.throws [ { services.vllm-station.serve.preset = "no-such-preset"; } ];

  # ---- rendering of typed options ----
  bool-flags-false = h.check (with' {
    enableChunkedPrefill = false;
    enablePrefixCaching = false;
  }) (
    config:
    h.contains "chunked prefill off" (afterImage config) "--no-enable-chunked-prefill"
    ++ h.contains "prefix caching off" (afterImage config) "--no-enable-prefix-caching"
  );

  speculative-config-json = h.check (with' {
    speculativeConfig = {
      method = "mtp";
      num_speculative_tokens = 4;
    };
  }) (config: h.eq "--speculative-config" (flagValue "--speculative-config" (afterImage config)) ''{"method":"mtp","num_speculative_tokens":4}'');

  flag-escaping = h.check (with' {
    extraFlags = [
      "--chat-template-content-format"
      "a b \"quoted\" 50% $HOME"
    ];
  }) (
    config:
    h.eq "round trip" (lib.last (start config)) "a b \"quoted\" 50% $HOME"
    ++ h.ok "% and $ doubled for systemd" (lib.hasInfix "50%% $$HOME" (sc config).ExecStart)
  );

  # The graceful stop follows the longest request allowed: maxOutputTokens at stopDecodeRate.
  shutdown-timeout-from-max-output-tokens = h.check (with' {
    maxOutputTokens = 1000;
    stopDecodeRate = 3;
  }) (
    config:
    h.eq "ceil(1000 / 3)" config.services.vllm-station.serve.shutdownTimeout 334
    ++ h.eq "the cap and the timeout reach vLLM" (lib.drop 5 config.services.vllm-station.serve.vllmArgs) [
      "--shutdown-timeout"
      "334"
      "--override-generation-config"
      ''{"max_new_tokens":1000}''
    ]
    ++ h.eq "container stop -t" (lib.elemAt (h.argv (lib.last (sc config).ExecStop)) 3) "364"
    ++ h.eq "TimeoutStopSec" (sc config).TimeoutStopSec 394
  );

  shutdown-timeout-flag-is-owned = h.assertionFails (with' {
    maxOutputTokens = 1000;
    extraFlags = [
      "--shutdown-timeout=5"
      "--override-generation-config"
      "{}"
    ];
  }) "--shutdown-timeout (set `shutdownTimeout`), --override-generation-config (set `maxOutputTokens (max_new_tokens)`)";

  headless-worker = h.check (with' {
    headless = true;
    tensorParallelSize = 2;
    extraFlags = [
      "--nnodes"
      "2"
      "--node-rank"
      "1"
    ];
  }) (
    config:
    h.eq "worker args" (afterImage config) [
      "org/model"
      "--tensor-parallel-size"
      "2"
      "--headless"
      "--shutdown-timeout"
      "600"
      "--nnodes"
      "2"
      "--node-rank"
      "1"
    ]
    ++ h.eq "a worker is not drained (no API): the stop is the container's alone" (map (l: builtins.elemAt (h.argv l) 1) (sc config).ExecStop) [ "stop" ]
    ++ h.eq "no readiness probe" (sc config).ExecStartPost [ ]
    ++ h.eq "prestart still runs" (lib.length (sc config).ExecStartPre) 1
  );

  tensor-parallel-head = h.check (with' { tensorParallelSize = 2; }) (
    config: h.eq "--tensor-parallel-size" (flagValue "--tensor-parallel-size" (afterImage config)) "2"
  );

  wildcard-host-probes-loopback = h.check (with' {
    host = "0.0.0.0";
    exposeUnauthenticatedVllm = true;
    apiKeyFile = "/run/secrets/key";
  }) (config: h.eq "probe" (flagValue "--base-url" (waitReady config)) "http://127.0.0.1:8000");

  ipv6-host-probe = h.check (with' {
    host = "::";
    exposeUnauthenticatedVllm = true;
    apiKeyFile = "/run/secrets/key";
  }) (config: h.eq "probe" (flagValue "--base-url" (waitReady config)) "http://[::1]:8000");

  exposed-host-warns-listing-the-open-paths = h.check (with' {
    host = "0.0.0.0";
    exposeUnauthenticatedVllm = true;
    apiKeyFile = "/run/secrets/key";
  }) (
    config:
    let
      w = h.warningsBut "(allowHubDownload)" config;
    in
    h.eq "one warning" (lib.length w) 1
    ++ h.ok "warning names the option path" (lib.hasPrefix "services.vllm-station.serve: exposeUnauthenticatedVllm" (builtins.head w))
    ++ h.ok "warning lists the open paths: ${builtins.head w}" (lib.all (p: lib.hasInfix p (builtins.head w)) [
      "/invocations"
      "/tokenize"
      "/metrics"
      "/pooling"
      "/pause"
    ])
    ++ h.ok "the key guards /v1 only" (lib.hasInfix "apiKeyFile guards /v1 only" (builtins.head w))
  );

  loopback-does-not-warn = h.check (with' { exposeUnauthenticatedVllm = true; }) (
    config: h.eq "warnings" (h.warningsBut "(allowHubDownload)" config) [ ]
  );

  assert-open-host-needs-exposure = h.assertionFails (with' {
    host = "0.0.0.0";
    apiKeyFile = "/run/secrets/key";
  }) "services.vllm-station.serve: host = \"0.0.0.0\" lets other hosts reach vLLM, whose key guards only /v1";

  assert-private-host-needs-exposure = h.assertionFails (with' { host = "10.10.0.2"; }) "or set services.vllm-station.serve.exposeUnauthenticatedVllm = true";

  assert-open-firewall-needs-exposure = h.assertionFails (with' { openFirewall = true; }) "services.vllm-station.serve: openFirewall opens vLLM's port";

  api-key-file = h.check (with' { apiKeyFile = "/run/secrets/vllm-api-key"; }) (
    config:
    let
      s = sc config;
      argv = start config;
    in
    h.eq "LoadCredential" s.LoadCredential [ "api-key:/run/secrets/vllm-api-key" ]
    ++ h.eq "station exec puts the credential in the environment, then runs the runtime" (lib.take 6 argv) [
      "/run/vllm-station-tools/bin/station"
      "exec"
      "--secret-env"
      "VLLM_API_KEY=%d/api-key"
      "--"
      "${h.fake.docker}/bin/docker"
    ]
    ++ h.contains "key forwarded by name only" argv "VLLM_API_KEY"
    ++ h.ok "key file path not in ExecStart" (!lib.hasInfix "/run/secrets" s.ExecStart)
    ++ h.ok "wait-ready reads the key file, privileged (+)" (
      lib.hasPrefix "+" (builtins.head s.ExecStartPost)
      && lib.hasSuffix ''"--api-key-file" "/run/secrets/vllm-api-key"'' (builtins.head s.ExecStartPost)
    )
  );

  environment-and-file = h.check (with' {
    environment = {
      NCCL_DEBUG = "INFO";
      HF_HOME = "/srv/hf";
    };
    environmentFile = "/run/secrets/vllm.env";
  }) (
    config:
    h.contains "environment passed" (envFlags config) "NCCL_DEBUG=INFO"
    ++ h.contains "environment overrides cache defaults" (envFlags config) "HF_HOME=/srv/hf"
    ++ h.lacks "default replaced" (envFlags config) "HF_HOME=/var/cache/vllm-station/huggingface"
    ++ h.eq "--env-file" (flagValue "--env-file" (start config)) "/run/secrets/vllm.env"
  );

  local-model-mounted = h.check (with' { model = "/data/models/glm"; }) (
    config:
    h.contains "model volume" (start config) "/data/models/glm:/data/models/glm:ro"
    ++ h.eq "preflight modelDir" (preflightJson config).modelDir "/data/models/glm"
  );

  start-timeout = h.check (with' { startTimeout = 1800; }) (
    config:
    h.eq "TimeoutStartSec" (sc config).TimeoutStartSec 1800
    ++ h.eq "wait-ready --timeout" (flagValue "--timeout" (waitReady config)) "1740"
    ++ h.contains "engine timeout" (envFlags config) "VLLM_ENGINE_READY_TIMEOUT_S=1800"
  );

  start-timeout-too-short = h.throws (with' { startTimeout = 30; });

  gpu-memory-utilization-range = h.throws (with' { gpuMemoryUtilization = 1.5; });

  open-firewall = h.check (with' {
    host = "0.0.0.0";
    exposeUnauthenticatedVllm = true;
    openFirewall = true;
    apiKeyFile = "/run/secrets/key";
  }) (config: h.eq "allowedTCPPorts" config.networking.firewall.allowedTCPPorts [ 8000 ]);

  prestart-options = h.check (with' {
    prestart = {
      gpuNode = 2;
      maxFilePagesGiB = 8;
      settleSeconds = 5;
      keepLogs = 3;
      dropCaches = false;
    };
  }) (
    config:
    let
      argv = prestart config;
    in
    h.eq "--gpu-node" (flagValue "--gpu-node" argv) "2"
    ++ h.eq "--max-file-pages-gib" (flagValue "--max-file-pages-gib" argv) "8"
    ++ h.eq "--settle-seconds" (flagValue "--settle-seconds" argv) "5"
    ++ h.eq "--keep-logs" (flagValue "--keep-logs" argv) "3"
    ++ h.contains "--no-drop" argv "--no-drop"
  );

  preflight-gate = h.check [
    flash
    {
      services.vllm-station.serve.preflight = {
        enable = true;
        only = [
          "filepages"
          "gpu"
        ];
      };
    }
  ] (
    config:
    let
      pre = (sc config).ExecStartPre;
      json = preflightJson config;
    in
    h.eq "the sequence: stamp gate, prestart, preflight" (map (a: builtins.elemAt (h.argv a) 1) pre) [
      "gate"
      "prestart"
      "preflight"
    ]
    ++ h.ok "preflight privileged" (lib.hasPrefix "+" (lib.last pre))
    ++ h.eq "preflight argv" (h.argv (lib.last pre)) [
      "/run/vllm-station-tools/bin/station"
      "preflight"
      "--config"
      "/etc/vllm-station/preflight.json"
      "--only"
      "filepages,gpu"
    ]
    ++ h.eq "preflight.json" json {
      host = "127.0.0.1";
      port = 8888;
      model = flashDir;
      modelDir = flashDir;
      revision = null;
      gpuNode = 1;
      maxFilePagesGiB = 4;
      gpuMemoryUtilization = 0.94;
      maxModelLen = 1048576;
      maxNumSeqs = 256;
      kvCacheDtype = null; # the checkpoint's (fp8)
      # the preset's parsers: preflight's `parsers` check compares them with the checkpoint's model card
      toolCallParser = "glm47";
      reasoningParser = "glm45";
      runtime = "${h.fake.docker}/bin/docker";
      image = h.image;
      paths = {
        state = "/var/lib/vllm-station";
        cache = "/var/cache/vllm-station";
        logs = "/var/log/vllm-station";
      };
      pair = null;
    }
  );

  preflight-json-written-without-gate = h.check [ flash ] (
    config:
    h.eq "stamp gate and prestart" (lib.length (sc config).ExecStartPre) 2
    ++ h.eq "json model" (preflightJson config).model flashDir
  );

  preflight-settings-extensible = h.check [
    base
    {
      services.vllm-station.serve.preflight.settings = {
        pair = {
          role = "head";
          rank = 0;
        };
        revision = "0123456789abcdef0123456789abcdef01234567";
      };
    }
  ] (
    config:
    h.eq "pair" (preflightJson config).pair {
      role = "head";
      rank = 0;
    }
    ++ h.eq "revision" (preflightJson config).revision "0123456789abcdef0123456789abcdef01234567"
  );

  native-backend = h.check (with' { backend = "native"; }) (
    config:
    let
      s = sc config;
      unit = h.unit config;
    in
    h.eq "ExecStart" (start config) [
      "${h.fake.vllm}/bin/vllm"
      "serve"
      "org/model"
      "--host"
      "127.0.0.1"
      "--port"
      "8000"
      "--shutdown-timeout"
      "600"
    ]
    ++ h.eq "DynamicUser" s.DynamicUser true
    ++ h.eq "prestart --runtime" (flagValue "--runtime" (prestart config)) "none"
    ++ h.eq "ExecStop: the drain alone (systemd's SIGTERM stops vLLM)" (map h.argv s.ExecStop) [
      [
        "/run/vllm-station-tools/bin/station"
        "drain"
        "--stopping"
      ]
    ]
    ++ h.eq "SIGTERM to the API server alone: it drains, then stops its engine" s.KillMode "mixed"
    ++ h.eq "MemoryDenyWriteExecute relaxed (JIT)" s.MemoryDenyWriteExecute false
    ++ h.eq "PrivateDevices relaxed (GPUs)" s.PrivateDevices false
    ++ h.eq "DevicePolicy" s.DevicePolicy "closed"
    ++ h.contains "DeviceAllow" s.DeviceAllow "char-nvidia-uvm"
    ++ h.eq "HF_HOME" unit.environment.HF_HOME "/var/cache/vllm-station/huggingface"
    ++ h.eq "engine timeout" unit.environment.VLLM_ENGINE_READY_TIMEOUT_S "900"
    ++ h.eq "no container runtime" (config.virtualisation.docker.enable or false) false
    ++ h.eq "no CDI" (config.hardware.nvidia-container-toolkit.enable or false) false
  );

  native-environment-file = h.check (with' {
    backend = "native";
    environmentFile = "/run/secrets/vllm.env";
  }) (config: h.eq "EnvironmentFile" (sc config).EnvironmentFile [ "/run/secrets/vllm.env" ]);

  podman-runtime = h.check (with' { runtime = "podman"; }) (
    config:
    let
      s = sc config;
    in
    h.eq "runtime" (builtins.head (start config)) "${h.fake.podman}/bin/podman"
    ++ h.contains "conmon stays in the unit" (start config) "--cgroups=no-conmon"
    ++ h.eq "podman enabled" config.virtualisation.podman.enable true
    ++ h.eq "docker not enabled" (config.virtualisation.docker.enable or false) false
    ++ h.eq "prestart --runtime" (flagValue "--runtime" (prestart config)) "${h.fake.podman}/bin/podman"
    ++ h.eq "preflight runtime" (preflightJson config).runtime "${h.fake.podman}/bin/podman"
    ++ h.eq "no inherited syscall filter" s.SystemCallFilter [ ]
    ++ h.eq "no docker dependency" ((h.unit config).requires or [ ]) [ ]
  );

  # ---- assertions: each fails with its message ----
  assert-model-missing = h.assertionFails [
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
      };
    }
  ] "services.vllm-station.serve: set `model`";

  assert-image-missing = h.assertionFails [
    {
      services.vllm-station.serve = {
        enable = true;
        model = "org/model";
      };
    }
  ] "needs `image`, pinned by digest";

  assert-image-tag = h.assertionFails (with' { image = "vllm/vllm-openai:v0.11.0"; }) "`image` must be pinned by digest";

  assert-image-short-digest = h.assertionFails (with' {
    image = "vllm/vllm-openai@sha256:abc123";
  }) "`image` must be pinned by digest";

  image-not-needed-native = h.check [
    {
      services.vllm-station.serve = {
        enable = true;
        model = "org/model";
        allowHubDownload = true;
        backend = "native";
      };
    }
  ] (config: h.eq "no image in unit" (lib.filter (lib.hasInfix "docker") (h.unit config).serviceConfig.ExecStop) [ ]);

  # ---- the weights check (step 7) ----
  weights-check-only-with-tensor-parallelism = h.check [ flash ] (
    config: h.eq "TP=1: no weights-check" (map (l: builtins.elemAt (h.argv l) 1) (sc config).ExecStartPost) [ "wait-ready" ]
  );

  weights-check-with-tp = h.check [
    flash
    { services.vllm-station.serve.tensorParallelSize = 4; }
  ] (
    config:
    h.eq "after wait-ready, the local checkpoint split 4 ways" (lib.drop 1 (h.argv (lib.last (sc config).ExecStartPost))) [
      "weights-check"
      "--unit"
      "vllm-station.service"
      "--checkpoint"
      flashDir
      "--tensor-parallel-size"
      "4"
      "--wait"
      "60"
    ]
  );

  weights-check-not-for-a-hub-id = h.check (with' { tensorParallelSize = 2; }) (
    config: h.eq "no local checkpoint, no size to compare" (lib.length (sc config).ExecStartPost) 1
  );

  # ---- the image's vLLM version travels with its digest ----
  image-vllm-version-checked = h.check [
    flash
    { services.vllm-station.serve.imageVllmVersion = import ../../../modules/presets/checked-with.nix; }
  ] (config: h.eq "no warning for the checked version" config.warnings [ ]);

  image-vllm-version-other-warns = h.check [
    flash
    { services.vllm-station.serve.imageVllmVersion = "0.1.0"; }
  ] (
    config:
    h.ok "warns: ${builtins.toJSON config.warnings}" (
      lib.any (w: lib.hasInfix "the image holds vLLM 0.1.0, but the presets' flags were checked against vLLM" w) config.warnings
    )
  );

  # ---- serving a hub id is a deliberate choice ----
  assert-hub-id-needs-allow = h.assertionFails [
    {
      services.vllm-station.serve = {
        enable = true;
        image = h.image;
        model = "nvidia/GLM-5.3-Flash-NVFP4";
      };
    }
  ] "is the hub id \"nvidia/GLM-5.3-Flash-NVFP4\": vLLM would download it inside the serving unit, which is not bound to NUMA node 0";

  hub-id-allowed-warns = h.check (with' { model = "org/hub-model"; }) (
    config:
    h.ok "warns why: ${builtins.toJSON config.warnings}" (
      lib.any (w: lib.hasInfix "serving the hub id org/hub-model" w && lib.hasInfix "not bound to NUMA node 0" w) config.warnings
    )
    ++ h.eq "no stamp gate for a hub id" (map (a: builtins.elemAt (h.argv a) 1) (sc config).ExecStartPre) [ "prestart" ]
  );

  # The preset serves the verified local copy: the gate comes first, the hub is never contacted.
  preset-serves-the-local-copy = h.check [ flash ] (
    config:
    h.eq "model" (lib.head config.services.vllm-station.serve.vllmArgs) flashDir
    ++ h.eq "gate first" (lib.take 4 (h.argv (lib.head (sc config).ExecStartPre))) [
      "/run/vllm-station-tools/bin/station"
      "gate"
      "stamp"
      flashDir
    ]
    ++ h.eq "no hub warning" config.warnings [ ]
  );

  assert-numa-cpuset-mems = h.assertionFails (with' {
    containerOptions = [ "--cpuset-mems=0" ];
  }) "must not be bound to NUMA memory nodes (found: --cpuset-mems=0)";

  assert-numa-cpuset-mems-split = h.assertionFails (with' {
    containerOptions = [
      "--cpuset-mems"
      "0"
    ];
  }) "CUDA fail with error 802";

  assert-numa-numactl = h.assertionFails (with' {
    containerCommand = [
      "numactl"
      "--membind=0"
      "vllm"
      "serve"
    ];
  }) "found: numactl, --membind=0";

  assert-numa-unit-policy = h.assertionFails [
    base
    {
      systemd.services.vllm-station.serviceConfig = {
        NUMAPolicy = "bind";
        NUMAMask = "0";
      };
    }
  ] "found: serviceConfig.NUMAPolicy, serviceConfig.NUMAMask";

  # cgroup memory-node restrictions pin the process just as well (AllowedMemoryNodes= and the
  # start-up variant, which applies while the unit starts — i.e. while vLLM allocates).
  assert-numa-allowed-memory-nodes = h.assertionFails [
    base
    {
      systemd.services.vllm-station.serviceConfig = {
        AllowedMemoryNodes = "0";
        StartupAllowedMemoryNodes = "0";
      };
    }
  ] "found: serviceConfig.AllowedMemoryNodes, serviceConfig.StartupAllowedMemoryNodes";

  assert-auto-tool-choice-needs-parser = h.assertionFails (with' {
    enableAutoToolChoice = true;
  }) "`enableAutoToolChoice` needs `toolCallParser`";

  assert-extra-flags-repeat-typed = h.assertionFails (with' {
    extraFlags = [
      "--max-model-len=4096"
      "--port"
      "1"
    ];
  }) "--max-model-len (set `maxModelLen`), --port (set `port`)";

  assert-extra-flags-api-key = h.assertionFails (with' {
    extraFlags = [
      "--api-key"
      "sk-secret"
    ];
  }) "--api-key (set `apiKeyFile";

  assert-api-key-in-store = h.assertionFails (with' {
    apiKeyFile = "/nix/store/00000000000000000000000000000000-key";
  }) "`apiKeyFile` must be an absolute path outside the Nix store";

  assert-api-key-relative = h.assertionFails (with' { apiKeyFile = "secrets/key"; }) "`apiKeyFile` must be an absolute path";

  assert-environment-file-in-store = h.assertionFails (with' {
    environmentFile = "/nix/store/00000000000000000000000000000000-env";
  }) "`environmentFile` must be an absolute path outside the Nix store";

  assert-headless-open-firewall = h.assertionFails (with' {
    headless = true;
    openFirewall = true;
  }) "a headless worker serves no API; set `openFirewall = false`";

  assert-headless-api-key = h.assertionFails (with' {
    headless = true;
    apiKeyFile = "/run/secrets/key";
  }) "`apiKeyFile` belongs on the head station";
}
