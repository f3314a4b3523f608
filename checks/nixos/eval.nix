# One example station evaluated as a full NixOS system against a full nixpkgs tree (NIXOS_TREE).
# Shared by the NixOS tier (./default.nix) and the system tier (../system/render.nix). Builds nothing.
{ nixosTree }:
let
  lib =
    if nixosTree != "" then
      import (nixosTree + "/lib")
    else
      throw "NIXOS_TREE unset: set NIXOS_TREE=/path/to/a/full/nixpkgs";
  evalConfig = import (nixosTree + "/nixos/lib/eval-config.nix");

  inherit (import ../helpers.nix { inherit lib; }) evaluationOnly;
in
{
  inherit lib;
  # modules: the example's modules (its file, and any test-only definitions); system: the platform.
  evalExample =
    modules: system:
    evalConfig {
      inherit lib;
      system = null;
      modules = [ ../../modules ] ++ modules ++ [
        {
          nixpkgs.hostPlatform = system;
          nixpkgs.overlays = [ evaluationOnly ];
          # The offline tree has no doc/ (the NixOS manual): leave documentation out.
          documentation.enable = false;
          documentation.nixos.enable = false;
        }
      ];
    };
}
