# The vLLM version whose `vllm serve` argument parser accepted every preset's flags
# (checks/test_vllm_flags.py asserts it against the vLLM the test floor installs).
"0.32.0"
