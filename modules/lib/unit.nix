# How a vllm-station unit loads secret files, written once: systemd credentials (`LoadCredential=`,
# which systemd reads as root at each start into the unit's private credentials directory, `%d`), the
# Exec arguments that name them, and the wiring of vLLM's own key (`serve.apiKeyFile`) into a unit that
# talks to vLLM. Modules call these; none writes `%d/` or `isSecretPath` itself
# (checks/test_module_seams.py keeps it so). Also the shape of a unit that restarts the serving unit
# through systemd (`restarter`: the watchdog's, the pair worker's rejoin loop), written once.
#
#   unit = import ./lib/unit.nix { inherit lib utils; };
#   key = unit.vllmApiKey serve "vllm-station-probe";
#   ExecStart = unit.execLine ([ station "probe" … ] ++ key.args);   # … "--api-key-file" "%d/api-key"
#   LoadCredential = unit.loadCredential key.credentials;          # [ "api-key:/var/lib/…" ]
{ lib, utils }:
let
  contract = import ./contract.nix;
  hardening = import ./hardening.nix;

  # What may stand around `%d` in an argument quoted by hand: no quote, backslash, `$`, `%` or space
  # to escape (credential names and gateway key names are checked by their modules too).
  plain = text: builtins.match "[A-Za-z0-9_.=/:+-]*" text != null;
in
rec {
  # A path a secret may live at: absolute, outside the world-readable Nix store (null: no secret).
  isSecretPath =
    path:
    path == null
    || (
      builtins.substring 0 1 path == "/"
      && builtins.substring 0 (builtins.stringLength builtins.storeDir + 1) path != "${builtins.storeDir}/"
    );

  # One credential: `file` (a file, or a directory: then one credential `<name>_<file name>` each)
  # loaded as `name` into the unit's credentials directory.
  credential = name: file: { inherit name file; };

  # `LoadCredential=` for a list of credentials, in order (an empty list renders no line).
  loadCredential = map (c: "${c.name}:${c.file}");

  # An Exec argument that names the credentials directory: `<prefix>%d/<name>` ("VLLM_API_KEY=%d/api-key",
  # "alice=%d/key-alice", "%d/" for the directory itself). `execLine` quotes it, once, and keeps the `%`
  # single: systemd expands the specifier (utils.escapeSystemdExecArgs would write `%%d`, a literal).
  credentialArg =
    {
      name ? "",
      prefix ? "",
    }:
    if plain name && plain prefix then
      { credentialArg = "${prefix}%d/${name}"; }
    else
      throw "modules/lib/unit.nix: credential argument `${prefix}%d/${name}` needs quoting beyond a plain name";

  # An Exec line from a list of arguments: plain ones escaped (utils.escapeSystemdExecArgs), credential
  # arguments (`credentialArg`) in double quotes with their specifier. The same text as escaping the
  # whole list when no credential argument is in it.
  execLine = lib.concatMapStringsSep " " (
    arg: if builtins.isAttrs arg then "\"${arg.credentialArg}\"" else utils.escapeSystemdExecArgs [ arg ]
  );

  # vLLM's own key (`services.vllm-station.serve.apiKeyFile`) for the unit `unitName` that sends it to
  # vLLM: each part is empty when no key is set.
  #   args         `--api-key-file %d/api-key` for a `station` verb (put them in `execLine`)
  #   credentials  the key file as credential `api-key` (`loadCredential`)
  #   secretFiles  the key file as the secrets check lists it (option, path)
  #   secrets      the unit's entry of `services.vllm-station.secrets.units` (modules/secrets.nix)
  #   checkUnits   the unit's secrets check, for its `after` and `requires`: a missing key file fails
  #                the start naming serve.apiKeyFile and the file, not with 243/CREDENTIALS
  vllmApiKey =
    serve: unitName:
    let
      on = serve.apiKeyFile != null;
      apiKey = "api-key";
      secretFiles = lib.optional on {
        option = "services.vllm-station.serve.apiKeyFile";
        path = serve.apiKeyFile;
      };
    in
    {
      args = lib.optionals on [
        "--api-key-file"
        (credentialArg { name = apiKey; })
      ];
      # `VLLM_API_KEY=%d/api-key`: `station exec --secret-env`'s form (the serving unit).
      envArg = credentialArg {
        name = apiKey;
        prefix = "VLLM_API_KEY=";
      };
      credentials = lib.optional on (credential apiKey serve.apiKeyFile);
      inherit secretFiles;
      secrets = lib.optionalAttrs on { ${unitName} = secretFiles; };
      checkUnits = lib.optionals on [ (contract.secretsCheckUnit unitName) ];
    };

  # A long-running unit that restarts the serving unit through systemd when its verdict says so (the
  # watchdog's wedge, the pair worker's rejoin): the module that owns it declares it
  # (`systemd.services.<its name> = unit.restarter { … }`), this is its shape, written once.
  #   execStart     the `station <verb>` argument list (escaped here)
  #   textfileDir   writable where it exists (`-`: the directory comes with monitoring), or null
  #   after, requires  ordering and requirements besides the defaults
  # root (no DynamicUser): restarting a unit is a call to the system manager that only root may make. A
  # loop that keeps failing stays failed (node_exporter shows it) instead of looping: 5 starts in 10 min.
  restarter =
    {
      description,
      execStart,
      textfileDir ? null,
      after ? [ ],
      requires ? [ ],
    }:
    {
      inherit description after requires;
      wantedBy = [ "multi-user.target" ];
      startLimitBurst = 5;
      startLimitIntervalSec = 600;
      serviceConfig = hardening.for [ ] // {
        Type = "exec";
        ExecStart = utils.escapeSystemdExecArgs execStart;
        ReadWritePaths = lib.optional (textfileDir != null) "-${textfileDir}";
        Restart = "on-failure";
        RestartSec = 10;
      };
    };

  # Its cadence as options, one type and range each (the watchdog's `interval` and `wedgeVerdicts`, the
  # rejoin loop's `interval` and `verdicts`): seconds between its looks, and the verdicts in a row that
  # restart; the defaults and descriptions are the module's.
  restarterOptions =
    {
      interval,
      verdicts,
      intervalDescription,
      verdictsDescription,
    }:
    {
      interval = lib.mkOption {
        type = lib.types.ints.between 1 3600;
        default = interval;
        description = intervalDescription;
      };
      verdicts = lib.mkOption {
        type = lib.types.ints.between 1 100;
        default = verdicts;
        description = verdictsDescription;
      };
    };

  # How such a unit restarts the serving unit (its `station` verb's arguments): the unit, this system's
  # systemctl, and with a container runtime the container it kills once systemd has the restart (a
  # graceful stop would wait out vLLM's --shutdown-timeout for requests a stuck engine never finishes).
  restartArgs =
    {
      systemd,
      runtime ? null,
    }:
    [
      "--unit"
      "${contract.unit}.service"
      "--systemctl"
      (lib.getExe' systemd "systemctl")
    ]
    ++ lib.optionals (runtime != null) [
      "--runtime"
      runtime
      "--container"
      contract.unit
    ];
}
