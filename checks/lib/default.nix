# Module tests (tier nix_lib): lib.evalModules over modules/ with option stubs for the NixOS
# options the modules set; needs only a nixpkgs lib tree.
#
#   nix-instantiate --eval --strict --json checks/lib --argstr nixpkgsLib "$NIXPKGS_LIB"
#   nix-instantiate --eval --strict --json checks/lib --argstr nixpkgsLib "$NIXPKGS_LIB" \
#     --argstr only serve/defaults --show-trace
# (Nix auto-calls the entry only when some --arg/--argstr is given; NIXPKGS_LIB from the environment
# is the fallback for nixpkgsLib.)
#
# Every file in ./tests is `{ lib, h }: { <name> = <test>; … }` (see ./harness.nix for the test
# shapes); its tests are named "<file>/<name>". Result: { passed = [ names ]; failed = [ { name; message; } ]; }.
# `only` evaluates one test without catching its errors, to see the trace; `--argstr output names`
# lists the test names without running them.
{
  nixpkgsLib ? builtins.getEnv "NIXPKGS_LIB",
  lib ?
    if nixpkgsLib != "" then
      import (nixpkgsLib + "/lib")
    else
      throw "NIXPKGS_LIB unset: set NIXPKGS_LIB=/path/to/nixpkgs-lib (a tree with lib/) or pass --arg lib",
  only ? null,
  output ? "results", # or "names": the test names, without running them
}:
let
  h = import ./harness.nix { inherit lib; };

  files = lib.filterAttrs (file: kind: kind == "regular" && lib.hasSuffix ".nix" file) (
    builtins.readDir ./tests
  );
  tests = lib.concatMapAttrs (
    file: _:
    lib.mapAttrs' (
      name: test: lib.nameValuePair "${lib.removeSuffix ".nix" file}/${name}" test
    ) (import (./tests + "/${file}") { inherit lib h; })
  ) files;

  results = lib.mapAttrs (name: test: h.run name test) tests;
in
if output == "names" then
  lib.attrNames tests
else if only != null then
  h.runUncaught only (tests.${only} or (throw "no test named ${only}; tests: ${toString (lib.attrNames tests)}"))
else
  {
    passed = lib.attrNames (lib.filterAttrs (_: r: r == [ ]) results);
    failed = lib.mapAttrsToList (name: problems: {
      inherit name;
      message = lib.concatStringsSep "\n" problems;
    }) (lib.filterAttrs (_: r: r != [ ]) results);
  }
