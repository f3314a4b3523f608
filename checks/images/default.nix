# The release path of one station, evaluated offline (tier nix_nixos): its images,
# `packages.aarch64-linux.<station>-<format>` as the flake's own `outputs` function defines them
# (./common.nix), and its install target (./install.nix) when a disko tree is given. One process per
# station: the station's own evaluation is shared by its images and its install target. Builds nothing.
#
#   nix-instantiate --eval --strict --json checks/images --argstr nixosTree "$NIXOS_TREE" \
#     --argstr station station-a [--argstr diskoTree "$DISKO_TREE"]
#   … --argstr output names     # the image output names, without evaluating any system
#
# The tree's own image machinery (`system.build.images`, NixOS 25.05+) is used when it has one; older
# trees get ./stand-in.nix (test-only): `machinery` in the result says which one evaluated.
#
# Result: { machinery; images = { "<station>-<format>" = { drvPath; filePath; format; system; units;
#           problems = [ … ]; … }; }; install = null or ./install.nix's result; }
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  diskoTree ? "",
  station ? "",
  # nixpkgs option paths the repository uses (a JSON list): each one's status in this tree, `ok` (an
  # option, or a set of them) or why not (absent, a hidden renamed or removed option's alias)
  optionUses ? "[]",
  output ? "results",
}:
let
  common = import ./common.nix { inherit nixosTree; };
  inherit (common)
    lib
    flake
    machinery
    plain
    serving
    servingProblems
    ;

  # Image outputs: the aarch64 packages named "<station>-<format>" after a nixosConfiguration
  # (longest station name first, so "station-a-…" is not read as a station "station").
  stations = lib.sort (a: b: lib.stringLength a > lib.stringLength b) (lib.attrNames flake.nixosConfigurations);
  stationOf = name: lib.findFirst (s: lib.hasPrefix "${s}-" name) null stations;
  imageNames = lib.filter (name: stationOf name != null) (lib.attrNames flake.packages.aarch64-linux);

  base = flake.nixosConfigurations.${station}.config;
  want = serving base;

  # Walk a dotted path through the options: an attrsOf-submodule option (systemd.services) takes the next
  # component as an attribute name, a submodule option descends, any other option ends the walk (what
  # follows is inside its value: sysctl keys, /etc entries).
  optionStatus =
    path:
    let
      walk =
        opts: names:
        if names == [ ] then
          opts
        else if opts == null then
          null
        else if lib.isOption opts then
          let
            sub = opts.type.getSubOptions [ ];
            named = lib.elem opts.type.name [
              "attrsOf"
              "lazyAttrsOf"
            ];
          in
          if sub == { } then
            opts
          else if named then
            walk sub (lib.drop 1 names)
          else
            walk sub names
        else
          walk (opts.${lib.head names} or null) (lib.tail names);
      found = walk flake.nixosConfigurations.${station}.options (lib.splitString "." path);
    in
    if found == null then
      "absent"
    else if !(lib.isOption found) then
      (if lib.isAttrs found then "ok" else "not an option")
    else if (found.visible or true) == false then
      "hidden (a renamed or removed option's alias)"
    else
      "ok";

  check =
    name:
    let
      format = lib.removePrefix "${station}-" name;
      drv = flake.packages.aarch64-linux.${name};
      inside = drv.passthru.config;
      got = serving inside;
    in
    {
      inherit format;
      drvPath = plain drv.drvPath;
      filePath = drv.passthru.filePath;
      system = inside.nixpkgs.hostPlatform.system;
      units = lib.attrNames got.units;
      serviceWanted = lib.elem "multi-user.target" (inside.systemd.services.vllm-station.wantedBy or [ ]);
      # the image is its own system (image media, not the station's disks)
      rootDevice = inside.fileSystems."/".device or null;
      stationRootDevice = base.fileSystems."/".device or null;
      failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) inside.assertions);
      problems = servingProblems want got;
    };
in
if output == "names" then
  imageNames
else if !(flake.nixosConfigurations ? ${station}) then
  throw "checks/images: --argstr station <one of ${builtins.toJSON (lib.attrNames flake.nixosConfigurations)}>"
else
  {
    inherit machinery;
    options = lib.genAttrs (builtins.fromJSON optionUses) optionStatus;
    images = lib.genAttrs (lib.filter (name: stationOf name == station) imageNames) check;
    install =
      if diskoTree == "" then
        null
      else
        import ./install.nix {
          inherit common diskoTree station want;
        };
  }
