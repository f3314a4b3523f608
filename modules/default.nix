# nixosModules.default: every vllm-station service module. Importing turns nothing on; each
# concern (serve, host, download, pair) has its own `enable`.
{
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types literalExpression;
in
{
  imports = [
    ./serve.nix
    ./host.nix
    ./download.nix
    ./pair.nix
    ./gateway.nix
    ./station-listener.nix
    ./monitoring.nix
    ./golive.nix
    ./secrets.nix
  ];

  options.services.vllm-station.package = mkOption {
    type = types.package;
    default = pkgs.callPackage ../pkgs/station-tools/package.nix { };
    defaultText = literalExpression "pkgs.callPackage ./pkgs/station-tools/package.nix { }";
    description = ''
      The `station` operator tools (prestart, wait-ready, preflight, download, verify, smoke, …)
      that the vllm-station units run. The flake sets this to its own package.
    '';
  };
}
