# The install path evaluated offline (tier nix_nixos): install/flake.nix's own `outputs` function,
# called with the flake (./common.nix) for `vllm-station`, the tree for `nixpkgs` and a disko tree
# (DISKO_TREE, the revision install/flake.lock pins) for `disko`. Builds nothing.
#
# Called by ./default.nix with `--argstr diskoTree "$DISKO_TREE"`.
#
# Result: { scripts = { diskoScript = drvPath; formatScript; mountScript; }; fileSystems; devices;
#           failedAssertions; problems = [ … ]; }
{
  common, # ./common.nix
  diskoTree,
  station,
  want, # the station's own serving configuration (common.serving)
}:
let
  inherit (common)
    lib
    nixpkgs
    flake
    plain
    serving
    servingProblems
    ;
  contract = import ../../modules/lib/contract.nix;

  disko =
    if diskoTree == "" then
      throw "DISKO_TREE unset"
    else
      (import (diskoTree + "/flake.nix")).outputs {
        self = disko;
        inherit nixpkgs;
      };
  install = (import ../../install/flake.nix).outputs {
    self = install;
    vllm-station = flake;
    inherit nixpkgs disko;
  };

  target = install.nixosConfigurations.${station}.config;
  fs = lib.mapAttrs (_: f: { inherit (f) device fsType options; }) (
    lib.filterAttrs (
      mount: _:
      lib.elem mount [
        "/"
        "/boot"
        contract.modelsRoot
      ]
    ) target.fileSystems
  );
in
{
  scripts = lib.genAttrs [ "diskoScript" "formatScript" "mountScript" ] (
    name: plain target.system.build.${name}.drvPath
  );
  fileSystems = fs;
  modelsRoot = contract.modelsRoot;
  # the layout as disko's own configuration output holds it (what `disko --flake` reads)
  diskoDevices = lib.mapAttrs (_: d: d.device) install.diskoConfigurations.${station}.disko.devices.disk;
  devices = lib.mapAttrs (_: d: d.device) target.disko.devices.disk;
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) target.assertions);
  bootLoader = {
    systemd-boot = target.boot.loader.systemd-boot.enable;
    nvidiaOpen = target.hardware.nvidia.open;
  };
  problems = servingProblems want (serving target);
}
