"""Builders of fake host roots for tests: real files in the kernel's formats under a tmp directory.

- `gb300_root(root, file_pages_gib=…)`: a DGX Station GB300-shaped machine — node 0 with 72 CPUs and
  LPDDR, node 1 with the GPU's HBM (memory, no CPUs), /proc/meminfo, /proc/sys/vm/drop_caches,
  /proc/net/tcp{,6} with headers only.
- `one_node_root(root)`: a plain one-node machine (no node 1).
- `garble(root, rel)`, `make_unreadable(root, rel)`, `remove(root, rel)`: broken files.
- `add_listener(root, port, inode)`, `add_process(root, pid, comm, cgroup, socket_inodes)`: sockets
  and their owners as /proc shows them.
- `write_stamp(model_dir, …)`: a `station verify` stamp (version 1) plus the files it lists.
- `write_fake_runtime(dir)`: an executable stand-in for docker/podman (logs, rm, image inspect) with
  realistic exit codes and stderr; its state lives in a directory (containers, images, calls.log).

Other test modules (the pair checks) reuse these; keep the signatures stable.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

KiB = 1024
GiB = 1024**3
NODE_DIR = "sys/devices/system/node"

# the GB300 station: 252 GB HBM3e on node 1 (as the kernel rounds it: whole kB), ~496 GB LPDDR5X on node 0
HBM_BYTES = 252 * 10**9
LPDDR_BYTES = 496 * 10**9


def _kb(n_bytes: int | float) -> int:
    return int(n_bytes) // KiB


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")
    return path


def node_meminfo_text(node: int, values: Mapping[str, int]) -> str:
    """`nodeN/meminfo` text; values in bytes (HugePages_* are counts)."""
    lines = []
    for key, value in values.items():
        if key.startswith("HugePages_"):
            lines.append(f"Node {node} {key + ':':<17}{value:>8}")
        else:
            lines.append(f"Node {node} {key + ':':<17}{_kb(value):>8} kB")
    return "\n".join(lines) + "\n"


def proc_meminfo_text(values: Mapping[str, int]) -> str:
    return "\n".join(f"{key + ':':<16}{_kb(value):>8} kB" for key, value in values.items()) + "\n"


def write_node(
    root: Path,
    node: int,
    *,
    cpus: str,
    mem_total: int,
    mem_free: int,
    file_pages: int,
    active_file: int | None = None,
    inactive_file: int | None = None,
    extra: Mapping[str, int] | None = None,
) -> Path:
    """One NUMA node directory (sizes in bytes); `cpus` in cpulist format ("" for none)."""
    if active_file is None:
        active_file = file_pages // 4
    if inactive_file is None:
        inactive_file = file_pages - active_file
    values: dict[str, int] = {
        "MemTotal": mem_total,
        "MemFree": mem_free,
        "MemUsed": mem_total - mem_free,
        "SwapCached": 0,
        "Active": active_file,
        "Inactive": inactive_file,
        "Active(anon)": 0,
        "Inactive(anon)": 0,
        "Active(file)": active_file,
        "Inactive(file)": inactive_file,
        "Unevictable": 0,
        "Mlocked": 0,
        "Dirty": 0,
        "Writeback": 0,
        "FilePages": file_pages,
        "Mapped": 0,
        "AnonPages": 0,
        "Shmem": 0,
        "KernelStack": 0,
        "PageTables": 0,
        "Slab": 0,
        "HugePages_Total": 0,
        "HugePages_Free": 0,
        "HugePages_Surp": 0,
    }
    values.update(extra or {})
    write(root, f"{NODE_DIR}/node{node}/meminfo", node_meminfo_text(node, values))
    write(root, f"{NODE_DIR}/node{node}/cpulist", cpus + "\n")
    return root / NODE_DIR / f"node{node}"


def write_proc_meminfo(root: Path, **overrides: int) -> Path:
    values = {
        "MemTotal": LPDDR_BYTES,
        "MemFree": LPDDR_BYTES - 40 * GiB,
        "MemAvailable": LPDDR_BYTES - 20 * GiB,
        "Buffers": 1 * GiB,
        "Cached": 20 * GiB,
        "SwapCached": 0,
        "Active(file)": 5 * GiB,
        "Inactive(file)": 15 * GiB,
        "SwapTotal": 0,
        "SwapFree": 0,
    }
    values.update(overrides)
    return write(root, "proc/meminfo", proc_meminfo_text(values))


TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)
TCP6_HEADER = (
    "  sl  local_address                         remote_address                        st tx_queue rx_queue "
    "tr tm->when retrnsmt   uid  timeout inode\n"
)


def base_proc(root: Path) -> None:
    write_proc_meminfo(root)
    write(root, "proc/sys/vm/drop_caches", "")
    write(root, "proc/net/tcp", TCP_HEADER)
    write(root, "proc/net/tcp6", TCP6_HEADER)


def gb300_root(
    root: Path,
    *,
    file_pages_gib: float = 0.25,
    hbm_free_gib: float | None = None,
    active_file_gib: float | None = None,
) -> Path:
    """GB300-shaped: node0 = 72 Grace CPUs + LPDDR, node1 = HBM with no CPUs."""
    file_pages = int(file_pages_gib * GiB)
    hbm_free = int(hbm_free_gib * GiB) if hbm_free_gib is not None else HBM_BYTES - file_pages - GiB
    write_node(
        root, 0, cpus="0-71", mem_total=LPDDR_BYTES, mem_free=LPDDR_BYTES - 60 * GiB, file_pages=30 * GiB
    )
    write_node(
        root,
        1,
        cpus="",
        mem_total=HBM_BYTES,
        mem_free=hbm_free,
        file_pages=file_pages,
        active_file=int(active_file_gib * GiB) if active_file_gib is not None else None,
    )
    write(root, f"{NODE_DIR}/online", "0-1\n")
    write(root, f"{NODE_DIR}/has_cpu", "0\n")
    write(root, f"{NODE_DIR}/has_memory", "0-1\n")
    base_proc(root)
    return root


def set_file_pages(root: Path, node: int, file_pages_gib: float) -> None:
    """Rewrite FilePages of an existing node (keeps the other lines)."""
    path = root / NODE_DIR / f"node{node}" / "meminfo"
    lines = path.read_text().splitlines()
    out = []
    for line in lines:
        if "FilePages:" in line:
            line = f"Node {node} {'FilePages:':<17}{_kb(file_pages_gib * GiB):>8} kB"
        out.append(line)
    # atomically, as the kernel's file changes: a reader (prestart's settle loop) never sees it half-written
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(out) + "\n")
    os.replace(tmp, path)


def one_node_root(root: Path) -> Path:
    write_node(root, 0, cpus="0-15", mem_total=64 * GiB, mem_free=40 * GiB, file_pages=10 * GiB)
    write(root, f"{NODE_DIR}/online", "0\n")
    base_proc(root)
    return root


def garble(root: Path, rel: str, text: str = "this is not\x00 what the kernel writes ::\n") -> Path:
    return write(root, rel, text)


def make_unreadable(root: Path, rel: str) -> Path:
    """Replace a file by a directory: reading it fails even as root (chmod 000 does not stop root)."""
    path = root / rel
    if path.is_file():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove(root: Path, rel: str) -> None:
    (root / rel).unlink()


# --- sockets -------------------------------------------------------------------------------------


def _hex_v4(address: str) -> str:
    return "".join(f"{int(part):02X}" for part in reversed(address.split(".")))


def add_listener(root: Path, port: int, inode: int, address: str = "0.0.0.0", state: str = "0A") -> None:
    """A LISTEN socket line in /proc/net/tcp (IPv4)."""
    path = root / "proc/net/tcp"
    if not path.exists():
        write(root, "proc/net/tcp", TCP_HEADER)
    n = len(path.read_text().splitlines()) - 1
    line = (
        f"{n:4d}: {_hex_v4(address)}:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 "
        f"00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )
    with path.open("a") as f:
        f.write(line)


def add_process(
    root: Path, pid: int, comm: str, cgroup: str = "0::/user.slice", socket_inodes: tuple[int, ...] = ()
) -> Path:
    base = root / "proc" / str(pid)
    (base / "fd").mkdir(parents=True, exist_ok=True)
    (base / "comm").write_text(comm + "\n")
    (base / "cgroup").write_text(cgroup + "\n")
    (base / "cmdline").write_bytes(comm.encode() + b"\0")
    for fd, inode in enumerate(socket_inodes, start=3):
        os.symlink(f"socket:[{inode}]", base / "fd" / str(fd))
    return base


# --- model stamp ---------------------------------------------------------------------------------


def write_stamp(
    model_dir: Path,
    *,
    repo: str = "nvidia/GLM-5.3-Flash-NVFP4",
    revision: str = "a" * 40,
    files: Mapping[str, int] | None = None,
    config: Mapping[str, object] | None = None,
) -> Path:
    """Checkpoint files of the given sizes, an optional config.json, and `.station-verified.json`."""
    model_dir.mkdir(parents=True, exist_ok=True)
    files = (
        files
        if files is not None
        else {"model-00001-of-00002.safetensors": 4096, "model-00002-of-00002.safetensors": 2048}
    )
    entries = []
    if config is not None:
        (model_dir / "config.json").write_text(json.dumps(config))
        entries.append(
            {"path": "config.json", "size": (model_dir / "config.json").stat().st_size, "sha256": None}
        )
    for name, size in files.items():
        with (model_dir / name).open("wb") as f:
            f.truncate(size)
        entries.append({"path": name, "size": size, "sha256": None})
    stamp = {
        "version": 1,
        "repo": repo,
        "revision": revision,
        "verified_at": "2026-11-30T05:00:00Z",
        "sha256_checked": False,
        "architectures": ["GlmMoeDsaForCausalLM"],
        "quant_algo": "NVFP4",
        "files": entries,
    }
    path = model_dir / ".station-verified.json"
    path.write_text(json.dumps(stamp, indent=2))
    return path


# --- container runtime stand-in ------------------------------------------------------------------

FAKE_RUNTIME = r"""
import json, os, sys
from pathlib import Path

state = Path(os.environ["FAKE_RUNTIME_STATE"])
flavor = os.environ.get("FAKE_RUNTIME_FLAVOR", "docker")
args = sys.argv[1:]
with (state / "calls.log").open("a") as log:
    log.write(" ".join(args) + "\n")

def no_container(name):
    if flavor == "podman":
        sys.stderr.write(f'Error: no container with name or ID "{name}" found: no such container\n')
        sys.exit(125)
    sys.stderr.write(f"Error response from daemon: No such container: {name}\n")
    sys.exit(1)

if os.environ.get("FAKE_RUNTIME_DOWN"):
    sys.stderr.write("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                     "Is the docker daemon running?\n")
    sys.exit(1)

if args[:1] == ["logs"]:
    box = state / "containers" / args[1]
    if not box.is_dir():
        no_container(args[1])
    out = (box / "stdout").read_bytes() if (box / "stdout").exists() else b""
    err = (box / "stderr").read_bytes() if (box / "stderr").exists() else b""
    sys.stdout.buffer.write(out); sys.stdout.flush()
    sys.stderr.buffer.write(err); sys.stderr.flush()
    sys.exit(0)
if args[:2] == ["rm", "-f"]:
    box = state / "containers" / args[2]
    if not box.is_dir():
        no_container(args[2])
    for f in box.iterdir():
        f.unlink()
    box.rmdir()
    print(args[2])
    sys.exit(0)
if args[:2] == ["image", "inspect"]:
    ref = args[2]
    path = state / "images" / (ref.replace("/", "_").replace(":", "_").replace("@", "_") + ".json")
    if not path.exists():
        if flavor == "podman":
            sys.stderr.write(f"Error: {ref}: image not known\n"); sys.exit(125)
        print("[]")
        sys.stderr.write(f"Error response from daemon: No such image: {ref}\n"); sys.exit(1)
    print(path.read_text()); sys.exit(0)
sys.stderr.write(f"unknown command: {args}\n")
sys.exit(125)
"""


def write_fake_runtime(directory: Path) -> tuple[Path, Path]:
    """An executable docker/podman stand-in and its state dir. Returns (script, state)."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / "state"
    (state / "containers").mkdir(parents=True, exist_ok=True)
    (state / "images").mkdir(parents=True, exist_ok=True)
    (state / "calls.log").write_text("")
    script = directory / "fake-runtime"
    script.write_text(f"#!{sys.executable}\n{FAKE_RUNTIME}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script, state


def add_container(state: Path, name: str, stdout: bytes = b"", stderr: bytes = b"") -> None:
    box = state / "containers" / name
    box.mkdir(parents=True, exist_ok=True)
    (box / "stdout").write_bytes(stdout)
    (box / "stderr").write_bytes(stderr)


def add_image(state: Path, ref: str, repo_digests: list[str], image_id: str = "sha256:" + "1" * 64) -> None:
    path = state / "images" / (ref.replace("/", "_").replace(":", "_").replace("@", "_") + ".json")
    path.write_text(json.dumps([{"Id": image_id, "RepoTags": [], "RepoDigests": repo_digests}]))
