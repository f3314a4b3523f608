"""The `station` verbs: one module or package per verb (the table is `vllm_station.cli.COMMANDS`).

A verb exposes `configure(parser)` and `run(args) -> int` for `vllm_station.cli`, and builds on the shared
layers one level up (`api/`, `host/`, `checkpoint/`, `output`, `argtypes`, `polling`, `errors`, …). A verb
never imports another verb, and no layer imports a verb: tests/test_architecture_wing.py keeps it so
(docs/architecture.md).
"""
