# services.vllm-station.serve: vLLM's own flags, as typed options, and how they render into the
# arguments of `vllm serve` (`serve.vllmArgs`, model first). Imported by serve.nix, which owns the
# serving unit and puts these arguments in its ExecStart (after the container's options, or after
# `vllm serve` natively); the options that shape the unit itself (host, port, headless,
# shutdownTimeout, the model and its checkpoint) are declared there and only read here.
{
  config,
  lib,
  ...
}:
let
  inherit (lib)
    mkOption
    types
    literalExpression
    optional
    optionals
    optionalAttrs
    ;

  cfg = config.services.vllm-station.serve;

  # The directory vLLM loads (serve.nix: the pinned revision's directory under a local `model`).
  modelPath = if cfg.checkpointDir != null then cfg.checkpointDir else cfg.model;
  # The name clients use stays `model` when the path carries the revision (not a new name per upgrade).
  servedModelName =
    if cfg.servedModelName != null then
      cfg.servedModelName
    else if modelPath != cfg.model then
      cfg.model
    else
      null;

  optionalFlag = flag: value: optionals (value != null) [ flag (toString value) ];
  boolFlag =
    flag: value:
    optional (value == true) "--${flag}" ++ optional (value == false) "--no-${flag}";

  # Typed options -> vLLM arguments (model first: `vllm serve MODEL …`). Never joined by hand:
  # serve.nix escapes the list as a whole for the unit.
  vllmArgs =
    optional (cfg.model != null) modelPath # null is refused by an assertion
    ++ optionalFlag "--served-model-name" servedModelName
    ++ optionals (!cfg.headless) [
      "--host"
      cfg.host
      "--port"
      (toString cfg.port)
    ]
    ++ optionals (cfg.tensorParallelSize > 1) [
      "--tensor-parallel-size"
      (toString cfg.tensorParallelSize)
    ]
    ++ optionalFlag "--max-model-len" cfg.maxModelLen
    ++ optionalFlag "--max-num-seqs" cfg.maxNumSeqs
    # toJSON renders 0.94 as "0.94" (toString would give "0.940000").
    ++ optionals (cfg.gpuMemoryUtilization != null) [
      "--gpu-memory-utilization"
      (builtins.toJSON cfg.gpuMemoryUtilization)
    ]
    ++ optionalFlag "--kv-cache-dtype" cfg.kvCacheDtype
    ++ boolFlag "enable-chunked-prefill" cfg.enableChunkedPrefill
    ++ boolFlag "enable-prefix-caching" cfg.enablePrefixCaching
    ++ optional cfg.enableAutoToolChoice "--enable-auto-tool-choice"
    ++ optionalFlag "--tool-call-parser" cfg.toolCallParser
    ++ optionalFlag "--reasoning-parser" cfg.reasoningParser
    ++ optionals (cfg.speculativeConfig != null) [
      "--speculative-config"
      (builtins.toJSON cfg.speculativeConfig)
    ]
    ++ optional cfg.headless "--headless"
    # SIGTERM: refuse new requests, finish running ones for up to this long (0: abort them).
    ++ [
      "--shutdown-timeout"
      (toString cfg.shutdownTimeout)
    ]
    ++ optionals (cfg.maxOutputTokens != null) [
      "--override-generation-config"
      (builtins.toJSON { max_new_tokens = cfg.maxOutputTokens; })
    ]
    ++ cfg.extraFlags;

  # Flags the typed options own; extraFlags may not repeat them.
  typedFlags = {
    "--served-model-name" = "servedModelName";
    "--host" = "host";
    "--port" = "port";
    "--tensor-parallel-size" = "tensorParallelSize";
    "-tp" = "tensorParallelSize";
    "--max-model-len" = "maxModelLen";
    "--max-num-seqs" = "maxNumSeqs";
    "--gpu-memory-utilization" = "gpuMemoryUtilization";
    "--kv-cache-dtype" = "kvCacheDtype";
    "--enable-chunked-prefill" = "enableChunkedPrefill";
    "--no-enable-chunked-prefill" = "enableChunkedPrefill";
    "--enable-prefix-caching" = "enablePrefixCaching";
    "--no-enable-prefix-caching" = "enablePrefixCaching";
    "--enable-auto-tool-choice" = "enableAutoToolChoice";
    "--tool-call-parser" = "toolCallParser";
    "--reasoning-parser" = "reasoningParser";
    "--speculative-config" = "speculativeConfig";
    "--headless" = "headless";
    "--shutdown-timeout" = "shutdownTimeout";
    "--api-key" = "apiKeyFile (a file read at start, never the key in the Nix store)";
  };
  # maxOutputTokens is vLLM's generation config override: with it set, extraFlags may not set another.
  ownedFlags =
    typedFlags
    // optionalAttrs (cfg.maxOutputTokens != null) {
      "--override-generation-config" = "maxOutputTokens (max_new_tokens)";
    };
  flagName = arg: builtins.head (lib.splitString "=" arg);
  repeatedFlags = lib.filter (arg: ownedFlags ? ${flagName arg}) cfg.extraFlags;
in
{
  options.services.vllm-station.serve = {
    servedModelName = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "glm-5.3-flash";
      description = "Name clients use in `model` (`--served-model-name`); null: the model id.";
    };

    tensorParallelSize = mkOption {
      type = types.ints.positive;
      default = 1;
      description = "`--tensor-parallel-size` (rendered when > 1; the pair module sets 2).";
    };

    maxModelLen = mkOption {
      type = types.nullOr types.ints.positive;
      default = null;
      example = 1048576;
      description = "`--max-model-len`: context length in tokens; null: the model's.";
    };

    maxNumSeqs = mkOption {
      type = types.nullOr types.ints.positive;
      default = null;
      example = 256;
      description = "`--max-num-seqs`: sequences in flight; null: vLLM's default.";
    };

    gpuMemoryUtilization = mkOption {
      type = types.nullOr (types.numbers.between 0 1);
      default = null;
      example = 0.94;
      description = "`--gpu-memory-utilization`: fraction of GPU memory vLLM may use; null: vLLM's default.";
    };

    kvCacheDtype = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "fp8";
      description = "`--kv-cache-dtype` (`auto`, `fp8`, `fp8_e4m3`, …); null: vLLM's default.";
    };

    enableChunkedPrefill = mkOption {
      type = types.nullOr types.bool;
      default = null;
      description = "`--enable-chunked-prefill` (true) / `--no-enable-chunked-prefill` (false); null: vLLM's default.";
    };

    enablePrefixCaching = mkOption {
      type = types.nullOr types.bool;
      default = null;
      description = "`--enable-prefix-caching` (true) / `--no-enable-prefix-caching` (false); null: vLLM's default.";
    };

    enableAutoToolChoice = mkOption {
      type = types.bool;
      default = false;
      description = "`--enable-auto-tool-choice` (needs `toolCallParser`).";
    };

    toolCallParser = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "glm47";
      description = "`--tool-call-parser`.";
    };

    reasoningParser = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "glm45";
      description = "`--reasoning-parser`.";
    };

    speculativeConfig = mkOption {
      type = types.nullOr (types.attrsOf types.anything);
      default = null;
      example = literalExpression ''{ method = "mtp"; num_speculative_tokens = 4; }'';
      description = "`--speculative-config`, rendered as JSON.";
    };

    maxOutputTokens = mkOption {
      type = types.nullOr types.ints.positive;
      default = null;
      example = 32768;
      description = ''
        The most tokens one request may generate, server-wide: rendered as
        `--override-generation-config {"max_new_tokens":N}`, which vLLM applies as an upper bound to every
        request's `max_tokens` (requests asking more get N). null: up to the context length. It bounds the
        longest request, so it sizes `shutdownTimeout`.
      '';
    };

    extraFlags = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "--max-num-batched-tokens"
        "16384"
      ];
      description = "Extra vLLM arguments, after the typed ones. Flags owned by a typed option are refused.";
    };

    vllmArgs = mkOption {
      type = types.listOf types.str;
      readOnly = true;
      internal = true;
      default = vllmArgs;
      defaultText = literalExpression "[ model … ] rendered from the options";
      description = "The vLLM arguments as rendered (model first), for tests and other modules.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = !cfg.enableAutoToolChoice || cfg.toolCallParser != null;
        message = "services.vllm-station.serve: `enableAutoToolChoice` needs `toolCallParser` (e.g. \"glm47\", \"hermes\").";
      }
      {
        assertion = repeatedFlags == [ ];
        message = "services.vllm-station.serve: `extraFlags` repeats flags owned by typed options: ${
          lib.concatMapStringsSep ", " (f: "${flagName f} (set `${ownedFlags.${flagName f}}`)") repeatedFlags
        }.";
      }
    ];
  };
}
