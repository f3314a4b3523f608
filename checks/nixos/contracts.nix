# The artifacts that Nix writes and Python reads, per example, as plain data (tier nix_nixos,
# checks/test_contracts.py feeds them through the Python readers). Builds nothing.
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
}:
let
  inherit (import ./eval.nix { inherit nixosTree; }) lib evalExample;
  contract = import ../../modules/lib/contract.nix;
  examples = {
    flash-station = "x86_64-linux";
    cpu-station = "x86_64-linux";
    station-a = "aarch64-linux";
    station-b = "aarch64-linux";
  };
  etcPath = path: lib.removePrefix "/etc/" path;
  artifacts =
    name: system:
    let
      config = (evalExample [ (../examples + "/${name}.nix") ] system).config;
      etc = config.environment.etc;
    in
    {
      preflightJson = builtins.unsafeDiscardStringContext etc.${etcPath contract.preflightConfig}.text;
      pairEnv = if etc ? ${etcPath contract.pairEnvFile} then etc.${etcPath contract.pairEnvFile}.text else null;
    };
in
{
  inherit (contract) stampName preflightConfig pairEnvFile;
  examples = lib.mapAttrs artifacts examples;
}
