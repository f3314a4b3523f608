# Example: a pair of stations serving GLM-5.3 NVFP4 (753B) with TP=2 over a ConnectX-8 RoCE rail,
# as one function of the role: station-a.nix is `role = "head"` (rank 0, serves the API),
# station-b.nix `role = "worker"` (rank 1, headless) — `nixosConfigurations.station-a`/`-b`,
# aarch64-linux. Everything else derives from the role. Operator path: README, "Two stations".
{ role }:
{ lib, ... }:
let
  headAddress = "192.168.100.1"; # rail addresses (cx8r1), /30 point-to-point
  workerAddress = "192.168.100.2";

  isHead = role == "head";
  self = if isHead then headAddress else workerAddress;
in
{
  services.vllm-station = {
    serve = {
      enable = true;
      preset = "glm53-tp2";
      # The digest you pulled and tested on both stations; this one is a placeholder of the right shape.
      image = "vllm/vllm-openai@sha256:4b5ad1f6c2e3d4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d";
      # The preset serves /var/lib/vllm-station-models/glm53: each station its own complete,
      # verified copy of the checkpoint (the download entry `glm53` below).
      # The head's API on loopback (vLLM's key guards only /v1): the network's endpoint is the head's
      # gateway below; the worker exposes no API.
      host = "127.0.0.1";
      apiKeyFile = if isHead then "/var/lib/vllm-station-secrets/vllm-api-key" else null;
      preflight.enable = true;
    };

    # Station A downloads from the hub (bound to NUMA node 0), verifies and shares its copy read-only
    # over the rail (pair.checkpointShare, on by default); station B's unit copies it from A (rsync,
    # both ends bound to node 0), verifies locally and stamps. Same pinned revision on both.
    download = {
      enable = true;
      models.glm53 = {
        # model = "nvidia/GLM-5.3-NVFP4" comes from the preset.
        revision = "5f0c6e1d2b3a49788c7d6e5f4a3b2c1d0e9f8a7b";
      }
      // (
        if isHead then
          { tokenFile = "/var/lib/vllm-station-secrets/hf-token"; }
        else
          { copyFrom = "rsync://${headAddress}:8730/glm53"; }
      );
    };

    pair = {
      enable = true;
      inherit role headAddress workerAddress;
      railInterface = "cx8r1";
      railHca = "mlx5_1";
      gidIndex = 3;
    };

    # Station A's endpoint: nginx with TLS, API keys (files outside the Nix store, read at each
    # start), the path allowlist and per-key limits, on 443 of the management network.
    gateway = lib.mkIf isHead {
      enable = true;
      serverName = "llm.example.com";
      tls.certificateFile = "/var/lib/vllm-station-gateway/fullchain.pem";
      tls.keyFile = "/var/lib/vllm-station-gateway/key.pem";
      keys.alice.file = "/var/lib/vllm-station-secrets/gateway/alice";
      openFirewall = true; # 443 only
    };

    # CDMM, zone reclaim, no NUMA balancing, init_on_alloc=0, unlimited memlock.
    host.enable = true;
  };

  # The RoCE rail: jumbo frames, this station's rail address.
  networking.interfaces.cx8r1 = {
    mtu = 9000;
    ipv4.addresses = [
      {
        address = self;
        prefixLength = 30;
      }
    ];
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
  networking.hostName = if isHead then "station-a" else "station-b";
  system.stateVersion = "24.11";
}
