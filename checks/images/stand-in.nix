# Test-only stand-in for nixpkgs' image machinery (`image.modules` and `system.build.images`, in
# nixpkgs since NixOS 25.05), for full trees that predate it (the 24.11-era offline tree). Never in
# modules/: the flake uses the locked nixpkgs' own machinery; checks/images/default.nix adds this
# module only when the tree has no nixos/modules/image/images.nix.
#
# It mirrors the contract the flake relies on, and only that: every `image.modules.<format>` is the
# station's configuration extended with that one module (extendModules), its
# `system.build.image` is the image, and `system.build.images.<format>` carries the variant's
# `config` in `passthru` (so tests can compare the serving configuration inside the image).
{
  config,
  lib,
  extendModules,
  modulesPath,
  ...
}:
let
  inherit (lib) mkOption types;
in
{
  options = {
    image.modules = mkOption {
      type = types.attrsOf types.deferredModule;
      description = "Test stand-in: one module per image format (see the header).";
    };
    system.build.images = mkOption {
      type = types.lazyAttrsOf types.raw;
      readOnly = true;
      description = "Test stand-in: the image of each `image.modules` entry.";
    };
  };

  config = {
    image.modules = {
      # An EFI-bootable raw disk: GPT with an ESP and an ext4 root found by label, as on 25.05+.
      raw-efi =
        { config, pkgs, ... }:
        {
          boot.loader.systemd-boot.enable = lib.mkDefault true;
          boot.growPartition = lib.mkDefault true;
          fileSystems = lib.mkImageMediaOverride {
            "/" = {
              device = "/dev/disk/by-label/nixos";
              autoResize = true;
              fsType = "ext4";
            };
            "/boot" = {
              device = "/dev/disk/by-label/ESP";
              fsType = "vfat";
            };
          };
          system.build.image = import (modulesPath + "/../lib/make-disk-image.nix") {
            inherit lib config pkgs;
            format = "raw";
            partitionTableType = "efi";
          };
          system.build.imageFilePath = "nixos.img";
        };
      # The installer ISO: the configuration plus nixpkgs' installation-CD profile.
      iso-installer =
        { config, ... }:
        {
          imports = [ (modulesPath + "/installer/cd-dvd/installation-cd-base.nix") ];
          system.build.image = config.system.build.isoImage;
          system.build.imageFilePath = "iso/${config.isoImage.isoName}";
        };
    };

    system.build.images = lib.mapAttrs (
      _: module:
      let
        variant = extendModules { modules = [ module ]; };
      in
      lib.recursiveUpdate variant.config.system.build.image {
        passthru = {
          inherit (variant) config;
          filePath = variant.config.system.build.imageFilePath;
        };
      }
    ) config.image.modules;
  };
}
