# Example: station-b of checks/examples/gateway-station.nix (`nixosConfigurations.remote-station`): a
# GB300 station whose only client is the gateway on another host (10.10.0.1). vLLM stays on loopback;
# its stationListener terminates TLS on the private address 10.10.0.2, wants the gateway's client
# certificate (mutual TLS) and proxies to vLLM. The firewall opens port 8443 to 10.10.0.1 only
# (iptables rules here; nftables' `extraInputRules` with networking.nftables.enable = true).
{ ... }:
{
  services.vllm-station = {
    serve = {
      enable = true;
      preset = "glm53-flash";
      # Placeholder digest of the right shape (`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`).
      image = "vllm/vllm-openai@sha256:4b5ad1f6c2e3d4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d";
      host = "127.0.0.1"; # the listener (and Prometheus) reach vLLM on loopback
      port = 8888;
      # The key the gateway sends (its upstreamApiKeyFile holds the same one).
      apiKeyFile = "/var/lib/vllm-station-secrets/vllm-api-key";
    };
    download = {
      enable = true;
      models.glm53-flash.revision = "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"; # placeholder
    };
    stationListener = {
      enable = true;
      host = "10.10.0.2"; # this station's private address
      port = 8443;
      gateways = [ "10.10.0.1" ]; # the gateway host: the only source the firewall lets in
      tls = {
        certificateFile = "/var/lib/vllm-station-listener/fullchain.pem"; # names stations.vllm.internal
        keyFile = "/var/lib/vllm-station-listener/key.pem";
        clientCaFile = "/var/lib/vllm-station-listener/gateways-ca.pem"; # signed the gateway's client certificate
      };
    };
    host.enable = true;
  };

  networking.interfaces.enp1s0.ipv4.addresses = [
    {
      address = "10.10.0.2";
      prefixLength = 24;
    }
  ];

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
  networking.hostName = "remote-station";
  system.stateVersion = "24.11";
}
