"""`station gates`: the quality gates before go-live (docs/gates.md).

The batteries' data and model — the failure classes, the matchers, the tool cases, the agent tasks and
their office environment, the needle's wording — are the layer `vllm_station.batteries` (the simulator
answers the same cases). The runners are here:

- `checker`, `tools`: the tool-call battery.
- `agent`: the agent battery, driving the environment turn by turn.
- `needle`: long-context retrieval, prompts built to an exact token count with the server's /tokenize.
- `common`: request settings, one plain and one streamed ask, progress lines.
- `cli`: `station gates {tools,agent,needle}`.
"""
