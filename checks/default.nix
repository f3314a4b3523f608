# The flake's `checks.<system>`: the package, its pytest suite (`passthru.tests.pytest`: the runtime
# package's source holds no tests, so a changed test rebuilds no unit's `station`), the module tests,
# the example stations as whole NixOS systems, and the VM tests. `nix flake check` in CI with KVM runs
# them all; here (offline) scripts/check evaluates the same files through checks/lib, checks/nixos
# and checks/vm.
{
  self,
  pkgs,
  lib,
  system,
}:
let
  moduleTests = import ./lib { inherit lib; };
  moduleTestsPassed =
    if moduleTests.failed == [ ] then
      pkgs.runCommand "vllm-station-module-tests" { } ''
        echo "${toString (lib.length moduleTests.passed)} module tests passed" > $out
      ''
    else
      throw "vllm-station module tests failed: ${builtins.toJSON moduleTests.failed}";

  example =
    file:
    (lib.nixosSystem {
      modules = [
        self.nixosModules.default
        file
        { nixpkgs.hostPlatform = system; }
      ];
    }).config.system.build.toplevel;
in
{
  package = self.packages.${system}.default;
  package-tests = self.packages.${system}.default.passthru.tests.pytest;
  module-tests = moduleTestsPassed;
  flash-station = example ./examples/flash-station.nix;
  station-a = example ./examples/station-a.nix;
  station-b = example ./examples/station-b.nix;
  vm-serve = import ./vm/serve.nix { inherit pkgs; };
  vm-pair = import ./vm/pair.nix { inherit pkgs; };
}
