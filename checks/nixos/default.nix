# Full NixOS evaluations (tier nix_nixos): checks/examples/*.nix with modules/ against a full
# nixpkgs tree (NIXOS_TREE), asserting on the rendered unit text. Builds nothing.
#
#   nix-instantiate --eval --strict --json checks/nixos --argstr nixosTree "$NIXOS_TREE"
#   … --argstr output units     # { "<example>/<system>/<unit>" = unit text; } (for systemd-analyze)
#   … --arg toplevel true       # also instantiate each system's toplevel (slower)
#   … --argstr output names     # the check names, without evaluating any system
#
# Result: { passed = [ "<example>/<system>/<check>" … ]; failed = [ { name; message; } ]; }.
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  systems ? [
    "x86_64-linux"
    "aarch64-linux"
  ],
  output ? "results",
  toplevel ? false,
}:
let
  inherit (import ./eval.nix { inherit nixosTree; }) lib evalExample;

  # ---- reading rendered units ----
  # "[Unit]\nA=1\n[Service]\nB=2" -> { Unit = [ "A=1" ]; Service = [ "B=2" ]; }
  sections =
    text:
    removeAttrs (lib.foldl' (
      acc: line:
      let
        header = builtins.match "[[](.+)[]]" line;
      in
      if header != null then
        acc // { current = builtins.head header; }
      else if line == "" || lib.hasPrefix "#" line then
        acc
      else
        acc // { ${acc.current} = (acc.${acc.current} or [ ]) ++ [ line ]; }
    ) { current = "none"; } (lib.splitString "\n" text)) [ "current" ];
  values =
    section: key:
    map (lib.removePrefix "${key}=") (lib.filter (lib.hasPrefix "${key}=") section);
  inherit (import ../helpers.nix { inherit lib; }) argv after flagValue;

  show = builtins.toJSON;
  eq = what: actual: expected: lib.optional (actual != expected) "${what}: expected ${show expected}, got ${show actual}";
  ok = what: cond: lib.optional (!cond) what;

  # The example serves its verified local copy: the preset's flags with that directory as the model.
  flashModelDir = "/var/lib/vllm-station-models/glm53-flash";
  flashRevision = "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"; # the example's pin
  # vLLM loads the pinned revision's directory under the entry's dir (contract.revisionDir).
  flashRevisionDir = "${flashModelDir}/revisions/${flashRevision}";
  presetFlags = host: [ flashRevisionDir ] ++ lib.tail (import ../glm53-flash-flags.nix host);

  # ---- the checks of one evaluated example: name -> [ problems ] ----
  flashChecks =
    config:
    let
      cfg = config.services.vllm-station.serve;
      # Context-free copies: only strings are compared here, nothing is built.
      text = builtins.unsafeDiscardStringContext config.systemd.units."vllm-station.service".text;
      s = sections text;
      unit = s.Unit or [ ];
      requires = lib.concatMap (lib.splitString " ") (values unit "Requires");
      unitAfter = lib.concatMap (lib.splitString " ") (values unit "After");
      service = s.Service or [ ];
      v = values service;
      start = argv (builtins.head (v "ExecStart"));
      pre = v "ExecStartPre";
      post = v "ExecStartPost";
      envFlags = lib.concatLists (
        lib.imap0 (i: a: lib.optional (a == "--env" && i + 1 < lib.length start) (builtins.elemAt start (i + 1))) start
      );
      station = "/run/vllm-station-tools/bin/station"; # the stable link (serve.nix), not the store path
      docker = builtins.unsafeDiscardStringContext (lib.getExe' config.virtualisation.docker.package "docker");
      failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
    in
    {
      nixos-assertions = eq "failed NixOS assertions" failedAssertions [ ];
      warnings = eq "warnings" config.warnings [ ];
      start-limits-in-unit-section =
        eq "[Unit] StartLimitBurst" (values unit "StartLimitBurst") [ "3" ]
        ++ eq "[Unit] StartLimitIntervalSec" (values unit "StartLimitIntervalSec") [ "3600" ]
        ++ eq "no StartLimit* in [Service]" (lib.filter (lib.hasPrefix "StartLimit") service) [ ];
      restart-always =
        eq "Restart" (v "Restart") [ "always" ] ++ eq "RestartSec" (v "RestartSec") [ "60" ];
      prestart-privileged-every-start =
        let
          prestart = argv (builtins.elemAt pre 1);
        in
        eq "ExecStartPre count (stamp gate, prestart, preflight)" (lib.length pre) 3
        ++ eq "stamp gate first, with the declared revision" (lib.take 6 (argv (builtins.head pre))) [
          station
          "gate"
          "stamp"
          flashRevisionDir
          "--revision"
          flashRevision
        ]
        ++ ok "prestart and preflight start with +: ${show pre}" (lib.all (lib.hasPrefix "+") (lib.tail pre))
        ++ eq "prestart argv" (lib.take 2 prestart) [
          station
          "prestart"
        ]
        ++ eq "prestart --gpu-node" (flagValue "--gpu-node" prestart) "1"
        ++ eq "prestart --runtime: the runtime's absolute path (the unit's PATH lacks it)" (flagValue "--runtime" prestart) docker
        ++ eq "prestart --log-dir" (flagValue "--log-dir" prestart) "/var/log/vllm-station";
      preflight-gate = eq "preflight argv" (argv (lib.last pre)) [
        station
        "preflight"
        "--config"
        "/etc/vllm-station/preflight.json"
      ];
      preset-flags-exact = eq "vLLM flags after the image" (after cfg.image start) (presetFlags "127.0.0.1");
      container-without-restart-policy-or-rm =
        ok "a --restart flag in ExecStart" (!lib.any (lib.hasPrefix "--restart") start)
        ++ ok "--rm in ExecStart" (!lib.elem "--rm" start)
        ++ eq "container name" (flagValue "--name" start) "vllm-station"
        ++ ok "GPUs through CDI" (lib.elem "nvidia.com/gpu=all" start);
      ready-means-serving =
        eq "ExecStartPost count" (lib.length post) 1
        ++ ok "wait-ready privileged (+): it reads the key file itself" (lib.hasPrefix "+" (builtins.head post))
        ++ eq "wait-ready argv" (argv (builtins.head post)) [
          station
          "wait-ready"
          "--base-url"
          "http://127.0.0.1:8888"
          "--model"
          "glm-5.3-flash"
          "--timeout"
          "840"
          "--api-key-file"
          "/var/lib/vllm-station-secrets/vllm-api-key"
        ]
        ++ eq "TimeoutStartSec" (v "TimeoutStartSec") [ "900" ]
        ++ ok "engine-ready timeout raised" (lib.elem "VLLM_ENGINE_READY_TIMEOUT_S=900" envFlags);
      persistent-caches =
        eq "CacheDirectory" (v "CacheDirectory") [ "vllm-station" ]
        ++ eq "StateDirectory" (v "StateDirectory") [ "vllm-station" ]
        ++ eq "LogsDirectory" (v "LogsDirectory") [ "vllm-station" ]
        ++ ok "compile cache in the cache dir" (lib.elem "VLLM_CACHE_ROOT=/var/cache/vllm-station/vllm" envFlags)
        ++ ok "cache dir mounted" (lib.elem "/var/cache/vllm-station:/var/cache/vllm-station" start);
      api-key-not-in-unit =
        eq "LoadCredential" (v "LoadCredential") [ "api-key:/var/lib/vllm-station-secrets/vllm-api-key" ]
        ++ eq "station exec hands the credential over" (lib.take 6 start) [
          station
          "exec"
          "--secret-env"
          "VLLM_API_KEY=%d/api-key"
          "--"
          docker
        ]
        ++ ok "key forwarded by name" (lib.elem "VLLM_API_KEY" envFlags)
        ++ ok "no --api-key flag" (!lib.elem "--api-key" start);
      # The stop sequence: drain (503 at the gateway and listener), then SIGTERM with room for vLLM's
      # --shutdown-timeout (the preset's 32768 tokens at 55.6 tok/s), every bound above the one before.
      graceful-stop =
        eq "ExecStop: drain, then the container's stop with shutdownTimeout + 30" (map argv (v "ExecStop")) [
          [
            station
            "drain"
            "--stopping"
          ]
          [
            docker
            "stop"
            "-t"
            "620"
            "vllm-station"
          ]
        ]
        ++ ok "drain privileged (+), the stop's failure ignored (-)" (
          map (lib.substring 0 1) (v "ExecStop") == [ "+" "-" ]
        )
        ++ eq "--shutdown-timeout" (flagValue "--shutdown-timeout" start) "590"
        ++ eq "shutdownTimeout = ceil(maxOutputTokens / stopDecodeRate)" cfg.shutdownTimeout 590
        ++ eq "TimeoutStopSec: shutdownTimeout + 60" (v "TimeoutStopSec") [ "650" ]
        ++ eq "the drain flag's directory" (lib.filter (lib.hasInfix "vllm-station-drain") config.systemd.tmpfiles.rules) [
          "d /var/lib/vllm-station-drain 0755 root root - -"
        ];
      memlock =
        eq "LimitMEMLOCK" (v "LimitMEMLOCK") [ "infinity" ]
        ++ ok "container memlock" (lib.elem "--ulimit=memlock=-1:-1" start);
      hardening =
        eq "ProtectSystem" (v "ProtectSystem") [ "strict" ]
        ++ eq "NoNewPrivileges" (v "NoNewPrivileges") [ "true" ]
        ++ eq "CapabilityBoundingSet" (v "CapabilityBoundingSet") [ "" ]
        ++ eq "PrivateTmp" (v "PrivateTmp") [ "true" ]
        ++ ok "no NUMA binding" (v "NUMAPolicy" == [ ] && v "NUMAMask" == [ ]);
      firewall =
        ok "vLLM's port 8888 closed: vLLM on loopback, its key guards only /v1" (!lib.elem 8888 config.networking.firewall.allowedTCPPorts)
        ++ eq "vLLM on loopback" cfg.host "127.0.0.1";
      docker-with-cdi =
        eq "docker" config.virtualisation.docker.enable true
        ++ eq "nvidia-container-toolkit" config.hardware.nvidia-container-toolkit.enable true
        ++ eq "docker CDI feature" (config.virtualisation.docker.daemon.settings.features.cdi or null) true
        ++ ok "requires docker.service" (lib.elem "docker.service" requires);
      # The key is checked before systemd loads it (modules/secrets.nix): a missing file fails the start
      # naming serve.apiKeyFile, not with 243/CREDENTIALS; its default home outlives a reboot.
      secrets-checked-first =
        ok "requires its secrets check" (lib.elem "vllm-station-secrets@vllm-station.service" requires)
        ++ ok "starts after its secrets check" (lib.elem "vllm-station-secrets@vllm-station.service" unitAfter)
        ++ eq "what the check reads" (builtins.fromJSON config.environment.etc."vllm-station/secrets.json".text).units.vllm-station [
          {
            option = "services.vllm-station.serve.apiKeyFile";
            path = "/var/lib/vllm-station-secrets/vllm-api-key";
            kind = "file";
          }
        ]
        ++ ok "the secrets directory, root-only" (lib.elem "d /var/lib/vllm-station-secrets 0700 root root -" config.systemd.tmpfiles.rules)
        ++ ok "the check unit" (config.systemd.units ? "vllm-station-secrets@.service");
      host-tuning =
        eq "vm.zone_reclaim_mode" config.boot.kernel.sysctl."vm.zone_reclaim_mode" 1
        ++ eq "kernel.numa_balancing" config.boot.kernel.sysctl."kernel.numa_balancing" 0
        ++ ok "init_on_alloc=0" (lib.elem "init_on_alloc=0" config.boot.kernelParams)
        ++ ok "CDMM modprobe option" (
          lib.hasInfix "options nvidia NVreg_CoherentGPUMemoryMode=driver" config.boot.extraModprobeConfig
        );
      preflight-json =
        let
          json = builtins.fromJSON (builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/preflight.json".text);
        in
        eq "preflight.json" {
          inherit (json)
            port
            model
            gpuNode
            maxFilePagesGiB
            gpuMemoryUtilization
            maxModelLen
            runtime
            pair
            ;
        } {
          port = 8888;
          model = flashModelDir;
          gpuNode = 1;
          maxFilePagesGiB = 4;
          gpuMemoryUtilization = 0.94;
          maxModelLen = 1048576;
          runtime = docker;
          pair = null;
        };
    }
    // lib.optionalAttrs toplevel {
      toplevel-instantiates = ok "toplevel drvPath" (lib.hasSuffix ".drv" config.system.build.toplevel.drvPath);
    };

  # The native backend on the same example (a stand-in `vllm`: 24.11's vLLM 0.6.2 is marked broken),
  # for its rendering and its systemd-analyze exposure.
  nativeChecks =
    config:
    let
      text = builtins.unsafeDiscardStringContext config.systemd.units."vllm-station.service".text;
      service = (sections text).Service or [ ];
      v = values service;
      start = argv (builtins.head (v "ExecStart"));
    in
    {
      nixos-assertions = eq "failed NixOS assertions" (map (a: a.message) (lib.filter (a: !a.assertion) config.assertions)) [ ];
      vllm-serve-directly =
        ok "ExecStart runs bin/vllm serve: ${show start}" (
          lib.hasSuffix "/bin/vllm" (builtins.elemAt start 5) && builtins.elemAt start 6 == "serve"
        )
        ++ eq "preset flags" (after "serve" start) (presetFlags "127.0.0.1")
        ++ ok "no container runtime" (!lib.any (lib.hasInfix "docker") start);
      dynamic-user-sandbox =
        eq "DynamicUser" (v "DynamicUser") [ "true" ]
        ++ eq "PrivateUsers" (v "PrivateUsers") [ "true" ]
        ++ eq "DevicePolicy" (v "DevicePolicy") [ "closed" ]
        ++ ok "HF cache in the cache dir" (lib.elem ''Environment="HF_HOME=/var/cache/vllm-station/huggingface"'' service)
        ++ ok "engine-ready timeout" (lib.elem ''Environment="VLLM_ENGINE_READY_TIMEOUT_S=900"'' service);
      no-container-runtime =
        eq "docker" config.virtualisation.docker.enable false
        ++ eq "prestart --runtime" (flagValue "--runtime" (argv (builtins.elemAt (v "ExecStartPre") 1))) "none"
        ++ eq "station exec, then vllm serve" (lib.take 5 start) [
          "/run/vllm-station-tools/bin/station"
          "exec"
          "--secret-env"
          "VLLM_API_KEY=%d/api-key"
          "--"
        ];
      native-graceful-stop =
        eq "ExecStop: drain only (systemd's SIGTERM stops vLLM)" (map argv (v "ExecStop")) [
          [
            "/run/vllm-station-tools/bin/station"
            "drain"
            "--stopping"
          ]
        ]
        ++ eq "KillMode: SIGTERM to the API server alone" (v "KillMode") [ "mixed" ]
        ++ eq "TimeoutStopSec" (v "TimeoutStopSec") [ "650" ];
    };

  examples = {
    flash-station = {
      file = ../examples/flash-station.nix;
      checks = flashChecks;
    };
    flash-station-native = {
      modules = [
        ../examples/flash-station.nix
        (
          { pkgs, ... }:
          {
            services.vllm-station.serve = {
              backend = "native";
              package = pkgs.writeShellScriptBin "vllm" "exit 1";
            };
          }
        )
      ];
      systems = [ "x86_64-linux" ];
      checks = nativeChecks;
    };
  }
  # station-a / station-b (the pair; aarch64-linux only): ./pair.nix
  // import ./pair.nix {
    inherit lib sections values argv after eq ok show toplevel;
  };

  evaluated = lib.concatMap (
    name:
    map (system: {
      name = "${name}/${system}";
      config = (evalExample (examples.${name}.modules or [ examples.${name}.file ]) system).config;
      inherit (examples.${name}) checks;
    }) (lib.intersectLists (examples.${name}.systems or systems) systems)
  ) (lib.attrNames examples);

  results = lib.concatMap (
    e: lib.mapAttrsToList (check: problems: {
      name = "${e.name}/${check}";
      inherit problems;
    }) (e.checks e.config)
  ) evaluated;
in
if output == "names" then
  map (r: r.name) results
else if output == "units" then
  # every unit the project's modules render: "<example>/<system>/<unit>" = text
  lib.listToAttrs (
    lib.concatMap (
      e:
      lib.mapAttrsToList (unit: u: lib.nameValuePair "${e.name}/${unit}" u.text) (
        lib.filterAttrs (unit: u: lib.hasPrefix "vllm-station" unit && u.enable && u ? text) e.config.systemd.units
      )
    ) evaluated
  )
else
  {
    passed = map (r: r.name) (lib.filter (r: r.problems == [ ]) results);
    failed = map (r: {
      inherit (r) name;
      message = lib.concatStringsSep "\n" r.problems;
    }) (lib.filter (r: r.problems != [ ]) results);
  }
