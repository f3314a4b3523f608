# The secret files the vllm-station units load: where they live by default, and a check before each
# unit loads them. Enabled by what the other modules declare; it has no `enable` of its own.
#
# What this module owns:
#   systemd.tmpfiles   `secretsDir` (/var/lib/vllm-station-secrets), root-only (0700), on the persistent
#                      disk: files there outlive a reboot, unlike /run (a tmpfs).
#   /etc/vllm-station/secrets.json   which unit loads which file for which option (`secretsManifest`)
#   vllm-station-secrets@.service    `station secrets check --unit %i`: a oneshot each consumer requires
#                      and starts after (`contract.secretsCheckUnit`). systemd resolves `LoadCredential=`
#                      before any command of a unit runs, so a check inside the consumer comes too late
#                      (the unit fails with 243/CREDENTIALS first); this one fails the consumer's start with a
#                      message that names the option and the file. It does not stay active
#                      (no RemainAfterExit): every start of a consumer — a restart, systemd's own restarts —
#                      checks again, and a switch never restarts a consumer through it.
#
# A consumer module declares `services.vllm-station.secrets.units.<its unit> = [ { option; path; } ]` and
# adds `requires`/`after` on `contract.secretsCheckUnit "<its unit>"` to its own unit; this module edits
# no unit but its own.
#
# sops-nix and agenix write their files at activation (before any unit starts, at boot and at a switch)
# or, with systemd-sysusers, in their own units (`sops-install-secrets`, `agenix-install-secrets`), which
# the check then starts after. docs/secrets.md says how to point the options at their files.
{
  config,
  lib,
  utils,
  ...
}:
let
  inherit (lib) mkOption types;
  cfg = config.services.vllm-station.secrets;
  contract = import ./lib/contract.nix;
  hardening = import ./lib/hardening.nix;
  station = lib.getExe config.services.vllm-station.package;

  # The units of the secret managers NixOS users run, when they install secrets as units (with
  # systemd-sysusers or userborn): the check starts after them. Without, they run at activation.
  secretManagerUnits = lib.filter (u: config.systemd.services ? ${u}) [
    "sops-install-secrets"
    "agenix-install-secrets"
  ];

  manifest = builtins.toJSON {
    units = lib.mapAttrs (_: map (s: { inherit (s) option path kind; })) cfg.units;
  };
in
{
  options.services.vllm-station.secrets.units = mkOption {
    internal = true;
    type = types.attrsOf (
      types.listOf (
        types.submodule {
          options = {
            option = mkOption {
              type = types.str;
              description = "The option that names the file (`services.vllm-station.serve.apiKeyFile`).";
            };
            path = mkOption {
              type = types.str;
              description = "The file (or directory) the unit loads.";
            };
            kind = mkOption {
              type = types.enum [
                "file"
                "directory"
              ];
              default = "file";
              description = "A file, or a directory of files (`LoadCredential=` of a directory).";
            };
          };
        }
      )
    );
    default = { };
    description = ''
      The secret files each unit loads, by unit name (without `.service`), set by the modules that own
      those units. Each such unit requires `vllm-station-secrets@<unit>.service`, which checks them.
    '';
  };

  config = lib.mkIf (cfg.units != { }) {
    systemd.tmpfiles.rules = [ "d ${contract.secretsDir} 0700 root root -" ];

    environment.etc."${lib.removePrefix "/etc/" contract.secretsManifest}".text = manifest;

    systemd.services."${contract.unit}-secrets@" = {
      description = "Secret files of %i: each in place before it loads them";
      after = map (u: "${u}.service") secretManagerUnits;
      serviceConfig = hardening.base // {
        Type = "oneshot";
        # root (no DynamicUser) able to open any file, as systemd is when it loads them: a secret
        # manager may give a file to another owner (sops-nix's `owner`), mode 0400.
        CapabilityBoundingSet = [ "CAP_DAC_READ_SEARCH" ];
        PrivateUsers = false; # a user namespace would leave other owners' files unreadable even so
        ExecStart = "${utils.escapeSystemdExecArgs [
          station
          "secrets"
          "check"
          "--manifest"
          contract.secretsManifest
        ]} --unit %i";
        # The files may be anywhere a secret manager writes them (under /root too): read-only, not hidden.
        ProtectHome = "read-only";
        # no network: the check opens local files only
        RestrictAddressFamilies = [ "AF_UNIX" ];
      };
    };
  };
}
