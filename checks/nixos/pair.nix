# Full NixOS evaluations of the pair examples (checks/examples/station-{a,b}.nix, aarch64-linux):
# the rendered vllm-station, download and beacon units, the pair's env file and the firewall.
# Loaded by ./default.nix (which passes its unit-reading helpers); adds the examples `station-a`
# and `station-b`.
{
  lib,
  sections,
  values,
  argv,
  after,
  eq,
  ok,
  show, # unused here; part of the helper set ./default.nix passes
  toplevel ? false,
}:
let
  headIp = "192.168.100.1";
  workerIp = "192.168.100.2";
  rev = "5f0c6e1d2b3a49788c7d6e5f4a3b2c1d0e9f8a7b";
  # The download entry's dir, and the pinned revision's directory under it (contract.revisionDir).
  entryDir = "/var/lib/vllm-station-models/glm53";
  dir = "${entryDir}/revisions/${rev}";
  stamp = "${dir}/.station-verified.json";
  envFile = "/etc/vllm-station/pair.env";

  unitText = config: name: builtins.unsafeDiscardStringContext config.systemd.units."${name}".text;
  noContext = builtins.unsafeDiscardStringContext;
  # The sequence's steps by their verb: `station <verb> <subverb>` -> [ verb subverb ].
  verbs = lines: map (l: lib.take 2 (lib.drop 1 (argv l))) lines;

  # The vLLM arguments each role must render, exactly (after the image in the container command).
  vllmFlags =
    role:
    [
      dir
      "--served-model-name"
      "glm-5.3"
    ]
    ++ lib.optionals (role == "head") [
      "--host"
      "127.0.0.1"
      "--port"
      "8000"
    ]
    ++ [
      "--tensor-parallel-size"
      "2"
      "--max-model-len"
      "98304"
      "--gpu-memory-utilization"
      "0.93"
      "--kv-cache-dtype"
      "fp8"
      "--enable-prefix-caching"
      "--enable-auto-tool-choice"
      "--tool-call-parser"
      "glm47"
      "--reasoning-parser"
      "glm45"
      "--speculative-config"
      ''{"method":"mtp","num_speculative_tokens":4}''
    ]
    ++ lib.optional (role == "worker") "--headless"
    ++ [
      # the graceful stop: 32768 tokens at 12.8 tok/s (the TP=2 recipe's rate at 32 users)
      "--shutdown-timeout"
      "2560"
      "--override-generation-config"
      ''{"max_new_tokens":32768}''
      "--nnodes"
      "2"
      "--node-rank"
      (if role == "head" then "0" else "1")
      "--master-addr"
      headIp
      "--master-port"
      "29500"
    ];

  expectedEnv = role: ''
    GLOO_SOCKET_IFNAME=cx8r1
    HEAD_IP=${headIp}
    NCCL_DEBUG=INFO
    NCCL_IB_GID_INDEX=3
    NCCL_IB_HCA==mlx5_1
    NCCL_NET_GDR_LEVEL=SYS
    NCCL_SOCKET_IFNAME=cx8r1
    RAIL_HCA=mlx5_1
    RAIL_IFACE=cx8r1
    RANK=${if role == "head" then "0" else "1"}
    VLLM_HOST_IP=${if role == "head" then headIp else workerIp}
    WORKER_IP=${workerIp}
  '';

  pairChecks =
    role: config:
    let
      isHead = role == "head";
      peer = if isHead then workerIp else headIp;
      # The serving unit's steps and the beacon: the stable link (serve.nix); the download unit: the store path.
      station = "/run/vllm-station-tools/bin/station";
      stationPackage = noContext (lib.getExe config.services.vllm-station.package);
      image = config.services.vllm-station.serve.image;

      serving = sections (unitText config "vllm-station.service");
      sv = values (serving.Service or [ ]);
      su = values (serving.Unit or [ ]);
      start = argv (builtins.head (sv "ExecStart"));
      pre = sv "ExecStartPre";

      download = sections (unitText config "vllm-station-download-glm53.service");
      dv = values (download.Service or [ ]);
      du = values (download.Unit or [ ]);

      beacon = sections (unitText config "vllm-station-pair-beacon.service");
      bv = values (beacon.Service or [ ]);
      bu = values (beacon.Unit or [ ]);

      failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
      fw = config.networking.firewall;
    in
    {
      nixos-assertions = eq "failed NixOS assertions" failedAssertions [ ];
      warnings = eq "warnings" config.warnings [ ];

      vllm-flags-exact = eq "vLLM flags after the image" (after image start) (vllmFlags role);

      # One file for shells, the unit and the container.
      env-file =
        eq "${envFile}" config.environment.etc."vllm-station/pair.env".text (expectedEnv role)
        ++ eq "EnvironmentFile" (sv "EnvironmentFile") [ envFile ]
        ++ ok "container --env-file ${envFile}" (lib.elem envFile (after "--env-file" start))
        ++ ok "RDMA devices in the container (--device /dev/infiniband)" (
          lib.any (i: builtins.elemAt start i == "--device" && builtins.elemAt start (i + 1) == "/dev/infiniband") (
            lib.range 0 (lib.length start - 2)
          )
        );

      memlock =
        eq "LimitMEMLOCK" (sv "LimitMEMLOCK") [ "infinity" ]
        ++ eq "container memlock, once" (lib.count (a: a == "--ulimit=memlock=-1:-1") start) 1;

      # Stamp gate first, then (head) the wait for the worker, then the privileged prestart, preflight.
      start-order =
        eq "ExecStartPre" (verbs pre) (
          [
            [
              "gate"
              "stamp"
            ]
          ]
          ++ lib.optional isHead [
            "pair"
            "wait-worker"
          ]
          ++ [
            [
              "prestart"
              "--gpu-node"
            ]
            [
              "preflight"
              "--config"
            ]
          ]
        )
        ++ eq "every step is the station tool" (lib.unique (map (l: lib.head (argv l)) pre)) [ station ]
        ++ ok "prestart privileged" (lib.all (lib.hasPrefix "+") (lib.drop (if isHead then 2 else 1) pre))
        ++ (
          if isHead then
            eq "the head waits for ${workerIp}'s beacon, at most 300 s" (lib.drop 3 (argv (builtins.elemAt pre 1))) [
              "--url"
              "http://${workerIp}:29510/ready"
              "--worker-address"
              workerIp
              "--timeout"
              "300"
              "--interval"
              "5"
            ]
            ++ eq "nccl-check requires GPUDirect RDMA" (lib.last (argv (builtins.elemAt (sv "ExecStartPost") 1))) "--require-gdr"
            ++ eq "weights-check: half of ${dir} per rank" (lib.drop 1 (argv (lib.last (sv "ExecStartPost")))) [
              "weights-check"
              "--unit"
              "vllm-station.service"
              "--checkpoint"
              dir
              "--tensor-parallel-size"
              "2"
              "--wait"
              "60"
            ]
            ++ eq "the head's gates after start: wait-ready, nccl-check, weights-check" (
              map (l: lib.take 2 (argv (lib.removeSuffix " \"--api-key-file\" \"/var/lib/vllm-station-secrets/vllm-api-key\"" l))) (sv "ExecStartPost")
            ) [
              [
                station
                "wait-ready"
              ]
              [
                station
                "nccl-check"
              ]
              [
                station
                "weights-check"
              ]
            ]
            ++ ok "nccl-check and weights-check privileged (journal)" (lib.all (lib.hasPrefix "+") (lib.tail (sv "ExecStartPost")))
            ++ eq "TimeoutStartSec (preset)" (sv "TimeoutStartSec") [ "1800" ]
          else
            eq "no readiness probe on the worker" (sv "ExecStartPost") [ ]
        );

      stop-order =
        eq "beacon BindsTo" (bu "BindsTo") [ "vllm-station.service" ]
        ++ eq "beacon After (stops before vllm-station)" (bu "After") [ "vllm-station.service" ]
        ++ eq "beacon ExecStop: the worker waits for the head's port 29500 to close" (map argv (bv "ExecStop")) (
          lib.optional (!isHead) [
            station
            "pair"
            "wait-head-stop"
            "--head"
            headIp
            "--port"
            "29500"
            "--timeout"
            "2650" # the head finishes its requests first: shutdownTimeout (2560) + 90
            "--interval"
            "5"
            "--unit"
            "vllm-station.service"
          ]
        )
        ++ eq "beacon: station pair beacon on the rail address, serving the local stamp" (argv (builtins.head (bv "ExecStart"))) ([
          station
          "pair"
          "beacon"
          "--bind"
          (if isHead then headIp else workerIp)
          "--port"
          "29510"
          "--role"
          role
          "--rank"
          (if isHead then "0" else "1")
          "--stamp"
          stamp
        ]
        ++ lib.optionals (!isHead) [
          "--head"
          headIp
          "--master-port"
          "29500"
        ])
        ++ ok "beacon is pulled in by vllm-station" (
          lib.elem "vllm-station-pair-beacon.service" config.systemd.services.vllm-station.wants
          || lib.elem "vllm-station.service" config.systemd.services.vllm-station-pair-beacon.wantedBy
        );

      # The worker's half of the restart in the recipe's order: restart the worker once the head is down
      # and its session over (the head's half is the head's watchdog, with monitoring on).
      rejoin =
        if isHead then
          eq "no rejoin unit on the head" (config.systemd.units ? "vllm-station-pair-rejoin.service") false
        else
          let
            r = sections (unitText config "vllm-station-pair-rejoin.service");
            rv = values (r.Service or [ ]);
            rargv = argv (builtins.head (rv "ExecStart"));
          in
          eq "rejoin: the local beacon, the head's rendezvous, the worker's own unit" (lib.take 10 (lib.drop 1 rargv)) [
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
          ++ ok "rejoin runs systemctl of this system" (lib.any (lib.hasSuffix "/bin/systemctl") rargv)
          ++ ok "rejoin kills the serving container after the restart's request" (
            lib.any (lib.hasSuffix "/bin/docker") rargv && lib.elem "vllm-station" rargv
          )
          ++ eq "rejoin: StartLimitBurst under [Unit]" (values (r.Unit or [ ]) "StartLimitBurst") [ "5" ];

      firewall =
        eq "extraCommands rules" (lib.filter (l: lib.hasInfix "nixos-fw-accept" l) (lib.splitString "\n" fw.extraCommands)) (
          map (p: "iptables -w -A nixos-fw -i cx8r1 -s ${peer} -p tcp --dport ${p} -j nixos-fw-accept") (
            lib.optional isHead "29500"
            ++ [ "29510" ]
            ++ lib.optional isHead "8730" # the checkpoint share
            ++ [ "32768:60999" ]
          )
        )
        ++ eq "only the head's gateway (443) open to the world (vLLM on loopback)" fw.allowedTCPPorts (lib.optional isHead 443)
        ++ eq "no world-open ranges" fw.allowedTCPPortRanges [ ]
        ++ eq "nothing per interface" (lib.concatMap (i: i.allowedTCPPorts) (lib.attrValues fw.interfaces)) [ ];

      download-unit =
        eq "NUMAPolicy" (dv "NUMAPolicy") [ "bind" ]
        ++ eq "NUMAMask" (dv "NUMAMask") [ "0" ]
        ++ eq "DevicePolicy" (dv "DevicePolicy") [ "closed" ]
        ++ eq "no DeviceAllow" (dv "DeviceAllow") [ ]
        ++ eq "PrivateDevices" (dv "PrivateDevices") [ "true" ]
        ++ eq "Type" (dv "Type") [ "oneshot" ]
        ++ eq "Restart" (dv "Restart") [ "on-failure" ]
        ++ eq "[Unit] StartLimitBurst" (du "StartLimitBurst") [ "3" ]
        ++ eq "[Unit] StartLimitIntervalSec" (du "StartLimitIntervalSec") [ "3600" ]
        ++ eq "ConditionPathExists" (du "ConditionPathExists") [ "!${stamp}" ]
        ++ eq "ExecStart" (lib.filter (a: a != "--token-file" && a != "%d/hf-token") (argv (builtins.head (dv "ExecStart")))) (
          [ stationPackage ]
          ++ (
            if isHead then
              [
                "download"
                "nvidia/GLM-5.3-NVFP4"
                "--revision"
                rev
                "--dir"
                dir
                "--membind"
                "0"
              ]
            else
              [
                "copy"
                "rsync://${headIp}:8730/glm53"
                "--dir"
                dir
                "--revision"
                rev
                "--repo"
                "nvidia/GLM-5.3-NVFP4"
                "--membind"
                "0"
              ]
          )
          ++ [
            "--expect-arch"
            "GlmMoeDsaForCausalLM"
            "--expect-quant-algo"
            "MIXED_PRECISION"
            "--expect-shards"
            "50"
          ]
        )
        ++ eq "token credential" (dv "LoadCredential") (lib.optional isHead "hf-token:/var/lib/vllm-station-secrets/hf-token");

      serving-requires-stamp =
        ok "Wants the download unit" (lib.elem "vllm-station-download-glm53.service" (lib.concatMap (lib.splitString " ") (su "Wants")))
        # Not After= it: the first switch does not wait for a download; skipped until the stamp exists.
        ++ ok "not After the download unit" (!lib.elem "vllm-station-download-glm53.service" (lib.concatMap (lib.splitString " ") (su "After")))
        ++ eq "skipped until the pinned revision is verified" (su "ConditionPathExists") [ stamp ]
        ++ eq "the stamp gate checks ${dir} at revision ${rev}" (lib.take 6 (argv (builtins.head pre))) [
          station
          "gate"
          "stamp"
          dir
          "--revision"
          rev
        ];

      preflight-json =
        let
          json = builtins.fromJSON (builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/preflight.json".text);
        in
        eq "preflight pair" json.pair {
          inherit role;
          rank = if isHead then 0 else 1;
          headAddress = headIp;
          workerAddress = workerIp;
          railInterface = "cx8r1";
          railHca = "mlx5_1";
          gidIndex = 3;
          masterPort = 29500;
          beaconPort = 29510;
          peerStampUrl = "http://${peer}:29510/stamp";
        }
        ++ eq "preflight revision" json.revision rev
        ++ eq "preflight modelDir" json.modelDir dir;

      # A shares its verified copy read-only with B only; B's download unit pulls it (station copy).
      checkpoint-share =
        if isHead then
          let
            share = sections (unitText config "vllm-station-checkpoint-share.service");
            shv = values (share.Service or [ ]);
            start' = argv (builtins.head (shv "ExecStart"));
          in
          eq "rsync daemon on the rail address" (lib.drop 1 start') [
            "--daemon"
            "--no-detach"
            "--config=/etc/vllm-station/rsyncd.conf"
            "--address=${headIp}"
            "--port=8730"
          ]
          ++ ok "rsync from nixpkgs" (lib.hasSuffix "/bin/rsync" (builtins.head start'))
          ++ eq "NUMA node 0" (shv "NUMAMask") [ "0" ]
          ++ ok "module glm53, read only, worker only" (
            lib.all (l: lib.hasInfix l config.environment.etc."vllm-station/rsyncd.conf".text) [
              "[glm53]"
              "read only = yes"
              "hosts allow = ${workerIp}"
            ]
          )
        else
          eq "no share on the worker" (config.systemd.units ? "vllm-station-checkpoint-share.service") false
          ++ ok "rsync on the copy unit's PATH" (
            lib.any (l: lib.hasPrefix "PATH=" (lib.removePrefix "Environment=\"" l) && lib.hasInfix "-rsync-" l) (download.Service or [ ])
          );

      rail-interface =
        eq "MTU" config.networking.interfaces.cx8r1.mtu 9000
        ++ eq "address" (map (a: a.address) config.networking.interfaces.cx8r1.ipv4.addresses) [
          (if isHead then headIp else workerIp)
        ];
    }
    // lib.optionalAttrs toplevel {
      toplevel-instantiates = ok "toplevel drvPath" (lib.hasSuffix ".drv" config.system.build.toplevel.drvPath);
    };
in
{
  station-a = {
    file = ../examples/station-a.nix;
    systems = [ "aarch64-linux" ];
    checks = pairChecks "head";
  };
  station-b = {
    file = ../examples/station-b.nix;
    systems = [ "aarch64-linux" ];
    checks = pairChecks "worker";
  };
}
