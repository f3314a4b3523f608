# VM tests (tier nix_vm): instantiated only here (no builds offline); real CI builds and runs them.
#
#   nix-instantiate --eval --strict --json checks/vm --argstr nixosTree "$NIXOS_TREE"
#
# Result: { passed = [ "<test>/<system>" … ]; failed = [ ]; drvPaths = { "<test>/<system>" = "/nix/store/….drv"; }; }
# (an evaluation error fails the whole run with Nix's message).
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  systems ? [ "x86_64-linux" ],
}:
let
  lib =
    if nixosTree != "" then
      import (nixosTree + "/lib")
    else
      throw "NIXOS_TREE unset: set NIXOS_TREE=/path/to/a/full/nixpkgs";

  inherit (import ../helpers.nix { inherit lib; }) evaluationOnly;

  tests = {
    serve = ./serve.nix;
    pair = ./pair.nix;
  };

  drvPaths = lib.listToAttrs (
    lib.concatMap (
      system:
      let
        pkgs = import nixosTree {
          inherit system;
          overlays = [ evaluationOnly ];
          config = { };
        };
      in
      lib.mapAttrsToList (
        name: file: lib.nameValuePair "${name}/${system}" (import file { inherit pkgs; }).drvPath
      ) tests
    ) systems
  );
in
{
  passed = lib.attrNames (lib.filterAttrs (_: lib.hasSuffix ".drv") drvPaths);
  failed = lib.mapAttrsToList (name: drv: {
    inherit name;
    message = "not a derivation path: ${drv}";
  }) (lib.filterAttrs (_: drv: !lib.hasSuffix ".drv" drv) drvPaths);
  inherit drvPaths;
}
