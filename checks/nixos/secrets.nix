# The station's secrets from the secret managers NixOS users run (tier nix_nixos,
# checks/test_nix_secrets.py): the flagship example (flash-station, with monitoring and golive) with
# its secrets from sops-nix or agenix, each installing them at activation (their default) or in their
# own unit (with systemd-sysusers), evaluated as a full NixOS system with their NixOS module. Builds
# nothing, decrypts nothing.
#
#   nix-instantiate --eval --strict --json checks/nixos/secrets.nix --argstr nixosTree "$NIXOS_TREE" \
#     --argstr sopsTree "$SOPS_NIX_TREE" --argstr agenixTree "$AGENIX_TREE"
#
# Result: { contract = { secretsDir; secretsManifest; }; variants.<name> = { units; manifest;
#   activationScripts; managerUnit; tmpfiles; failed; }; } (an empty tree string leaves its variants out)
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  sopsTree ? "",
  agenixTree ? "",
  system ? "x86_64-linux",
}:
let
  inherit (import ./eval.nix { inherit nixosTree; }) lib evalExample;
  contract = import ../../modules/lib/contract.nix;
  noContext = builtins.unsafeDiscardStringContext;

  # The station with every unit that loads the station's key: serving, gateway keys, probe, watchdog, golive.
  station = {
    services.vllm-station.monitoring.enable = true;
    services.vllm-station.golive.enable = true;
  };

  # The options pointed at the secret manager's files, the way docs/secrets.md says.
  sops =
    { config, ... }:
    {
      imports = [ (sopsTree + "/modules/sops") ];
      sops = {
        defaultSopsFile = "/etc/station-secrets.yaml"; # a path on the station: nothing read here
        validateSopsFiles = false;
        age.keyFile = "/var/lib/sops-nix/key.txt";
        secrets = {
          vllm-api-key = { };
          gateway-alice = { };
          gateway-ops = { };
          hf-token = { };
        };
      };
      services.vllm-station.serve.apiKeyFile = lib.mkForce config.sops.secrets.vllm-api-key.path;
      services.vllm-station.gateway.keys.alice.file = lib.mkForce config.sops.secrets.gateway-alice.path;
      services.vllm-station.gateway.keys.ops.file = lib.mkForce config.sops.secrets.gateway-ops.path;
      services.vllm-station.download.models.glm53-flash.tokenFile = config.sops.secrets.hf-token.path;
    };
  agenix =
    { config, ... }:
    {
      imports = [ (agenixTree + "/modules/age.nix") ];
      age.identityPaths = [ "/etc/ssh/ssh_host_ed25519_key" ];
      age.secrets = {
        vllm-api-key.file = "/etc/station-secrets/vllm-api-key.age";
        gateway-alice.file = "/etc/station-secrets/gateway-alice.age";
        gateway-ops.file = "/etc/station-secrets/gateway-ops.age";
        hf-token.file = "/etc/station-secrets/hf-token.age";
      };
      services.vllm-station.serve.apiKeyFile = lib.mkForce config.age.secrets.vllm-api-key.path;
      services.vllm-station.gateway.keys.alice.file = lib.mkForce config.age.secrets.gateway-alice.path;
      services.vllm-station.gateway.keys.ops.file = lib.mkForce config.age.secrets.gateway-ops.path;
      services.vllm-station.download.models.glm53-flash.tokenFile = config.age.secrets.hf-token.path;
    };
  # Their own units instead of activation scripts: what both do with systemd-sysusers.
  sysusers = {
    systemd.sysusers.enable = true;
    users.mutableUsers = false;
    users.allowNoPasswordLogin = true; # a test system: no password asked for
  };

  ours = [
    "vllm-station.service"
    "vllm-station-gateway-keys.service"
    "vllm-station-probe.service"
    "vllm-station-watchdog.service"
    "vllm-station-golive.service"
    "vllm-station-download-glm53-flash.service"
    "vllm-station-secrets@.service"
  ];

  render =
    modules: managerUnit:
    let
      config = (evalExample ([ ../examples/flash-station.nix station ] ++ modules) system).config;
    in
    {
      units = lib.genAttrs ours (u: noContext config.systemd.units.${u}.text);
      manifest = noContext config.environment.etc.${lib.removePrefix "/etc/" contract.secretsManifest}.text;
      activationScripts = lib.attrNames config.system.activationScripts;
      managerUnit =
        if config.systemd.services ? ${managerUnit} then
          {
            inherit (config.systemd.services.${managerUnit}) wantedBy before;
          }
        else
          null;
      tmpfiles = lib.filter (lib.hasInfix contract.secretsDir) config.systemd.tmpfiles.rules;
      failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
    };
in
{
  contract = {
    inherit (contract) secretsDir secretsManifest;
  };
  variants =
    lib.optionalAttrs (sopsTree != "") {
      sops-activation = render [ sops ] "sops-install-secrets";
      sops-unit = render [
        sops
        sysusers
      ] "sops-install-secrets";
    }
    // lib.optionalAttrs (agenixTree != "") {
      agenix-activation = render [ agenix ] "agenix-install-secrets";
      agenix-unit = render [
        agenix
        sysusers
      ] "agenix-install-secrets";
    };
}
