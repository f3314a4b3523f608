"""The gates' batteries as data, below the verbs: what `station gates` runs and `station simulate --gates`
answers, defined once.

- `classes`: the failure classes every gate names (serving faults and model faults).
- `match`, `cases`: the tool-call battery's cases (`data/tools/`, one file per category) and matchers.
- `env`, `tasks`: the agent battery's stateful office and its tasks (`data/agent/`, one file per domain),
  each checked at load by replaying its reference path.
- `needles`: the needle sentence, the questions, the `record_number` tool, which needle a prompt asks for.
"""
