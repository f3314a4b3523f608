# GLM-5.3 NVFP4 (753B MoE, ~464 GB in 50 shards) across two DGX Station GB300 with TP=2 over a
# ConnectX-8 RoCE rail: each GPU holds ~218 GiB of weights. Station A (rank 0) serves the API,
# station B (rank 1) runs a headless worker; `services.vllm-station.pair` adds the ranks, addresses
# and the --tensor-parallel-size/--nnodes/--node-rank/--master-* flags.
# MTP speculative decoding with 4 draft tokens (vLLM's `--speculative-config`, method "mtp"), and tool
# calls with auto tool choice and the GLM parsers, as the Flash preset.
# Each station serves its verified local copy of the download entry `glm53` (station B: `verifyOnly`,
# rsync'd from A); services.vllm-station.pair.ncclCheck.requireGdr (default on) refuses a start
# whose NCCL is not GPUDirect RDMA.
{
  serve = {
    model = "/var/lib/vllm-station-models/glm53";
    servedModelName = "glm-5.3";
    maxModelLen = 98304;
    gpuMemoryUtilization = 0.93;
    kvCacheDtype = "fp8";
    enablePrefixCaching = true;
    enableAutoToolChoice = true;
    toolCallParser = "glm47";
    reasoningParser = "glm45";
    # 753B over two stations: ~232 GB of weights per station to load, then compile and graph capture.
    startTimeout = 1800;
    # The longest answer a request may get, and the per-user decode rate at 32 users of the TP=2 recipe
    # (77.9 ms between tokens: 12.8 tok/s): shutdownTimeout = 32768 / 12.8 = 2560 s.
    maxOutputTokens = 32768;
    stopDecodeRate = 12.8;
    speculativeConfig = {
      method = "mtp";
      num_speculative_tokens = 4;
    };
  };
  download.presetModels.glm53 = "nvidia/GLM-5.3-NVFP4";
  # What `station verify` expects of this checkpoint (download units of this repository pick it up).
  download.presetExpectations."nvidia/GLM-5.3-NVFP4" = {
    arch = "GlmMoeDsaForCausalLM";
    quantAlgo = "MIXED_PRECISION";
    shards = 50;
  };
}
