# GLM-5.3-Flash (NVFP4) at its full 1,048,576-token context on one DGX Station GB300:
# the flags of the go-live recipe (fp8 KV cache holds ~5.9 M tokens at 0.94 GPU memory).
# No speculative decoding: this checkpoint's MTP head fails to load (tensor shape mismatch).
{
  serve = {
    model = "nvidia/GLM-5.3-Flash-NVFP4";
    servedModelName = "glm-5.3-flash";
    port = 8888;
    maxModelLen = 1048576;
    maxNumSeqs = 256;
    gpuMemoryUtilization = 0.94;
    kvCacheDtype = "fp8";
    enableChunkedPrefill = true;
    enablePrefixCaching = true;
    enableAutoToolChoice = true;
    toolCallParser = "glm47";
    reasoningParser = "glm45";
  };
}
