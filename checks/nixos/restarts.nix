# What `nixos-rebuild switch` restarts (tier nix_nixos, checks/test_nix_restarts.py): the flagship
# example (flash-station, with golive) evaluated as it is and with one change at a time. Switch restarts
# a unit whose text changed (X-Restart-Triggers is part of the text); the test compares the texts.
# Builds nothing.
#
#   nix-instantiate --eval --strict --json checks/nixos/restarts.nix --argstr nixosTree "$NIXOS_TREE"
#
# Result: { "<change>" = { serving; golive; servingTriggers; goliveTriggers; toolsLink; package;
#                          prefetchUnit (null without one); download; }; }
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  system ? "x86_64-linux",
}:
let
  inherit (import ./eval.nix { inherit nixosTree; }) lib evalExample;

  changes = {
    as-is = { };
    # Another build of the tools (another version, one more file): a new store path.
    tools = (
      { pkgs, ... }:
      {
        services.vllm-station.package = lib.mkForce (
          (pkgs.callPackage ../../pkgs/station-tools/package.nix { }).overridePythonAttrs (old: {
            version = "${old.version}.post1";
            postInstall = (old.postInstall or "") + "\necho changed > $out/changed\n";
          })
        );
      }
    );
    image.services.vllm-station.serve.image = lib.mkForce "vllm/vllm-openai@sha256:${lib.strings.replicate 64 "b"}";
    flag.services.vllm-station.serve.maxNumSeqs = lib.mkForce 128;
    revision.services.vllm-station.download.models.glm53-flash.revision = lib.mkForce "0123456789abcdef0123456789abcdef01234567";
    # The first half of a checkpoint upgrade: the next revision fetched beside the served one.
    prefetch.services.vllm-station.download.models.glm53-flash.prefetch = [ "0123456789abcdef0123456789abcdef01234567" ];
    model.services.vllm-station.serve.model = lib.mkForce "/var/lib/vllm-station-models/glm53-flash-b";
    environment.services.vllm-station.serve.environment.NCCL_DEBUG = "INFO";
    devices.services.vllm-station.serve.gpuDevices = lib.mkForce [ "nvidia.com/gpu=0" ];
  };

  noContext = builtins.unsafeDiscardStringContext;
  render =
    change:
    let
      config =
        (evalExample [
          ../examples/flash-station.nix
          { services.vllm-station.golive.enable = true; }
          change
        ] system).config;
      text = unit: noContext config.systemd.units.${unit}.text;
      triggers = unit: map noContext config.systemd.services.${unit}.restartTriggers;
    in
    {
      serving = text "vllm-station.service";
      golive = text "vllm-station-golive.service";
      servingTriggers = triggers "vllm-station";
      goliveTriggers = triggers "vllm-station-golive";
      toolsLink = map noContext (lib.filter (lib.hasInfix "/run/vllm-station-tools") config.systemd.tmpfiles.rules);
      package = noContext config.services.vllm-station.package.outPath;
      prefetchUnit =
        if config.systemd.units ? "vllm-station-prefetch-glm53-flash.service" then
          text "vllm-station-prefetch-glm53-flash.service"
        else
          null;
      download = text "vllm-station-download-glm53-flash.service";
    };
in
lib.mapAttrs (_: render) changes
