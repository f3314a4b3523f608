"""A check's verdict, one vocabulary for every verb that judges: preflight's checks, weights-check and
nccl-check (their `--json` writes the value: "PASS", "WARN", …).

    from vllm_station.status import Status, worst
    worst([Status.PASS, Status.WARN])  # Status.WARN

- PASS: what was measured meets the threshold.
- WARN: it serves, but not as it should (a skewed split, IB without GPUDirect RDMA, a close margin).
- FAIL: it must not go on as it is; the verb exits 1.
- SKIP: this check does not apply here, or cannot look (no NVML, vLLM's CPU build); not a failure.
- PENDING: no verdict yet: the evidence is not there (a log without the line it waits for); exit 4.

A verb says which of them it can give (preflight gives no PENDING); `VERDICTS` are the four a finished
check gives, in `worst`'s order.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Status(enum.StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    PENDING = "PENDING"


# The verdicts of a finished check, mildest first: `worst` ranks by this order.
VERDICTS: tuple[Status, ...] = (Status.PASS, Status.SKIP, Status.WARN, Status.FAIL)


def severity(status: Status) -> int:
    """The rank of a finished check's verdict (PASS 0 … FAIL 3); PENDING has none (ValueError)."""
    return VERDICTS.index(status)


def worst(statuses: Iterable[Status], default: Status = Status.SKIP) -> Status:
    """The worst of finished checks' verdicts (FAIL > WARN > SKIP > PASS); `default` for none."""
    return max(statuses, key=severity, default=default)
