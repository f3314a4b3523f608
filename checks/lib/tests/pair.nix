# services.vllm-station.pair: env rendering for both roles, flags, ordering, firewall, assertions,
# and the glm53-tp2 preset.
{ lib, h }:
let
  headIp = "192.168.100.1";
  workerIp = "192.168.100.2";

  station = role: {
    services.vllm-station.serve = {
      enable = true;
      preset = "glm53-tp2";
      image = h.image;
      model = "/var/lib/vllm-station-models/glm53";
    };
    # the download user reads the head's shared checkpoint
    services.vllm-station.download.enable = true;
    services.vllm-station.pair = {
      enable = true;
      inherit role;
      headAddress = headIp;
      workerAddress = workerIp;
      railInterface = "cx8r1";
      railHca = "mlx5_1";
    };
  };
  head = station "head";
  worker = station "worker";
  with' = base: extra: [
    base
    extra
  ];

  stationExe = "/run/vllm-station-tools/bin/station";
  sc = config: (h.unit config).serviceConfig;
  start = config: h.argv (sc config).ExecStart;
  vllmArgs = config: config.services.vllm-station.serve.vllmArgs;
  envText = config: config.environment.etc."vllm-station/pair.env".text;
  # KEY=value lines back into an attrset (and the lines must be exactly that shape).
  envOf =
    config:
    lib.listToAttrs (
      map (
        line:
        let
          m = builtins.match "([A-Z_][A-Z0-9_]*)=(.*)" line;
        in
        if m == null then
          throw "pair.env line is not KEY=value: ${line}"
        else
          lib.nameValuePair (builtins.elemAt m 0) (builtins.elemAt m 1)
      ) (lib.filter (l: l != "") (lib.splitString "\n" (envText config)))
    );
  beacon = config: config.systemd.services.vllm-station-pair-beacon;
  # Index of the first element of `sub` inside `list` followed by the rest of `sub`, or null.
  hasRun =
    list: sub:
    let
      n = lib.length sub;
      idxs = lib.range 0 (lib.length list - n);
    in
    lib.length list >= n && lib.any (i: lib.sublist i n list == sub) idxs;
  firewallLines =
    config:
    lib.filter (l: l != "") (lib.splitString "\n" config.networking.firewall.extraCommands);

  commonEnv = {
    HEAD_IP = headIp;
    WORKER_IP = workerIp;
    RAIL_IFACE = "cx8r1";
    RAIL_HCA = "mlx5_1";
    NCCL_SOCKET_IFNAME = "cx8r1";
    GLOO_SOCKET_IFNAME = "cx8r1";
    NCCL_IB_HCA = "=mlx5_1";
    NCCL_IB_GID_INDEX = "3";
    NCCL_NET_GDR_LEVEL = "SYS";
    NCCL_DEBUG = "INFO";
  };
in
{
  # ---- environment, both roles ----
  env-head = h.check [ head ] (
    config:
    h.eq "pair.env (head)" (envOf config) (
      commonEnv
      // {
        RANK = "0";
        VLLM_HOST_IP = headIp;
      }
    )
    ++ h.eq "pair.env mode" config.environment.etc."vllm-station/pair.env".mode "0444"
  );

  env-worker = h.check [ worker ] (
    config:
    h.eq "pair.env (worker)" (envOf config) (
      commonEnv
      // {
        RANK = "1";
        VLLM_HOST_IP = workerIp;
      }
    )
  );

  env-overrides = h.check (with' worker {
    services.vllm-station.pair.environment = {
      NCCL_DEBUG = "WARN";
      NCCL_IB_TIMEOUT = "22";
    };
    services.vllm-station.pair.gidIndex = 5;
  }) (
    config:
    let
      env = envOf config;
    in
    h.eq "NCCL_DEBUG overridden" env.NCCL_DEBUG "WARN"
    ++ h.eq "new key added" env.NCCL_IB_TIMEOUT "22"
    ++ h.eq "gidIndex follows" env.NCCL_IB_GID_INDEX "5"
    ++ h.eq "others kept" env.NCCL_SOCKET_IFNAME "cx8r1"
  );

  # The unit loads the same file the shells source: EnvironmentFile= and the container's --env-file.
  env-file-loaded-by-unit = h.check [ head ] (
    config:
    h.contains "EnvironmentFile" (sc config).EnvironmentFile "/etc/vllm-station/pair.env"
    ++ h.ok "container --env-file /etc/vllm-station/pair.env in ${builtins.toJSON (start config)}" (
      hasRun (start config) [
        "--env-file"
        "/etc/vllm-station/pair.env"
      ]
    )
    ++ h.ok "restart on env change" (lib.elem (envText config) (h.unit config).restartTriggers)
    ++ h.ok "RDMA devices in the container" (
      hasRun (start config) [
        "--device"
        "/dev/infiniband"
      ]
    )
  );

  env-file-native = h.check (with' worker {
    services.vllm-station.serve.backend = "native";
    services.vllm-station.serve.image = lib.mkForce null;
  }) (
    config:
    h.contains "EnvironmentFile" (sc config).EnvironmentFile "/etc/vllm-station/pair.env"
    ++ h.lacks "no container option on native" (start config) "--env-file"
    ++ h.lacks "no --device on native" (start config) "--device=/dev/infiniband"
  );

  # ---- flags ----
  flags-head = h.check [ head ] (
    config:
    let
      args = vllmArgs config;
    in
    h.ok "TP/nodes/rank/master flags in ${builtins.toJSON args}" (
      hasRun args [
        "--tensor-parallel-size"
        "2"
      ]
      && hasRun args [
        "--nnodes"
        "2"
        "--node-rank"
        "0"
        "--master-addr"
        headIp
        "--master-port"
        "29500"
      ]
    )
    ++ h.lacks "head is not headless" args "--headless"
    ++ h.contains "head serves the API" args "--port"
    ++ h.ok "wait-ready on the head" ((sc config).ExecStartPost != [ ])
  );

  flags-worker = h.check [ worker ] (
    config:
    let
      args = vllmArgs config;
    in
    h.ok "TP/nodes/rank/master flags in ${builtins.toJSON args}" (
      hasRun args [
        "--tensor-parallel-size"
        "2"
      ]
      && hasRun args [
        "--nnodes"
        "2"
        "--node-rank"
        "1"
        "--master-addr"
        headIp
        "--master-port"
        "29500"
      ]
    )
    ++ h.contains "worker is headless" args "--headless"
    ++ h.lacks "worker exposes no API (--port)" args "--port"
    ++ h.lacks "worker exposes no API (--host)" args "--host"
    ++ h.eq "no readiness probe on the worker" (sc config).ExecStartPost [ ]
  );

  master-port-option = h.check (with' head { services.vllm-station.pair.masterPort = 31000; }) (
    config:
    h.ok "--master-port 31000" (
      hasRun (vllmArgs config) [
        "--master-port"
        "31000"
      ]
    )
    ++ h.eq "rendezvous in the flags only, not in the env" ((envOf config) ? MASTER_PORT) false
  );

  memlock = h.check [ worker ] (
    config:
    h.eq "LimitMEMLOCK" (sc config).LimitMEMLOCK "infinity"
    ++ h.eq "container gets --ulimit=memlock=-1:-1 once" (lib.count (a: a == "--ulimit=memlock=-1:-1") (start config)) 1
  );

  memlock-with-host-module = h.check (with' worker { services.vllm-station.host.enable = true; }) (
    config:
    h.eq "LimitMEMLOCK" (sc config).LimitMEMLOCK "infinity"
    ++ h.eq "--ulimit=memlock=-1:-1 once" (lib.count (a: a == "--ulimit=memlock=-1:-1") (start config)) 1
  );

  # ---- ordering ----
  order-head-waits-for-worker = h.check (with' head { services.vllm-station.serve.preflight.enable = true; }) (
    config:
    let
      pre = map h.argv (sc config).ExecStartPre;
      verb = argv: lib.take 2 (lib.drop 1 argv);
      idx = v: lib.lists.findFirstIndex (a: verb a == v) null pre;
    in
    h.eq "the sequence: stamp gate, wait for the worker, prestart, preflight" (map verb pre) [
      [ "gate" "stamp" ]
      [ "pair" "wait-worker" ]
      [ "prestart" "--gpu-node" ]
      [ "preflight" "--config" ]
    ]
    ++ h.eq "wait-worker argv" (lib.elemAt pre (idx [ "pair" "wait-worker" ])) [
      stationExe
      "pair"
      "wait-worker"
      "--url"
      "http://${workerIp}:29510/ready"
      "--worker-address"
      workerIp
      "--timeout"
      "300"
      "--interval"
      "5"
    ]
  );

  order-worker-does-not-wait = h.check [ worker ] (
    config:
    h.eq "no wait-for-worker on the worker" (lib.filter (
      p: lib.hasInfix "wait-worker" p
    ) (sc config).ExecStartPre) [ ]
  );

  order-beacon = h.check [ worker ] (
    config:
    let
      b = beacon config;
    in
    h.eq "bindsTo" b.bindsTo [ "vllm-station.service" ]
    ++ h.eq "after (so it stops first)" b.after [ "vllm-station.service" ]
    ++ h.eq "wantedBy" b.wantedBy [ "vllm-station.service" ]
    ++ h.eq "the beacon: role, rank, rail address, the local stamp, the head's rendezvous (engine state)" (h.argv b.serviceConfig.ExecStart) [
      stationExe
      "pair"
      "beacon"
      "--bind"
      workerIp
      "--port"
      "29510"
      "--role"
      "worker"
      "--rank"
      "1"
      "--stamp"
      "/var/lib/vllm-station-models/glm53/.station-verified.json"
      "--head"
      headIp
      "--master-port"
      "29500"
    ]
    ++ h.eq "ExecStop waits for the head's master port, bounded" (map h.argv b.serviceConfig.ExecStop) [
      [
        stationExe
        "pair"
        "wait-head-stop"
        "--head"
        headIp
        "--port"
        "29500"
        "--timeout"
        "2650" # the head finishes its requests first: its shutdownTimeout (2560) + 90
        "--interval"
        "5"
        "--unit"
        "vllm-station.service"
      ]
    ]
    ++ h.ok "ExecStop privileged (+): systemctl without the D-Bus system bus" (
      lib.all (lib.hasPrefix "+") b.serviceConfig.ExecStop
    )
    ++ h.ok "stop timeout covers the wait" (b.serviceConfig.TimeoutStopSec > 90)
    ++ h.eq "no shell: no ExecStartPre" (b.serviceConfig.ExecStartPre or [ ]) [ ]
  );

  beacon-sandbox-is-the-base = h.check [ worker ] (
    config:
    let
      base = (import ../../../modules/lib/hardening.nix).base;
      sc' = (beacon config).serviceConfig;
    in
    h.eq "every base setting, unrelaxed" (builtins.intersectAttrs base sc') base
    ++ h.eq "DynamicUser" sc'.DynamicUser true
  );

  # Rank 1 loads only once the head has joined (after its unit is active, which the head waits for):
  # its weights check is a unit of its own, not a start step that would wait for the head forever.
  worker-weights-check-is-its-own-unit = h.check [ worker ] (
    config:
    let
      w = config.systemd.services.vllm-station-weights-check;
    in
    h.eq "no start step on the worker" (sc config).ExecStartPost [ ]
    ++ h.eq "weights-check: half the checkpoint for rank 1, waiting as long as a start may" (h.argv w.serviceConfig.ExecStart) [
      stationExe
      "weights-check"
      "--unit"
      "vllm-station.service"
      "--checkpoint"
      "/var/lib/vllm-station-models/glm53"
      "--tensor-parallel-size"
      "2"
      "--wait"
      (toString config.services.vllm-station.serve.startTimeout)
    ]
    ++ h.eq "started with the serving unit, stopped with it" [ w.wantedBy w.bindsTo w.after ] [
      [ "vllm-station.service" ]
      [ "vllm-station.service" ]
      [ "vllm-station.service" ]
    ]
    ++ h.eq "PENDING is no verdict" w.serviceConfig.SuccessExitStatus [ 4 ]
    ++ h.eq "monitoring reads it" config.services.vllm-station.serve.weightsCheckUnit "vllm-station-weights-check.service"
  );

  no-weights-check-unit-on-the-head = h.check [ head ] (
    config:
    h.eq "the head checks as a start step" (config.systemd.services ? vllm-station-weights-check) false
    ++ h.eq "no unit for monitoring" config.services.vllm-station.serve.weightsCheckUnit null
  );

  nccl-check-gates-the-head = h.check [ head ] (
    config:
    let
      post = (sc config).ExecStartPost;
    in
    h.eq "ExecStartPost: wait-ready, nccl-check, weights-check" (map (l: builtins.elemAt (h.argv l) 1) post) [
      "wait-ready"
      "nccl-check"
      "weights-check"
    ]
    ++ h.ok "nccl-check privileged (+)" (lib.hasPrefix "+" (builtins.elemAt post 1))
    ++ h.eq "weights-check: half the checkpoint per rank" (h.argv (lib.last post)) [
      stationExe
      "weights-check"
      "--unit"
      "vllm-station.service"
      "--checkpoint"
      "/var/lib/vllm-station-models/glm53"
      "--tensor-parallel-size"
      "2"
      "--wait"
      "60"
    ]
    ++ h.ok "weights-check privileged (+): it reads the journal" (lib.hasPrefix "+" (lib.last post))
    ++ h.eq "nccl-check argv" (h.argv (builtins.elemAt post 1)) [
      "/run/vllm-station-tools/bin/station"
      "nccl-check"
      "--unit"
      "vllm-station.service"
      "--wait"
      "30"
      "--require-gdr" # the recipe requires GPUDirect RDMA confirmed: on by default
    ]
  );

  nccl-check-options = h.check (with' head {
    services.vllm-station.pair.ncclCheck = {
      requireGdr = false;
      pendingOk = true;
      waitSeconds = 10;
    };
  }) (
    config:
    h.eq "nccl-check argv tail" (lib.drop 4 (h.argv (builtins.elemAt (sc config).ExecStartPost 1))) [
      "--wait"
      "10"
      "--pending-ok"
    ]
  );

  nccl-check-off = h.check (with' head { services.vllm-station.pair.ncclCheck.enable = false; }) (
    config:
    h.eq "wait-ready and weights-check, no nccl-check" (map (l: builtins.elemAt (h.argv l) 1) (sc config).ExecStartPost) [
      "wait-ready"
      "weights-check"
    ]
  );

  # ---- the head shares its verified checkpoint with the worker (read-only rsync module) ----
  checkpoint-share-on-the-head = h.check [ head ] (
    config:
    let
      u = config.systemd.services.vllm-station-checkpoint-share;
      conf = config.environment.etc."vllm-station/rsyncd.conf".text;
    in
    h.eq "reads as the download user" [ u.serviceConfig.User u.serviceConfig.Group ] [ "vllm-station" "vllm-station" ]
    ++ h.eq "rsync daemon on the head's rail address" (h.argv u.serviceConfig.ExecStart) [
      "/nix/store/00000000000000000000000000000000-rsync/bin/rsync"
      "--daemon"
      "--no-detach"
      "--config=/etc/vllm-station/rsyncd.conf"
      "--address=${headIp}"
      "--port=8730"
    ]
    ++ h.eq "bulk reads bound to node 0" [ u.serviceConfig.NUMAPolicy u.serviceConfig.NUMAMask ] [ "bind" "0" ]
    ++ h.ok "read-only, to the worker only, the served directory as module glm53: ${conf}" (
      lib.all (line: lib.hasInfix line conf) [
        "read only = yes"
        "hosts allow = ${workerIp}"
        "hosts deny = *"
        "[glm53]"
        "path = /var/lib/vllm-station-models/glm53"
        "use chroot = no"
      ]
    )
    ++ h.eq "the base sandbox" (builtins.intersectAttrs (import ../../../modules/lib/hardening.nix).base u.serviceConfig) (import ../../../modules/lib/hardening.nix).base
  );

  assert-share-needs-the-download-user = h.assertionFails (with' head {
    services.vllm-station.download.enable = lib.mkForce false;
  }) "checkpointShare: the head shares the checkpoint its download unit verified";

  no-checkpoint-share-on-the-worker = h.check [ worker ] (
    config:
    h.eq "no share unit" (config.systemd.services ? vllm-station-checkpoint-share) false
    ++ h.eq "no rsyncd.conf" (config.environment.etc ? "vllm-station/rsyncd.conf") false
  );

  order-head-stops-freely = h.check [ head ] (
    config: h.eq "head beacon has no ExecStop wait" (beacon config).serviceConfig.ExecStop [ ]
  );

  rejoin-on-the-worker = h.check [ worker ] (
    config:
    let
      r = config.systemd.services.vllm-station-pair-rejoin;
      argv = h.argv r.serviceConfig.ExecStart;
    in
    h.eq "the rejoin loop: the local beacon, the head's rendezvous, the worker's own unit" (lib.take 11 argv) [
      stationExe
      "pair"
      "rejoin"
      "--beacon"
      "http://${workerIp}:29510/ready"
      "--head"
      headIp
      "--master-port"
      "29500"
      "--unit"
      "vllm-station.service"
    ]
    ++ h.ok "the interval and the verdicts" (hasRun argv [ "--interval" "10" "--verdicts" "3" ] != null)
    ++ h.ok "the serving container is killed after the restart's request (docker)" (
      hasRun argv [ "--container" "vllm-station" ] != null && lib.elem "--runtime" argv
    )
    ++ h.eq "root: systemctl restart" (r.serviceConfig.DynamicUser or false) false
    ++ h.eq "wantedBy" r.wantedBy [ "multi-user.target" ]
    ++ h.ok "bounded restarts" (r.startLimitBurst == 5)
  );

  no-rejoin-on-the-head = h.check [ head ] (
    config: h.eq "no rejoin unit" (config.systemd.services ? vllm-station-pair-rejoin) false
  );

  rejoin-can-be-turned-off = h.check (with' worker { services.vllm-station.pair.rejoin.enable = false; }) (
    config: h.eq "no rejoin unit" (config.systemd.services ? vllm-station-pair-rejoin) false
  );

  head-beacon-watches-no-engine = h.check [ head ] (
    config:
    h.ok "only the worker's beacon reports an engine state (the head's start reads it)" (
      !(lib.elem "--head" (h.argv (beacon config).serviceConfig.ExecStart))
    )
  );

  preflight-settings = h.check [ worker ] (
    config:
    let
      p = (builtins.fromJSON (builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/preflight.json".text)).pair;
    in
    h.eq "preflight pair" p {
      role = "worker";
      rank = 1;
      headAddress = headIp;
      workerAddress = workerIp;
      railInterface = "cx8r1";
      railHca = "mlx5_1";
      gidIndex = 3;
      masterPort = 29500;
      beaconPort = 29510;
      peerStampUrl = "http://${headIp}:29510/stamp";
    }
  );

  # ---- firewall ----
  firewall-head = h.check [ head ] (
    config:
    h.eq "rules" (firewallLines config) [
      "iptables -w -A nixos-fw -i cx8r1 -s ${workerIp} -p tcp --dport 29500 -j nixos-fw-accept"
      "iptables -w -A nixos-fw -i cx8r1 -s ${workerIp} -p tcp --dport 29510 -j nixos-fw-accept"
      "iptables -w -A nixos-fw -i cx8r1 -s ${workerIp} -p tcp --dport 8730 -j nixos-fw-accept" # the checkpoint share
      "iptables -w -A nixos-fw -i cx8r1 -s ${workerIp} -p tcp --dport 32768:60999 -j nixos-fw-accept"
    ]
    ++ h.eq "nothing opened to the world" (config.networking.firewall.allowedTCPPorts or [ ]) [ ]
    ++ h.eq "no port ranges to the world" (config.networking.firewall.allowedTCPPortRanges or [ ]) [ ]
  );

  firewall-worker = h.check [ worker ] (
    config:
    h.eq "rules" (firewallLines config) [
      "iptables -w -A nixos-fw -i cx8r1 -s ${headIp} -p tcp --dport 29510 -j nixos-fw-accept"
      "iptables -w -A nixos-fw -i cx8r1 -s ${headIp} -p tcp --dport 32768:60999 -j nixos-fw-accept"
    ]
    ++ h.eq "nothing opened to the world" (config.networking.firewall.allowedTCPPorts or [ ]) [ ]
  );

  firewall-every-rule-has-a-source = h.check [ head ] (
    config:
    h.eq "rules without -s PEER" (lib.filter (l: !lib.hasInfix "-s ${workerIp} " l) (firewallLines config)) [ ]
  );

  firewall-nftables = h.check (with' head { networking.nftables.enable = true; }) (
    config:
    h.eq "no iptables commands" config.networking.firewall.extraCommands ""
    ++ h.eq "nftables rule" config.networking.firewall.extraInputRules ''
      iifname "cx8r1" ip saddr ${workerIp} tcp dport { 29500, 29510, 8730, 32768-60999 } accept comment "vllm-station pair: head"
    ''
  );

  firewall-ipv6 = h.check (with' worker {
    services.vllm-station.pair = {
      headAddress = lib.mkForce "fd00::1";
      workerAddress = lib.mkForce "fd00::2";
    };
  }) (config: h.ok "ip6tables" (lib.all (lib.hasPrefix "ip6tables -w -A nixos-fw -i cx8r1 -s fd00::1 ") (firewallLines config)));

  firewall-off = h.check (with' head { services.vllm-station.pair.firewall.enable = false; }) (
    config: h.eq "no rules" config.networking.firewall.extraCommands ""
  );

  head-api-port = h.check (with' head {
    services.vllm-station.serve = {
      openFirewall = true;
      exposeUnauthenticatedVllm = true;
    };
  }) (
    config: h.eq "head may open its API port" config.networking.firewall.allowedTCPPorts [ 8000 ]
  );

  # ---- the preset ----
  preset-glm53-tp2 = h.check [ head ] (
    config:
    let
      args = vllmArgs config;
      flag = f: v: h.ok "${f} ${v} in ${builtins.toJSON args}" (hasRun args [ f v ]);
    in
    flag "--max-model-len" "98304"
    ++ flag "--gpu-memory-utilization" "0.93"
    ++ flag "--kv-cache-dtype" "fp8"
    ++ flag "--speculative-config" ''{"method":"mtp","num_speculative_tokens":4}''
    ++ flag "--tool-call-parser" "glm47"
    ++ flag "--reasoning-parser" "glm45"
    ++ h.contains "auto tool choice" args "--enable-auto-tool-choice"
    ++ flag "--served-model-name" "glm-5.3"
    ++ h.contains "prefix caching" args "--enable-prefix-caching"
    ++ h.eq "model (overridden by the local path)" (builtins.head args) "/var/lib/vllm-station-models/glm53"
    ++ h.eq "checkpoint expectations" config.services.vllm-station.download.presetExpectations."nvidia/GLM-5.3-NVFP4" {
      arch = "GlmMoeDsaForCausalLM";
      quantAlgo = "MIXED_PRECISION";
      shards = 50;
    }
  );

  preset-model-default = h.check [ { services.vllm-station.serve.preset = "glm53-tp2"; } ] (
    config:
    h.eq "model: the download entry glm53's directory" config.services.vllm-station.serve.model "/var/lib/vllm-station-models/glm53"
    ++ h.eq "its repository" config.services.vllm-station.download.presetModels.glm53 "nvidia/GLM-5.3-NVFP4"
  );

  import-enables-nothing = h.check [ ] (
    config:
    h.eq "no beacon" (config.systemd.services ? vllm-station-pair-beacon) false
    ++ h.eq "no pair.env" ((config.environment.etc or { }) ? "vllm-station/pair.env") false
    ++ h.eq "no firewall commands" config.networking.firewall.extraCommands ""
  );

  # ---- every assertion ----
  assert-missing-peer = h.assertionFails [
    (lib.recursiveUpdate head { services.vllm-station.pair.workerAddress = null; })
  ] "headAddress and workerAddress must both be set";

  assert-missing-head = h.assertionFails [
    (lib.recursiveUpdate worker { services.vllm-station.pair.headAddress = null; })
  ] "missing: headAddress";

  assert-rank-mismatch = h.assertionFails (with' worker {
    services.vllm-station.pair.rank = 0;
  }) "role \"worker\" runs rank 1, but rank = 0";

  assert-tp-size = h.assertionFails (with' head {
    services.vllm-station.serve.tensorParallelSize = 4;
  }) "serve.tensorParallelSize is 4, but a pair is 2 stations";

  assert-same-address = h.assertionFails [
    (lib.recursiveUpdate head { services.vllm-station.pair.workerAddress = headIp; })
  ] "headAddress and workerAddress are both ${headIp}";

  assert-worker-api-port = h.assertionFails (with' worker {
    services.vllm-station.serve.openFirewall = true;
  }) "a worker serves no API, but services.vllm-station.serve.openFirewall is true";

  assert-serve-enabled = h.assertionFails [
    (lib.recursiveUpdate head { services.vllm-station.serve.enable = false; })
  ] "set services.vllm-station.serve.enable = true";

  assert-env-value = h.assertionFails (with' head {
    services.vllm-station.pair.environment.NCCL_DEBUG = "INFO ; rm -rf /";
  }) "offending: NCCL_DEBUG";

  warning-start-timeout = h.check (with' head { services.vllm-station.pair.workerWaitSeconds = 1500; }) (
    config:
    h.ok "warns about the start timeout: ${builtins.toJSON config.warnings}" (
      lib.any (lib.hasInfix "counts against serve.startTimeout") config.warnings
    )
  );
}
