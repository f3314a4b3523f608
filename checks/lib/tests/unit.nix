# modules/lib/unit.nix: the one helper for credentials (`LoadCredential=`, `%d/…` arguments), vLLM's key
# in a unit that sends it, the test of a secret's path, and the shape of a unit that restarts the serving
# unit (the watchdog's, the pair's rejoin).
{ lib, h }:
let
  unit = import ../../../modules/lib/unit.nix {
    inherit lib;
    inherit (h) utils;
  };
  serveWith = apiKeyFile: { inherit apiKeyFile; };
  key = unit.vllmApiKey (serveWith "/var/lib/vllm-station-secrets/vllm-api-key") "vllm-station-probe";
  none = unit.vllmApiKey (serveWith null) "vllm-station-probe";
  line = unit.execLine [
    "/bin/station"
    "x%y"
    (unit.credentialArg {
      name = "key-alice";
      prefix = "alice=";
    })
    (unit.credentialArg { })
  ];
  throwsOn = value: !(builtins.tryEval (builtins.deepSeq value true)).success;
  restarter = unit.restarter {
    description = "restarts";
    execStart = [
      "/bin/station"
      "watchdog"
      "100%"
    ];
    textfileDir = "/var/lib/prometheus-node-exporter-text";
    after = [ "vllm-station.service" ];
    requires = [ "vllm-station-secrets@x.service" ];
  };
  bare = unit.restarter {
    description = "restarts";
    execStart = [ "/bin/station" ];
  };
in
{
  # `%d` once (systemd expands it), every other `%` doubled as escapeSystemdExecArgs does.
  exec-line-quotes-the-credential-once = h.check [ ] (
    _:
    h.eq "line" line ''"/bin/station" "x%%y" "alice=%d/key-alice" "%d/"''
    ++ h.eq "argv" (h.argv line) [
      "/bin/station"
      "x%y"
      "alice=%d/key-alice"
      "%d/"
    ]
    ++ h.eq "without credentials: escapeSystemdExecArgs itself" (unit.execLine [ "a b" "$c" ]) (
      h.utils.escapeSystemdExecArgs [ "a b" "$c" ]
    )
  );

  credential-names-that-need-quoting-are-refused = h.check [ ] (
    _:
    h.ok "a space" (throwsOn (unit.credentialArg { name = "a b"; }))
    ++ h.ok "a quote" (throwsOn (unit.credentialArg { prefix = "a\"="; }))
    ++ h.ok "a percent" (throwsOn (unit.credentialArg { name = "%n"; }))
    ++ h.ok "a dollar" (throwsOn (unit.credentialArg { name = "$x"; }))
  );

  vllm-api-key-wiring = h.check [ ] (
    _:
    h.eq "args" (h.argv (unit.execLine key.args)) [
      "--api-key-file"
      "%d/api-key"
    ]
    ++ h.eq "LoadCredential" (unit.loadCredential key.credentials) [
      "api-key:/var/lib/vllm-station-secrets/vllm-api-key"
    ]
    ++ h.eq "the secrets manifest entry" key.secrets {
      vllm-station-probe = [
        {
          option = "services.vllm-station.serve.apiKeyFile";
          path = "/var/lib/vllm-station-secrets/vllm-api-key";
        }
      ];
    }
    ++ h.eq "the check it starts after" key.checkUnits [ "vllm-station-secrets@vllm-station-probe.service" ]
    ++ h.eq "the serving unit's --secret-env form" (unit.execLine [ key.envArg ]) ''"VLLM_API_KEY=%d/api-key"''
    ++ h.eq "no key: no args" none.args [ ]
    ++ h.eq "no key: no credential" (unit.loadCredential none.credentials) [ ]
    ++ h.eq "no key: no manifest entry" none.secrets { }
    ++ h.eq "no key: no check" none.checkUnits [ ]
  );

  secret-paths = h.check [ ] (
    _:
    h.ok "null: no secret" (unit.isSecretPath null)
    ++ h.ok "absolute, outside the store" (unit.isSecretPath "/var/lib/vllm-station-secrets/k")
    ++ h.ok "relative: refused" (!unit.isSecretPath "secrets/k")
    ++ h.ok "in the store: refused" (!unit.isSecretPath "${builtins.storeDir}/abc-k")
    ++ h.ok "a sibling of the store's name is not the store" (unit.isSecretPath "${builtins.storeDir}x/k")
  );

  # The watchdog and the pair's rejoin: root, the base sandbox, bounded restarts, declared by their modules.
  restarter-shape = h.check [ ] (
    _:
    h.eq "root: no DynamicUser, no User" [ (restarter.serviceConfig.DynamicUser or false) (restarter.serviceConfig ? User) ] [ false false ]
    ++ h.eq "the base sandbox" (removeAttrs restarter.serviceConfig [ "Type" "ExecStart" "ReadWritePaths" "Restart" "RestartSec" ]) (import ../../../modules/lib/hardening.nix).base
    ++ h.eq "ExecStart escaped" restarter.serviceConfig.ExecStart ''"/bin/station" "watchdog" "100%%"''
    ++ h.eq "bounded restarts" [ restarter.startLimitBurst restarter.startLimitIntervalSec restarter.serviceConfig.Restart restarter.serviceConfig.RestartSec ] [ 5 600 "on-failure" 10 ]
    ++ h.eq "the textfile directory where it exists" restarter.serviceConfig.ReadWritePaths [ "-/var/lib/prometheus-node-exporter-text" ]
    ++ h.eq "no textfile directory: none" bare.serviceConfig.ReadWritePaths [ ]
    ++ h.eq "ordering and requirements given" [ restarter.after restarter.requires restarter.wantedBy ] [ [ "vllm-station.service" ] [ "vllm-station-secrets@x.service" ] [ "multi-user.target" ] ]
    ++ h.eq "none given: none" [ bare.after bare.requires ] [ [ ] [ ] ]
    ++ h.eq "Type exec: a start that cannot exec fails the start" restarter.serviceConfig.Type "exec"
  );

  restarter-options = h.check [ ] (
    _:
    let
      o = unit.restarterOptions {
        interval = 30;
        intervalDescription = "i";
        verdicts = 3;
        verdictsDescription = "v";
      };
    in
    h.eq "defaults and descriptions: the module's" [ o.interval.default o.verdicts.default o.verdicts.description ] [ 30 3 "v" ]
    ++ h.eq "interval: 1 to 3600 s" (map o.interval.type.check [ 0 1 3600 3601 ]) [ false true true false ]
    ++ h.eq "verdicts: 1 to 100" (map o.verdicts.type.check [ 0 1 100 101 ]) [ false true true false ]
  );

  restart-args = h.check [ ] (
    _:
    h.eq "the serving unit, this system's systemctl" (unit.restartArgs { systemd = h.fake.systemd; }) [
      "--unit"
      "vllm-station.service"
      "--systemctl"
      "${h.fake.systemd}/bin/systemctl"
    ]
    ++ h.eq "a runtime: the container it kills" (lib.drop 4 (unit.restartArgs {
      systemd = h.fake.systemd;
      runtime = "/bin/docker";
    })) [
      "--runtime"
      "/bin/docker"
      "--container"
      "vllm-station"
    ]
  );
}
