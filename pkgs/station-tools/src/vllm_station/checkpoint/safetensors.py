"""The safetensors header reader: 8-byte little-endian length, a JSON header, then the data area.

Only the header is read (seconds for hundreds of GB). `read_shard_header` accepts a header only when the
`safetensors` library (0.8) would open the file, by the library's own rules:

- the length is at most 100,000,000 bytes and the header fits in the file; the header is UTF-8 JSON,
  a JSON object;
- `__metadata__`, when present and not null, is an object of string → string;
- every other key is a tensor: an object with `dtype` (one of the library's dtypes, `DTYPE_BITS`),
  `shape` (a list of integers in 0..2^64) and `data_offsets` (`[begin, end]`, integers in 0..2^64,
  begin <= end); other keys in the object are ignored, as the library ignores them;
- the element count and its bit size do not overflow 64 bits, the bit size is a whole number of bytes
  (F4 and F6_* pack 2 and 4/3 elements per byte: an odd F4 count is refused, as the library refuses
  it), and end - begin is that many bytes;
- sorted by offsets, the tensors tile the data area exactly to the end of the file (a truncated or
  padded shard fails).

It is stricter than the library where the file would open but not load, or where a real checkpoint
never goes: a shape numpy and torch cannot hold (more than 64 dimensions, or its non-zero dimensions
times the element size reaching 2^63 — numpy refuses such a tensor even when it has a zero dimension),
a duplicate key anywhere, a tensor written as a JSON array instead of an object, and JSON nested deeper
than `MAX_DEPTH`.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_station import bounded
from vllm_station.checkpoint.files import join_limited, read_error

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
MAX_DEPTH = 64  # nesting of the header JSON (the library's JSON parser stops at 128)
U64_LIMIT = 1 << 64  # the library's usize: shapes, offsets and sizes must stay below it
LOADER_LIMIT = 1 << 63  # numpy's and torch's int64 sizes: a loadable shape stays below it
MAX_DIMS = 64  # numpy's limit on dimensions
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

# bits per element of every dtype the safetensors library (0.8) knows; any other name is refused
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}  # fmt: skip


@dataclass
class TensorInfo:
    dtype: str
    shape: list[int]
    begin: int
    end: int


class ShardError(Exception):
    """One shard's header is unreadable or inconsistent (the message is the problem)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ShardError(f"header repeats the key {key!r}")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise ShardError(f"header holds {name}, which is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ShardError(f"header holds the number {text}, out of range")
    return value


def _check_values(value: Any, depth: int = 0) -> None:
    """Every string encodes as UTF-8 (no lone surrogate escapes); nesting stays under MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise ShardError(f"header JSON is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ShardError(f"header holds a string that is not Unicode text: {exc}") from exc
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_values(k, depth + 1)
            _check_values(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_values(v, depth + 1)


def _is_u64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < U64_LIMIT


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
        header = bounded.loads_json(
            text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite
        )
    except UnicodeDecodeError as exc:
        raise ShardError(f"header is not UTF-8: {exc}") from exc
    except bounded.JsonTooDeep as exc:
        raise ShardError("header JSON is nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise ShardError(f"header is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ShardError("header JSON is nested too deeply") from exc
    if not isinstance(header, dict):
        raise ShardError(f"header is not a JSON object ({type(header).__name__})")
    if SURROGATE_ESCAPE.search(raw):  # only a \uD800-\uDFFF escape makes a string that is not text
        _check_values(header)
    return header


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "…"


def _tensor(name: str, entry: Any) -> TensorInfo | str:
    """The tensor an entry describes, or the problem with it."""
    if not isinstance(entry, dict):
        return f"tensor {name!r} is not an object: {_shown(entry)}"
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        return f"tensor {name!r} has no {', '.join(missing)}: {_shown(entry)}"
    if len(entry) > 3:  # keys the library ignores: only nesting can make them unreadable to it
        for key, value in entry.items():
            if key not in ("dtype", "shape", "data_offsets"):
                _check_values(value, 2)
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return f"tensor {name!r} has the unknown dtype {_shown(dtype)} (the safetensors library refuses it)"
    if not isinstance(shape, list) or not all(_is_u64(d) for d in shape):
        return f"tensor {name!r} has a shape that is not a list of integers in 0..2^64: {_shown(shape)}"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_u64(o) for o in offsets)):
        return f"tensor {name!r} has data_offsets that are not [begin, end]: {_shown(offsets)}"
    begin, end = offsets
    if end < begin:
        return f"tensor {name!r} ends at {end}, before it begins at {begin}"
    count = 1
    for d in shape:  # the library multiplies in order and refuses an overflow even before a 0
        count *= d
        if count >= U64_LIMIT:
            return f"tensor {name!r} ({dtype} {shape}) has more elements than 64 bits count"
    bits = count * DTYPE_BITS[dtype]
    if bits >= U64_LIMIT:
        return f"tensor {name!r} ({dtype} {shape}) has more bits than 64 bits count"
    if bits % 8:
        return f"tensor {name!r} ({dtype} {shape}) is {bits} bits, not a whole number of bytes"
    if bits // 8 != end - begin:
        return f"tensor {name!r} ({dtype} {shape}) needs {bits // 8} bytes, its offsets span {end - begin}"
    extent = max(1, DTYPE_BITS[dtype] // 8)
    for d in shape:  # what numpy and torch can hold: their sizes are int64 (zero dimensions aside)
        extent *= d or 1
    if len(shape) > MAX_DIMS or extent >= LOADER_LIMIT:
        return (
            f"tensor {name!r} ({dtype} {shape}) has a shape numpy and torch cannot hold "
            f"(at most {MAX_DIMS} dimensions, sizes below 2^63)"
        )
    return TensorInfo(dtype=dtype, shape=shape, begin=begin, end=end)


def read_shard_header(path: Path) -> dict[str, TensorInfo]:
    """Parse a safetensors header and check it against the file size. Raises ShardError."""
    try:
        with bounded.open_regular(path) as f:
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
    header = _parse(raw)
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise ShardError(f"__metadata__ is not an object of strings: {_shown(meta)}")
    data_len = size - 8 - header_len
    tensors: dict[str, TensorInfo] = {}
    bad: list[str] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        t = _tensor(name, entry)
        if isinstance(t, str):
            bad.append(t)
        else:
            tensors[name] = t
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
