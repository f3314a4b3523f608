"""`station gates`: the quality gates before go-live (docs/gates.md).

- `classes`: the failure classes every gate names (serving faults and model faults).
- `cases`, `match`, `checker`, `tools`: the tool-call battery (data in `data/tools/`, one file per category).
- `env`, `agent`: the agent battery and its stateful tool environment (tasks in `data/agent/`).
- `needle`: long-context retrieval, prompts built to an exact token count with the server's /tokenize.
- `common`: request settings, one plain and one streamed ask, progress lines.
- `cli`: `station gates {tools,agent,needle}`.
"""
