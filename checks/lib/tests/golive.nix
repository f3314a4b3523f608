# services.vllm-station.golive: the oneshot unit after a switch, its config file, its key, its assertion,
# and that it leaves the serving unit alone.
{ lib, h }:
let
  # (lib.takeEnd is newer than the NixOS tree the flake's checks evaluate with)
  lastTwo = l: lib.sublist (lib.length l - 2) 2 l;
  flash = {
    services.vllm-station.serve = {
      enable = true;
      preset = "glm53-flash";
      image = h.image;
    };
  };
  on = [
    flash
    { services.vllm-station.golive.enable = true; }
  ];
  with' = modules: extra: modules ++ [ extra ];

  unitOf = config: config.systemd.services.vllm-station-golive;
  sc = config: (unitOf config).serviceConfig;
  settings =
    config:
    builtins.fromJSON (
      builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/golive.json".text
    );
  station = "/run/vllm-station-tools/bin/station"; # the stable link (serve.nix), not the store path
  # vLLM's key through the credential (modules/lib/unit.nix): `%d` once, for systemd to expand.
  keyArgs = [
    "--api-key-file"
    "%d/api-key"
  ];
in
{
  import-enables-nothing = h.check [ flash ] (
    config:
    h.eq "no golive unit" (config.systemd.services ? vllm-station-golive) false
    ++ h.eq "no config file" (config.environment.etc ? "vllm-station/golive.json") false
  );

  oneshot-after-the-serving-unit = h.check on (
    config:
    let
      u = unitOf config;
    in
    h.eq "Type" (sc config).Type "oneshot"
    ++ h.eq "RemainAfterExit (a switch reruns it only when its triggers change)" (sc config).RemainAfterExit true
    ++ h.contains "after" u.after "vllm-station.service"
    ++ h.contains "wants" u.wants "vllm-station.service"
    ++ h.contains "wantedBy" u.wantedBy "multi-user.target"
    ++ h.eq "ExecStart" (h.argv (sc config).ExecStart) [
      station
      "golive"
      "--config"
      "/etc/vllm-station/golive.json"
    ]
    ++ h.eq "DynamicUser" (sc config).DynamicUser true
    ++ h.eq "StateDirectory (the reports)" (sc config).StateDirectory "vllm-station-golive"
    ++ h.eq "hardened: NoNewPrivileges" (sc config).NoNewPrivileges true
    ++ h.eq "hardened: no GPU device" (sc config).DevicePolicy "closed"
    ++ h.eq "no key, no credential" ((sc config) ? LoadCredential) false
  );

  config-file-records-the-station = h.check on (
    config:
    let
      s = settings config;
    in
    h.eq "baseUrl: the preset's port on loopback" s.baseUrl "http://127.0.0.1:8888"
    ++ h.eq "expect: the one-user floor of the recipe" s.expect [ "c1.tok_s>=100" ]
    ++ h.eq "station.vllmArgs: what the serving unit runs" s.station.vllmArgs config.services.vllm-station.serve.vllmArgs
    ++ h.eq "station.preset" s.station.preset "glm53-flash"
    ++ h.eq "station.image" s.station.image h.image
    ++ h.eq "reports into the state directory" s.outDir "/var/lib/vllm-station-golive"
    ++ h.eq "needle calibration kept in the cache directory" s.needle.calibrationCache "/var/cache/vllm-station-golive/needle-calibration.json"
    ++ h.eq "bench levels" s.bench.concurrency [ 1 32 ]
    ++ h.eq "restart triggers: the config itself, and what is served" (unitOf config).restartTriggers [
      config.environment.etc."vllm-station/golive.json".text
      config.services.vllm-station.serve.served
    ]
  );

  # Served but not in golive.json: the engine's environment. The gates run again.
  environment-change-changes-the-trigger = h.check on (
    config:
    let
      other = (h.eval (with' on { services.vllm-station.serve.environment.NCCL_DEBUG = "INFO"; })).config;
    in
    h.ok "an environment variable changes the restart triggers" (
      (unitOf config).restartTriggers != (unitOf other).restartTriggers
    )
  );

  # A new `station` package re-runs nothing: the unit runs it through the stable link.
  tools-change-reruns-nothing = h.check on (
    config:
    let
      changed = h.fake.station // {
        outPath = "/nix/store/11111111111111111111111111111111-vllm-station-0.2.0";
      };
      other = (h.eval (with' on { services.vllm-station.package = changed; })).config;
    in
    h.eq "ExecStart" (sc other).ExecStart (sc config).ExecStart
    ++ h.eq "restartTriggers" (unitOf other).restartTriggers (unitOf config).restartTriggers
  );

  # A different served configuration is a different trigger: the switch reruns the gates.
  serving-change-changes-the-trigger = h.check (with' on { services.vllm-station.serve.maxModelLen = 524288; }) (
    config:
    h.ok "maxModelLen is in the recorded flags" (lib.elem "524288" (settings config).station.vllmArgs)
  );

  thresholds-follow-the-monitoring-floor = h.check (with' on {
    services.vllm-station.monitoring.thresholds.tokensPerSecond = 120;
  }) (config: h.eq "expect" (settings config).expect [ "c1.tok_s>=120" ]);

  own-thresholds-and-flags = h.check (with' on {
    services.vllm-station.golive = {
      expect = [ "c32.ttft_p50<=1.5" ];
      skip = [ "needle" ];
      extraFlags = [ "--agent-repeats" "3" ];
    };
  }) (
    config:
    h.eq "expect" (settings config).expect [ "c32.ttft_p50<=1.5" ]
    ++ h.eq "skip" (settings config).skip [ "needle" ]
    ++ h.eq "extra flags last" (lib.drop 4 (h.argv (sc config).ExecStart)) [ "--agent-repeats" "3" ]
  );

  api-key-through-a-credential = h.check (with' on { services.vllm-station.serve.apiKeyFile = "/run/secrets/vllm-api-key"; }) (
    config:
    h.eq "LoadCredential" (sc config).LoadCredential [ "api-key:/run/secrets/vllm-api-key" ]
    ++ h.eq "--api-key-file %d/api-key" (lastTwo (h.argv (sc config).ExecStart)) keyArgs
    ++ h.ok "%d quoted once, not escaped to %%d" (lib.hasSuffix " \"--api-key-file\" \"%d/api-key\"" (sc config).ExecStart)
    ++ h.ok "the key's path is not in the config file" (
      !lib.hasInfix "/run/secrets" config.environment.etc."vllm-station/golive.json".text
    )
  );

  # It reads the serving options; the serving unit is the same with or without it.
  serving-unit-untouched = h.check on (
    config:
    let
      without = (h.eval [ flash ]).config;
    in
    h.eq "vllm-station.serviceConfig" (h.unit config).serviceConfig (h.unit without).serviceConfig
    ++ h.eq "vllm-station.after" (h.unit config).after (h.unit without).after
  );

  needs-the-serving-api = h.assertionFails [
    { services.vllm-station.golive.enable = true; }
  ] "services.vllm-station.golive: it tests this station's API";

  bad-gate-name-throws = h.throws [
    flash
    {
      services.vllm-station.golive = {
        enable = true;
        skip = [ "lint" ];
      };
    }
  ];
}
