# The gateway tests' input: what NixOS renders for checks/examples/gateway-station.nix, as plain data,
# so that a real nginx can run it (checks/test_gateway*.py). Builds nothing.
#
#   nix-instantiate --eval --strict --json checks/gateway/render.nix --argstr nixosTree "$NIXOS_TREE" \
#     --argstr ports '{"gateway":P,"gateway-rr":P,"listener":P,"local":P1,"station-b":P2,"station-c":P3}'
#
# Result: { <variant> = { nginxConf; keysUnit; nginxPackage; mimeTypes; failed; warnings; }; … }
# for the variants below (`--argstr only '["example","single"]'` picks others). The example is evaluated as it is plus the test-only definitions (each
# says why); `round-robin` differs from `example` in `gateway.balancing` (its port and read timeout).
{
  nixosTree ? builtins.getEnv "NIXOS_TREE",
  system ? builtins.currentSystem,
  ports,
  # which of `variants` below to evaluate (a JSON list): each costs a NixOS evaluation
  only ? ''["example", "round-robin"]'',
}:
let
  inherit (import ../nixos/eval.nix { inherit nixosTree; }) lib evalExample;
  p = builtins.fromJSON ports;

  testOnly =
    { lib, ... }:
    {
      # Debian's nginx 1.22 runs it (../nixos/debian-nginx.nix), its nginx.conf reachable from the
      # evaluation (environment.etc."nginx/nginx.conf"); the text is the same.
      imports = [ ../nixos/debian-nginx.nix ];
      services.nginx.enableReload = true;
      services.vllm-station.gateway = {
        # On a loopback port of the test machine.
        host = "127.0.0.1";
        port = p.gateway;
        # The three stations are `station simulate` instances on loopback ports (names and weights kept).
        upstreams = lib.mapAttrs (name: _: { address = lib.mkForce "127.0.0.1:${toString p.${name}}"; }) {
          local = null;
          station-b = null;
          station-c = null;
        };
        # The benchmark's key (scripts/bench-gateway): limits far above its load, so they never shape it.
        keys.bench = {
          file = "/var/lib/vllm-station-secrets/gateway/bench";
          limits = {
            rate = "100000r/s";
            burst = 100000;
            connections = 4096;
          };
        };
        # An operator key (/tokenize, /version: what golive's needle gate needs).
        keys.ops = {
          file = "/var/lib/vllm-station-secrets/gateway/ops";
          role = "operator";
          # as the flagship example's: above golive's request rate (its gates run back to back)
          limits = {
            rate = "100r/s";
            burst = 500;
            connections = 300;
          };
        };
        # A key with tiny limits, for the 413 and 429 proofs.
        keys.limited = {
          file = "/var/lib/vllm-station-secrets/gateway/limited";
          limits = {
            rate = "1r/s";
            burst = 0;
            connections = 1;
            maxBodySize = "1k";
          };
        };
      };
      # No GPU and no CDI device here (the serving unit is not what these tests run).
      services.vllm-station.serve.gpuDevices = lib.mkForce [ ];
    };

  # The path and limit tests run `station simulate` instances, which speak plain HTTP on loopback: the
  # link to the stations is plain there (the example's stationTls and stationListener off). The
  # `station-tls` variant keeps both: test_gateway_tls.py runs that link.
  plainLink = {
    services.vllm-station.gateway.stationTls.enable = lib.mkForce false;
    services.vllm-station.stationListener.enable = lib.mkForce false;
  };

  variants = {
    example = [ plainLink ];
    # The example's link as it is: the gateway -> this station's listener (TLS, the gateway's client
    # certificate) -> vLLM, whose loopback port a recording station takes (test_gateway_tls.py).
    station-tls = [
      {
        services.vllm-station.gateway.upstreams = lib.mkOverride 10 {
          local.address = "127.0.0.1:${toString p.listener}";
        };
        services.vllm-station.stationListener.port = lib.mkForce p.listener;
        services.vllm-station.serve.port = lib.mkForce p.local;
      }
    ];
    round-robin = [
      plainLink
      {
        services.vllm-station.gateway.balancing = "round-robin";
        services.vllm-station.gateway.port = lib.mkForce p.gateway-rr; # both can run at once
        # The 504 proof: a wedged station (no answer at all) times out in seconds, not an hour.
        services.vllm-station.gateway.readTimeout = 2;
        # The 403 proof: clients from 127.0.0.1 only (a test connects from 127.0.0.2).
        services.vllm-station.gateway.allowFrom = [ "127.0.0.1" ];
      }
    ];
    # The status page monitoring adds (services.nginx.statusPage): loopback only (test_gateway_raw.py).
    monitored = [
      plainLink
      {
        services.vllm-station.monitoring.enable = true;
        services.vllm-station.gateway.port = lib.mkForce p.gateway-rr;
      }
    ];
    # scripts/bench-gateway: one station behind the gateway (the same simulator as direct).
    single = [
      plainLink
      {
        services.vllm-station.gateway.upstreams = lib.mkForce {
          local.address = "127.0.0.1:${toString p.local}";
        };
        services.vllm-station.gateway.port = lib.mkForce p.gateway-rr; # runs next to `example`
      }
    ];
  };

  render =
    extra:
    let
      config = (evalExample ([ ../examples/gateway-station.nix testOnly ] ++ extra) system).config;
      nginx = config.services.nginx;
      text = s: builtins.unsafeDiscardStringContext s;
    in
    {
      nginxConf = text config.environment.etc."nginx/nginx.conf".source.text;
      keysUnit = text config.systemd.units."vllm-station-gateway-keys.service".text;
      nginxPackage = text "${nginx.package}";
      mimeTypes = text nginx.defaultMimeTypes;
      stationPackage = text "${config.services.vllm-station.package}";
      failed = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
      inherit (config) warnings;
    };
in
lib.mapAttrs (_: render) (lib.getAttrs (builtins.fromJSON only) variants)
