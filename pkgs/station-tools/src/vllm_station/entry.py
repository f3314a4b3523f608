"""The `station-<command>` console scripts, generated from `cli.COMMANDS` (PEP 562 module `__getattr__`).

`vllm_station.entry.smoke` is `main(argv=None) -> int` running `station smoke ARGV...`; every command has
one, its dashes written as underscores (`entry.wait_ready` runs `station wait-ready`). pyproject.toml names
them as `station-smoke = "vllm_station.entry:smoke"`: the installer's script does
`from vllm_station.entry import smoke`, which asks this module's `__getattr__`. Any other name is an
AttributeError (an ImportError for `from … import`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from vllm_station import cli

EntryPoint = Callable[[list[str] | None], int]


def _command(attr: str) -> str | None:
    command = attr.replace("_", "-")
    ok = attr.isidentifier() and not attr.startswith("_")
    return command if ok and command in cli.COMMANDS else None


def __getattr__(attr: str) -> EntryPoint:
    command = _command(attr)
    if command is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

    def main(argv: list[str] | None = None) -> int:
        return cli.main([command, *(sys.argv[1:] if argv is None else argv)])

    main.__name__ = main.__qualname__ = attr
    main.__doc__ = f"`station {command} ARGV...` (argv defaults to sys.argv[1:])."
    return main


def __dir__() -> list[str]:
    return sorted(name.replace("-", "_") for name in cli.COMMANDS)
