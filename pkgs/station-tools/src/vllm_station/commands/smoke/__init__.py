"""`station smoke`: the operator's go/no-go after every switch.

- `plan`: the smoke plan (`Plan`: timeout, tool_choice) and its runner, the four checks in order
  (`vllm_station.api.checks`) into a `SmokeReport`; what `station golive` runs as its first gate.
- `cli`: `station smoke`'s options and its table.
"""
