"""One vocabulary and one exit-code table for every verb, found from `cli.COMMANDS` (a verb added later is
checked without being listed).

1. The shared flags (`vllm_station.options`): every (sub)command's `--base-url`, `--api-key-file`,
   `--ca-file`, `--model`, `--timeout`, `--json`, `--output`, `--quiet` is the layer's (tagged by it), with
   the layer's default, help, type and metavar; `--json` is a switch everywhere.
2. The exit codes (`errors.EXIT_TABLE`): every HTTP verb against the same real, in-process servers for the
   shared situations — a model the server does not serve, a refused API key, a port where another program
   answers (not HTTP), a port where nothing listens, a bad argument — gives the table's code.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import free_port
from simserver import SimServer

from vllm_station import argtypes, cli, options, output
from vllm_station.errors import EXIT_FAIL, EXIT_UNREACHABLE, EXIT_USAGE
from vllm_station.sim.config import SimConfig

SHARED = (
    "--base-url", "--api-key-file", "--ca-file", "--model", "--timeout", "--json", "--output", "--quiet",
)  # fmt: skip

# (command, option) whose same-named option means something else, with why. Strict: an entry whose option
# is gone or became the layer's fails the test, and goes.
OTHER_MEANING = {
    ("simulate", "--model"): "the server side: the model name it serves",
    ("simulate", "--api-key-file"): "the server side: the key it requires",
    ("preflight", "--model"): "an override of preflight.json's model (a repo id or path), not a served name",
}
# Options of verbs another branch is reworking now; they move to the layer when it lands. Strict, as above.
PENDING = {
    ("pair wait-worker", "--timeout"): "commands/pair/ is being reworked (issue 29)",
    ("pair wait-head-stop", "--timeout"): "commands/pair/ is being reworked (issue 29)",
}


def _leaves(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, f"{path} {name}")


def all_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for name in cli.COMMANDS:
        top = cli.build_parser(only=name)
        (action,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        found += list(_leaves(action.choices[name], name))
    return found


COMMANDS = all_commands()


def _shared_actions() -> Iterator[tuple[str, str, argparse.Action]]:
    for path, parser in COMMANDS:
        for action in parser._actions:
            for opt in action.option_strings:
                if opt in SHARED:
                    yield path, opt, action


def _what_help(h: str) -> bool:
    """`--output FILE` of a verb that exists to write a file: the layer's wording, naming the file."""
    head, _, tail = options.OUTPUT_WHAT_HELP.partition("{what}")
    return h.startswith(head) and h.endswith(tail) and len(h) > len(head) + len(tail)


def test_every_shared_flag_is_the_layers() -> None:
    """A verb that adds its own `--json`, `--timeout`, … (another help, default or type) fails here."""
    seen: set[tuple[str, str]] = set()
    own, wrong = [], []
    for path, opt, action in _shared_actions():
        seen.add((path, opt))
        if (path, opt) in OTHER_MEANING or (path, opt) in PENDING:
            assert getattr(action, options.SHARED_ATTR, None) is None, f"{path} {opt}: now the layer's"
            continue
        if getattr(action, options.SHARED_ATTR, None) != opt:
            own.append(f"{path} {opt}")
            continue
        h = action.help or ""
        base_url_forms = (
            (options.default_base_url(), options.BASE_URL_HELP, "URL"),
            (None, options.BASE_URL_FROM_CONFIG_HELP, "URL"),
        )
        problem = {
            "--base-url": (action.default, h, action.metavar) not in base_url_forms,
            "--api-key-file": (action.default, h) != (None, options.KEY_HELP),
            "--ca-file": (action.default, h) != (None, options.CA_HELP),
            "--model": action.default is not None
            or h not in (options.MODEL_HELP, options.MODEL_FROM_CONFIG_HELP),
            "--timeout": not isinstance(action.type, argtypes.Bounded)
            or action.type.what != "a number of seconds"
            or action.metavar != options.TIMEOUT_METAVAR
            or not h.startswith("seconds: "),
            "--json": action.nargs != 0
            or action.default is not False
            or not h.endswith(" as JSON on stdout"),
            "--output": not isinstance(action.type, output.OutPath)
            or action.metavar != "FILE"
            or not (h == options.OUTPUT_HELP or _what_help(h)),
            "--quiet": action.nargs != 0 or action.dest != "quiet" or h != options.QUIET_HELP,
        }[opt]
        if problem:
            wrong.append(f"{path} {opt}: default={action.default!r} help={h!r}")
    assert not own, "shared flags not made by vllm_station.options:\n" + "\n".join(own)
    assert not wrong, "shared flags unlike the layer's:\n" + "\n".join(wrong)
    stale = sorted({*OTHER_MEANING, *PENDING} - seen)
    assert not stale, f"exceptions for options that no longer exist: {stale}"


def test_every_http_verb_has_the_endpoint_vocabulary() -> None:
    """Every verb with --base-url has the key, the CA, --model and --json; the default is the same one."""
    http = [(p, parser) for p, parser in COMMANDS
            if "--base-url" in {o for a in parser._actions for o in a.option_strings}]  # fmt: skip
    names = {p for p, _ in http}
    assert {"smoke", "probe", "wait-ready", "bench", "watchdog", "golive", "gates tools"} <= names
    for path, parser in http:
        opts = {o for a in parser._actions for o in a.option_strings}
        missing = {"--api-key-file", "--ca-file", "--model", "--json"} - opts
        assert missing == set(), f"{path}: no {sorted(missing)}"


def test_json_is_a_switch_and_bench_says_so() -> None:
    """`station bench --json out.json` (the old `--json FILE`) is a usage error that names --output, not a
    run that writes a file called like its mode."""
    for path, opt, action in _shared_actions():
        if opt == "--json":
            assert action.nargs == 0, f"{path} --json takes a value"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["bench", "--json", "out.json"]) == EXIT_USAGE
    assert "--json is a switch" in err.getvalue() and "--output FILE" in err.getvalue()


def test_bench_json_prints_the_report_on_stdout(tmp_path: Path) -> None:
    """`--json` (a switch): the report on stdout, the table on stderr; `--output FILE` the same report."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["bench", "-c", "1", "--requests", "1", "--warmup", "0", "--output-len", "4", "--quiet"]
    with SimServer() as sim, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--base-url", sim.base_url, "--json", "--output", str(tmp_path / "r.json")])
    assert code == 0, err.getvalue()
    report = json.loads(out.getvalue())
    assert report["schema"] == "station-bench/1" and report["levels"][0]["ok"] == 1
    assert json.loads((tmp_path / "r.json").read_text())["levels"] == report["levels"]
    assert "level" in err.getvalue()  # the table, on stderr when --json has stdout


def test_no_progress_is_a_hidden_alias_of_quiet() -> None:
    parser = dict(COMMANDS)["bench"]
    assert parser.parse_args(["--no-progress"]).quiet is True
    assert "--no-progress" not in parser.format_help()


def test_golive_falls_back_to_the_shared_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No --base-url and a config without baseUrl: the one default, not an error of golive's own."""
    monkeypatch.setenv(options.BASE_URL_ENV, f"http://127.0.0.1:{free_port()}")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["golive", "--quiet", "--skip", "tools,agent,needle,bench"])
    assert code == EXIT_UNREACHABLE, err.getvalue()


# ---- the exit-code table, every HTTP verb against the same situations ----------------------------------


class NotHttp:
    """A port where another program answers: an SSH banner line, then the connection closes."""

    def __enter__(self) -> NotHttp:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with contextlib.suppress(OSError), conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


# each HTTP verb, with what keeps its run short; watchdog and the pair's verbs are left out: a daemon's
# verdicts are its output (it exits 0 after --cycles), and the pair waits for a peer, not a model server
VERBS = {
    "smoke": ["smoke"],
    "probe": ["probe"],
    "wait-ready": ["wait-ready", "--interval", "1"],
    "bench": ["bench", "-c", "1", "--requests", "1", "--warmup", "0", "--output-len", "4", "--quiet"],
    "gates tools": ["gates", "tools", "--quiet"],
    "gates agent": ["gates", "agent", "--quiet"],
    "gates needle": ["gates", "needle", "--quiet", "--lengths", "2000"],
    "golive": ["golive", "--quiet", "--skip", "tools,agent,needle,bench"],
}
KEY = "sk-vocabulary-right"
SITUATIONS = {  # situation -> (the table's code, its arguments; {sim}, {key}, {badkey}, {refused}, {nothttp})
    "wrong model": (EXIT_FAIL, ["--base-url", "{sim}", "--api-key-file", "{key}", "--model", "nope"]),
    "wrong key": (EXIT_FAIL, ["--base-url", "{sim}", "--api-key-file", "{badkey}"]),
    "not HTTP": (EXIT_FAIL, ["--base-url", "{nothttp}"]),
    "refused": (EXIT_UNREACHABLE, ["--base-url", "{refused}"]),
    "bad argument": (EXIT_USAGE, ["--base-url", "{sim}", "--timeout", "nan"]),
}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    d = tmp_path_factory.mktemp("vocab")
    (d / "key").write_text(KEY + "\n")
    (d / "badkey").write_text("sk-vocabulary-wrong\n")
    with SimServer(SimConfig(api_key=KEY)) as sim, NotHttp() as other:
        yield {
            "sim": sim.base_url,
            "key": str(d / "key"),
            "badkey": str(d / "badkey"),
            "refused": f"http://127.0.0.1:{free_port()}",
            "nothttp": f"http://127.0.0.1:{other.port}",
        }


@pytest.mark.parametrize("situation", list(SITUATIONS))
@pytest.mark.parametrize("verb", list(VERBS))
def test_the_same_situation_gives_the_same_code(places: dict[str, str], verb: str, situation: str) -> None:
    want, extra = SITUATIONS[situation]
    argv = [*VERBS[verb], *(a.format(**places) for a in extra)]
    if "--timeout" not in extra:
        argv += ["--timeout", "5"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    assert code == want, f"station {' '.join(argv)}: exit {code}, the table says {want}\n{err.getvalue()}"
    assert "Traceback" not in err.getvalue()


def test_the_table_covers_every_http_verb() -> None:
    """A new HTTP verb joins VERBS (or says here why not): the table test is not a sample."""
    http = {
        p for p, parser in COMMANDS if "--base-url" in {o for a in parser._actions for o in a.option_strings}
    }
    left_out = {"watchdog": "a daemon: its verdicts are its output, exit 0 after --cycles"}
    assert http - set(VERBS) - set(left_out) == set(), "an HTTP verb missing from the exit-code table test"
