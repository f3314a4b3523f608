# GLM-5.3-Flash (NVFP4) at its full 1,048,576-token context on one DGX Station GB300: the flags of
# the go-live recipe. The fp8 KV cache (~5.9 M tokens at 0.94 GPU memory) comes from the
# checkpoint's own configuration (`kv_cache_quant_algo`), so no `--kv-cache-dtype` is rendered.
# No speculative decoding: this checkpoint's MTP head fails to load (tensor shape mismatch).
# The model is served from the verified local copy of the download entry `glm53-flash`
# (services.vllm-station.download.models.glm53-flash: give it the pinned revision).
{
  serve = {
    model = "/var/lib/vllm-station-models/glm53-flash";
    servedModelName = "glm-5.3-flash";
    port = 8888;
    maxModelLen = 1048576;
    maxNumSeqs = 256;
    gpuMemoryUtilization = 0.94;
    enableChunkedPrefill = true;
    enablePrefixCaching = true;
    enableAutoToolChoice = true;
    toolCallParser = "glm47";
    reasoningParser = "glm45";
    # The longest answer a request may get (vLLM's server-wide max_new_tokens): the full context is for
    # the prompt. It bounds the longest request, which sizes the graceful stop: shutdownTimeout =
    # 32768 / 55.6 tok/s (the recipe's per-user rate at 32 users) = 590 s.
    maxOutputTokens = 32768;
  };
  download.presetModels.glm53-flash = "nvidia/GLM-5.3-Flash-NVFP4";
}
