"""The documentation works as written: its Nix blocks, its "try it without a GPU" block, its links.

Tier `nix_nixos`: every ```nix block in README.md and docs/*.md works as written.

Each block is evaluated as a NixOS module of a full system (checks/nixos/snippets.nix) against the
full nixpkgs tree, with only a bootable minimum added (boot loader, root file system, stateVersion,
allowUnfree). Placeholders are filled by this test, and only these:
  `<the digest you tested>` → 64 hex digits, `<40-hex commit>` → 40 hex digits.
A block passes when no assertion fails, every unit it renders evaluates, and no vllm-station unit
wants or orders after a vllm-station unit that is not rendered (the defect of a download entry
declared without `download.enable`).

Tier `unit`: the README's "Try it without a GPU" block is run as a newcomer would run it — a fresh venv,
`pip install` from PyPI, `station simulate` and the commands against it — and every page of docs/ is
listed in docs/README.md, every relative link (and its #anchor) in README.md and docs/*.md resolves.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nixenv import CACHE, REPO, eval_json, require_nix, require_tree

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```nix\n(.*?)^```", re.MULTILINE | re.DOTALL)
PLACEHOLDERS = {"<the digest you tested>": "a" * 64, "<40-hex commit>": "0123456789abcdef" * 2 + "01234567"}


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


@pytest.mark.nix_nixos
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


@pytest.mark.nix_nixos
@pytest.mark.parametrize("name", [n for n, _ in _blocks()])
def test_snippet_evaluates_as_written(name: str, results: dict[str, Any]) -> None:
    r = results[name]
    assert r["failed"] == [], f"{name}: failed assertions: {r['failed']}"
    assert r["missingUnits"] == [], f"{name}: wants units that are not rendered: {r['missingUnits']}"


@pytest.mark.nix_nixos
def test_the_operator_snippets_render_the_serving_unit(results: dict[str, Any]) -> None:
    serving = {name: r["units"] for name, r in results.items() if "vllm-station" in r["units"]}
    assert "README.md#1" in serving and "README.md#2" in serving, serving
    assert "vllm-station-download-glm53-flash" in results["README.md#1"]["units"], results["README.md#1"]
    assert "vllm-station-pair-beacon" in results["README.md#2"]["units"], results["README.md#2"]
    # the two-station path by units: A downloads and shares, B copies
    assert {"vllm-station-download-glm53", "vllm-station-checkpoint-share"} <= set(results["README.md#2"]["units"])
    assert "vllm-station-download-glm53" in results["README.md#3"]["units"], results["README.md#3"]
    assert "vllm-station-checkpoint-share" not in results["README.md#3"]["units"]


# --- the README's "Try it without a GPU" block, run as written -------------------------------------------------

TRY_HEADING = "## Try it without a GPU"
PRESET = REPO / "modules" / "presets" / "glm53-flash.nix"
PIP_CACHE = CACHE / "pip-cache"  # the wheels a fresh venv downloads, kept between runs (outside the repo)


def try_block() -> str:
    """The first ```sh block under the README's "Try it without a GPU" heading."""
    text = (REPO / "README.md").read_text()
    assert TRY_HEADING in text, f"README.md has no {TRY_HEADING!r} section"
    section = text.split(TRY_HEADING, 1)[1].split("\n## ", 1)[0]
    m = re.search(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert m, f"no ```sh block under {TRY_HEADING!r}"
    return m.group(1)


def _preset() -> tuple[str, int]:
    text = PRESET.read_text()
    model = re.search(r'servedModelName = "([^"]+)";', text)
    port = re.search(r"\bport = (\d+);", text)
    assert model and port, f"{PRESET}: servedModelName / port not found"
    return model.group(1), int(port.group(1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_try_block_is_the_newcomers_path_with_the_presets_model_and_port() -> None:
    """What the block must hold (the run below proves it works): install, simulate the preset, smoke, bench
    with plots and thresholds, golive with a report — in that order, against the preset's model and port."""
    block = try_block()
    model, port = _preset()
    steps = [
        r"pip install \./pkgs/station-tools",
        rf"station simulate --model {re.escape(model)} --port {port}\b",
        rf"station smoke --base-url http://127\.0\.0\.1:{port} --model {re.escape(model)}",
        rf"station bench sweep --base-url http://127\.0\.0\.1:{port}\b.*--plots \S+.*--expect 'c1\.tok_s>=100'",
        rf"station golive --base-url http://127\.0\.0\.1:{port}\b.*--out \S+",
    ]
    joined = block.replace("\\\n", " ")
    at = 0
    for step in steps:
        m = re.compile(step).search(joined, at)
        assert m, f"the try block lacks (in order) {step!r}:\n{block}"
        at = m.end()
    # every URL in it is the preset's port (the run below moves that port, and only that one)
    assert set(re.findall(r"127\.0\.0\.1:(\d+)", block)) == {str(port)}, block


@pytest.mark.slow
def test_the_try_block_runs_as_written(tmp_path: Path) -> None:
    """The block in bash (`set -e`: every command must exit 0) from a copy of the package's tree, with a fresh
    HOME and no dev venv on PATH: the venv, `pip install` from PyPI, the simulator, smoke, bench, golive.
    Changed for the run, and only this: the preset's port becomes a free one (the machine may serve 8888)."""
    try:
        socket.create_connection(("pypi.org", 443), timeout=10).close()
    except OSError as err:
        pytest.skip(f"PyPI unreachable ({err}): the block's `pip install` needs it")
    model, port = _preset()
    work, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    shutil.copytree(REPO / "pkgs" / "station-tools", work / "pkgs" / "station-tools",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests", ".*"))  # fmt: skip
    script = try_block().replace(f"127.0.0.1:{port}", f"127.0.0.1:{(free := _free_port())}")
    script = script.replace(f"--port {port}", f"--port {free}")
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    # no `station` on PATH but the one the block installs (the dev venv's bin/ left out)
    path = ":".join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":")
                    if p and not Path(p, "station").exists())  # fmt: skip
    # a newcomer's shell: the machine's settings (proxies, pip's index) kept; no dev venv, no key, a fresh HOME
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "STATION_API_KEY", "OPENAI_API_KEY"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env |= {"HOME": str(home), "PATH": path, "PIP_CACHE_DIR": str(PIP_CACHE), "MPLBACKEND": "Agg",
            "TMPDIR": str(tmp_path)}  # fmt: skip
    proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=1200)
    finally:
        try:  # the simulator, if a step failed before `kill %1`
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"the try block failed (exit {proc.returncode}):\n{out[-6000:]}"
    assert (home / "station-venv" / "bin" / "station").exists(), "station was not installed into the new venv"
    assert re.search(r"^GO: 4 pass \(exit 0\)$", out, re.MULTILINE), out[-4000:]
    assert "PASS c1.tok_s>=100" in out and "PASS failures==0" in out, out[-4000:]
    plots = sorted(p.name for p in (work / "bench-plots").glob("*.png"))
    assert plots, f"bench wrote no plots into bench-plots/:\n{out[-3000:]}"
    report = json.loads((work / "golive" / "golive.json").read_text())
    assert report["result"] == "go" and report["model"] == model, report["result"]
    assert [g["name"] for g in report["gates"] if g["held"]] == ["smoke", "tools", "agent", "needle", "bench"]
    page = (work / "golive" / "golive.html").read_text()
    assert "station golive: GO" in page and model in page


# --- the docs index and the links --------------------------------------------------------------------------------

INDEX = REPO / "docs" / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (a link-like string there is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, markup and punctuation dropped, spaces to hyphens; repeats get -1, -2."""
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL).splitlines():
        m = re.match(r"^#{1,6} (.*)$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_docs_page_is_in_the_index() -> None:
    listed = {t.split("#", 1)[0] for t in LINK.findall(_prose(INDEX.read_text()))}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert len(pages) >= 20, pages
    assert sorted(pages - listed) == [], "docs/README.md does not list these pages"


def test_every_relative_link_resolves() -> None:
    broken = []
    checked = 0
    for doc in DOCS:
        for target in LINK.findall(_prose(doc.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
                continue
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            checked += 1
            if not dest.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file: {dest})")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no heading #{anchor} in {dest.name})")
    assert checked > 100, checked
    assert broken == [], "\n".join(broken)
