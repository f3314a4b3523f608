# The artifacts that Nix writes and Python reads, per example, as plain data (tier nix_nixos,
# checks/test_contracts.py feeds them through the Python readers; checks/test_vllm_flags.py feeds
# `vllmArgs` through the real `vllm serve` argument parser). Builds nothing.
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
      # What the unit passes to `vllm serve`, exactly: the model first, then the flags.
      vllmArgs = map builtins.unsafeDiscardStringContext config.services.vllm-station.serve.vllmArgs;
    };
  # golive's settings file (`station golive --config`), from the flash example with golive on.
  goliveJson =
    let
      config =
        (evalExample [
          ../examples/flash-station.nix
          { services.vllm-station.golive.enable = true; }
        ] "x86_64-linux").config;
    in
    builtins.unsafeDiscardStringContext config.environment.etc."vllm-station/golive.json".text;
in
{
  inherit (contract)
    stampName
    preflightConfig
    pairEnvFile
    drainFlag
    stoppingFlag
    ;
  inherit goliveJson;
  # A revision's directory under a download entry's dir (vllm_station.checkpoint.revisions reads it).
  revisionDirExample = contract.revisionDir "/var/lib/vllm-station-models/m" "0123456789abcdef0123456789abcdef01234567";
  # What the flagship example serves: the pinned revision's directory, and the stamp its start needs.
  flashCheckpointDir = (evalExample [ ../examples/flash-station.nix ] "x86_64-linux").config.services.vllm-station.serve.checkpointDir;
  # The vLLM release the presets' flags were checked against.
  checkedWith = import ../../modules/presets/checked-with.nix;
  examples = lib.mapAttrs artifacts examples;
}
