"""Tier `nix_nixos`: every ```nix block in README.md and docs/*.md works as written.

Each block is evaluated as a NixOS module of a full system (checks/nixos/snippets.nix) against the
full nixpkgs tree, with only a bootable minimum added (boot loader, root file system, stateVersion,
allowUnfree). Placeholders are filled by this test, and only these:
  `<the digest you tested>` → 64 hex digits, `<40-hex commit>` → 40 hex digits.
A block passes when no assertion fails, every unit it renders evaluates, and no vllm-station unit
wants or orders after a vllm-station unit that is not rendered (the defect of a download entry
declared without `download.enable`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from nixenv import REPO, eval_json, require_nix, require_tree

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```nix\n(.*?)^```", re.MULTILINE | re.DOTALL)
PLACEHOLDERS = {"<the digest you tested>": "a" * 64, "<40-hex commit>": "0123456789abcdef" * 2 + "01234567"}
pytestmark = pytest.mark.nix_nixos


def _blocks() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for i, m in enumerate(BLOCK.finditer(doc.read_text()), 1):
            found.append((f"{doc.relative_to(REPO)}#{i}", m.group(1)))
    return found


def _filled(text: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


def test_placeholders_are_the_known_ones() -> None:
    """A new `<…>` placeholder must be added above, or the block would not evaluate as written."""
    unknown = {
        name: re.findall(r"<[^<>\n]*>", _filled(text)) for name, text in _blocks() if re.search(r"<[^<>\n]*>", _filled(text))
    }
    assert unknown == {}, unknown
    assert len(_blocks()) >= 5, [n for n, _ in _blocks()]


@functools.cache
def _results(tmp: str) -> dict[str, Any]:
    files = []
    for name, text in _blocks():
        path = Path(tmp) / (re.sub(r"[^A-Za-z0-9]+", "-", name) + ".nix")
        path.write_text(_filled(text))
        files.append(str(path))
    out: dict[str, Any] = eval_json(
        [
            str(REPO / "checks" / "nixos" / "snippets.nix"),
            "--argstr", "nixosTree", os.environ.get("NIXOS_TREE", ""),
            "--argstr", "files", json.dumps(files),
        ],
        timeout=900,
    )  # fmt: skip
    return {name: out[f] for (name, _), f in zip(_blocks(), files, strict=True)}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_nix()
    require_tree("NIXOS_TREE", "nixos/lib/eval-config.nix", "documentation snippets as NixOS modules")
    return _results(str(tmp_path_factory.mktemp("snippets")))


@pytest.mark.parametrize("name", [n for n, _ in _blocks()])
def test_snippet_evaluates_as_written(name: str, results: dict[str, Any]) -> None:
    r = results[name]
    assert r["failed"] == [], f"{name}: failed assertions: {r['failed']}"
    assert r["missingUnits"] == [], f"{name}: wants units that are not rendered: {r['missingUnits']}"


def test_the_operator_snippets_render_the_serving_unit(results: dict[str, Any]) -> None:
    serving = {name: r["units"] for name, r in results.items() if "vllm-station" in r["units"]}
    assert "README.md#1" in serving and "README.md#2" in serving, serving
    assert "vllm-station-download-glm53-flash" in results["README.md#1"]["units"], results["README.md#1"]
    assert "vllm-station-pair-beacon" in results["README.md#2"]["units"], results["README.md#2"]
    # the two-station path by units: A downloads and shares, B copies
    assert {"vllm-station-download-glm53", "vllm-station-checkpoint-share"} <= set(results["README.md#2"]["units"])
    assert "vllm-station-download-glm53" in results["README.md#3"]["units"], results["README.md#3"]
    assert "vllm-station-checkpoint-share" not in results["README.md#3"]["units"]
