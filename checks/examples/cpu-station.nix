# Example: any x86_64/aarch64 Linux box without a GPU serving a small model with vLLM's CPU build
# (`nixosConfigurations.cpu-station`) — the same serving unit, prestart, restart policy and readiness
# as a GB300 station, for trying the operator path (smoke, bench) before the hardware arrives.
# The system test tier runs this unit for real with a vLLM CPU image and a small tool-calling model.
{ ... }:
{
  services.vllm-station.serve = {
    enable = true;
    # An image with vLLM's CPU build whose entrypoint is `vllm serve` (placeholder digest of the right shape).
    image = "registry.example/vllm-cpu@sha256:7d3c1e5a9b0f2d4c6e8a1b3d5f7092e4c6a8b0d2f4e6a8c0b2d4f6e8a0c2e4f6";
    gpuDevices = [ ]; # no GPU: no CDI device
    model = "/var/lib/vllm-station-models/tiny-tools";
    servedModelName = "tiny-tools";
    host = "127.0.0.1";
    port = 8899;
    maxModelLen = 2048;
    enableAutoToolChoice = true;
    toolCallParser = "hermes";
    extraFlags = [ "--enforce-eager" ]; # CPU: no graph compilation (start in ~30 s)
    environment = {
      VLLM_CPU_KVCACHE_SPACE = "1"; # GiB of host memory for the KV cache
      # Its OpenMP threads sleep between parallel regions instead of spinning: on a machine that runs
      # other work beside vLLM's CPU build (a test run, a desktop), spinning threads take its cores.
      OMP_WAIT_POLICY = "PASSIVE";
    };
    startTimeout = 600;
  };

  # A bootable minimum, so the example evaluates as a whole system.
  boot.loader.grub.enable = false;
  boot.loader.systemd-boot.enable = true;
  fileSystems."/" = {
    device = "/dev/disk/by-label/nixos";
    fsType = "ext4";
  };
  networking.hostName = "cpu-station";
  system.stateVersion = "24.11";
}
