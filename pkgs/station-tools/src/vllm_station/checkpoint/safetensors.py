"""The safetensors header reader: 8-byte little-endian length, a JSON header, then the data area.

Only the header is read (seconds for hundreds of GB). `read_shard_header` checks that every tensor's
offsets are sane, its byte length fits its dtype and shape, and that the tensors tile the data area
exactly up to the end of the file (a truncated or padded shard fails).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from vllm_station.checkpoint.files import join_limited, read_error

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit

# bits per element; unknown dtypes skip the size check (still offsets and coverage)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip


@dataclass
class TensorInfo:
    dtype: str
    shape: list[int]
    begin: int
    end: int


class ShardError(Exception):
    """One shard's header is unreadable or inconsistent (the message is the problem)."""


def read_shard_header(path: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header and check it against the file size. Raises ShardError."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise ShardError(f"file is {size} bytes, too short for a safetensors header (truncated?)")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > MAX_HEADER_BYTES:
                raise ShardError(
                    f"header length {header_len} exceeds {MAX_HEADER_BYTES}: not a safetensors file"
                )
            if 8 + header_len > size:
                raise ShardError(
                    f"header length {header_len} runs past the end of the file ({size} bytes): truncated?"
                )
            raw = f.read(header_len)
    except OSError as exc:
        raise ShardError(read_error(exc)) from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise ShardError("header is not a JSON object")
    data_len = size - 8 - header_len
    tensors: dict[str, TensorInfo] = {}
    bad: list[str] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
            if not (isinstance(dtype, str) and isinstance(shape, list)):
                raise TypeError
            if not all(isinstance(d, int) and d >= 0 for d in shape):
                raise TypeError
            if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end):
                raise TypeError
        except (KeyError, TypeError, ValueError):
            bad.append(f"tensor {name!r} has a malformed entry {json.dumps(entry)[:120]}")
            continue
        bits = DTYPE_BITS.get(dtype)
        if bits is not None:
            count = 1
            for d in shape:
                count *= d
            if (count * bits + 7) // 8 != end - begin:
                bad.append(
                    f"tensor {name!r} ({dtype} {shape}) needs {(count * bits + 7) // 8} bytes, "
                    f"its offsets span {end - begin}"
                )
        tensors[name] = TensorInfo(dtype=dtype, shape=shape, begin=begin, end=end)
    if bad:
        raise ShardError(join_limited(bad))
    pos = 0
    for name, t in sorted(tensors.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if t.begin != pos:
            what = "overlaps the previous tensor" if t.begin < pos else f"leaves a {t.begin - pos}-byte hole"
            raise ShardError(f"tensor {name!r} at offset {t.begin} {what} (expected {pos})")
        pos = t.end
    if pos > data_len:
        raise ShardError(
            f"truncated: the header describes {pos} data bytes, the file holds {data_len} "
            f"({pos - data_len} missing; file size {size})"
        )
    if pos < data_len:
        raise ShardError(f"{data_len - pos} unexpected bytes after the last tensor (file size {size})")
    return tensors
