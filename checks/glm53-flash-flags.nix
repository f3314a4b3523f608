# The seed's vLLM flags for GLM-5.3-Flash at full context, written out once as the tests' expectation
# (module tests and the full NixOS evaluations compare the rendered command line against it).
host: [
  "nvidia/GLM-5.3-Flash-NVFP4"
  "--served-model-name"
  "glm-5.3-flash"
  "--host"
  host
  "--port"
  "8888"
  "--max-model-len"
  "1048576"
  "--max-num-seqs"
  "256"
  "--gpu-memory-utilization"
  "0.94"
  "--kv-cache-dtype"
  "fp8"
  "--enable-chunked-prefill"
  "--enable-prefix-caching"
  "--enable-auto-tool-choice"
  "--tool-call-parser"
  "glm47"
  "--reasoning-parser"
  "glm45"
]
