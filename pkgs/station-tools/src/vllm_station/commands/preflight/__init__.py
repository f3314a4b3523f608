"""`station preflight`: independent host, GPU, checkpoint, disk and network checks before a start.

`core` holds the registry (`@check`), `CheckResult`, `PreflightConfig` and `run_checks`; `checks` the
one-station checks; `pair` (when present) the two-station checks; `cli` the command.
"""
