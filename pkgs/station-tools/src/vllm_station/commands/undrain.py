"""`station undrain`: back into the gateways' rotation after `station drain` (the operator's flag only).

    station undrain [--json]

The stopping flag (the serving unit's, vllm_station.drainflag) is not touched: systemd removes it when
the stop is over, and the station is routed again once its engine answers. Undraining a station that is
not drained changes nothing. Exit codes: 0 done (or already so), 1 the flag could not be removed.
"""

from __future__ import annotations

import argparse
import sys

from vllm_station import options
from vllm_station.drainflag import drain_flag, remove_flag, render, status
from vllm_station.errors import EXIT_OK


def configure(parser: argparse.ArgumentParser) -> None:
    options.add_json(parser, what="the status")


def run(args: argparse.Namespace) -> int:
    changed = remove_flag(drain_flag())
    st = status(changed)
    print(render(st, args.json))
    if st.stopping.present:
        print(f"station undrain: the serving unit is stopping ({st.stopping.path}): "
              "it is routed again after its next start", file=sys.stderr)  # fmt: skip
    return EXIT_OK
