# services.vllm-station.pair: two stations serve one model with tensor parallelism (TP=2) over a
# RoCE rail. Station A (role "head", rank 0) serves the API; station B (role "worker", rank 1) runs
# `vllm serve --headless`. This module feeds the serving module (services.vllm-station.serve): its
# flags, and through `serve.inputs` the head's wait-for-worker and NCCL gates, the pair's environment
# file, RDMA devices and memlock — the serving unit itself is written only by serve.nix. It owns the
# firewall rules and a small beacon unit.
#
# Who listens, and so how the stations are ordered (vLLM multiprocessing executor, `--nnodes 2`):
# - The HEAD listens: rank 0 hosts the torch.distributed TCP store on `--master-addr:--master-port`,
#   and the worker's headless process dials it (retrying until its own timeout). NCCL's bootstrap,
#   Gloo and vLLM's ZeroMQ message queues then open further listeners on BOTH stations, on
#   kernel-chosen ephemeral ports of the rail address (VLLM_HOST_IP) — hence the port range below.
# - So the worker has nothing of vLLM's to probe before the head exists. Each station therefore runs
#   `vllm-station-pair-beacon` (`station pair beacon`): a read-only HTTP server on its rail address
#   that is up exactly while the local `vllm-station` unit is active (BindsTo= + After=). It serves
#   `/ready` (role, rank, address) and `/stamp` (the local checkpoint's verification stamp, for the
#   peer's preflight revision comparison: `pair.peerStampUrl` in the preflight config).
# - Start order: worker first. The head's step 2 (`station pair wait-worker`) polls
#   http://WORKER:beaconPort/ready for at most `workerWaitSeconds` and fails with a message naming
#   the worker's address if it never answers.
# - Stop order: head first. The worker's beacon is ordered after `vllm-station` and bound to it, so
#   stopping the worker's serving unit stops the beacon first; its ExecStop (`station pair
#   wait-head-stop`) waits (at most `headStopWaitSeconds`) until the head's master port stops
#   answering, then lets the worker go.
# RDMA traffic itself (RoCE v2, UDP 4791) is handled by the NIC and never passes netfilter; only the
# TCP rendezvous/bootstrap ports need the firewall rules, and they are opened to the peer's rail
# address on the rail interface only.
{
  config,
  lib,
  pkgs,
  utils,
  ...
}:
let
  inherit (lib)
    mkOption
    mkEnableOption
    mkIf
    mkDefault
    types
    literalExpression
    ;

  top = config.services.vllm-station;
  cfg = top.pair;
  serve = top.serve;
  contract = import ./lib/contract.nix;
  hardening = import ./lib/hardening.nix;
  unit = import ./lib/unit.nix { inherit lib utils; };
  # The beacon runs `station` through the serving unit's stable link (contract.stationAt; serve.nix's
  # header), not the store path: a new package would restart it on switch, and the worker's beacon,
  # stopped while its serving unit is active, waits `headStopWaitSeconds` for a head that keeps running.
  station = contract.stationAt;

  isHead = cfg.role == "head";
  expectedRank = if isHead then 0 else 1;
  stations = 2;

  selfAddress = if isHead then cfg.headAddress else cfg.workerAddress;
  peerAddress = if isHead then cfg.workerAddress else cfg.headAddress;
  isIPv6 = a: a != null && lib.hasInfix ":" a;
  # "[::1]" style for URLs, bare for everything else.
  urlHost = a: if isIPv6 a then "[${a}]" else a;

  # Values every consumer can parse identically: systemd's EnvironmentFile=, `docker --env-file`
  # (which does no quote processing at all) and a shell's `set -a; . FILE`.
  safeValue = v: builtins.match "[A-Za-z0-9_.,:=/@+-]*" v != null;

  envText = lib.concatStrings (lib.mapAttrsToList (k: v: "${k}=${v}\n") cfg.environment);
  envFile = contract.pairEnvFile;

  workerAddress = toString cfg.workerAddress; # null is refused by an assertion
  headAddress = toString cfg.headAddress;
  readyUrl = "http://${urlHost workerAddress}:${toString cfg.beaconPort}/ready";
  stampUrl = "http://${urlHost (toString peerAddress)}:${toString cfg.beaconPort}/stamp";

  servesLocalModel = serve.model != null && lib.hasPrefix "/" serve.model;

  beaconArgs =
    [
      station
      "pair"
      "beacon"
      "--bind"
      (toString selfAddress)
      "--port"
      (toString cfg.beaconPort)
      "--role"
      cfg.role
      "--rank"
      (toString cfg.rank)
    ]
    ++ lib.optionals servesLocalModel [
      "--stamp"
      (contract.stampOf serve.checkpointDir)
    ]
    # The worker's beacon reports its engine's state (waiting / joined / orphaned) from the engine's
    # connection to the head's rendezvous port: the head's start refuses a worker still in an old session.
    ++ lib.optionals (!isHead) [
      "--head"
      headAddress
      "--master-port"
      (toString cfg.masterPort)
    ];

  # The worker beacon's ExecStop: let the head go first (bounded).
  waitForHeadStopArgs = [
    station
    "pair"
    "wait-head-stop"
    "--head"
    headAddress
    "--port"
    (toString cfg.masterPort)
    "--timeout"
    (toString cfg.headStopWaitSeconds)
    "--interval"
    (toString cfg.pollSeconds)
    "--unit"
    "${contract.unit}.service"
  ];

  # The worker's rejoin loop: restart the worker once its session is over and the head is down.
  runtime = serve.preflight.settings.runtime or null;
  rejoinArgs =
    [
      station
      "pair"
      "rejoin"
      "--beacon"
      "http://${urlHost workerAddress}:${toString cfg.beaconPort}/ready"
      "--head"
      headAddress
      "--master-port"
      (toString cfg.masterPort)
    ]
    # An engine in a dead session finishes nothing: the container is killed after the restart's request.
    ++ unit.restartArgs {
      inherit runtime;
      systemd = config.systemd.package;
    }
    ++ [
      "--interval"
      (toString cfg.rejoin.interval)
      "--verdicts"
      (toString cfg.rejoin.verdicts)
    ]
    # Its restarts, for the restart alert (systemd's counter does not count an explicit restart).
    ++ lib.optionals monitored [
      "--textfile-dir"
      contract.textfileDir
    ];
  rejoining = !isHead && cfg.rejoin.enable;
  monitored = top.monitoring.enable or false;

  # Station A shares its verified checkpoint read-only with B's copy unit (`station copy`), an rsync
  # module named after the checkpoint's directory. A config file, not a program.
  sharing = isHead && cfg.checkpointShare.enable && servesLocalModel;
  shareModule = baseNameOf serve.model;
  shareConfig = ''
    # vllm-station: this station's verified checkpoint, read-only, for the worker's copy unit
    use chroot = no
    read only = yes
    list = no
    max connections = 2
    # the connection count lives in a lock file: in the unit's runtime directory (the rest is read-only)
    lock file = /run/${contract.shareUnit}/rsyncd.lock
    hosts allow = ${workerAddress}
    hosts deny = *
    [${shareModule}]
    path = ${toString serve.checkpointDir}
    comment = vllm-station checkpoint (${cfg.role})
  '';
  shareArgs = [
    (lib.getExe pkgs.rsync)
    "--daemon"
    "--no-detach"
    "--config=${contract.shareConfig}"
    "--address=${headAddress}"
    "--port=${toString cfg.checkpointShare.port}"
  ];

  # Firewall: the peer's rail address, on the rail interface, to these TCP ports only.
  tcpPorts = lib.optional isHead cfg.masterPort ++ [ cfg.beaconPort ] ++ lib.optional sharing cfg.checkpointShare.port;
  range = cfg.firewall.portRange;
  iptablesRules =
    let
      ipt = if isIPv6 peerAddress then "ip6tables" else "iptables";
      rule =
        dport:
        "${ipt} -w -A nixos-fw -i ${cfg.railInterface} -s ${peerAddress} -p tcp --dport ${dport} -j nixos-fw-accept";
    in
    lib.concatMapStringsSep "\n" rule (
      map toString tcpPorts ++ lib.optional (range != null) "${toString range.from}:${toString range.to}"
    )
    + "\n";
  nftablesRules =
    let
      family = if isIPv6 peerAddress then "ip6" else "ip";
      ports = lib.concatStringsSep ", " (
        map toString tcpPorts ++ lib.optional (range != null) "${toString range.from}-${toString range.to}"
      );
    in
    ''
      iifname "${cfg.railInterface}" ${family} saddr ${peerAddress} tcp dport { ${ports} } accept comment "vllm-station pair: ${cfg.role}"
    '';

  defaultEnvironment = {
    RANK = toString cfg.rank;
    HEAD_IP = cfg.headAddress;
    WORKER_IP = cfg.workerAddress;
    RAIL_IFACE = cfg.railInterface;
    RAIL_HCA = cfg.railHca;
    # No MASTER_ADDR/MASTER_PORT/WORLD_SIZE: torch's env:// launchers read those, and vLLM gets
    # its rendezvous from the flags (--master-addr/--master-port).
    # Bootstrap/TCP traffic of NCCL and Gloo on the rail, never the management network.
    NCCL_SOCKET_IFNAME = cfg.railInterface;
    GLOO_SOCKET_IFNAME = cfg.railInterface;
    # "=" makes NCCL match the HCA name exactly (mlx5_1 must not also select mlx5_10…).
    NCCL_IB_HCA = "=${cfg.railHca}";
    NCCL_IB_GID_INDEX = toString cfg.gidIndex;
    # Allow GPUDirect RDMA whatever the PCIe/C2C distance between NIC and GPU.
    NCCL_NET_GDR_LEVEL = "SYS";
    # The transport line ("via NET/IB/0/GDRDMA" or a socket fallback) is visible to `station nccl-check`.
    NCCL_DEBUG = "INFO";
    # The address vLLM advertises to its peer (ZeroMQ queues, rendezvous): this station's rail address.
    VLLM_HOST_IP = selfAddress;
  };
in
{
  options.services.vllm-station.pair = {
    enable = mkEnableOption "serving one model from two stations with tensor parallelism over a RoCE rail";

    role = mkOption {
      type = types.enum [
        "head"
        "worker"
      ];
      example = "worker";
      description = ''
        `head` (station A, rank 0) serves the API; `worker` (station B, rank 1) runs vLLM headless
        and exposes no API. The worker starts first and stops last.
      '';
    };

    rank = mkOption {
      type = types.ints.between 0 1;
      default = expectedRank;
      defaultText = literalExpression ''if role == "head" then 0 else 1'';
      description = "vLLM's `--node-rank`. Follows {option}`role`; setting it to anything else is an error.";
    };

    headAddress = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "192.168.100.1";
      description = "Rail address of the head (station A): `--master-addr`, `HEAD_IP`.";
    };

    workerAddress = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "192.168.100.2";
      description = "Rail address of the worker (station B): `WORKER_IP`.";
    };

    railInterface = mkOption {
      type = types.str;
      default = "cx8r1";
      example = "enp1s0f1np1";
      description = "Network interface of the RoCE rail (`NCCL_SOCKET_IFNAME`, `GLOO_SOCKET_IFNAME`, firewall).";
    };

    railHca = mkOption {
      type = types.str;
      default = "mlx5_1";
      description = "RDMA device of the rail (`NCCL_IB_HCA`).";
    };

    gidIndex = mkOption {
      type = types.ints.unsigned;
      default = 3;
      description = "RoCE v2 GID index of the rail's IPv4 address (`NCCL_IB_GID_INDEX`); see `show_gids`.";
    };

    masterPort = mkOption {
      type = types.port;
      default = 29500;
      description = "Rendezvous port the head listens on (`--master-port`).";
    };

    beaconPort = mkOption {
      type = types.port;
      default = 29510;
      description = ''
        Port of `vllm-station-pair-beacon` on each station's rail address: `/ready` while the local
        serving unit is active, `/stamp` the local checkpoint's verification stamp.
      '';
    };

    workerWaitSeconds = mkOption {
      type = types.ints.positive;
      default = 300;
      description = ''
        How long the head's pre-start waits for the worker's beacon before failing. It counts
        against the serving unit's start timeout.
      '';
    };

    headStopWaitSeconds = mkOption {
      type = types.ints.unsigned;
      default = config.services.vllm-station.serve.shutdownTimeout + 90;
      defaultText = literalExpression "config.services.vllm-station.serve.shutdownTimeout + 90";
      description = ''
        How long a stopping worker waits for the head to stop first. The head's stop lets its requests
        in flight finish for up to `serve.shutdownTimeout` (the worker's rank serves them too), so the
        default waits that long and 90 s more.
      '';
    };

    pollSeconds = mkOption {
      type = types.ints.positive;
      default = 5;
      description = "Interval of the start/stop ordering probes.";
    };

    environment = mkOption {
      type = types.attrsOf types.str;
      defaultText = literalExpression ''
        {
          RANK = "0"; HEAD_IP = headAddress; WORKER_IP = workerAddress; RAIL_IFACE = railInterface;
          RAIL_HCA = railHca;
          NCCL_SOCKET_IFNAME = railInterface; GLOO_SOCKET_IFNAME = railInterface;
          NCCL_IB_HCA = "=''${railHca}"; NCCL_IB_GID_INDEX = "3"; NCCL_NET_GDR_LEVEL = "SYS";
          NCCL_DEBUG = "INFO"; VLLM_HOST_IP = <this station's rail address>;
        }
      '';
      example = {
        NCCL_DEBUG = "WARN";
        NCCL_IB_TIMEOUT = "22";
      };
      description = ''
        The pair's environment. Every default is set with `mkDefault`, so a plain definition
        overrides it and new keys add to it. Written to `${envFile}` (source it with
        `set -a; . ${envFile}; set +a`), which the serving unit (and its container) loads, so a
        shell and the unit never disagree. Values are restricted to `[A-Za-z0-9_.,:=/@+-]`.
      '';
    };

    rdmaDevices = mkOption {
      type = types.listOf types.str;
      default = [ "/dev/infiniband" ];
      description = ''
        Device nodes (or directories of them) passed into the container with `--device=` so NCCL's
        IB/RoCE transport can open the HCA (`uverbs*`, `rdma_cm`). Without them NCCL falls back to
        sockets. Container backend only; the native backend's unit allows `char-infiniband_verbs`.
      '';
    };

    ncclCheck = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          On the head, after `wait-ready`: `station nccl-check --unit vllm-station.service --wait
          {option}`ncclCheck.waitSeconds`` gates the start. A socket fallback (the pair would serve
          ~10x slower) or an RDMA/GID error (exit 1), or no transport line at all (exit 4), fails the
          start; the journal holds the verdict and the fix. Needs `NCCL_DEBUG=INFO` (the default of
          {option}`environment`). The worker never gates on it: its NCCL connects only once the head runs.
        '';
      };
      waitSeconds = mkOption {
        type = types.ints.positive;
        default = 30;
        description = "How long nccl-check waits for a final verdict (counts against `serve.startTimeout`).";
      };
      requireGdr = mkOption {
        type = types.bool;
        default = true;
        description = ''
          Also refuse IB/RoCE without GPUDirect RDMA (`--require-gdr`): the TP=2 recipe requires
          GDRDMA confirmed. false: accept NCCL over the RoCE NIC through host memory.
        '';
      };
      pendingOk = mkOption {
        type = types.bool;
        default = false;
        description = "Let a start without any NCCL transport line through with a warning (`--pending-ok`).";
      };
    };

    rejoin = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          On the worker: `${contract.rejoinUnit}` (`station pair rejoin`) restarts the worker's serving unit
          when its engine's session with the head is over (the beacon reports it `orphaned`, or `joined`
          to a head port that no longer answers) while the head is down — the second step of the
          recipe's order (stop the head, then the worker; start the worker, then the head). A headless
          vLLM worker never joins a second head: without this, after the head's crash or reboot the
          worker must be restarted by hand before the head can start.
        '';
      };
    }
    // unit.restarterOptions {
      interval = 10;
      intervalDescription = "Seconds between the rejoin loop's looks.";
      verdicts = 3;
      verdictsDescription = "Consecutive looks that find the session over (and the head down) before the restart.";
    };

    checkpointShare = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          On the head: `${contract.shareUnit}`, an rsync daemon on the head's rail address that shares
          the served checkpoint directory read-only with the worker's address only (module = the
          directory's name, e.g. `glm53`), bound to NUMA node 0 like every bulk read. The worker's
          download entry pulls from it: `copyFrom = "rsync://<headAddress>:<port>/glm53"` runs
          `station copy`, which refuses a source without a verification stamp at the pinned revision.
        '';
      };
      port = mkOption {
        type = types.port;
        default = 8730;
        description = "TCP port of the checkpoint share (opened to the worker's rail address only).";
      };
    };

    firewall = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          Open, to the peer's rail address on {option}`railInterface` only, TCP
          {option}`masterPort` (head), {option}`beaconPort` and {option}`firewall.portRange`.
          Nothing is opened to any other address.
        '';
      };

      portRange = mkOption {
        type = types.nullOr (
          types.submodule {
            options = {
              from = mkOption { type = types.port; };
              to = mkOption { type = types.port; };
            };
          }
        );
        default = {
          from = 32768;
          to = 60999;
        };
        description = ''
          Ports NCCL's bootstrap, Gloo and vLLM's message queues listen on: they bind kernel-chosen
          ephemeral ports, so this is the kernel's `net.ipv4.ip_local_port_range` (Linux default
          32768–60999). Keep the two in step if you narrow either; `null` opens none.
        '';
      };
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.headAddress != null && cfg.workerAddress != null;
        message = "services.vllm-station.pair: headAddress and workerAddress must both be set (the rail addresses of station A and station B); missing: ${
          lib.concatStringsSep ", " (
            lib.optional (cfg.headAddress == null) "headAddress"
            ++ lib.optional (cfg.workerAddress == null) "workerAddress"
          )
        }.";
      }
      {
        assertion = cfg.rank == expectedRank;
        message = "services.vllm-station.pair: role \"${cfg.role}\" runs rank ${toString expectedRank}, but rank = ${toString cfg.rank}; remove the rank setting (it follows the role).";
      }
      {
        assertion = serve.tensorParallelSize == stations;
        message = "services.vllm-station.pair: serve.tensorParallelSize is ${toString serve.tensorParallelSize}, but a pair is ${toString stations} stations of one GPU each; set services.vllm-station.serve.tensorParallelSize = ${toString stations}.";
      }
      {
        assertion = cfg.headAddress == null || cfg.headAddress != cfg.workerAddress;
        message = "services.vllm-station.pair: headAddress and workerAddress are both ${toString cfg.headAddress}; give each station its own rail address.";
      }
      {
        assertion = isHead || !serve.openFirewall;
        message = "services.vllm-station.pair: a worker serves no API, but services.vllm-station.serve.openFirewall is true; set it to false on the worker (station B).";
      }
      {
        assertion = !sharing || top.download.enable;
        message = "services.vllm-station.pair.checkpointShare: the head shares the checkpoint its download unit verified, read as the download user; set services.vllm-station.download.enable = true (with models.<name>.dir = ${toString serve.model}), or checkpointShare.enable = false.";
      }
      {
        assertion = serve.enable;
        message = "services.vllm-station.pair: the pair runs the serving unit; set services.vllm-station.serve.enable = true.";
      }
      {
        assertion = lib.all safeValue (lib.attrValues cfg.environment);
        message = "services.vllm-station.pair.environment: values must match [A-Za-z0-9_.,:=/@+-]* (one file serves systemd, docker --env-file and shells); offending: ${
          lib.concatStringsSep ", " (lib.attrNames (lib.filterAttrs (_: v: !safeValue v) cfg.environment))
        }.";
      }
    ];

    services.vllm-station.pair.environment = lib.mapAttrs (_: mkDefault) (
      lib.filterAttrs (_: v: v != null) defaultEnvironment
    );

    warnings = lib.optional (isHead && serve.startTimeout - cfg.workerWaitSeconds < 600) "services.vllm-station.pair: the head's pre-start may wait up to workerWaitSeconds = ${toString cfg.workerWaitSeconds} s for the worker, and that counts against serve.startTimeout = ${toString serve.startTimeout} s, leaving vLLM less than 10 minutes to load and become ready; raise serve.startTimeout or lower workerWaitSeconds.";

    services.vllm-station.serve = {
      tensorParallelSize = mkDefault stations;
      headless = !isHead;
      extraFlags = [
        "--nnodes"
        (toString stations)
        "--node-rank"
        (toString cfg.rank)
        "--master-addr"
        headAddress
        "--master-port"
        (toString cfg.masterPort)
      ];
      inputs = {
        # The unit and its container get the pair's environment from the very file operators
        # source. Not serve.environmentFile: that one stays free for secrets.
        environmentFiles = [ envFile ];
        restartTriggers = [ envText ];
        # ibverbs needs the RDMA device nodes inside the container (CDI brings only the GPU).
        devices = lib.mkIf (serve.backend == "container") cfg.rdmaDevices;
        # RDMA registers (pins) GPU and host buffers; the default 8 MiB memlock limit makes it fail.
        unlimitedMemlock = true;
        waitForWorker = mkIf isHead {
          url = readyUrl;
          address = workerAddress;
          timeout = cfg.workerWaitSeconds;
          interval = cfg.pollSeconds;
        };
        ncclCheck = mkIf (isHead && cfg.ncclCheck.enable) {
          inherit (cfg.ncclCheck) waitSeconds requireGdr pendingOk;
        };
      };
      preflight.settings.pair = {
        inherit (cfg)
          role
          rank
          headAddress
          workerAddress
          railInterface
          railHca
          gidIndex
          masterPort
          beaconPort
          ;
        peerStampUrl = stampUrl;
      };
    };

    environment.etc."${lib.removePrefix "/etc/" envFile}" = {
      text = envText;
      mode = "0444";
    };

    systemd.services.${contract.beaconUnit} = {
      description = "vllm-station pair beacon (${cfg.role} ${toString selfAddress}): /ready while vllm-station is active, /stamp";
      bindsTo = [ "${contract.unit}.service" ];
      after = [ "${contract.unit}.service" ];
      wantedBy = [ "${contract.unit}.service" ];
      serviceConfig = hardening.base // {
        Type = "exec";
        DynamicUser = true;
        ExecStart = utils.escapeSystemdExecArgs beaconArgs;
        # `+`: root asks systemd over its private socket. As the beacon's DynamicUser, `systemctl show`
        # needs the D-Bus system bus to know that user; where it does not (found by the system tier:
        # "Transport endpoint is not connected"), the wait was silently skipped.
        ExecStop = lib.optional (!isHead) ("+" + utils.escapeSystemdExecArgs waitForHeadStopArgs);
        TimeoutStopSec = cfg.headStopWaitSeconds + 30;
        Restart = "on-failure";
        RestartSec = 5;
      };
    };

    # root, bounded restarts, the textfile directory (with monitoring): modules/lib/unit.nix's restarter
    systemd.services.${contract.rejoinUnit} = mkIf rejoining (unit.restarter {
      description = "vllm-station pair: restart the worker once its session with the head is over and the head is down";
      execStart = rejoinArgs;
      after = [ "${contract.unit}.service" ];
      textfileDir = if monitored then contract.textfileDir else null;
    });

    environment.etc."${lib.removePrefix "/etc/" contract.shareConfig}" = mkIf sharing { text = shareConfig; };

    systemd.services.${contract.shareUnit} = mkIf sharing {
      description = "vllm-station: share the verified checkpoint ${toString serve.model} with the worker ${workerAddress} (rsync, read-only)";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      restartTriggers = [ shareConfig ];
      serviceConfig = hardening.base // {
        Type = "exec";
        # The user the download unit writes the checkpoint as: it reads every file whatever its mode
        # (found by the system tier: a DynamicUser was refused safetensors shards written 0600).
        User = top.download.user;
        Group = top.download.group;
        ExecStart = utils.escapeSystemdExecArgs shareArgs;
        RuntimeDirectory = contract.shareUnit;
        # Reading 464 GB fills the page cache: keep it on node 0's LPDDR, never the GPU's HBM.
        NUMAPolicy = "bind";
        NUMAMask = lib.concatMapStringsSep "," toString top.download.numaNodes;
        # the rail address may come up after the unit: try again
        Restart = "on-failure";
        RestartSec = 10;
      };
    };

    networking.firewall = mkIf (cfg.firewall.enable && peerAddress != null) (
      if config.networking.nftables.enable or false then
        { extraInputRules = nftablesRules; }
      else
        { extraCommands = iptablesRules; }
    );
  };
}
