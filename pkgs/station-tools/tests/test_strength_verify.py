"""Mutants of `station verify` that survived the other tests (issue 17).

Each check below could be switched off without a test failing: the dtype x shape = byte-span check, the
"tensors tile the data area" check (a hole, an overlap, a first tensor not at 0, a short or padded data
area) and the index's "names a shard outside the directory" guard (`../x.safetensors`, an absolute path).
Shards are written byte by byte here so each one is wrong in exactly one way.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from vllm_station.checkpoint.safetensors import ShardError, TensorInfo, read_shard_header
from vllm_station.checkpoint.stamp import STAMP_NAME
from vllm_station.checkpoint.verification import Problem, verify_checkpoint

# literals, never the tested module's own constants (tests/test_architecture_literals.py)
INDEX_NAME = "model.safetensors.index.json"


def shard(path: Path, tensors: dict[str, tuple[str, list[int], int, int]], data_len: int) -> Path:
    """A safetensors file: {name: (dtype, shape, begin, end)} and `data_len` bytes of data."""
    header = {n: {"dtype": d, "shape": s, "data_offsets": [b, e]} for n, (d, s, b, e) in tensors.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(range(256)) * (data_len // 256)
                     + bytes(data_len % 256))  # fmt: skip
    return path


def refusal(path: Path) -> str:
    with pytest.raises(ShardError) as err:
        read_shard_header(path)
    return str(err.value)


# ---- dtype x shape = byte span ----


def test_byte_span_must_match_dtype_times_shape(tmp_path: Path) -> None:
    good = shard(tmp_path / "good.safetensors", {"w": ("F32", [2, 3], 0, 24)}, 24)
    assert read_shard_header(good) == {"w": TensorInfo("F32", [2, 3], 0, 24)}
    short = shard(tmp_path / "short.safetensors", {"w": ("F32", [2, 3], 0, 20)}, 20)
    assert refusal(short) == "tensor 'w' (F32 [2, 3]) needs 24 bytes, its offsets span 20"
    long = shard(tmp_path / "long.safetensors", {"w": ("BF16", [2, 3], 0, 24)}, 24)
    assert refusal(long) == "tensor 'w' (BF16 [2, 3]) needs 12 bytes, its offsets span 24"


@pytest.mark.parametrize(
    ("dtype", "shape", "nbytes"),
    [("F4", [6], 3), ("F6_E2M3", [4], 3), ("F8_E4M3", [5], 5), ("I64", [3], 24), ("C64", [1, 2], 16),
     ("BOOL", [7], 7), ("F16", [0, 9], 0)],
)  # fmt: skip
def test_byte_span_per_dtype(tmp_path: Path, dtype: str, shape: list[int], nbytes: int) -> None:
    ok = shard(tmp_path / "ok.safetensors", {"t": (dtype, shape, 0, nbytes)}, nbytes)
    assert read_shard_header(ok)["t"].end == nbytes
    off = shard(tmp_path / "off.safetensors", {"t": (dtype, shape, 0, nbytes + 1)}, nbytes + 1)
    assert refusal(off) == f"tensor 't' ({dtype} {shape}) needs {nbytes} bytes, its offsets span {nbytes + 1}"


# ---- the tensors tile the data area exactly ----


def test_a_hole_between_tensors_is_refused(tmp_path: Path) -> None:
    p = shard(tmp_path / "hole.safetensors", {"a": ("F32", [2], 0, 8), "b": ("F32", [2], 12, 20)}, 20)
    assert refusal(p) == "tensor 'b' at offset 12 leaves a 4-byte hole (expected 8)"


def test_an_overlap_is_refused(tmp_path: Path) -> None:
    p = shard(tmp_path / "overlap.safetensors", {"a": ("F32", [2], 0, 8), "b": ("F32", [2], 4, 12)}, 12)
    assert refusal(p) == "tensor 'b' at offset 4 overlaps the previous tensor (expected 8)"


def test_the_first_tensor_must_start_the_data_area(tmp_path: Path) -> None:
    p = shard(tmp_path / "late.safetensors", {"a": ("F32", [2], 4, 12)}, 12)
    assert refusal(p) == "tensor 'a' at offset 4 leaves a 4-byte hole (expected 0)"


def test_tiling_in_offset_order_not_header_order(tmp_path: Path) -> None:
    p = shard(tmp_path / "order.safetensors",
              {"z": ("F32", [2], 8, 16), "a": ("F32", [1], 16, 20), "m": ("U8", [8], 0, 8)}, 20)  # fmt: skip
    assert sorted((t.begin, n) for n, t in read_shard_header(p).items()) == [(0, "m"), (8, "z"), (16, "a")]


def test_a_short_or_padded_data_area_is_refused(tmp_path: Path) -> None:
    tensors = {"a": ("F32", [2], 0, 8), "b": ("F32", [2], 8, 16)}
    short = shard(tmp_path / "short.safetensors", tensors, 12)
    size = short.stat().st_size
    assert refusal(short) == (
        f"truncated: the header describes 16 data bytes, the file holds 12 (4 missing; file size {size})"
    )
    padded = shard(tmp_path / "padded.safetensors", tensors, 17)
    assert refusal(padded) == f"1 unexpected bytes after the last tensor (file size {padded.stat().st_size})"
    exact = shard(tmp_path / "exact.safetensors", tensors, 16)
    assert set(read_shard_header(exact)) == {"a", "b"}


# ---- the index names only shards inside the checkpoint directory ----


def checkpoint(root: Path, weight_map: dict[str, str]) -> Path:
    d = root / "ckpt"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"architectures": ["TinyForCausalLM"]}))
    (d / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shard(d / "model-00001.safetensors", {"inside": ("F32", [2], 0, 8)}, 8)
    return d


def problems_of(d: Path) -> list[Problem]:
    report = verify_checkpoint(d, write_stamp=True)
    assert report.ok is (not report.problems)
    return report.problems


def test_a_well_formed_checkpoint_passes(tmp_path: Path) -> None:
    d = checkpoint(tmp_path, {"inside": "model-00001.safetensors"})
    assert problems_of(d) == []
    assert (d / STAMP_NAME).exists()


@pytest.mark.parametrize("where", ["parent", "absolute", "nested-parent"])
def test_index_naming_a_shard_outside_the_directory_is_refused(tmp_path: Path, where: str) -> None:
    # a real, valid shard outside: without the guard, verify would read it and pass
    outside = shard(tmp_path / "x.safetensors", {"outside": ("F32", [2], 0, 8)}, 8)
    name = {"parent": "../x.safetensors", "absolute": str(outside),
            "nested-parent": "sub/../../x.safetensors"}[where]  # fmt: skip
    d = checkpoint(tmp_path, {"inside": "model-00001.safetensors", "outside": name})
    (d / "sub").mkdir()
    report = verify_checkpoint(d)
    assert Problem(INDEX_NAME, f"names a shard outside the directory: {name!r}") in report.problems
    assert report.ok is False and report.shards == 1, "the outside file is not counted as a shard"
    assert not (d / STAMP_NAME).exists(), "no stamp for a checkpoint whose index points outside it"


def test_outside_names_do_not_hide_the_inside_checks(tmp_path: Path) -> None:
    outside = shard(tmp_path / "x.safetensors", {"outside": ("F32", [2], 0, 8)}, 8)
    names = {"inside": "model-00001.safetensors", "a": str(outside), "b": "missing.safetensors"}
    d = checkpoint(tmp_path, names)
    problems = problems_of(d)
    assert Problem(INDEX_NAME, f"names a shard outside the directory: {str(outside)!r}") in problems
    assert Problem("missing.safetensors", f"listed in {INDEX_NAME} but missing") in problems


# ---- every refusal of a tensor entry, exactly (mutants found in checkpoint/safetensors.py) ----


def header_file(path: Path, header: object, data_len: int = 0, raw: bytes | None = None) -> Path:
    body = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + bytes(data_len))
    return path


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ([1, 2], "tensor 't' is not an object: [1, 2]"),
        ({"dtype": "F32", "shape": [1]},
         "tensor 't' has no data_offsets: {\"dtype\": \"F32\", \"shape\": [1]}"),
        ({"shape": [1]}, "tensor 't' has no dtype, data_offsets: {\"shape\": [1]}"),
        ({"dtype": "F99", "shape": [1], "data_offsets": [0, 4]},
         "tensor 't' has the unknown dtype \"F99\" (the safetensors library refuses it)"),
        ({"dtype": 5, "shape": [1], "data_offsets": [0, 4]},
         "tensor 't' has the unknown dtype 5 (the safetensors library refuses it)"),
        ({"dtype": "F32", "shape": [1, -1], "data_offsets": [0, 4]},
         "tensor 't' has a shape that is not a list of integers in 0..2^64: [1, -1]"),
        ({"dtype": "F32", "shape": [True], "data_offsets": [0, 4]},
         "tensor 't' has a shape that is not a list of integers in 0..2^64: [true]"),
        ({"dtype": "F32", "shape": [2**64], "data_offsets": [0, 4]},
         "tensor 't' has a shape that is not a list of integers in 0..2^64: [18446744073709551616]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0]},
         "tensor 't' has data_offsets that are not [begin, end]: [0]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]},
         "tensor 't' has data_offsets that are not [begin, end]: [0, 4, 8]"),
        ({"dtype": "F32", "shape": [1], "data_offsets": "0-4"},
         "tensor 't' has data_offsets that are not [begin, end]: \"0-4\""),
        ({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]},
         "tensor 't' ends at 4, before it begins at 8"),
        ({"dtype": "U8", "shape": [2**32, 2**32], "data_offsets": [0, 0]},
         "tensor 't' (U8 [4294967296, 4294967296]) has more elements than 64 bits count"),
        ({"dtype": "F64", "shape": [2**61], "data_offsets": [0, 0]},
         "tensor 't' (F64 [2305843009213693952]) has more bits than 64 bits count"),
        ({"dtype": "F4", "shape": [3], "data_offsets": [0, 1]},
         "tensor 't' (F4 [3]) is 12 bits, not a whole number of bytes"),
        ({"dtype": "U8", "shape": [1] * 65, "data_offsets": [0, 1]},
         f"tensor 't' (U8 {[1] * 65}) has a shape numpy and torch cannot hold (at most 64 dimensions, "
         "sizes below 2^63)"),
        ({"dtype": "I16", "shape": [2**62, 0], "data_offsets": [0, 0]},
         "tensor 't' (I16 [4611686018427387904, 0]) has a shape numpy and torch cannot hold (at most 64 "
         "dimensions, sizes below 2^63)"),
    ],
)  # fmt: skip
def test_tensor_entry_refusals(tmp_path: Path, entry: object, message: str) -> None:
    assert refusal(header_file(tmp_path / "t.safetensors", {"t": entry}, 8)) == message


def test_accepted_edges(tmp_path: Path) -> None:
    ok = {"dtype": "U8", "shape": [1] * 64, "data_offsets": [0, 1], "extra": {"ignored": [1, 2]}}
    assert read_shard_header(header_file(tmp_path / "a.safetensors", {"t": ok}, 1))["t"].end == 1
    zero = {"dtype": "I16", "shape": [2**61, 0], "data_offsets": [0, 0]}  # 2^62 bytes of extent: below 2^63
    assert read_shard_header(header_file(tmp_path / "b.safetensors", {"t": zero}))["t"].shape == [2**61, 0]
    meta = {"__metadata__": {"format": "pt"}, "t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}
    assert set(read_shard_header(header_file(tmp_path / "c.safetensors", meta, 2))) == {"t"}
    null_meta = {"__metadata__": None, "t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}
    assert set(read_shard_header(header_file(tmp_path / "d.safetensors", null_meta, 2))) == {"t"}


def test_file_level_refusals(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x00\x00")
    assert refusal(short) == "file is 3 bytes, too short for a safetensors header (truncated?)"
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 100_000_001) + b"{}")
    assert refusal(huge) == "header length 100000001 exceeds 100000000: not a safetensors file"
    past = tmp_path / "past.safetensors"
    past.write_bytes(struct.pack("<Q", 20) + b"{}")
    assert refusal(past) == "header length 20 runs past the end of the file (10 bytes): truncated?"
    fits = tmp_path / "fits.safetensors"
    fits.write_bytes(struct.pack("<Q", 2) + b"{}")
    assert read_shard_header(fits) == {}
    bad_meta = header_file(tmp_path / "meta.safetensors", {"__metadata__": {"a": 1}})
    assert refusal(bad_meta) == '__metadata__ is not an object of strings: {"a": 1}'
    listed = header_file(tmp_path / "list.safetensors", [1])
    assert refusal(listed) == "header is not a JSON object (list)"
    two = header_file(tmp_path / "two.safetensors", None, raw=b'{"a": [1], "b": [2]}')
    assert refusal(two) == "tensor 'a' is not an object: [1]; tensor 'b' is not an object: [2]"


@pytest.mark.parametrize(
    "index",
    ['["not", "an", "object"]', '{"weight_map": {}}', '{"weight_map": {"w": 1}}', '{"weight_map": ["a"]}',
     '{"metadata": {}}'],
)  # fmt: skip
def test_an_index_without_a_usable_weight_map_is_named(tmp_path: Path, index: str) -> None:
    d = checkpoint(tmp_path, {"inside": "model-00001.safetensors"})
    (d / INDEX_NAME).write_text(index)
    problems = verify_checkpoint(d).problems
    assert Problem(INDEX_NAME, "no 'weight_map' object of tensor -> shard file names") in problems


def test_an_index_that_is_not_json_is_named(tmp_path: Path) -> None:
    d = checkpoint(tmp_path, {"inside": "model-00001.safetensors"})
    (d / INDEX_NAME).write_text("{not json")
    problems = verify_checkpoint(d).problems
    mine = [p for p in problems if p.path == INDEX_NAME]
    assert len(mine) == 1 and isinstance(mine[0].problem, str) and "JSON" in mine[0].problem, problems
