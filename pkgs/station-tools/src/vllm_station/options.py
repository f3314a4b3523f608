"""The options every verb shares, defined once: one name, one default, one help, one type each.

    from vllm_station import options
    def configure(parser):
        add_endpoint_args(parser)          # api.args: --base-url, --api-key-file, --ca-file (from here)
        options.add_model(parser)
        options.add_timeout(parser, default=60.0, what="each request")
        options.add_json(parser)
        options.add_output(parser)         # --output FILE: the JSON report, also written to a file
        options.add_quiet(parser)

The vocabulary (docs/architecture.md has the table):

=================  ==========================================================================================
`--base-url URL`   the server; default `$STATION_BASE_URL`, else `http://127.0.0.1:8000` (vLLM on this
                   station at the serve module's default port); golive: its `--config`'s `baseUrl` first
`--api-key-file`   the key (else `$STATION_API_KEY`, else `$OPENAI_API_KEY`, else none)
`--ca-file PEM`    the CA bundle https is verified against
`--model NAME`     the served model (default: what /v1/models lists)
`--timeout S`      seconds (what they bound is said in each verb's help; the type and range are here)
`--json`           a switch: the report as JSON on stdout. Never a file name.
`--output FILE`    the JSON report, also written to FILE; in a verb that exists to write a file (`gateway
                   keys`), that file
`--out DIR`        a directory of report files (golive)
`--quiet`          no progress lines on stderr (`--no-progress`: a hidden alias)
`--debug`          debug log on stderr (the `station` parser's, for every verb)
=================  ==========================================================================================

The verbs that judge a log (nccl-check, weights-check) share `add_log_source` (--unit/--log),
`add_log_wait` (--wait/--interval) and `add_all_invocations`; `host.journal.log_reader` reads what they name.

Every option made here is tagged (`SHARED_ATTR` on its argparse action): tests/test_options_vocabulary.py
walks every verb's parser and fails on a shared name not made here, or made with another default, type
or help.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from vllm_station import argtypes, output

SHARED_ATTR = "station_shared_option"  # set on every argparse action made here: the option's name

BASE_URL_ENV = "STATION_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:8000"  # services.vllm-station.serve's default port, on this station
BASE_URL_HELP = (
    f"the server: its root or OpenAI /v1 URL, http or https (default ${BASE_URL_ENV}, else "
    f"{DEFAULT_BASE_URL}: vLLM on this station at the serve module's default port)"
)
BASE_URL_FROM_CONFIG_HELP = BASE_URL_HELP[:-1] + "; first: --config's baseUrl)"
KEY_HELP = "file holding the API key (default: $STATION_API_KEY, else $OPENAI_API_KEY, else no key)"
CA_HELP = "verify https against this CA bundle only (a gateway with a private CA); default: system CAs"
MODEL_HELP = "served model name (default: the model /v1/models lists)"
MODEL_FROM_CONFIG_HELP = "served model name (default: --config's model, else the model /v1/models lists)"
QUIET_HELP = "no progress lines on stderr"
OUTPUT_HELP = "also write the JSON report to this file"
OUTPUT_WHAT_HELP = "write {what} to this file"  # a verb that exists to write a file (gateway keys)
TIMEOUT_METAVAR = "S"


def default_base_url() -> str:
    """`$STATION_BASE_URL`, else vLLM on this station at the serve module's default port."""
    return os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL


def _tag(action: argparse.Action, name: str) -> argparse.Action:
    setattr(action, SHARED_ATTR, name)
    return action


def add_base_url(parser: argparse.ArgumentParser, *, from_config: bool = False) -> None:
    """--base-url: the one default; with `from_config` (golive) None, the verb reads its config first and
    then `default_base_url()`."""
    _tag(
        parser.add_argument(
            "--base-url",
            default=None if from_config else default_base_url(),
            metavar="URL",
            help=BASE_URL_FROM_CONFIG_HELP if from_config else BASE_URL_HELP,
        ),
        "--base-url",
    )


def add_api_key_file(parser: argparse.ArgumentParser) -> None:
    _tag(parser.add_argument("--api-key-file", metavar="FILE", help=KEY_HELP), "--api-key-file")


def add_ca_file(parser: argparse.ArgumentParser) -> None:
    _tag(parser.add_argument("--ca-file", metavar="PEM", help=CA_HELP), "--ca-file")


def add_model(parser: argparse.ArgumentParser, *, from_config: bool = False) -> None:
    help_text = MODEL_FROM_CONFIG_HELP if from_config else MODEL_HELP
    _tag(parser.add_argument("--model", metavar="NAME", default=None, help=help_text), "--model")


def add_timeout(
    parser: argparse.ArgumentParser,
    *,
    default: float | None,
    what: str,
    hi: float = argtypes.DAY,
    zero_ok: bool = False,
    required: bool = False,
) -> None:
    """--timeout S: seconds (`what` they bound, e.g. "each request"); the type and metavar are the same
    everywhere, the default and bound are the verb's."""
    shown = "" if default is None else f" (default {default:g})"
    kwargs: dict[str, Any] = {"required": True} if required else {"default": default}
    _tag(
        parser.add_argument(
            "--timeout",
            type=argtypes.seconds(hi=hi, zero_ok=zero_ok),
            metavar=TIMEOUT_METAVAR,
            help=f"seconds: {what}{shown}",
            **kwargs,
        ),
        "--timeout",
    )


def add_json(parser: argparse.ArgumentParser, *, what: str = "the report") -> None:
    """--json: a switch, `what` as JSON on stdout. Never a file name (that is --output)."""
    _tag(
        parser.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout"),
        "--json",
    )


def add_output(
    parser: argparse._ActionsContainer,
    *,
    what: str | None = None,
    required: bool = False,
    replaced: bool = False,
    old_name: str | None = None,
) -> None:
    """--output FILE: a file the verb writes (checked when parsed, written by `vllm_station.output`). By
    default the JSON report, also written to a file; `what` names another file a verb exists to write
    (`gateway keys`: "the key map"). `replaced`: the file is replaced whole (a device node is refused).
    `old_name` (`--out`): the verb's old name of the option, kept hidden, saying on stderr that it is."""
    kind = output.out_file(replaced=replaced)
    help_text = OUTPUT_HELP if what is None else OUTPUT_WHAT_HELP.format(what=what)
    if old_name is not None:
        # one of the two is required: the group's error names --output (the old name is hidden)
        group = parser.add_mutually_exclusive_group(required=required)
        group.add_argument(
            old_name, dest="output", type=kind, metavar="FILE", action=_OldName, help=argparse.SUPPRESS
        )
        parser, required = group, False
    _tag(
        parser.add_argument(
            "--output", type=kind, metavar="FILE", default=None, required=required, help=help_text
        ),
        "--output",
    )


class _OldName(argparse.Action):
    """An option's old name: stores as the new one does, and says so on stderr (once a release)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: {option_string} is the old name of --output (deprecated: it goes in a later "
            "release; write --output)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """--quiet (dest `quiet`); `--no-progress`, its old name in bench, stays a hidden alias."""
    _tag(parser.add_argument("--quiet", action="store_true", help=QUIET_HELP), "--quiet")
    _tag(
        parser.add_argument("--no-progress", dest="quiet", action="store_true", help=argparse.SUPPRESS),
        "--quiet",
    )


# ---- the verbs that judge a log (nccl-check, weights-check): where it is, and how long to wait --------


def add_log_source(container: argparse._ActionsContainer) -> None:
    """--unit UNIT (the journal of a systemd unit) or --log FILE; in a verb's mutually exclusive group
    when it makes them one choice."""
    container.add_argument(
        "--unit",
        type=argtypes.unit_name,
        metavar="UNIT",
        help="read the journal of this systemd unit (current start)",
    )
    container.add_argument("--log", metavar="FILE", help="read this log file (e.g. a saved container log)")


def add_log_wait(parser: argparse.ArgumentParser, *, until: str) -> None:
    """--wait SECONDS (poll `until` … or the time is up) and --interval between the polls."""
    parser.add_argument(
        "--wait",
        type=argtypes.seconds(zero_ok=True),
        metavar="SECONDS",
        help=f"poll until {until} or the time is up",
    )
    parser.add_argument(
        "--interval",
        type=argtypes.seconds(hi=3600),
        default=5.0,
        help="seconds between polls with --wait (5)",
    )


def add_all_invocations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all-invocations",
        action="store_true",
        help="with --unit: read the unit's whole journal, not the current start",
    )
