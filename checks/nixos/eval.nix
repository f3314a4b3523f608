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

  # What the nixpkgs of flake.lock (26.05) requires and the offline tree (24.11) does not check, stated as
  # assertions so that the examples and the documentation's snippets fail here as they would there.
  # Grafana: 26.05 dropped the built-in `security.secret_key` (24.11's default, below), so a
  # configuration that leaves it unset no longer evaluates.
  pinnedRequirements =
    { config, ... }:
    {
      assertions = [
        {
          assertion =
            !config.services.grafana.enable || config.services.grafana.settings.security.secret_key != "SW2YcwTIb9zpOOhoPsMm";
          message = "services.grafana.settings.security.secret_key is unset: the nixpkgs of flake.lock has no default for it; set it to a file outside the Nix store (\"$__file{/var/lib/grafana/secret-key}\").";
        }
      ];
    };
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
        pinnedRequirements
      ];
    };
}
