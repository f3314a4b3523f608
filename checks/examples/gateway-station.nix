# Example: a GB300 station serving GLM-5.3-Flash behind the gateway (TLS, API keys, the path allowlist,
# per-key limits), with two more stations behind the same endpoint, reached over mutual TLS. vLLM listens on loopback only;
# the gateway is the station's endpoint. The gateway tests (checks/test_gateway*.py) run the nginx
# configuration this renders with a real nginx in front of `station simulate` instances.
{ ... }:
{
  services.vllm-station = {
    serve = {
      enable = true;
      preset = "glm53-flash";
      # Placeholder digest of the right shape (`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`).
      image = "vllm/vllm-openai@sha256:4b5ad1f6c2e3d4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d";
      host = "127.0.0.1"; # only the gateway (and Prometheus, for /metrics) talk to vLLM
      port = 8888;
      # The stations' own key: the gateway sends it in place of the client's (upstreamApiKeyFile).
      apiKeyFile = "/var/lib/vllm-station-secrets/vllm-api-key";
    };
    download = {
      enable = true;
      models.glm53-flash.revision = "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"; # placeholder
    };

    gateway = {
      enable = true;
      serverName = "llm.example.com";
      # From your CA, outside the Nix store (or tls.acme = true with security.acme configured).
      tls.certificateFile = "/var/lib/vllm-station-gateway/fullchain.pem";
      tls.keyFile = "/var/lib/vllm-station-gateway/key.pem";
      keys = {
        alice.file = "/var/lib/vllm-station-secrets/gateway/alice";
        bob.file = "/var/lib/vllm-station-secrets/gateway/bob";
        # Batch jobs: many requests at once, a lower rate.
        batch = {
          file = "/var/lib/vllm-station-secrets/gateway/batch";
          limits = {
            connections = 256;
            rate = "120r/m";
            burst = 256;
          };
        };
      };
      paths = [
        "/v1/chat/completions"
        "/v1/completions"
        "/v1/models"
        "/v1/responses"
      ];
      # This station and two more GB300s on the private network. Each station's vLLM stays on its
      # loopback behind its stationListener (checks/examples/remote-station.nix is station-b), which
      # speaks TLS, wants this gateway's client certificate and is reachable from 10.10.0.1 only; the
      # gateway sends them the same serve.apiKeyFile key. nginx speaks one scheme to a pool, so this
      # station is reached through its own listener too (on loopback, below).
      upstreams = {
        local.address = "127.0.0.1:8443";
        station-b.address = "10.10.0.2:8443";
        station-c = {
          address = "10.10.0.3:8443";
          weight = 2;
        };
      };
      stationTls = {
        enable = true;
        caFile = "/var/lib/vllm-station-gateway/stations-ca.pem"; # signed every station's listener certificate
        serverName = "stations.vllm.internal"; # the name each of those certificates carries
        certificateFile = "/var/lib/vllm-station-gateway/client.pem"; # this gateway's client certificate
        keyFile = "/var/lib/vllm-station-gateway/client-key.pem";
      };
      # A conversation stays where its prefix cache is.
      affinity.header = "X-Session-ID";
      openFirewall = true;
    };
    # This station's end of the pool: TLS on loopback, for its own gateway only.
    stationListener = {
      enable = true;
      host = "127.0.0.1";
      port = 8443;
      tls = {
        certificateFile = "/var/lib/vllm-station-listener/fullchain.pem"; # names stations.vllm.internal
        keyFile = "/var/lib/vllm-station-listener/key.pem";
        clientCaFile = "/var/lib/vllm-station-listener/gateways-ca.pem"; # signed the gateway's client.pem
      };
    };
    host.enable = true;
  };

  nixpkgs.config.allowUnfree = true;
  services.xserver.videoDrivers = [ "nvidia" ];
  hardware.nvidia.open = true;

  # A bootable minimum, so the example evaluates as a whole system.
  boot.loader.grub.enable = false;
  boot.loader.systemd-boot.enable = true;
  fileSystems."/" = {
    device = "/dev/disk/by-label/nixos";
    fsType = "ext4";
  };
  networking.hostName = "gateway-station";
  system.stateVersion = "24.11";
}
