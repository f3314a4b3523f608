"""`station simulate`: an OpenAI-compatible server with a *known* timing schedule.

It is the ground truth for `station bench` (accuracy tests, client-capacity measurements) and a GPU-free
way to rehearse a go-live.

- `config`: what the server is told: the timing schedule, the tokenizer, failure injection (no aiohttp).
- `server`: the aiohttp application, shaped like vLLM's OpenAI server, and its measured emission records.
- `cli`: `station simulate`'s options and its run loop (SIGINT/SIGTERM stop it, `--stats-file`).
- `process`: `station simulate` in a subprocess of its own session, for tests and scripts.
"""
