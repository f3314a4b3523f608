"""`read_shard_header` against the real `safetensors` library: a header the reader accepts opens with the
library (every tensor read), and a header the library refuses is refused by the reader.

The differential test generates headers with hypothesis (tensors of every dtype the library knows and a
few it does not, shapes with zeros, huge and non-integer dimensions, shifted offsets, holes, overlaps,
`__metadata__` of every JSON type, short and padded data areas, whitespace around the JSON, extra keys,
tensors written as arrays), writes each to a real file and asks both. The reader may be stricter than the
library only where its docstring says so (a tensor written as an array); the figures are printed.
"""

from __future__ import annotations

import json
import random
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
from safetensors import SafetensorError, safe_open

from vllm_station.checkpoint.safetensors import ShardError, read_shard_header

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}

# dtypes safetensors.numpy turns into arrays; the rest (BF16, F8_*, F4, F6_*) numpy has no type for, their
# bytes are read with safetensors.deserialize
NUMPY_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "I64", "U64", "F64", "C64"}
UNKNOWN_DTYPES = ["F99", "u8", "F8_E4M3FN", "FP4", ""]
MAX_DATA = 4096  # bytes of data written at most: a header that claims more is refused by both sides


def write_shard(path: Path, header: bytes, data_len: int, header_len: int | None = None) -> None:
    n = len(header) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", n) + header + bytes(i % 251 for i in range(data_len)))


def library_opens(path: Path) -> bool:
    """The library opens the file and reads every tensor: False when it refuses (SafetensorError) or
    numpy cannot hold a tensor it hands over (ValueError: a shape past numpy's int64 sizes)."""
    try:
        with safe_open(str(path), "numpy") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is no mapping: `in f` fails)
                if f.get_slice(key).get_dtype() in NUMPY_DTYPES:
                    f.get_tensor(key)
        if hasattr(safetensors, "deserialize"):  # safetensors >= 0.6: raw bytes of every dtype
            for _name, t in safetensors.deserialize(path.read_bytes()):
                assert isinstance(t["data"], (bytes, bytearray))
    except (SafetensorError, ValueError):
        return False
    return True


def reader_accepts(path: Path) -> tuple[bool, str]:
    try:
        read_shard_header(path)
    except ShardError as exc:
        return False, str(exc)
    return True, ""


def library_size(dtype: Any, shape: list[Any]) -> int | None:
    """Bytes of a tensor by the library's rule, or None where it has none (unknown dtype, bad shape)."""
    if dtype not in DTYPE_BITS or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    count = 1
    for d in shape:
        count *= d
    bits = count * DTYPE_BITS[dtype]
    return bits // 8


def hypothesis_cases() -> Any:
    """The hypothesis strategy of cases (hypothesis is imported here: without it only that test skips)."""
    from hypothesis import strategies as st

    dims = st.one_of(
        st.integers(0, 4), st.integers(0, 4), st.sampled_from([0, 1, 2**32, 2**63, 2**64, -1, True, 1.0])
    )
    tensor_plans = st.fixed_dictionaries(
        {
            "dtype": st.one_of(st.sampled_from(sorted(DTYPE_BITS)), st.sampled_from(UNKNOWN_DTYPES)),
            "shape": st.lists(dims, max_size=3),
            "end_shift": st.sampled_from([0, 0, 0, 0, 0, 0, 1, -1]),
            "begin_shift": st.sampled_from([0, 0, 0, 0, 0, 0, 0, 1, -1]),
            "form": st.sampled_from(
                ["object"] * 10 + ["extra", "array", "no_dtype", "offsets3", "not_object"]
            ),
        }
    )
    metadata_plans = st.one_of(
        st.just("absent"),
        st.just(None),
        st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        st.dictionaries(
            st.text(max_size=3), st.one_of(st.integers(), st.none(), st.booleans()), min_size=1, max_size=2
        ),
        st.sampled_from(["x", 1, [], ["a"]]),
    )
    cases = st.fixed_dictionaries(
        {
            "tensors": st.lists(tensor_plans, max_size=4),
            "names": st.lists(st.text(min_size=1, max_size=4), min_size=4, max_size=4, unique=True),
            "metadata": metadata_plans,
            "data_shift": st.sampled_from([0, 0, 0, 0, 0, 1, -1]),
            "pad": st.sampled_from(["", "", "", " ", "  \n", "lead"]),
            "header_len_shift": st.sampled_from([0] * 12 + [1, -1]),
        }
    )
    return cases


def build(case: dict[str, Any]) -> tuple[bytes, int, int]:
    """(header bytes, data bytes to write, header length to claim)."""
    header: dict[str, Any] = {}
    if case["metadata"] != "absent":
        header["__metadata__"] = case["metadata"]
    pos = 0
    for name, plan in zip(case["names"], case["tensors"], strict=False):
        if name == "__metadata__":
            continue
        size = library_size(plan["dtype"], plan["shape"])
        size = 1 if size is None else size
        begin = max(0, pos + plan["begin_shift"])
        end = max(0, begin + size + plan["end_shift"])
        pos = end
        entry: dict[str, Any] = {"dtype": plan["dtype"], "shape": plan["shape"], "data_offsets": [begin, end]}
        form = plan["form"]
        if form == "extra":
            entry["note"] = {"any": [1, "x"]}
        elif form == "no_dtype":
            del entry["dtype"]
        elif form == "offsets3":
            entry["data_offsets"] = [begin, end, end]
        header[name] = entry
        if form == "array":
            header[name] = [entry["dtype"], entry["shape"], entry["data_offsets"]]
        elif form == "not_object":
            header[name] = 1
    text = json.dumps(header)
    if case["pad"] == "lead":
        text = " " + text
    else:
        text += case["pad"]
    raw = text.encode("utf-8", "surrogatepass")
    data_len = max(0, min(pos, MAX_DATA) + case["data_shift"])
    return raw, data_len, max(0, len(raw) + case["header_len_shift"])


class Tally:
    """Both sides' verdicts on generated cases; the reader may only be stricter where it says so."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        self.stricter: list[str] = []

    def check(self, case: dict[str, Any]) -> None:
        header, data_len, header_len = build(case)
        write_shard(self.path, header, data_len, header_len)
        ours, problem = reader_accepts(self.path)
        theirs = library_opens(self.path)
        self.counts["cases"] += 1
        self.counts["library accepts" if theirs else "library refuses"] += 1
        self.counts["reader accepts" if ours else "reader refuses"] += 1
        if ours:
            assert theirs, f"read_shard_header accepted a header the library refuses: {header!r}"
        if not theirs:
            assert not ours
        if theirs and not ours:  # allowed only where the reader documents it is stricter
            assert "is not an object" in problem or "numpy and torch cannot hold" in problem, (
                problem,
                header,
            )
            self.stricter.append(problem)

    def report(self, how: str) -> None:
        self.counts["agree"] = self.counts["cases"] - len(self.stricter)
        stricter = len(self.stricter)
        print(f"differential ({how}): {dict(self.counts)}; reader stricter (array, numpy limits): {stricter}")
        # the generator must exercise both sides, or the test proves nothing
        floor = self.counts["cases"] // 10
        assert self.counts["library accepts"] >= floor and self.counts["library refuses"] >= floor, (
            self.counts
        )


def test_differential_hypothesis(tmp_path: Path) -> None:
    pytest.importorskip(
        "hypothesis", reason="hypothesis is not installed; test_differential_seeded still runs"
    )
    from hypothesis import HealthCheck, given, settings

    tally = Tally(tmp_path / "model.safetensors")

    @settings(
        max_examples=80,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(hypothesis_cases())
    def check(case: dict[str, Any]) -> None:
        tally.check(case)

    check()
    tally.report("hypothesis, 80 examples")


def random_case(rng: random.Random) -> dict[str, Any]:
    """The same kinds of case as the hypothesis strategy, from a seeded generator (cheap, so many); a
    third of them carry no deliberate fault, so both verdicts are well represented."""
    clean = rng.random() < 0.35

    def pick(good: list[Any], bad: list[Any]) -> Any:
        return rng.choice(good) if clean else rng.choice(good * 6 + bad)

    def dim() -> Any:
        return pick([0, 1, 2, 3, 4, 1, 2, 3, 4], [2**32, 2**63, 2**64, -1, True, 1.0])

    tensors = [
        {
            "dtype": pick(sorted(DTYPE_BITS), UNKNOWN_DTYPES),
            "shape": [dim() for _ in range(rng.randint(0, 3))],
            "end_shift": pick([0], [1, -1]),
            "begin_shift": pick([0], [1, -1]),
            "form": pick(["object", "object", "extra"], ["array", "no_dtype", "offsets3", "not_object"]),
        }
        for _ in range(rng.randint(0, 4))
    ]
    return {
        "tensors": tensors,
        "names": pick(
            [[f"t{i}" for i in range(4)], ["a", "\u00e9", "c.weight", " "]], [["__metadata__", "b", "c", "d"]]
        ),
        "metadata": pick(
            ["absent", None, {}, {"format": "pt"}], [{"format": 1}, {"a": None}, "x", 1, [], ["a"]]
        ),
        "data_shift": pick([0], [1, -1]),
        "pad": pick(["", " ", "  \n", "lead"], ["", "lead"]),
        "header_len_shift": pick([0], [1, -1]),
    }


def test_differential_seeded(tmp_path: Path) -> None:
    tally = Tally(tmp_path / "model.safetensors")
    rng = random.Random(12)
    for _ in range(1500):
        tally.check(random_case(rng))
    tally.report("seeded generator, seed 12, 1500 cases")


# the cases and each rule, named: (header object or raw JSON text, data bytes)
NAMED: dict[str, tuple[Any, int]] = {
    "unknown dtype F99": ({"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 1]}}, 1),
    "lower-case dtype": ({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}}, 4),
    "metadata with an integer": ({"__metadata__": {"format": 1}}, 0),
    "metadata with null values": ({"__metadata__": {"format": None}}, 0),
    "metadata a string": ({"__metadata__": "pt"}, 0),
    "odd F4 count (half a byte)": ({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, 2),
    "F6 count not a byte multiple": ({"w": {"dtype": "F6_E2M3", "shape": [1], "data_offsets": [0, 1]}}, 1),
    "shape overflow before a zero": (
        {"w": {"dtype": "U8", "shape": [2**32, 2**32, 0], "data_offsets": [0, 0]}},
        0,
    ),
    "shape past numpy's int64 sizes": (
        {"w": {"dtype": "U8", "shape": [2**62, 4, 0], "data_offsets": [0, 0]}},
        0,
    ),
    "boolean dimension": ({"w": {"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}}, 1),
    "float dimension": ('{"w": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}}', 1),
    "dimension past 64 bits": ({"w": {"dtype": "U8", "shape": [2**64], "data_offsets": [0, 1]}}, 1),
    "NaN in an extra key": ('{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": NaN}}', 1),
    "lone surrogate name": ('{"\\ud800": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', 1),
    "three offsets": ({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 1]}}, 1),
    "end before begin": ({"w": {"dtype": "U8", "shape": [0], "data_offsets": [1, 0]}}, 1),
    "padded data": ({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, 2),
    "not an object": ([], 0),
}
ACCEPTED: dict[str, tuple[Any, int]] = {
    "empty header": ({}, 0),
    "metadata null": ({"__metadata__": None}, 0),
    "even F4 count": ({"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}, 3),
    "F6 x4": ({"w": {"dtype": "F6_E3M2", "shape": [4], "data_offsets": [0, 3]}}, 3),
    "F8_E8M0 and FNUZ": (
        {
            "a": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [0, 2]},
            "b": {"dtype": "F8_E4M3FNUZ", "shape": [1], "data_offsets": [2, 3]},
        },
        3,
    ),
    "zero-sized tensors at one offset": (
        {
            "a": {"dtype": "BF16", "shape": [0, 5], "data_offsets": [0, 0]},
            "b": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
        },
        0,
    ),
    "scalar": ({"w": {"dtype": "C64", "shape": [], "data_offsets": [0, 8]}}, 8),
    "leading whitespace, extra key": (
        ' {"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "k": 1}}',
        1,
    ),
}


def _raw(header: Any) -> bytes:
    return (header if isinstance(header, str) else json.dumps(header)).encode()


@pytest.mark.parametrize("name", sorted(NAMED))
def test_library_refusals_are_refused(tmp_path: Path, name: str) -> None:
    header, data_len = NAMED[name]
    path = tmp_path / "model.safetensors"
    write_shard(path, _raw(header), data_len)
    assert not library_opens(path), f"{name}: the library opens it, the case is wrong"
    with pytest.raises(ShardError):
        read_shard_header(path)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_library_acceptances_are_accepted(tmp_path: Path, name: str) -> None:
    header, data_len = ACCEPTED[name]
    path = tmp_path / "model.safetensors"
    write_shard(path, _raw(header), data_len)
    assert library_opens(path), f"{name}: the library refuses it, the case is wrong"
    read_shard_header(path)


def test_messages_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    write_shard(path, _raw(NAMED["unknown dtype F99"][0]), 1)
    with pytest.raises(ShardError, match=r"tensor 'w' has the unknown dtype \"F99\""):
        read_shard_header(path)
    write_shard(path, _raw({"__metadata__": {"format": 1}}), 0)
    with pytest.raises(ShardError, match=r"__metadata__ is not an object of strings"):
        read_shard_header(path)
    write_shard(path, _raw(NAMED["odd F4 count (half a byte)"][0]), 2)
    with pytest.raises(ShardError, match=r"12 bits, not a whole number of bytes"):
        read_shard_header(path)


def test_files_written_by_the_library_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    from safetensors.numpy import save_file

    arrays = {
        "a": np.zeros((3, 0), dtype=np.float32),
        "b": np.arange(6, dtype=np.int64).reshape(2, 3),
        "c": np.ones((1,), dtype=np.bool_),
    }
    save_file(arrays, str(path), metadata={"format": "np"})
    assert sorted(read_shard_header(path)) == ["a", "b", "c"]
