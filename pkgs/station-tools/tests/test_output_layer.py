"""The output layer (`vllm_station.output` + `vllm_station.redact`): secrets in every form, real files.

* Redaction of every transformed form of a key a server can send back — JSON-escaped (once, twice,
  `\\uXXXX` in either case of hex), percent-encoded (either case, double), HTML references, split by
  whitespace or a line break (literal or escaped) — checked by `_leaks`, an independent detector that
  undoes each transformation and looks for the key.
* Real commands against a real in-process server whose model id and /version carry the key in each of
  those forms: stdout, stderr and every file written (`--json`, `--output`, golive.json/.html, the CSV,
  saved responses, and the text drawn in the PNG plots) hold no form of it.
* Real files: `--out`/`--output`/`--json FILE` checked before any request (exit 2, nothing sent); a FIFO
  or device node is never replaced; `>/dev/full` and `>&-` stdout are a clear exit.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from faultserver import FaultServer, Reply, fake_openai_routes

from vllm_station import output, redact
from vllm_station.cli import main

KEY = "SK9Q7ZK3/V8M2+P6W4"  # what the loader accepts today
ODD_KEY = 'Sk"Q7\\ZK3/V8 é2P6W4'  # a `"`, a `\`, a space and a non-ASCII letter


@pytest.fixture(autouse=True)
def _clean_registry() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


def _pct(s: str, upper: bool = True) -> str:
    return "".join(f"%{b:02X}" if upper else f"%{b:02x}" for b in s.encode())


def forms(key: str) -> dict[str, str]:
    """The key as a server (or a report format) can give it back."""
    js = json.dumps(key)[1:-1]
    u_all = "".join(f"\\u{ord(c):04x}" for c in key)
    return {
        "literal": key,
        "json": js,
        "json-ascii": json.dumps(key, ensure_ascii=True)[1:-1],
        "json-twice": json.dumps(json.dumps(key))[1:-1],
        "u-lower": u_all,
        "u-upper": u_all.upper().replace("\\U", "\\u"),
        "pct-upper": _pct(key),
        "pct-lower": _pct(key, upper=False),
        "pct-twice": _pct(key).replace("%", "%25"),
        "html-named": html.escape(key),
        "html-hex": "".join(f"&#x{ord(c):X};" for c in key),
        "html-dec": "".join(f"&#{ord(c)};" for c in key),
        "split-newline": key[:5] + "\n" + key[5:],
        "split-crlf-escaped": key[:7] + "\\r\\n" + key[7:],
        "split-spaces": " ".join(key),
        "split-pct-newline": key[:4] + "%0A" + key[4:],
        "repr": repr(key)[1:-1],
    }


def _normalise(text: str) -> str:
    """Undo every transformation `forms` knows, independently of `vllm_station.redact`."""
    for _ in range(3):
        text = html.unescape(text)
        text = re.sub(r"\\+[uU]([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)
        text = re.sub(r"\\+x([0-9a-fA-F]{2})", lambda m: chr(int(m[1], 16)), text)
        text = re.sub(r"\\+[nrt]", "", text)
        text = unquote(text)
    return re.sub(r"[\s\\]", "", text)


def _leaks(text: str, key: str) -> bool:
    return _normalise(key) in _normalise(text)


def test_the_detector_finds_every_form() -> None:
    """`_leaks` is the judge of the tests below: it must see each form (else they could not fail)."""
    for key in (KEY, ODD_KEY):
        for name, form in forms(key).items():
            assert _leaks(f"before {form} after", key), name
        assert not _leaks("before SK9Q7ZK3 after", key)


@pytest.mark.parametrize("key", [KEY, ODD_KEY], ids=["plain", "odd"])
@pytest.mark.parametrize("name", list(forms(KEY)))
def test_redact_masks_every_form(key: str, name: str) -> None:
    redact.register(key)
    form = forms(key)[name]
    masked = redact.redact(f"model id: m-{form}-x, again {form}.")
    assert not _leaks(masked, key), masked
    assert masked.startswith("model id: m-") and masked.endswith(".")
    # and through a report format: JSON-dumped (escaped again) and HTML-escaped
    assert not _leaks(redact.redact(json.dumps({"m": form})), key)
    assert not _leaks(redact.redact(html.escape(form)), key)


@pytest.mark.parametrize("key", [KEY, ODD_KEY], ids=["plain", "odd"])
@pytest.mark.parametrize("name", list(forms(KEY)))
def test_stream_masks_a_form_split_over_writes_and_lines(key: str, name: str) -> None:
    """The stdout/stderr wrapper: a form written in two pieces, flushed in between, is still masked,
    wherever the cut falls (inside a `%XX`, a `\\u00XX`, an `&#…;`, next to a line break)."""
    redact.register(key)
    form = forms(key)[name]
    for cut in range(1, len(form)):
        raw = io.StringIO()
        stream = redact.RedactingStream(raw)
        stream.write("answer: " + form[:cut])
        stream.flush()
        stream.write(form[cut:] + " done\n")
        stream.flush()
        stream.close_pending()
        assert not _leaks(raw.getvalue(), key), (cut, raw.getvalue())
        assert raw.getvalue().startswith("answer: ") and raw.getvalue().endswith(" done\n")


def test_a_progress_line_is_not_held_back() -> None:
    """Holding back only what could start a secret: ordinary text reaches the terminal on flush."""
    redact.register(KEY)
    raw = io.StringIO()
    stream = redact.RedactingStream(raw)
    stream.write("c8 12/40 done 50.0 tok/s")
    stream.flush()
    assert raw.getvalue() == "c8 12/40 done 50.0 tok/s"


# ---- real commands against a server that echoes the key --------------------------------------------


def _echoing_server(key: str) -> FaultServer:
    model = "m-" + " | ".join(forms(key).values())
    srv = FaultServer(fake_openai_routes(model))
    srv.route("GET", "/version", Reply(json={"version": "0.1 " + forms(key)["json-twice"]}))
    return srv


def _all_written(root: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


def test_golive_files_and_terminal_hold_no_form_of_the_key_or_the_url_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model id and /version carry every form of the key; then a run with `http://op:PASSWORD@`."""
    password = "Hunter2%22Hunter2"  # a `"` in it, percent-encoded in the URL
    monkeypatch.setenv("STATION_API_KEY", KEY)
    with _echoing_server(KEY) as srv:
        code = main(["golive", "--base-url", srv.url, "--skip", "tools,agent,needle,bench", "--quiet",
                     "--out", str(tmp_path / "key")])  # fmt: skip
        assert srv.requests[-1].headers.get("authorization") == f"Bearer {KEY}"
        key_cap = capsys.readouterr()
        monkeypatch.delenv("STATION_API_KEY")
        url = srv.url.replace("http://", f"http://op:{password}@")
        code2 = main(["golive", "--base-url", url, "--skip", "tools,agent,needle,bench", "--quiet",
                      "--out", str(tmp_path / "url")])  # fmt: skip
        url_cap = capsys.readouterr()
    assert code == 0 and code2 == 0, key_cap.err + url_cap.err
    for run, cap in (("key", key_cap), ("url", url_cap)):
        written = _all_written(tmp_path / run)
        assert sorted(Path(p).name for p in written) == ["golive.html", "golive.json"]
        report = json.loads(written[str(tmp_path / run / "golive.json")])
        assert report["model"].startswith("m-") and "***" in report["model"]  # the model id, masked
        for name, text in {"stdout": cap.out, "stderr": cap.err, **written}.items():
            assert not _leaks(text, KEY), (run, name)
            assert not _leaks(text, unquote(password)) and password not in text, (run, name)


def test_gates_output_and_json_hold_no_form_of_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATION_API_KEY", KEY)
    report = tmp_path / "tools.json"
    with _echoing_server(KEY) as srv:
        code = main(["gates", "tools", "--base-url", srv.url, "--quiet", "--json", "--output", str(report),
                     "--case", "multiple-weather"])  # fmt: skip
    cap = capsys.readouterr()
    assert code in (0, 1), cap.err
    assert json.loads(report.read_text())["model"].startswith("m-")
    for name, text in {"stdout": cap.out, "stderr": cap.err, "--output": report.read_text()}.items():
        assert not _leaks(text, KEY), name


def _is_png(path: Path) -> bool:
    return path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_bench_plots_draw_a_math_model_name_as_plain_masked_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model id in matplotlib math syntax (`$\\frac{`) and holding the key: the run's plots are drawn
    (no crash after the run), and every text drawn in them is masked (read from the figures as drawn:
    a PNG holds pixels, not text)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    drawn: list[str] = []
    real = output.save_figure

    def spy(fig: Figure, *args: object, **kwargs: object) -> bytes:
        data = real(fig, *args, **kwargs)  # type: ignore[arg-type]
        drawn.extend(t.get_text() for t in fig.findobj(Text))
        return data

    monkeypatch.setattr(output, "save_figure", spy)
    monkeypatch.setenv("STATION_API_KEY", KEY)
    model = "$\\frac{a}{" + forms(KEY)["pct-lower"] + "$^_"
    plots = tmp_path / "plots"
    with FaultServer(fake_openai_routes(model)) as srv:
        code = main(["bench", "sweep", "--base-url", srv.url, "-c", "1", "--warmup", "0", "--requests", "2",
                     "--no-progress", "--no-ignore-eos", "--plots", str(plots),
                     "--output", str(tmp_path / "b.json")])  # fmt: skip
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "Traceback" not in cap.err
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["latency-cdf.png", "throughput-ttft.png"]
    assert all(_is_png(p) for p in plots.iterdir())
    titles = [t for t in drawn if t.startswith("$\\frac")]
    assert titles and all("***" in t and not _leaks(t, KEY) for t in titles), drawn


# ---- real files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "missing-parent"])
def test_outputs_are_checked_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.delenv("STATION_API_KEY", raising=False)
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:
        target = tmp_path / "no" / "such" / "file.json"
    with FaultServer(fake_openai_routes("fake")) as srv:
        calls = {
            "gates --output": ["gates", "tools", "--base-url", srv.url, "--output", str(target)],
            "bench --output": ["bench", "sweep", "--base-url", srv.url, "--output", str(target)],
        }
        if kind == "fifo":  # golive's --out is a directory: a FIFO where golive.json goes
            out = tmp_path / "golive-out"
            out.mkdir()
            os.mkfifo(out / "golive.json")
            calls["golive --out"] = ["golive", "--base-url", srv.url, "--out", str(out)]
        elif kind == "missing-parent":
            calls["golive --out"] = ["golive", "--base-url", srv.url, "--out", str(tmp_path / "f" / "x")]
            (tmp_path / "f").write_text("a file, not a directory")
        for name, argv in calls.items():
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 2, (name, err)
            assert "nothing was run" in err, (name, err)
            assert srv.requests == [], (name, [r.path for r in srv.requests])
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_replace_never_replaces_a_fifo_or_device_node(tmp_path: Path) -> None:
    fifo = tmp_path / "keys.map"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/null"), Path("/dev/full")):
        before = os.lstat(path)
        with pytest.raises(output.OutputError, match="it is not replaced"):
            output.replace_text(path, "KEY NAME;\n", option="--out", mode=0o400)
        after = os.lstat(path)
        assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.map"]  # no temporary file left


def test_gateway_keys_out_dev_full_is_refused_and_stays_a_device(tmp_path: Path) -> None:
    """The reported bug: `gateway keys --out /dev/full` replaced the device node with the key map. Now
    refused when parsed (exit 2); `replace_text` refuses it again at write time (the test above)."""
    if os.geteuid() != 0:
        pytest.skip("only root could replace /dev/full; as another user the rename fails anyway")
    keyfile = tmp_path / "ops"
    keyfile.write_text("K" * 32 + "\n")
    before = os.lstat("/dev/full")
    r = subprocess.run(
        [sys.executable, "-m", "vllm_station", "gateway", "keys", "--key", f"ops={keyfile}",
         "--out", "/dev/full", "--upstream-out", str(tmp_path / "up.map")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "/dev/full: is a character device, not a regular file" in r.stderr, r.stderr
    after = os.lstat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert "Traceback" not in r.stderr


def test_write_text_writes_a_char_device_in_place_and_refuses_a_fifo(tmp_path: Path) -> None:
    output.write_text(Path("/dev/null"), "x", option="--json")
    with pytest.raises(output.OutputError, match="/dev/full: No space left on device"):
        output.write_text(Path("/dev/full"), "x", option="--json")
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(output.OutputError, match="is a FIFO"):  # never blocks: opened non-blocking
        # a FIFO with a reader open would accept the open; without one, ENXIO: either way refused
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            output.write_text(fifo, "x", option="--json")
        finally:
            os.close(fd)


@pytest.mark.parametrize("redirect", ["closed", "full"])
def test_a_closed_or_full_stdout_is_a_clear_exit(redirect: str) -> None:
    argv = [sys.executable, "-m", "vllm_station", "gates", "list"]
    if redirect == "closed":
        r = subprocess.run(argv, stdout=None, stderr=subprocess.PIPE, text=True, timeout=60,
                           preexec_fn=lambda: os.close(1))  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "stdout is closed" in r.stderr
    else:
        with open("/dev/full", "w") as full:
            r = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        assert r.returncode == 1, r.stderr
        message = "station: error: cannot write to stdout (No space left on device)"
        assert r.stderr.strip().splitlines() == [message]
    assert "Traceback" not in r.stderr
