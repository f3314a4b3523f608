"""The two pair examples differ only in the station's role (everything else derives from it).

Issue 7: `nixosConfigurations.station-a` and `station-b` "differ only in role and addresses". Both
files declare the same two rail addresses (head and worker), so the one code difference is `role`;
the other differing lines are the header comment naming the station. No Nix needed.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent / "examples"


def _changed(a: list[str], b: list[str]) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a, b, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_station_examples_differ_only_in_role() -> None:
    a = (EXAMPLES / "station-a.nix").read_text().splitlines()
    b = (EXAMPLES / "station-b.nix").read_text().splitlines()
    code = [line for line in _changed(a, b) if not line[1:].lstrip().startswith("#")]
    assert code == ['-  role = "head"; # station A: rank 0, serves the API',
                    '+  role = "worker"; # station B: rank 1, headless'], code  # fmt: skip


def test_station_examples_declare_both_rail_addresses() -> None:
    for name in ("station-a.nix", "station-b.nix"):
        text = (EXAMPLES / name).read_text()
        assert re.search(r'headAddress = "192\.168\.100\.1";', text), name
        assert re.search(r'workerAddress = "192\.168\.100\.2";', text), name
        assert "inherit role headAddress workerAddress;" in text, name


def test_diff_helper_sees_a_difference() -> None:
    assert _changed(["x", "role = 1"], ["x", "role = 2"]) == ["-role = 1", "+role = 2"]
