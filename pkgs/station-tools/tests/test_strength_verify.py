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

from vllm_station.checkpoint.layout import INDEX_NAME
from vllm_station.checkpoint.safetensors import ShardError, TensorInfo, read_shard_header
from vllm_station.checkpoint.stamp import STAMP_NAME
from vllm_station.checkpoint.verification import Problem, verify_checkpoint


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
