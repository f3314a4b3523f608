"""`station bench`: the go-live load test (see cli.py and docs/bench.md)."""
