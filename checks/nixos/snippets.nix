# Every ```nix block of README.md and docs/*.md, evaluated as a NixOS module of a full system
# (tier nix_nixos, checks/test_doc_snippets.py). The test writes each block to a file, its
# placeholders filled (see the test), and passes the files here. Builds nothing.
#
# Result: { "<file>" = { failed = [ assertion messages ]; missingUnits = [ … ]; units = [ … ]; }; }
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  files, # JSON list of absolute paths
  system ? "x86_64-linux",
}:
let
  inherit (import ./eval.nix { inherit nixosTree; }) lib evalExample;

  # What a snippet leaves out because it is part of any system: a bootable minimum and the driver.
  minimum = {
    boot.loader.grub.enable = false;
    boot.loader.systemd-boot.enable = true;
    fileSystems."/" = {
      device = "/dev/disk/by-label/nixos";
      fsType = "ext4";
    };
    nixpkgs.config.allowUnfree = true;
    system.stateVersion = "24.11";
  };

  check =
    file:
    let
      config = (evalExample [ (import file) minimum ] system).config;
      ours = lib.filterAttrs (name: u: lib.hasPrefix "vllm-station" name && u.enable) config.systemd.services;
      # Units ours want or order after that the system does not define (a download unit that is not rendered).
      wanted = lib.unique (
        lib.concatMap (u: lib.filter (lib.hasPrefix "vllm-station") ((u.wants or [ ]) ++ (u.after or [ ]))) (
          lib.attrValues ours
        )
      );
      defined = map (n: "${n}.service") (lib.attrNames ours);
      # an instance (`vllm-station-secrets@vllm-station.service`) is defined by its template
      instanceOf = u: builtins.match "(.*@)[^@]*[.]service" u;
      isDefined = u: lib.elem u defined || (instanceOf u != null && lib.elem "${lib.head (instanceOf u)}.service" defined);
    in
    {
      failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
      missingUnits = lib.filter (u: !isDefined u) wanted;
      units = lib.attrNames ours;
      # Force the unit texts: a type error or a throw in any rendered unit fails the snippet.
      texts = lib.mapAttrsToList (
        name: _: builtins.stringLength config.systemd.units."${name}.service".text
      ) ours;
    };
in
lib.listToAttrs (map (file: lib.nameValuePair file (check file)) (builtins.fromJSON files))
