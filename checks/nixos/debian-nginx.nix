# nixpkgs' nginx module rendering for the nginx the tests run: Debian's 1.22 (checks/gateway/render.nix,
# and checks/system/render.nix with `gateway`). Test-only, each line with its reason.
{ pkgs, ... }:
{
  services.nginx = {
    # nginx.conf as text: without building it (gixy and the formatter are not here); the text is the same.
    validateConfigFile = false;
    # nixpkgs renders for its package's version: render what it renders for Debian's (`listen … http2`).
    package = pkgs.nginxStable.overrideAttrs { version = "1.22.1"; };
  };
}
