# What checks/images' evaluations share: the flake's own `outputs` function called with a full nixpkgs
# tree (NIXOS_TREE) standing in for its `nixpkgs` input, and what "the serving configuration" renders.
# Builds nothing.
{ nixosTree }:
let
  lib =
    if nixosTree != "" then
      import (nixosTree + "/lib")
    else
      throw "NIXOS_TREE unset: set NIXOS_TREE=/path/to/a/full/nixpkgs";
  evalConfig = import (nixosTree + "/nixos/lib/eval-config.nix");
  inherit (import ../helpers.nix { inherit lib; }) evaluationOnly;

  # nixpkgs' own image machinery (`system.build.images`, NixOS 25.05+), or ./stand-in.nix (test-only).
  hasImageMachinery = builtins.pathExists (nixosTree + "/nixos/modules/image/images.nix");
  # A tree without doc/ (the offline one) cannot render the NixOS manual, which the installer
  # profile forces on: documentation stays off there, above the profile's mkForce.
  docPriority = if builtins.pathExists (nixosTree + "/doc") then 100 else 10;
  # Evaluation-only settings every NixOS evaluation of the tests shares (checks/nixos/eval.nix).
  testModules = [
    {
      nixpkgs.overlays = [ evaluationOnly ];
      documentation.enable = lib.mkOverride docPriority false;
      documentation.nixos.enable = lib.mkOverride docPriority false;
    }
  ] ++ lib.optional (!hasImageMachinery) ./stand-in.nix;

  # The flake's `nixpkgs` input, from the tree: `lib.nixosSystem` as nixpkgs' flake defines it
  # (eval-config with `system = null`), plus the test modules above.
  nixpkgs = {
    outPath = nixosTree;
    lib = lib.extend (
      _: _: {
        nixosSystem =
          args:
          evalConfig (
            {
              inherit lib;
              system = null;
            }
            // args
            // {
              modules = args.modules ++ testModules;
            }
          );
      }
    );
    legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
      system:
      import nixosTree {
        inherit system;
        overlays = [ evaluationOnly ];
      }
    );
  };
  flake = (import ../../flake.nix).outputs {
    self = flake;
    inherit nixpkgs;
  };

  plain = builtins.unsafeDiscardStringContext;
  show = builtins.toJSON;
in
{
  inherit
    lib
    nixpkgs
    flake
    hasImageMachinery
    plain
    ;
  machinery = if hasImageMachinery then "nixpkgs" else "stand-in";

  # What "the serving configuration" renders: every vllm-station unit and /etc file, as text, and
  # which vllm-station services are on. Store paths included: the same packages, or a difference.
  serving =
    config:
    let
      ours = lib.filterAttrs (name: _: lib.hasPrefix "vllm-station" name);
    in
    {
      units = lib.mapAttrs (_: u: plain u.text) (ours config.systemd.units);
      etc = lib.mapAttrs (_: e: plain (toString e.source)) (ours config.environment.etc);
      enabled = lib.mapAttrs (_: s: s.enable) (lib.filterAttrs (_: s: s ? enable) config.services.vllm-station);
      image = config.services.vllm-station.serve.image;
    };

  # The problems of `got` against `want` (two `serving` results), one per part that differs.
  servingProblems =
    want: got:
    lib.optional (want.units == { }) "the station renders no vllm-station unit"
    ++ lib.concatMap (
      part: lib.optional (want.${part} != got.${part}) "${part} differ: station ${show want.${part}}, variant ${show got.${part}}"
    ) [ "units" "etc" "enabled" "image" ];
}
