# The vLLM release whose `vllm serve` argument parser accepted every preset's flags, as the examples
# render them (checks/test_vllm_flags.py, tier realvllm: `scripts/check --only realvllm`). Raise it
# only after that test passed against the new release; serve's `imageVllmVersion` warns when an image
# carries another one.
"0.32.0"
