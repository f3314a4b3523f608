# modules/lib/unit.nix: the one helper for credentials (`LoadCredential=`, `%d/…` arguments), vLLM's key
# in a unit that sends it, and the test of a secret's path.
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
}
