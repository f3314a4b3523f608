# checks/day2/station.nix with a new build of the `station` tools (another version, one more file: a new
# store path), as a release of this project would bring: the day2 tier's "new station package" switch.
{ lib, pkgs, ... }:
{
  imports = [ ./station.nix ];
  services.vllm-station.package = lib.mkForce (
    (pkgs.callPackage ../../pkgs/station-tools/package.nix { }).overridePythonAttrs (old: {
      version = "${old.version}.post1";
      postInstall = (old.postInstall or "") + "\necho changed > $out/changed\n";
    })
  );
}
