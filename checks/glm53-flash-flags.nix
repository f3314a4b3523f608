# The seed's vLLM flags for GLM-5.3-Flash at full context, written out once as the tests' expectation
# (module tests and the full NixOS evaluations compare the rendered command line against it).
# Two differences from the recipe's command line, both deliberate: the model is the verified local
# copy (the download entry `glm53-flash`), and `--host` is rendered (the recipe relied on vLLM's
# default of all addresses). No `--kv-cache-dtype`: the fp8 KV cache comes from the checkpoint's config.
# Two additions, for a graceful stop: the preset caps answers at 32768 tokens (vLLM's server-wide
# max_new_tokens), and vLLM gets 32768 / 55.6 tok/s = 590 s to finish running requests on SIGTERM.
host: [
  "/var/lib/vllm-station-models/glm53-flash"
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
  "--enable-chunked-prefill"
  "--enable-prefix-caching"
  "--enable-auto-tool-choice"
  "--tool-call-parser"
  "glm47"
  "--reasoning-parser"
  "glm45"
  "--shutdown-timeout"
  "590"
  "--override-generation-config"
  ''{"max_new_tokens":32768}''
]
