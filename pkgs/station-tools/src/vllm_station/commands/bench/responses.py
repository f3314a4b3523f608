"""`--save-responses DIR`: every response of every phase as it came off the wire, with its timings.

One JSON Lines file per level and phase, written as soon as the phase ends (so a run stopped by Ctrl-C
keeps the phases it finished): `DIR/<level>-warmup.jsonl`, `DIR/<level>-repeat<R>.jsonl`. One line per
request, in the order the requests were issued:

    {"level": "c8", "phase": "repeat1", "index": 0, "prompt": 3,
     "sent_at": 1767225600.123456,            # wall clock (Unix seconds) when the request was sent
     "queue_s": 0.0002, "headers_s": 0.051, "end_s": 1.32,   # due → sent; sent → headers; sent → end
     "status": 200, "ok": true, "failure": null, "detail": "",
     "ttft_s": 0.052, "e2e_s": 1.31, "output_tokens": 128, "prompt_tokens": 131,
     "reads": [[0.052, 412], [0.062, 203], …],  # per network read: seconds after sending, body bytes
     "body": "data: {…}\\n\\ndata: [DONE]\\n\\n"}   # the response body, UTF-8 (invalid bytes as U+FFFD)

`prompt` is the line's index in `--prompts` (0-based; null for generated prompts). Bodies and details
pass through `vllm_station.redact` like every other output. A write that fails (a full disk) stops the
saving, not the run: the report's notes say so.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station import output
from vllm_station.commands.bench.parse import RequestResult
from vllm_station.commands.bench.wire import RawResult
from vllm_station.redact import redact

log = logging.getLogger("vllm_station.commands.bench")


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


@dataclass
class ResponseLog:
    directory: Path
    error: str | None = None
    files: int = 0

    def open(self) -> None:
        try:
            output.make_dir("--save-responses", self.directory)
        except output.OutputError as exc:
            self.error = str(exc)

    def write_phase(
        self,
        level: str,
        phase: str,
        raws: list[RawResult],
        parsed: list[RequestResult],
        prompt_ids: list[int] | None,
        clock: tuple[float, float],
    ) -> None:
        """`clock` = (time.time(), time.perf_counter()) taken together before the phase."""
        if self.error is not None:
            return
        wall0, perf0 = clock
        path = self.directory / f"{level}-{phase}.jsonl"
        by_index = {p.index: p for p in parsed}
        lines: list[str] = []
        for raw in raws:
            p = by_index.get(raw.index)
            sent = raw.t_sent or raw.t_start
            rec: dict[str, Any] = {
                "level": level,
                "phase": phase,
                "index": raw.index,
                "prompt": prompt_ids[raw.index] if prompt_ids is not None else None,
                "sent_at": _r(wall0 + (sent - perf0)),
                "queue_s": _r(max(0.0, sent - raw.t_sched)),
                "headers_s": _r(raw.t_headers - sent) if raw.t_headers else None,
                "end_s": _r(raw.t_end - sent),
                "status": raw.status or None,
                "ok": p.ok if p else False,
                "failure": p.failure if p else raw.error_kind,
                "detail": redact(p.detail if p else raw.error),
                "ttft_s": _r(p.ttft) if p else None,
                "e2e_s": _r(p.e2e) if p else None,
                "output_tokens": p.output_tokens if p else 0,
                "prompt_tokens": p.prompt_tokens if p else None,
                "reads": [[_r(t - sent), len(d)] for t, d in raw.chunks],
                "body": redact(b"".join(d for _, d in raw.chunks).decode("utf-8", errors="replace")),
            }
            lines.append(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
        try:
            output.write_text(path, "\n".join(lines) + ("\n" if lines else ""), option="--save-responses")
        except output.OutputError as exc:
            self.error = f"{exc}; later phases were not saved"
            log.warning("%s", self.error)
            return
        self.files += 1


def clock() -> tuple[float, float]:
    return time.time(), time.perf_counter()
