# Example: one DGX Station GB300 serving GLM-5.3-Flash at its full 1M-token context
# (`nixosConfigurations.flash-station`). The flake adds `nixosModules.default` and the platform
# (aarch64-linux); checks/nixos/ evaluates it for x86_64-linux and aarch64-linux too.
{ ... }:
{
  services.vllm-station = {
    serve = {
      enable = true;
      preset = "glm53-flash";
      # The digest you pulled and tested (`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`);
      # this one is a placeholder of the right shape.
      image = "vllm/vllm-openai@sha256:4b5ad1f6c2e3d4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d";
      # vLLM on loopback (the default, spelled out): its key guards only /v1, so /invocations,
      # /tokenize, /metrics … must not be reachable from the network. The network's endpoint is the
      # gateway below (TLS, API keys, an allowlist).
      host = "127.0.0.1";
      apiKeyFile = "/var/lib/vllm-station-secrets/vllm-api-key";
      # The preset serves /var/lib/vllm-station-models/glm53-flash, the verified local copy that the
      # download unit below writes; the unit refuses to start without its stamp.
      preflight.enable = true;
    };
    # Downloads bound to NUMA node 0, then verifies and stamps the checkpoint (revision pinned).
    download = {
      enable = true;
      models.glm53-flash = {
        # model = "nvidia/GLM-5.3-Flash-NVFP4" comes from the preset.
        revision = "9c1e0d2f4a6b8c0e1f3a5b7c9d1e3f5a7b9c0d2e"; # placeholder of the right shape
      };
    };
    # The station's endpoint: nginx with TLS, API keys (files outside the Nix store, read at each
    # start), the path allowlist and per-key limits, on 443; vLLM's port stays closed.
    gateway = {
      enable = true;
      serverName = "llm.example.com";
      # nginx reads these itself: readable by its group, so not in the root-only secrets directory.
      tls.certificateFile = "/var/lib/vllm-station-gateway/fullchain.pem";
      tls.keyFile = "/var/lib/vllm-station-gateway/key.pem";
      # The keys are loaded by systemd (root): they stay in the root-only, persistent secrets directory.
      keys = {
        alice.file = "/var/lib/vllm-station-secrets/gateway/alice";
        # golive's needle gate counts tokens at /tokenize: an operator key, with limits above what
        # golive sends (its bench runs 32 users at once; a 429 is a failed request, a NO-GO).
        ops = {
          file = "/var/lib/vllm-station-secrets/gateway/ops";
          role = "operator";
          limits = {
            rate = "100r/s";
            burst = 500;
            connections = 300;
          };
        };
      };
      openFirewall = true; # 443 only
    };
    # CDMM, zone reclaim, no NUMA balancing, init_on_alloc=0, unlimited memlock.
    host.enable = true;
  };

  # The GPU driver behind CDI (`hardware.nvidia-container-toolkit`, enabled by the serve module).
  nixpkgs.config.allowUnfree = true;
  services.xserver.videoDrivers = [ "nvidia" ]; # selects the driver; no X server is enabled
  hardware.nvidia.open = true; # GB300 (Blackwell) needs the open kernel modules

  # A bootable minimum, so the example evaluates as a whole system.
  boot.loader.grub.enable = false;
  boot.loader.systemd-boot.enable = true;
  fileSystems."/" = {
    device = "/dev/disk/by-label/nixos";
    fsType = "ext4";
  };
  networking.hostName = "flash-station";
  system.stateVersion = "24.11";
}
