"""For the Python scripts under scripts/: run under the repository's venv, or say how to get it.

`require(*modules)` at the top of a script, before its third-party imports: when one of the modules is
missing from the interpreter running the script, it re-executes the script with `.venv/bin/python`
(which `scripts/check` creates) if that exists, else exits 2 with one line naming the fix.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
_ONCE = "STATION_SCRIPT_REEXECUTED"


def require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    script = Path(sys.argv[0]).name
    # (sys.prefix, not the executable: the venv's python is a link to the system's; once only)
    venv = VENV_PYTHON.parent.parent
    if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != venv.resolve() and not os.environ.get(_ONCE):
        os.environ[_ONCE] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), sys.argv[0], *sys.argv[1:]])
    print(
        f"{script}: needs {', '.join(missing)} (the repository's venv): run scripts/check once to create"
        f" .venv, then: .venv/bin/python scripts/{script} …",
        file=sys.stderr,
    )
    sys.exit(2)
