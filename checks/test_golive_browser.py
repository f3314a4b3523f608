"""golive.html in a real browser: Debian's chromium, headless, renders the page of a real `station golive` run.

The run: `station simulate --gates long_context` (needles over half the context answered wrongly: a NO-GO
with misses) and `station golive --out` against it. Then chromium, with every host name resolving nowhere:
- `--dump-dom`: the tables read back from the rendered DOM equal the report's JSON (the gates, the needle
  cases with their outcome, bench's levels), and the heading names the verdict, station and model;
- `--log-net-log`: the page requested nothing (chromium's own background requests, whose initiator is "not an
  origin", are not the page's);
- `--enable-logging=stderr`: no console message (the page runs no script: any message is a fault);
- `--screenshot`: a PNG of the window's size that is not blank.
A page built to break each rule (an external image, a console.error) is caught by the same checks, so
they can fail. Skipped, with the reason, where chromium is not installed (scripts/check installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from nixenv import REPO

pytestmark = pytest.mark.slow

WINDOW = (1200, 2000)
FAST = ["--bench-output-len", "8", "--bench-requests", "1x", "--bench-concurrency", "1,4",
        "--needle-lengths", "30%,85%", "--needle-depths", "0,50", "--quiet"]  # fmt: skip


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium is not installed (Debian's `chromium` package; scripts/check installs it)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _station(*argv: str) -> list[str]:
    return [sys.executable, "-m", "vllm_station", *argv]


def _env() -> dict[str, str]:
    src = str(REPO / "pkgs" / "station-tools" / "src")
    return dict(os.environ, PYTHONPATH=f"{src}:{os.environ.get('PYTHONPATH', '')}", MPLBACKEND="Agg")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """A real golive run against the simulator: its report and its page."""
    out = tmp_path_factory.mktemp("golive")
    port = _free_port()
    sim = subprocess.Popen(
        _station("simulate", "--port", str(port), "--model", "glm-sim", "--gates", "long_context",
                 "--ttft", "0.002", "--itl", "0.0005", "--max-model-len", "30000"),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        subprocess.run(_station("wait-ready", "--base-url", url, "--timeout", "60", "--interval", "0.5"),
                       env=_env(), check=True, capture_output=True, timeout=90)  # fmt: skip
        golive = subprocess.run(
            _station("golive", "--base-url", url, "--out", str(out), "--expect", "c1.tok_s>=1", *FAST),
            env=_env(), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
    finally:
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
    assert golive.returncode == 1, f"expected a NO-GO (exit 1):\n{golive.stdout}\n{golive.stderr[-3000:]}"
    report: dict[str, Any] = json.loads((out / "golive.json").read_text())
    return report, out / "golive.html"


class _Rendered:
    """What chromium made of a page: the DOM, the console lines, the page's own requests, a screenshot."""

    def __init__(self, page: Path, work: Path) -> None:
        exe = _chromium()
        work.mkdir(parents=True, exist_ok=True)
        net = work / "net.json"
        shot = work / "shot.png"
        common = [
            exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", f"--user-data-dir={work / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
        ]  # fmt: skip
        url = page.resolve().as_uri()
        dump = subprocess.run([*common, f"--log-net-log={net}", "--dump-dom", url],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert dump.returncode == 0, dump.stderr[-3000:]
        self.dom = dump.stdout
        self.console = [line for line in dump.stderr.splitlines() if ":CONSOLE" in line]
        self.requests = _page_requests(net)
        snap = subprocess.run([*common, f"--screenshot={shot}", url],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert snap.returncode == 0 and shot.exists(), snap.stderr[-3000:]
        self.screenshot = shot


def _page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for: URL requests with an initiator (chromium's own have "not an origin")."""
    for _ in range(50):  # the log is complete once chromium has exited; allow its writer a moment
        try:
            log = json.loads(netlog.read_text())
            break
        except (OSError, ValueError):
            time.sleep(0.1)
    else:
        raise AssertionError(f"no readable net log at {netlog}")
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    return [
        e["params"]["url"]
        for e in log["events"]
        if names.get(e["type"]) == "URL_REQUEST_START_JOB"
        and (e.get("params") or {}).get("initiator") not in (None, "not an origin")
    ]


class _Tables(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.h1 = ""
        self._cell: list[str] | None = None
        self._h1 = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h1":
            self._h1 = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "h1":
            self._h1 = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._h1:
            self.h1 += data

    def table(self, first_header: str) -> list[list[str]]:
        return next(t for t in self.tables if t and t[0] and t[0][0] == first_header)


def _state(held: bool | None) -> str:
    return "skipped" if held is None else ("held" if held else "FAILED")


def test_the_page_renders_the_report(run: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    report, page = run
    shown = _Rendered(page, tmp_path)
    dom = _Tables(shown.dom)
    assert re.search(r"station golive: NO-GO \(exit 1\) — \S+", dom.h1), dom.h1
    assert report["station"]["host"] in dom.h1
    # the gates: name, result, time, summary — as the JSON has them
    gates = dom.table("gate")[1:]
    expected = [[g["name"], _state(g["held"]), f"{g['seconds']:,.1f}", g["summary"]] for g in report["gates"]]
    assert gates == expected
    # every needle case, its outcome as the JSON records it (the long-context fault: misses)
    needle = next(g for g in report["gates"] if g["name"] == "needle")["report"]["results"]
    rows = dom.table("variant")[1:]
    assert len(rows) == len(needle)
    outcome = {True: "retrieved"}
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (n["variant"], f"{n['length']:,}", outcome.get(n["retrieved"], "missed")) for n in needle
    ]
    assert any(r[3] == "missed" for r in rows), "the fault should have made misses"
    # bench's levels: tok/s rounded as the page promises
    levels = next(g for g in report["gates"] if g["name"] == "bench")["report"]["levels"]
    assert [(r[0], r[2]) for r in dom.table("level")[1:]] == [
        (lv["name"], f"{lv['tok_s']['mean']:,.1f}") for lv in levels
    ]
    # offline and quiet: nothing requested, nothing said on the console
    assert shown.requests == []
    assert shown.console == []
    # a screenshot of the window's size, not blank
    from matplotlib import image

    px = image.imread(str(shown.screenshot))
    assert px.shape[:2] == (WINDOW[1], WINDOW[0]), px.shape
    assert len({tuple(p) for p in px[::20, ::20, :3].reshape(-1, 3).round(2).tolist()}) > 10, "a blank page"
    keep = os.environ.get("STATION_GOLIVE_SCREENSHOT")  # where a person wants to look at it
    if keep:
        shutil.copyfile(shown.screenshot, keep)


def test_the_checks_catch_a_page_that_fetches_and_logs(tmp_path: Path) -> None:
    """The control: a page with an external image and a console.error is caught by the same checks."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><html><body><h1>x</h1><img src='http://fetch.example.invalid/x.png'>"
        "<script>console.error('boom')</script></body></html>"
    )
    shown = _Rendered(bad, tmp_path / "chromium")
    assert shown.requests == ["http://fetch.example.invalid/x.png"], shown.requests
    assert len(shown.console) == 1 and "boom" in shown.console[0], shown.console
