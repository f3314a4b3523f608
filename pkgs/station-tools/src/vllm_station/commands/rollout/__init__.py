"""`station rollout`: upgrade the stations behind a gateway one batch at a time (docs/rollout.md).

- `fleet`: the stations, in order (`--station NAME=HOST`, `--fleet FILE`), checked before anything runs.
- `core`: the command templates, each station's steps (drain, switch, wait-ready, golive, undrain; on a
  failure the rollback), the waves of `--batch` stations, the report (`station-rollout/1`).
- `cli`: the options, the plan (`--dry-run`), the table or `--json`.
"""
