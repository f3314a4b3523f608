# services.vllm-station.serve: vLLM's OpenAI-compatible server on one station, under systemd.
#
# The start sequence of `vllm-station.service`, in order. This list is the one place it is
# written (config below); other modules feed it through the internal options `serve.inputs.*`
# and never edit this unit themselves.
#   ExecStartPre   1. station gate stamp DIR     a local checkpoint carries its verification stamp
#                                                (and the revision download.nix declares). DIR is the
#                                                pinned revision's directory when a download entry
#                                                serves it (contract.revisionDir); the unit is then
#                                                skipped (ConditionPathExists) until that stamp exists,
#                                                and the download unit starts it when done.
#                  2. station pair wait-worker   pair head only: the worker's beacon answers (pair.nix)
#                  3. +station prestart          sync, drop the page cache, refuse while file pages sit
#                                                in the GPU's NUMA node, keep the previous container's logs
#                  4. +station preflight         `preflight.enable`: the configured checks gate the start
#   ExecStart         [station exec --secret-env VLLM_API_KEY=%d/api-key --] docker|podman run … vllm serve …
#                     (or `vllm serve …` natively)
#   ExecStartPost  5. +station wait-ready        not headless: /health answers and a 1-token completion works
#                  6. +station nccl-check        pair head only: NCCL picked GPUDirect RDMA (pair.nix)
#                  7. +station weights-check     tensor parallelism: each local rank holds its share of
#                                                the checkpoint's weights, not all of them (weightsCheck)
#   ExecStop       8. +station drain --stopping  not headless: the gateways stop sending new requests (503)
#                  9. -docker|podman stop -t T   SIGTERM: vLLM refuses new requests and finishes running ones
#                                                for up to `shutdownTimeout` s (T = it + 30, then SIGKILL);
#                                                the container is kept: step 3 saves its logs next start
#                     (native: systemd's SIGTERM to vLLM alone, KillMode=mixed)
#   TimeoutStopSec    shutdownTimeout + 60: above the container's stop timeout, so systemd never cuts it
# systemd owns restarts (Restart=always, RestartSec=60, at most 3 starts an hour), so steps 1–4 run
# before every start. The container is started by this unit directly, not through
# `virtualisation.oci-containers`: that module adds `--rm` (which would delete the crashed
# container's logs before prestart can save them) and its own restart policy.
#
# What `nixos-rebuild switch` restarts (docs/serve.md has the table). Switch restarts a unit whose
# text (or X-Restart-Triggers) changed. Every served parameter is in this unit's text — the image
# digest, the vLLM flags and the model in ExecStart, the revision in step 1, the environment (`--env`
# or Environment=), the devices, the pair's file through `inputs.restartTriggers` — so changing one
# restarts the engine. The `station` tools are not: every step runs them as
# /run/vllm-station-tools/bin/station (contract.stationAt), a link to services.vllm-station.package
# that this module declares as a systemd-tmpfiles `L+` rule. A new package changes the rule, not this
# unit; switch re-applies tmpfiles (systemd-tmpfiles-resetup, restarted with sysinit-reactivation.target
# before any unit starts), so the engine keeps serving and its next start runs the new tools. Why not
# the package's store path: it changes with any change to the tools, and a restart costs ~7 minutes of
# loading, the requests in flight, one of the 3 starts an hour and a golive run. Why not
# /run/current-system/sw/bin: any other package there may provide a `station` too (system-path ignores
# collisions); this link names exactly the configured package.
{
  config,
  lib,
  options,
  pkgs,
  utils,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    mkPackageOption
    types
    literalExpression
    optional
    optionals
    optionalAttrs
    optionalString
    ;

  cfg = config.services.vllm-station.serve;
  inputs = cfg.inputs;
  # The stable link, not the store path (see the header): the package changes no unit text.
  station = contract.stationAt;
  toolsPackage = config.services.vllm-station.package;
  presets = import ./presets;
  checkedWith = import ./presets/checked-with.nix;
  contract = import ./lib/contract.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };
  apiKey = unit.vllmApiKey cfg name;

  inherit (contract) isLoopback;
  # vLLM 0.32's routes outside /v1, which its --api-key does not guard (read from vllm/entrypoints:
  # the API server and its routers; some exist only with dev-mode or pooling models).
  vllmOpenPaths = [
    "/invocations"
    "/tokenize"
    "/detokenize"
    "/metrics"
    "/pooling"
    "/classify"
    "/score"
    "/rerank"
    "/pause"
    "/resume"
    "/abort_requests"
    "/sleep"
    "/wake_up"
    "/reset_prefix_cache"
    "/collective_rpc"
    "/server_info"
    "/load"
    "/ping"
    "/version"
    "/tokenizer_info"
    "/start_profile"
    "/stop_profile"
  ];
  hardening = import ./lib/hardening.nix;

  name = contract.unit; # unit name and container name
  inherit (contract) stateDir cacheDir logsDir;

  isContainer = cfg.backend == "container";
  runtimeExe =
    if cfg.runtime == "docker" then
      lib.getExe' config.virtualisation.docker.package "docker"
    else
      lib.getExe' config.virtualisation.podman.package "podman";

  # The unit's serviceConfig as merged from every module (host.nix and pair.nix add to it).
  unitConfig = config.systemd.services.${name}.serviceConfig;

  # Caches that make a restart cheap: torch.compile/Inductor, Triton, FlashInfer and CUDA JIT
  # output, and the Hugging Face hub cache. Same paths inside and outside the container.
  cacheEnvironment = {
    HOME = "${cacheDir}/home"; # writable (the state directory is mounted read-only into the container)
    XDG_CACHE_HOME = cacheDir;
    HF_HOME = "${cacheDir}/huggingface";
    VLLM_CACHE_ROOT = "${cacheDir}/vllm";
    TRITON_CACHE_DIR = "${cacheDir}/triton";
    # Inductor's default is /tmp/torchinductor_$USER: lost with the container (measured on vLLM 0.32
    # CPU: a warm start with it kept took 34.6 s against 62.1 s cold).
    TORCHINDUCTOR_CACHE_DIR = "${cacheDir}/inductor";
    FLASHINFER_WORKSPACE_BASE = cacheDir;
    CUDA_CACHE_PATH = "${cacheDir}/nv";
    # vLLM's own engine start deadline (default 600 s) must not be shorter than the unit's.
    VLLM_ENGINE_READY_TIMEOUT_S = toString cfg.startTimeout;
    VLLM_NO_USAGE_STATS = "1";
  };
  serverEnvironment = cacheEnvironment // cfg.environment;
  # The unit's own environment: the server's when it runs natively.
  unitEnvironment =
    if isContainer then
      optionalAttrs (cfg.runtime == "docker") {
        DOCKER_CONFIG = "/run/${name}/docker"; # no client config in /root (ProtectHome)
      }
    else
      serverEnvironment;

  # A local model directory outside the state directory is mounted read-only at the same path.
  modelIsPath = cfg.model != null && lib.hasPrefix "/" cfg.model;
  servesLocalModel = modelIsPath;
  # The directory vLLM loads: the pinned revision's (download.nix) under `model`, else `model` itself.
  modelPath = if modelIsPath && inputs.checkpoint.dir != null then inputs.checkpoint.dir else cfg.model;
  # Skipped, not failed, while the checkpoint a download unit produces is not stamped yet: the first
  # switch returns at once, and the download unit starts this unit when it has stamped the revision.
  awaitsDownload = servesLocalModel && inputs.checkpoint.units != [ ];
  extraModelVolume = optionals (modelIsPath && !lib.hasPrefix "${stateDir}/" modelPath) [
    "--volume"
    "${modelPath}:${modelPath}:ro"
  ];

  containerArgs =
    [
      runtimeExe
      "run"
      "--name"
      name
      # No `--rm` (prestart saves the logs of the previous run, then removes it) and no
      # `--restart` (systemd owns restarts so that prestart runs before every one of them).
      "--network=host" # listen on the host's address; the pair's NCCL/Gloo rails need it too
      "--ipc=host" # vLLM's worker processes share tensors through /dev/shm
      "--volume"
      "${cacheDir}:${cacheDir}"
      "--volume"
      "${stateDir}:${stateDir}:ro"
    ]
    ++ extraModelVolume
    ++ lib.concatMap (device: [
      "--device"
      device
    ]) (cfg.gpuDevices ++ inputs.devices)
    # The container gets the runtime daemon's limits, not the unit's: raise its own too.
    ++ optional inputs.unlimitedMemlock "--ulimit=memlock=-1:-1"
    ++ optionals (cfg.runtime == "podman") [ "--cgroups=no-conmon" ]
    ++ lib.concatLists (
      lib.mapAttrsToList (key: value: [
        "--env"
        "${key}=${value}"
      ]) serverEnvironment
    )
    # No value: the runtime client copies it from its own environment (set by `station exec`).
    ++ optionals (cfg.apiKeyFile != null) [
      "--env"
      "VLLM_API_KEY"
    ]
    ++ lib.concatMap (file: [
      "--env-file"
      file
    ]) (inputs.environmentFiles ++ lib.optional (cfg.environmentFile != null) cfg.environmentFile)
    ++ cfg.containerOptions
    ++ optional (cfg.image != null) cfg.image # null is refused by an assertion
    ++ cfg.containerCommand
    ++ cfg.vllmArgs;

  nativeArgs = [
    (lib.getExe' cfg.package "vllm")
    "serve"
  ] ++ cfg.vllmArgs;

  # Reads the key from the unit's credential at start and exports it for vLLM (and for the
  # runtime client, which forwards it with `--env VLLM_API_KEY`): the key never appears in the
  # unit, the Nix store or any process's argument list (modules/lib/unit.nix renders the credential).
  secretEnvPrefix = optionals (cfg.apiKeyFile != null) [
    station
    "exec"
    "--secret-env"
    apiKey.envArg
    "--"
  ];

  startCommand = unit.execLine (secretEnvPrefix ++ (if isContainer then containerArgs else nativeArgs));

  # ---- the start sequence's steps (the order is in `serviceConfig` below) ----
  # 1. A local checkpoint must carry the stamp `station verify` writes (download.nix declares the
  #    revision and the units that produce it).
  stampGateArgs =
    [
      station
      "gate"
      "stamp"
      modelPath
    ]
    ++ optionals (inputs.checkpoint.revision != null) [
      "--revision"
      inputs.checkpoint.revision
    ]
    ++ [
      "--fix"
      (
        if inputs.checkpoint.units != [ ] then
          "start ${lib.concatStringsSep " " inputs.checkpoint.units} (it downloads and verifies), or run: station verify ${modelPath}"
        else
          "run: station verify ${cfg.model} (or declare services.vllm-station.download.models.<name>.dir = \"${cfg.model}\")"
      )
    ];

  # 2. The pair's head waits for the worker (pair.nix fills `inputs.waitForWorker`).
  waitForWorkerArgs =
    let
      w = inputs.waitForWorker;
    in
    [
      station
      "pair"
      "wait-worker"
      "--url"
      w.url
      "--worker-address"
      w.address
      "--timeout"
      (toString w.timeout)
      "--interval"
      (toString w.interval)
    ];

  prestartArgs = [
    station
    "prestart"
    "--gpu-node"
    (toString cfg.prestart.gpuNode)
    "--max-file-pages-gib"
    (toString cfg.prestart.maxFilePagesGiB)
    "--settle-seconds"
    (toString cfg.prestart.settleSeconds)
    # The runtime's absolute path: the unit's PATH (coreutils, findutils, grep, sed, systemd) lacks it.
    "--runtime"
    (if isContainer then runtimeExe else "none")
    "--container"
    name
    "--log-dir"
    logsDir
    "--keep-logs"
    (toString cfg.prestart.keepLogs)
  ] ++ optional (!cfg.prestart.dropCaches) "--no-drop";

  preflightArgs =
    [
      station
      "preflight"
      "--config"
      contract.preflightConfig
    ]
    ++ optionals (cfg.preflight.only != [ ]) [
      "--only"
      (lib.concatStringsSep "," cfg.preflight.only)
    ];

  waitReadyArgs = [
    station
    "wait-ready"
    "--base-url"
    cfg.clientUrl
    "--model"
    (if cfg.servedModelName != null then cfg.servedModelName else cfg.model)
    "--timeout"
    # Finish (with wait-ready's own reason) before systemd's TimeoutStartSec kills the start.
    (toString (cfg.startTimeout - 60))
  ];
  # `+`: privileged, reading the key from `apiKeyFile` itself. Not `%d/api-key`: under systemd 252 a
  # sandboxed ExecStartPost= is refused the credentials directory that the main process reads (EACCES,
  # found by the system tier); the probe is our own HTTP client and needs no sandbox of its own.
  waitReadyCommand =
    "+"
    + utils.escapeSystemdExecArgs (
      waitReadyArgs
      ++ optionals (cfg.apiKeyFile != null) [
        "--api-key-file"
        cfg.apiKeyFile
      ]
    );

  # 6. Which transport did NCCL pick? (pair head; docs/nccl-check.md) `+`: it reads the system journal.
  ncclCheckCommand =
    let
      n = inputs.ncclCheck;
    in
    "+"
    + utils.escapeSystemdExecArgs (
      [
        station
        "nccl-check"
        "--unit"
        "${name}.service"
        "--wait"
        (toString n.waitSeconds)
      ]
      ++ optional n.requireGdr "--require-gdr"
      ++ optional n.pendingOk "--pending-ok"
    );

  # ---- the stop sequence (steps 8–9 at the top of this file): every bound derives from shutdownTimeout ----
  containerStopSeconds = cfg.shutdownTimeout + 30;
  stopTimeoutSeconds = cfg.shutdownTimeout + 60;
  drainStopCommand = "+" + utils.escapeSystemdExecArgs [
    station
    "drain"
    "--stopping"
  ];
  execStop =
    optional (!cfg.headless) drainStopCommand
    # `-`: nothing to stop when `run` never created the container. Not `rm`: prestart saves its logs first.
    ++ optional isContainer (
      "-"
      + utils.escapeSystemdExecArgs [
        runtimeExe
        "stop"
        "-t"
        (toString containerStopSeconds)
        name
      ]
    );

  execStartPre =
    optional servesLocalModel (utils.escapeSystemdExecArgs stampGateArgs)
    ++ optional (inputs.waitForWorker != null) (utils.escapeSystemdExecArgs waitForWorkerArgs)
    # `+`: privileged even though the service is sandboxed (drop_caches, the runtime's logs).
    ++ [ ("+" + utils.escapeSystemdExecArgs prestartArgs) ]
    ++ optional cfg.preflight.enable ("+" + utils.escapeSystemdExecArgs preflightArgs);

  # 7. Did each local rank load its share of the weights? (tensor parallelism applied; docs/weights-check.md)
  weightsCheckArgs = wait: [
    station
    "weights-check"
    "--unit"
    "${name}.service"
    "--checkpoint"
    modelPath
    "--tensor-parallel-size"
    (toString cfg.tensorParallelSize)
    "--wait"
    (toString wait)
  ];
  weightsCheckCommand = "+" + utils.escapeSystemdExecArgs (weightsCheckArgs cfg.weightsCheck.waitSeconds);
  weightsChecked = cfg.weightsCheck.enable && !cfg.headless && servesLocalModel;
  # A headless worker (pair rank 1) loads its share only once the head has joined, and the head waits for
  # the worker's unit to be active: a start step would wait for a head that waits for it. Its own unit
  # instead, started with each start of the serving unit, waiting as long as a start may take.
  workerWeightsChecked = cfg.weightsCheck.enable && cfg.headless && servesLocalModel;

  execStartPost =
    optional (!cfg.headless) waitReadyCommand
    ++ optional (inputs.ncclCheck != null) ncclCheckCommand
    ++ optional weightsChecked weightsCheckCommand;

  # ---- the sandbox: modules/lib/hardening.nix's base and the relaxations this unit needs ----
  sandbox =
    if !isContainer then
      hardening.for [
        "gpuDevices"
        "jit"
        "driverProc"
        "netlink"
        "numaPlacement"
      ]
      // {
        DynamicUser = true;
      }
    else if cfg.runtime == "docker" then
      hardening.for [ "dockerClient" ]
    else
      hardening.for [ "containerRuntime" ];

  # Memory binding of any kind on the serving unit (CUDA error 802 on GB300: the GPU's memory is
  # NUMA node 1; a node-0 binding keeps the process from it).
  pinningWords = [
    "--cpuset-mems"
    "--membind"
    "--cpunodebind"
    "--preferred"
    "--interleave"
  ];
  isPinningArg =
    arg:
    lib.any (word: arg == word || lib.hasPrefix "${word}=" arg) pinningWords
    || lib.hasSuffix "numactl" arg
    || builtins.match "-[mN][0-9].*" arg != null;
  # The pair's file is read by the unit (the native process, and an operator's `systemctl show`);
  # secrets (`environmentFile`) reach a container only through `--env-file`.
  unitEnvironmentFiles =
    inputs.environmentFiles ++ optional (!isContainer && cfg.environmentFile != null) cfg.environmentFile;

  pinningArgs = lib.filter isPinningArg (cfg.containerOptions ++ cfg.extraFlags ++ cfg.containerCommand);
  pinningUnitSettings = lib.filter (key: unitConfig ? ${key} && unitConfig.${key} != "default") [
    "NUMAPolicy"
    "NUMAMask"
    "AllowedMemoryNodes"
    "StartupAllowedMemoryNodes"
  ];

  # `serve.inputs.*`: internal options the other modules set.
  input =
    type: default: description:
    mkOption {
      inherit type default description;
      internal = true;
    };
  record = fields: types.submodule { options = lib.mapAttrs (_: type: mkOption { inherit type; }) fields; };

  inherit (unit) isSecretPath;
  # The files this unit loads at each start, checked before it loads them (modules/secrets.nix).
  secretFiles =
    apiKey.secretFiles
    ++ optional (cfg.environmentFile != null) {
      option = "services.vllm-station.serve.environmentFile";
      path = cfg.environmentFile;
    };
  secretsCheck = optionals (secretFiles != [ ]) [ (contract.secretsCheckUnit name) ];

  # Presets set option values under services.vllm-station with mkDefault. Walking the declared
  # options (not config) keeps this free of recursion; an unknown name fails loudly.
  presetDefaults =
    opts: values:
    lib.mapAttrs (
      key: value:
      let
        opt =
          opts.${key} or (throw "vllm-station preset sets `${key}`, which is not an option under services.vllm-station");
      in
      if lib.isOption opt then lib.mkDefault value else presetDefaults opt value
    ) values;
in
{
  # vLLM's flag options (maxModelLen, toolCallParser, extraFlags, …), their rendering (`vllmArgs`) and
  # the flags they own: one file beside this one.
  imports = [ ./serve-flags.nix ];

  options.services.vllm-station.serve = {
    enable = mkEnableOption "the vLLM OpenAI-compatible server (vllm-station)";

    package = mkPackageOption pkgs [ "python3Packages" "vllm" ] {
      extraDescription = ''
        Used only with `backend = "native"`; it must provide `bin/vllm`.
        GB300 stations use the container backend: nixpkgs 24.11 (the offline test tree) marks its vLLM
        0.6.2 broken on every platform, and no vLLM build from the locked nixpkgs is built or tested here.
      '';
    };

    host = mkOption {
      type = types.str;
      default = "127.0.0.1";
      example = "0.0.0.0";
      description = ''
        Address the OpenAI-compatible API listens on: loopback, where only this host (its gateway,
        Prometheus, the operator's tools) reaches vLLM. vLLM's own key (`apiKeyFile`) guards only
        `/v1`; any other address needs `exposeUnauthenticatedVllm`. Serve the network through
        `services.vllm-station.gateway` instead.
      '';
    };

    exposeUnauthenticatedVllm = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Allow `host` to be an address other hosts reach (and `openFirewall`), although vLLM then
        serves every path outside `/v1` — full inference at `/invocations`, `/tokenize`, `/metrics`,
        `/pause`, … — without any key, `apiKeyFile` or not. Evaluation warns, listing those paths.
        Without it, such a `host` or `openFirewall` is refused: put `services.vllm-station.gateway`
        in front.
      '';
    };

    port = mkOption {
      type = types.port;
      default = 8000;
      example = 8888;
      description = "Port of the OpenAI-compatible API.";
    };

    clientUrl = mkOption {
      type = types.str;
      readOnly = true;
      default = "http://${contract.clientHost cfg.host}:${toString cfg.port}";
      defaultText = literalExpression ''"http://''${host, as a client on this host reaches it}:''${toString port}"'';
      example = "http://[::1]:8000";
      description = ''
        How a client on this host reaches vLLM (read-only): `host` and `port` as a URL, a wildcard
        address on loopback (`0.0.0.0` → `127.0.0.1`, `::` → `[::1]`) and an IPv6 address in brackets
        (`::1` → `[::1]`). The one source of that address: the readiness probe (wait-ready), monitoring
        (its scrape target, the probe and the watchdog: `monitoring.vllmAddress`), golive (`golive.baseUrl`)
        and the gateway's default upstream all follow it.
      '';
    };

    preset = mkOption {
      type = types.nullOr (types.enum (lib.attrNames presets));
      default = null;
      example = "glm53-flash";
      description = ''
        A model recipe from `modules/presets/`: sets its option values with `lib.mkDefault`
        (any of them can be overridden). Does not enable the service.
      '';
    };

    backend = mkOption {
      type = types.enum [
        "container"
        "native"
      ];
      default = "container";
      description = ''
        `container`: run vLLM from a digest-pinned image with `runtime`, GPUs through CDI.
        `native`: run `serve.package`'s `vllm` directly, sandboxed under a dynamic user.
      '';
    };

    image = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
      description = ''
        Container image, pinned by digest (`name@sha256:<64 hex>`): a tag can move under a running
        station. Required with `backend = "container"`.
      '';
    };

    runtime = mkOption {
      type = types.enum [
        "docker"
        "podman"
      ];
      default = "docker";
      description = ''
        Container runtime. The module enables it (`virtualisation.docker.enable` or
        `virtualisation.podman.enable`, with `mkDefault`) and `hardware.nvidia-container-toolkit.enable`,
        which generates the CDI spec behind `gpuDevices`.
      '';
    };

    containerCommand = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "vllm"
        "serve"
      ];
      description = ''
        Command placed between the image and the vLLM arguments. Empty for images whose entrypoint is
        `vllm serve` (vllm/vllm-openai); `[ "vllm" "serve" ]` for images without one (NGC).
      '';
    };

    containerOptions = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "--shm-size=16g" ];
      description = ''
        Extra options for `docker run`/`podman run`. Memory binding (`--cpuset-mems`) is refused:
        see the NUMA assertion.
      '';
    };

    gpuDevices = mkOption {
      type = types.listOf types.str;
      default = [ "nvidia.com/gpu=all" ];
      description = "CDI device names passed to the container with `--device`.";
    };

    model = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "${contract.modelsRoot}/glm53-flash";
      description = ''
        The checkpoint to serve: an absolute path to a local directory, normally one that a
        `services.vllm-station.download.models.<name>` entry downloads and verifies (its `dir`,
        `/var/lib/vllm-station-models/<name>` by default): vLLM then loads the pinned revision's
        directory under it (`<model>/${contract.revisionsDirName}/<revision>`), and the unit is skipped
        until that directory carries the verification stamp (`${contract.stampName}`), then started by
        the download unit. Any other local directory must carry the stamp itself, or the start is
        refused. A path outside
        `/var/lib/vllm-station` is mounted read-only into the container at the same place.
        A Hugging Face repo id is served only with {option}`allowHubDownload`.
      '';
    };

    allowHubDownload = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Serve a Hugging Face repo id as {option}`model` directly. vLLM then downloads the checkpoint
        inside the serving unit, which is deliberately not bound to NUMA node 0: on a GB300 the
        download's page cache lands in the GPU's memory (node 1) and the start fails with
        "tried to allocate 151 GiB, 159.43 GiB free"; nothing verifies the files either. Prefer a
        `services.vllm-station.download.models` entry (bound to node 0, verified, stamped) and serve its `dir`.
      '';
    };

    headless = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Run as a headless worker (`--headless`): no API, no `--host`/`--port`, no readiness probe,
        no firewall opening. Set by the pair module on the worker station.
      '';
    };

    apiKeyFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "${contract.secretsDir}/vllm-api-key";
      description = ''
        File holding the API key clients must send (only the key). Read at each start through
        systemd's `LoadCredential=` and handed to vLLM as `VLLM_API_KEY`: it never enters the Nix
        store, the unit file or a command line. The readiness probe uses it too. Keep it where it
        outlives a reboot (`${contract.secretsDir}`, root-only) or where a secret manager writes it at
        boot (sops-nix, agenix): a missing file fails the start naming this option (docs/secrets.md).
      '';
    };

    imageVllmVersion = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "0.32.0";
      description = ''
        The vLLM version inside {option}`image`: declare it next to the digest, so the two travel
        together. The presets' flags were checked against vLLM ${checkedWith} (the `vllm serve` argument
        parser accepted them; `modules/presets/checked-with.nix`); another version warns, because a
        renamed or removed flag would stop the server at start.
      '';
    };

    weightsCheck = {
      enable = mkOption {
        type = types.bool;
        default = cfg.tensorParallelSize > 1;
        defaultText = literalExpression "tensorParallelSize > 1";
        description = ''
          After wait-ready: `station weights-check` reads each local rank's model-loading line from the
          unit's journal and compares its weight memory with the checkpoint's size divided by
          `tensorParallelSize`. A rank holding the whole model (tensor parallelism not applied) fails
          the start. Local model directories only (the size comes from the verification stamp).
        '';
      };
      waitSeconds = mkOption {
        type = types.ints.positive;
        default = 60;
        description = "How long weights-check waits for the loading lines (counts against `startTimeout`).";
      };
    };

    startTimeout = mkOption {
      type = types.ints.between 120 86400;
      default = 900;
      description = ''
        Seconds from `systemctl start` to serving before the start counts as failed
        (`TimeoutStartSec`). The GLM-5.3-Flash recipe needs ~7 minutes (weights ~77 s, then
        compilation and CUDA graph capture). vLLM's `VLLM_ENGINE_READY_TIMEOUT_S` is set to match;
        `station wait-ready` gives up 60 s earlier with its own reason.
      '';
    };

    stopDecodeRate = mkOption {
      type = types.numbers.positive;
      default = 55.6;
      example = 12.8;
      description = ''
        Tokens per second that one request decodes while the station is fully loaded: the slowest rate a
        request in flight at a stop can count on. The default is the GLM-5.3-Flash recipe's measurement
        (1,464 tok/s for 32 users: 55.6 tok/s each); the TP=2 preset sets its own (12.8 tok/s: 77.9 ms
        between tokens at 32 users). Used only to size `shutdownTimeout`.
      '';
    };

    shutdownTimeout = mkOption {
      type = types.ints.unsigned;
      default =
        if cfg.maxOutputTokens != null then
          builtins.ceil (cfg.maxOutputTokens * 1.0 / cfg.stopDecodeRate) # 1.0: never integer division
        else
          600;
      defaultText = literalExpression "if maxOutputTokens != null then ceil (maxOutputTokens / stopDecodeRate) else 600";
      example = 120;
      description = ''
        Seconds vLLM gives the requests in flight when it is stopped (`--shutdown-timeout`): on SIGTERM
        it refuses new requests and waits up to this long for the running ones, then aborts what is
        left; 0 aborts at once. The default waits for the longest request the station allows, decoded at
        the loaded rate: `maxOutputTokens / stopDecodeRate`, rounded up (GLM-5.3-Flash: 32768 / 55.6 =
        590 s); without `maxOutputTokens`, 600 s. Everything else of a stop derives from it: the
        container's stop timeout (`docker|podman stop -t`) is this + 30 s, systemd's `TimeoutStopSec`
        this + 60 s. Before the SIGTERM, the unit's first stop step (`station drain --stopping`) turns
        this station's gateway and listener to 503 for new requests, so no request reaches an engine
        that would refuse it. A stop of an idle engine is immediate whatever the value.
      '';
    };

    prestart = {
      gpuNode = mkOption {
        type = types.ints.unsigned;
        default = 1;
        description = "NUMA node of the GPU's memory (HBM): node 1 on GB300.";
      };
      maxFilePagesGiB = mkOption {
        type = types.ints.unsigned;
        default = 4;
        description = "Refuse to start while more than this many GiB of page cache sit on `gpuNode` after the drop.";
      };
      settleSeconds = mkOption {
        type = types.ints.unsigned;
        default = 2;
        description = "Wait between dropping the page cache and reading FilePages.";
      };
      dropCaches = mkOption {
        type = types.bool;
        default = true;
        description = "`sync` and drop the page cache before each start (false: `--no-drop`, only check).";
      };
      keepLogs = mkOption {
        type = types.ints.positive;
        default = 20;
        description = "Saved logs of previous containers kept under /var/log/vllm-station.";
      };
    };

    preflight = {
      enable = mkEnableOption ''
        `station preflight --config /etc/vllm-station/preflight.json` as a start gate
        (after prestart; a failing check refuses the start)'';
      only = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "filepages"
          "gpu"
        ];
        description = "Checks to run (`--only`); empty: all.";
      };
      settings = mkOption {
        type = types.submodule { freeformType = types.attrsOf types.anything; };
        default = { };
        description = ''
          Contents of /etc/vllm-station/preflight.json (written whenever the service is enabled, so
          `station preflight` by hand sees the same configuration). Filled from the serve options;
          the pair and download modules add their keys.
        '';
      };
    };

    environment = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = {
        NCCL_DEBUG = "INFO";
      };
      description = "Environment of the vLLM process (passed with `--env` to a container). Not for secrets.";
    };

    environmentFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "${contract.secretsDir}/vllm-station.env";
      description = ''
        File of `NAME=value` lines (secrets such as `HF_TOKEN`), read at start and never copied to
        the Nix store: systemd's `EnvironmentFile=` (native) or `--env-file` (container).
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Add `port` to `networking.firewall.allowedTCPPorts` (not for a headless worker).";
    };

    # Set by the other vllm-station modules (never by users): what they add to this unit. Only this
    # module writes `systemd.services.vllm-station`; see the start sequence at the top of the file.
    inputs = {
      checkpoint = {
        revision = input (types.nullOr types.str) null "Revision the local checkpoint's stamp must record (download.nix).";
        dir = input (types.nullOr types.str) null "The pinned revision's directory under `model`, served instead of `model` (download.nix).";
        units = input (types.listOf types.str) [ ] "Units that download/verify the served checkpoint: wanted, ordered before, named in the gate's fix (download.nix).";
      };
      waitForWorker = input (types.nullOr (record {
        url = types.str;
        address = types.str;
        timeout = types.ints.positive;
        interval = types.ints.positive;
      })) null "Step 2: the worker's beacon to wait for before starting (pair.nix, head only).";
      ncclCheck = input (types.nullOr (record {
        waitSeconds = types.ints.positive;
        requireGdr = types.bool;
        pendingOk = types.bool;
      })) null "Step 6: the NCCL transport gate after wait-ready (pair.nix, head only).";
      unlimitedMemlock = input types.bool false "`LimitMEMLOCK=infinity` on the unit and `--ulimit=memlock=-1:-1` on its container (host.nix, pair.nix).";
      environmentFiles = input (types.listOf types.str) [ ] "`EnvironmentFile=` of the unit and `--env-file` of its container (pair.nix: pair.env).";
      devices = input (types.listOf types.str) [ ] "Device nodes for the container (`--device`), after `gpuDevices` (pair.nix: RDMA).";
      restartTriggers = input (types.listOf types.str) [ ] "Contents whose change restarts the unit on switch (pair.nix: pair.env).";
    };

    served = mkOption {
      type = types.str;
      readOnly = true;
      internal = true;
      default = builtins.toJSON {
        start = startCommand;
        inherit (inputs) restartTriggers;
        environment = unitEnvironment;
        environmentFiles = unitEnvironmentFiles;
        revision = inputs.checkpoint.revision;
      };
      defaultText = literalExpression "the start command, the unit's environment and restart triggers, the revision";
      description = ''
        What the engine serves, as text: the start command (image, vLLM flags, model, the container's
        environment and devices), the unit's environment, its restart triggers and the checkpoint's
        revision. Never the `station` tools. golive re-runs when it changes.
      '';
    };

    weightsCheckUnit = mkOption {
      type = types.nullOr types.str;
      readOnly = true;
      internal = true;
      default = if workerWeightsChecked then "${contract.weightsCheckUnit}.service" else null;
      defaultText = literalExpression "the headless worker's weights-check unit, or null";
      description = ''
        The unit that checks a headless worker's share of the weights (its engine loads only once the
        head has joined, after the serving unit is active); null where the check is a start step (or off).
        Monitoring alerts on its failure.
      '';
    };

    startCondition = mkOption {
      type = types.nullOr types.str;
      readOnly = true;
      internal = true;
      default = if awaitsDownload then contract.stampOf modelPath else null;
      defaultText = literalExpression "the pinned revision's stamp when a download unit produces the checkpoint, else null";
      description = ''
        The path whose existence the serving unit's start needs (`ConditionPathExists=`): the pinned
        revision's stamp while a download unit produces it. golive's unit waits on the same condition.
      '';
    };

    checkpointDir = mkOption {
      type = types.nullOr types.str;
      readOnly = true;
      internal = true;
      default = if modelIsPath then modelPath else null;
      defaultText = literalExpression "the pinned revision's directory under `model`, else `model` (a local path)";
      description = "The local directory vLLM loads and whose stamp the start checks (the pair's share and beacon use it).";
    };

  };

  config = lib.mkMerge [
    {
      services.vllm-station = lib.mkMerge (
        lib.mapAttrsToList (
          presetName: values:
          lib.mkIf (cfg.preset == presetName) (presetDefaults options.services.vllm-station values)
        ) presets
      );
    }

    (lib.mkIf cfg.enable {
      assertions = [
        {
          assertion = cfg.model != null;
          message = "services.vllm-station.serve: set `model` (a local checkpoint directory) or a `preset`.";
        }
        {
          assertion = cfg.model == null || modelIsPath || cfg.allowHubDownload;
          message = "services.vllm-station.serve: `model` is the hub id \"${toString cfg.model}\": vLLM would download it inside the serving unit, which is not bound to NUMA node 0 (the page cache lands in the GPU's memory) and never verified. Declare services.vllm-station.download.models.<name> = { model = \"${toString cfg.model}\"; revision = \"<40-hex commit>\"; } with download.enable = true and serve its dir (/var/lib/vllm-station-models/<name>), or set serve.allowHubDownload = true.";
        }
        {
          assertion = !isContainer || cfg.image != null;
          message = ''services.vllm-station.serve: backend "container" needs `image`, pinned by digest (name@sha256:<64 hex>).'';
        }
        {
          assertion =
            !isContainer || cfg.image == null || builtins.match "[^@ ]+@sha256:[0-9a-f]{64}" cfg.image != null;
          message = "services.vllm-station.serve: `image` must be pinned by digest (name@sha256:<64 hex>), got `${toString cfg.image}`: a tag can change under a running station. Use `docker inspect --format '{{index .RepoDigests 0}}' IMAGE`.";
        }
        {
          assertion = pinningArgs == [ ] && pinningUnitSettings == [ ];
          message = "services.vllm-station.serve: the serving unit must not be bound to NUMA memory nodes (found: ${
            lib.concatStringsSep ", " (pinningArgs ++ map (k: "serviceConfig.${k}") pinningUnitSettings)
          }). On GB300 the GPU's memory is NUMA node ${toString cfg.prestart.gpuNode}; binding vLLM to node 0 makes CUDA fail with error 802. Leave it free and bind bulk I/O (downloads, copies) to node 0 instead (`station numa-exec --membind 0`).";
        }
        {
          assertion = isSecretPath cfg.apiKeyFile;
          message = "services.vllm-station.serve: `apiKeyFile` must be an absolute path outside the Nix store (got `${toString cfg.apiKeyFile}`): the store is world-readable.";
        }
        {
          assertion = isSecretPath cfg.environmentFile;
          message = "services.vllm-station.serve: `environmentFile` must be an absolute path outside the Nix store (got `${toString cfg.environmentFile}`): the store is world-readable.";
        }
        {
          assertion = cfg.headless || isLoopback cfg.host || cfg.exposeUnauthenticatedVllm;
          message = "services.vllm-station.serve: host = \"${cfg.host}\" lets other hosts reach vLLM, whose key guards only /v1 (${lib.concatStringsSep ", " (lib.take 4 vllmOpenPaths)}, … answer without one); keep host = \"127.0.0.1\" and enable services.vllm-station.gateway (TLS, keys, an allowlist) to serve the network, or set services.vllm-station.serve.exposeUnauthenticatedVllm = true to accept that.";
        }
        {
          assertion = !cfg.openFirewall || cfg.headless || cfg.exposeUnauthenticatedVllm;
          message = "services.vllm-station.serve: openFirewall opens vLLM's port, whose key guards only /v1; set openFirewall = false and services.vllm-station.gateway.openFirewall = true (the gateway's port), or set services.vllm-station.serve.exposeUnauthenticatedVllm = true to accept that.";
        }
        {
          assertion = !(cfg.headless && cfg.openFirewall);
          message = "services.vllm-station.serve: a headless worker serves no API; set `openFirewall = false`.";
        }
        {
          assertion = !(cfg.headless && cfg.apiKeyFile != null);
          message = "services.vllm-station.serve: a headless worker serves no API; `apiKeyFile` belongs on the head station.";
        }
      ];

      warnings =
        optional (
          !cfg.headless && cfg.exposeUnauthenticatedVllm && (!isLoopback cfg.host || cfg.openFirewall)
        ) "services.vllm-station.serve: exposeUnauthenticatedVllm: vLLM listens on ${cfg.host}:${toString cfg.port}${optionalString cfg.openFirewall " with its port open"}; without any key${optionalString (cfg.apiKeyFile != null) " (apiKeyFile guards /v1 only)"} anyone who reaches it can use ${lib.concatStringsSep ", " vllmOpenPaths}. Put services.vllm-station.gateway in front instead."
        ++ optional (
          !isContainer && (cfg.containerOptions != [ ] || cfg.containerCommand != [ ])
        ) "services.vllm-station.serve: `containerOptions`/`containerCommand` are ignored with backend \"native\"."
        ++ optional (
          isContainer && cfg.imageVllmVersion != null && cfg.imageVllmVersion != checkedWith
        ) "services.vllm-station.serve: the image holds vLLM ${toString cfg.imageVllmVersion}, but the presets' flags were checked against vLLM ${checkedWith}; run the flag test against that version (scripts/check --only realvllm with it) before switching, or use an image of ${checkedWith}."
        ++ optional (
          cfg.model != null && !modelIsPath && cfg.allowHubDownload
        ) "services.vllm-station.serve: serving the hub id ${cfg.model} (allowHubDownload): vLLM downloads it inside the serving unit, not bound to NUMA node 0, so its page cache can fill the GPU's memory, and nothing verifies it. A download entry avoids both.";

      virtualisation.docker.enable = lib.mkIf (isContainer && cfg.runtime == "docker") (lib.mkDefault true);
      virtualisation.podman.enable = lib.mkIf (isContainer && cfg.runtime == "podman") (lib.mkDefault true);
      # CDI devices come from the toolkit; a station without GPU devices (vLLM's CPU build) needs none.
      hardware.nvidia-container-toolkit.enable = lib.mkIf (isContainer && cfg.gpuDevices != [ ]) (lib.mkDefault true);

      networking.firewall.allowedTCPPorts = lib.mkIf (cfg.openFirewall && !cfg.headless) [ cfg.port ];

      environment.systemPackages = [ toolsPackage ];
      # The link every step of the start sequence runs `station` through (see the header).
      systemd.tmpfiles.rules = [
        "L+ ${contract.toolsLink} - - - - ${toolsPackage}"
        # `station drain`'s flag (root writes it; nginx, the gateway's and the listener's, tests it).
        "d ${contract.drainDir} 0755 root root - -"
      ];

      services.vllm-station.serve.preflight.settings = lib.mapAttrs (_: lib.mkDefault) {
        inherit (cfg)
          host
          port
          model
          gpuMemoryUtilization
          maxModelLen
          maxNumSeqs
          kvCacheDtype
          toolCallParser
          reasoningParser
          ;
        modelDir = if modelIsPath then modelPath else null;
        revision = inputs.checkpoint.revision;
        gpuNode = cfg.prestart.gpuNode;
        maxFilePagesGiB = cfg.prestart.maxFilePagesGiB;
        runtime = if isContainer then runtimeExe else null; # absolute: preflight runs with the unit's PATH
        image = if isContainer then cfg.image else null;
        paths = {
          state = stateDir;
          cache = cacheDir;
          logs = logsDir;
        };
        pair = null;
      };
      environment.etc."${lib.removePrefix "/etc/" contract.preflightConfig}".text =
        builtins.toJSON cfg.preflight.settings;
      services.vllm-station.secrets.units = lib.optionalAttrs (secretFiles != [ ]) { ${name} = secretFiles; };

      systemd.services.${contract.weightsCheckUnit} = lib.mkIf workerWeightsChecked {
        description = "vllm-station: this rank holds its share of the weights (station weights-check, headless worker)";
        wantedBy = [ "${name}.service" ];
        bindsTo = [ "${name}.service" ];
        after = [ "${name}.service" ];
        serviceConfig = hardening.for [ ] // {
          Type = "oneshot";
          # root (no DynamicUser): it reads the system journal, as the head's step 7 (`+`) does
          ExecStart = utils.escapeSystemdExecArgs (weightsCheckArgs cfg.startTimeout);
          # 4 = PENDING: no loading line within the wait (the head never joined); not a verdict on the weights
          SuccessExitStatus = [ 4 ];
          TimeoutStartSec = cfg.startTimeout + 60;
        };
      };

      systemd.services.${name} = {
        description = "vLLM OpenAI-compatible server (vllm-station)";
        wantedBy = [ "multi-user.target" ];
        # Wanted (so a start fetches a missing revision), not ordered after: the start does not wait for a
        # download; it is skipped until the stamp exists and the download unit starts it when done.
        wants = [ "network-online.target" ] ++ inputs.checkpoint.units;
        after =
          [ "network-online.target" ]
          ++ optionals isContainer [ "nvidia-container-toolkit-cdi-generator.service" ]
          ++ optionals (isContainer && cfg.runtime == "docker") [ "docker.service" ]
          ++ secretsCheck;
        requires = optionals (isContainer && cfg.runtime == "docker") [ "docker.service" ] ++ secretsCheck;

        # Top-level options: they render under [Unit], where systemd reads them.
        # At most 3 starts an hour: a crash loop must not hammer the machine or rotate logs away.
        startLimitBurst = 3;
        startLimitIntervalSec = 3600;
        inherit (inputs) restartTriggers;
        unitConfig = optionalAttrs (cfg.startCondition != null) { ConditionPathExists = cfg.startCondition; };

        environment = unitEnvironment;

        serviceConfig =
          sandbox
          // {
            Type = "exec";
            # The start sequence (steps 1–6 at the top of this file).
            ExecStartPre = execStartPre;
            ExecStart = startCommand;
            ExecStartPost = execStartPost;
            # The stop sequence (steps 8–9 at the top of this file).
            ExecStop = execStop;
            # always, not on-failure: vLLM can exit 0 when its engine dies (vllm#48966).
            Restart = "always";
            RestartSec = 60;
            TimeoutStartSec = cfg.startTimeout;
            TimeoutStopSec = stopTimeoutSeconds;
            StateDirectory = name;
            CacheDirectory = name;
            LogsDirectory = name;
            RuntimeDirectory = name;
            WorkingDirectory = stateDir;
          }
          // optionalAttrs (cfg.apiKeyFile != null) { LoadCredential = unit.loadCredential apiKey.credentials; }
          # RDMA registers (pins) GPU and host buffers; the default 8 MiB limit makes it fail.
          // optionalAttrs inputs.unlimitedMemlock { LimitMEMLOCK = "infinity"; }
          # Native: SIGTERM to vLLM's API server alone, which drains and then stops its engine processes
          # (control-group would signal them all at once, aborting the running requests).
          // optionalAttrs (!isContainer) { KillMode = "mixed"; }
          // optionalAttrs (unitEnvironmentFiles != [ ]) { EnvironmentFile = unitEnvironmentFiles; };
      };
    })
  ];
}
