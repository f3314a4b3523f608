"""`station download REPO --revision REV --dir DIR`: fetch a pinned revision under NUMA membind, then verify.

Order of work (each step fails with an operator message, nothing is marked verified on any failure):

1. Bind this process's memory to ``--membind`` nodes (default 0) *before any I/O*, and read the policy back
   from the kernel: the page cache filled by a 191-464 GB download then lands in LPDDR (node 0), not in the
   GPU's HBM node. ``--no-membind`` skips it (machines without NUMA).
2. The revision must be a 40-hex commit; a branch or tag moves, so it is refused unless ``--allow-branch``,
   which resolves it once through the API and records the commit.
3. Token: ``--token-file`` (first line), else ``$HF_TOKEN``, else huggingface_hub's stored login.
   Never printed.
4. ``HF_HUB_OFFLINE=1``: nothing is fetched; a complete earlier download of that commit in DIR (checked
   against ``.station-hashes.json``) is verified, anything else is an error.
5. The revision's listing (``GET /api/models/REPO/revision/REV?blobs=true``, what huggingface_hub's
   ``model_info(files_metadata=True)`` asks) gives the files with sizes and the LFS sha256 of every large
   file. It is read through the package's HTTP layer (a 30 s total deadline, a 16 MiB body cap, a JSON depth
   limit, no redirect followed; a proxy only from ``HTTPS_PROXY``/``NO_PROXY``), and every entry is checked:
   a plain relative path, a size, a well-formed sha256. The disk-space check runs against those sizes (minus
   what is already complete in DIR) before a byte is fetched, and the hub's hashes are written to
   ``DIR/.station-hashes.json`` for ``verify --sha256``. The hub is ``--endpoint``, else ``$HF_ENDPOINT``.
6. Files are fetched one by one with ``hf_hub_download(local_dir=DIR)`` (progress on stderr). Resuming: a
   connection that drops mid-file is resumed with an HTTP Range request by huggingface_hub (5 tries without
   progress); a rerun after an interruption skips every file already complete for that commit.
   (huggingface_hub 2.x discards a partial file when its process fails, so an interrupted file restarts
   from its beginning.) The file bodies are huggingface_hub's own requests (and hf_xet's, in Rust), outside
   the HTTP layer: they go to disk, not memory, the disk check bounds them by the listing, and step 7
   checks every size (and, with ``--sha256``, every hash) against it.
7. ``station verify`` runs with the expectations given; its stamp is the only proof of a usable checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fnmatch
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from vllm_station import bounded, checkpoint_args, options, redact
from vllm_station.api.sse import excerpt
from vllm_station.api.transport import RedirectRefused, SyncHttp, TooLarge, proxy_from_environment
from vllm_station.checkpoint.hashes import HashRecord, RecordedFile, read_hash_record, write_hash_record
from vllm_station.checkpoint.layout import CONFIG_NAME, INDEX_NAME, QUANT_CONFIG_NAME
from vllm_station.checkpoint.stamp import STAMP_NAME, remove_stamp
from vllm_station.checkpoint.verification import (
    Expectations,
    VerifyReport,
    failure_message,
    report_text,
    verify_checkpoint,
)
from vllm_station.errors import CheckFailed, StationError, Unreachable, UsageError
from vllm_station.report import dump_json

log = logging.getLogger("vllm_station.commands.download")

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
ALWAYS = (CONFIG_NAME, INDEX_NAME, QUANT_CONFIG_NAME)  # verify needs them whatever --include says
HEADROOM_BYTES = 16 * 1024 * 1024  # free space kept beyond the files themselves
API_TIMEOUT_S = 30.0  # the whole listing request (the HTTP layer's total deadline)
LISTING_LIMIT = 16 * 1024 * 1024  # one revision's file listing: ~300 bytes a file
ETAG_TIMEOUT_S = 30.0


@dataclass
class DownloadReport:
    repo: str
    requested_revision: str
    revision: str
    dir: str
    membind: str | None
    files: int
    bytes: int
    downloaded_files: int
    skipped_files: int
    seconds: float
    offline: bool = False
    verify: VerifyReport | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str | None
    blob_id: str | None


class DownloadFailed(StationError):
    pass


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo", metavar="REPO", help="model repository, e.g. nvidia/GLM-5.3-Flash-NVFP4")
    parser.add_argument(
        "--revision", required=True, metavar="REV", help="40-hex commit (a branch needs --allow-branch)"
    )
    parser.add_argument(
        "--dir", required=True, type=Path, metavar="DIR", help="target directory (the checkpoint)"
    )
    parser.add_argument(
        "--include", nargs="+", action="extend", metavar="GLOB", default=None,
        help=f"only files matching these globs (plus {', '.join(ALWAYS)} when present)",
    )  # fmt: skip
    parser.add_argument(
        "--token-file", type=Path, metavar="F", help="file holding the hub token (else $HF_TOKEN)"
    )
    parser.add_argument(
        "--endpoint", type=_endpoint, default=None, metavar="URL",
        help="the hub (default $HF_ENDPOINT, else https://huggingface.co)",
    )  # fmt: skip
    parser.add_argument(
        "--allow-branch",
        action="store_true",
        help="accept a branch/tag: resolve it to a commit now and record it",
    )
    checkpoint_args.add_membind(parser, "this process")
    checkpoint_args.add_expectations(parser)
    parser.add_argument(
        "--sha256", action="store_true", help="verify: also compare full sha256 with the hub's"
    )
    options.add_json(parser)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _endpoint(text: str) -> str:
    """--endpoint: an http(s) URL (parsed when the command line is: a bad one exits 2)."""
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r}: give an http(s) URL, e.g. https://huggingface.co")
    if parts.password is not None:
        redact.register(parts.password)
    return text.strip().rstrip("/")


def read_token(token_file: Path | None) -> tuple[str | None, str]:
    """(token, where it came from) — the token itself is never logged or printed."""
    if token_file is not None:
        try:
            text = bounded.read_text(token_file, limit=bounded.KEY_LIMIT)
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {token_file}: {exc.strerror or exc}") from exc
        lines = text.strip().splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            raise UsageError(f"--token-file {token_file} is empty")
        redact.register(token)  # a hub that echoes it gets it masked, as the API key is
        return token, f"from --token-file {token_file}"
    env = os.environ.get("HF_TOKEN", "").strip()
    if env:
        redact.register(env)
        return env, "from $HF_TOKEN"
    return None, "none given: only huggingface_hub's stored login, if any, was sent"


def _select(files: list[HubFile], include: list[str] | None) -> list[HubFile]:
    if not include:
        return files
    picked = [f for f in files if f.path in ALWAYS or any(fnmatch.fnmatch(f.path, g) for g in include)]
    if not any(f.path not in ALWAYS for f in picked):
        raise UsageError(f"--include {' '.join(include)} matches no file of the repository")
    return picked


def _gb(n: float) -> str:
    """Human size in decimal units (what the hub and `df -H` show)."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{int(n)} B"


def _is_complete(directory: Path, f: HubFile) -> bool:
    p = directory / f.path
    try:
        return p.is_file() and p.stat().st_size == f.size
    except OSError:
        return False


def remove_partials(directory: Path) -> int:
    """Delete partial files a killed earlier run left in huggingface_hub's local-dir cache; bytes freed.

    huggingface_hub 2.x names each partial file uniquely per process and cannot reuse it, so after a crash
    (SIGKILL, power loss) it is dead weight — up to a whole shard.
    """
    freed = 0
    partial_dir = directory / ".cache" / "huggingface" / "download"
    if not partial_dir.is_dir():
        return 0
    for p in partial_dir.rglob("*.incomplete"):
        try:
            size = p.stat().st_size
            p.unlink()
        except OSError as exc:
            log.warning("cannot remove the partial file %s: %s", p, exc)
            continue
        freed += size
    return freed


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (systemd stop) → KeyboardInterrupt: the partial file removed (run's handler), exit 130."""
    raise KeyboardInterrupt


def check_space(directory: Path, files: list[HubFile]) -> int:
    """Raise when the files still to fetch do not fit; returns the bytes still needed."""
    needed = sum(f.size for f in files if not _is_complete(directory, f))
    present = sum(f.size for f in files) - needed
    free = shutil.disk_usage(directory).free
    if needed + HEADROOM_BYTES > free:
        raise DownloadFailed(
            f"not enough disk space in {directory}: {len(files)} files need {_gb(needed)} more "
            f"({_gb(present)} already present) plus {HEADROOM_BYTES // 2**20} MiB headroom, "
            f"only {_gb(free)} free; "
            "free space or choose another --dir"
        )
    return needed


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _hub_answer(status: int | None, *, revision_missing: bool, repo_missing: bool, gated: bool,
                entry_missing: bool, first: str, repo: str, revision: str, endpoint: str, token_origin: str,
                what: str) -> StationError | None:  # fmt: skip
    """The operator message for an HTTP answer of the hub (one wording, whoever read the answer)."""
    if revision_missing:
        return DownloadFailed(
            f"revision {revision} not found in {repo} (HTTP {status or 404} from {endpoint}): "
            "check the commit id on the repository's history page"
        )
    if status in (401, 403) or gated:
        return DownloadFailed(
            f"HTTP {status} from {endpoint} for {repo} ({what}): the token ({token_origin}) is missing, "
            "invalid or has no access; for a gated model accept its license on the hub, pass --token-file"
        )
    if repo_missing:
        return DownloadFailed(
            f"repository {repo} not found (HTTP {status or 404} from {endpoint}): check the name"
        )
    if status == 404 and entry_missing:
        return DownloadFailed(f"{what}: not found at {revision} (HTTP {status or 404}); the listing changed?")
    if status is not None:
        return DownloadFailed(f"HTTP {status} from {endpoint} ({what}): {first}")
    return None


def hub_error(exc: BaseException, *, repo: str, revision: str, endpoint: str, token_origin: str,
              what: str) -> StationError:  # fmt: skip
    """Turn a huggingface_hub / network exception into one operator message.

    Classes are looked up by name so that huggingface_hub 0.2x (EntryNotFoundError, requests) and 1.x/2.x
    (RemoteEntryNotFoundError, httpx) both map to the same messages.
    """

    def kind(*names: str) -> bool:
        import huggingface_hub.errors as hf_errors

        classes = tuple(c for n in names if isinstance(c := getattr(hf_errors, n, None), type))
        return bool(classes) and isinstance(exc, classes)

    status = _status_of(exc)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    answer = _hub_answer(
        status if kind("HfHubHTTPError") or status in (401, 403) else None,
        revision_missing=kind("RevisionNotFoundError"), repo_missing=kind("RepositoryNotFoundError"),
        gated=kind("GatedRepoError"), entry_missing=kind("RemoteEntryNotFoundError", "EntryNotFoundError"),
        first=first, repo=repo, revision=revision, endpoint=endpoint, token_origin=token_origin, what=what,
    )  # fmt: skip
    if answer is not None:
        return answer
    if kind("OfflineModeIsEnabled"):
        return DownloadFailed(f"{what}: HF_HUB_OFFLINE is set for huggingface_hub: {exc}")
    mod = type(exc).__module__
    if mod.startswith(("httpx", "httpcore", "requests", "urllib3")) or isinstance(exc, ConnectionError):
        return Unreachable(f"cannot reach the hub at {endpoint} ({what}): {type(exc).__name__}: {exc}")
    return DownloadFailed(f"{what}: {type(exc).__name__}: {exc}")


def _interrupted(directory: Path, f: HubFile, done: int, total: int, exc: BaseException) -> DownloadFailed:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc and str(cause).strip() not in reason:
        reason += f" (cause: {type(cause).__name__}: {str(cause).strip()[:200]})"
    return DownloadFailed(
        f"download of {f.path} interrupted ({done}/{total} files complete): {type(exc).__name__}: {reason}; "
        f"rerun the same command to resume — complete files in {directory} are kept and not fetched again"
    )


def list_hub_files(
    endpoint: str, repo: str, revision: str, token: str | None, token_origin: str
) -> tuple[str, list[HubFile]]:
    """The revision's commit and files: `GET /api/models/{repo}/revision/{rev}?blobs=true` (what
    `HfApi.model_info(files_metadata=True)` asks), read through the HTTP layer — a total deadline, a cap on
    the body and on its nesting, no redirect followed — and every entry checked before anything is fetched."""
    if token is None:  # huggingface_hub's stored login, as hf_hub_download sends it
        from huggingface_hub import get_token

        token = get_token()
    what = "listing the files"
    url = f"{endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}?blobs=true"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with (
            SyncHttp(headers=headers, proxy=proxy_from_environment(url)) as http,
            http.stream("GET", url, timeout=API_TIMEOUT_S) as resp,
        ):
            status, code = resp.status_code, resp.headers.get("x-error-code", "")
            message = resp.headers.get("x-error-message", "")
            body = resp.read(LISTING_LIMIT)
    except (RedirectRefused, TooLarge) as exc:
        raise DownloadFailed(f"{what} of {repo}@{revision} at {endpoint}: {exc}") from None
    except httpx.HTTPError as exc:
        raise Unreachable(
            f"cannot reach the hub at {endpoint} ({what}): {type(exc).__name__}: {exc}"
        ) from None
    if status != 200:
        first = excerpt(message or body.decode(errors="replace"))
        answer = _hub_answer(
            status, revision_missing=code == "RevisionNotFound", repo_missing=code == "RepoNotFound",
            gated=code == "GatedRepo", entry_missing=False, first=first,
            repo=repo, revision=revision, endpoint=endpoint, token_origin=token_origin, what=what,
        )  # fmt: skip
        assert answer is not None
        raise answer
    try:
        info = bounded.loads_json(body)
    except ValueError as exc:
        raise DownloadFailed(f"{what}: the hub's answer is not JSON ({exc})") from None
    sha = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not COMMIT_RE.fullmatch(sha):
        raise DownloadFailed(f"the hub returned no commit id for {repo}@{revision}")
    siblings = info.get("siblings")
    if not isinstance(siblings, list) or not siblings:
        raise DownloadFailed(f"{repo}@{revision} lists no files")
    return sha, [_hub_file(entry) for entry in siblings]


def _hub_file(entry: Any) -> HubFile:
    """One entry of the listing, refused unless it is a plain relative path with a size (a hostile hub must
    not name `../` or an absolute path: hf_hub_download writes under --dir by that name)."""
    name = entry.get("rfilename") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not name or len(name) > 1024:
        raise DownloadFailed(f"the hub listed an entry without a file name: {excerpt(str(entry))}")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise DownloadFailed(f"the hub listed {name!r}: not a plain relative path; nothing was fetched")
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
    size = entry.get("size")
    if size is None and lfs is not None:
        size = lfs.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise DownloadFailed(f"the hub reported no size for {name}: cannot check disk space")
    sha256 = lfs.get("sha256") if lfs is not None else None
    if sha256 is not None and not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256)):
        raise DownloadFailed(f"the hub listed {name} with a malformed sha256: {excerpt(str(sha256))}")
    blob = entry.get("blobId")
    return HubFile(path=name, size=size, sha256=sha256, blob_id=blob if isinstance(blob, str) else None)


def offline(args: argparse.Namespace, directory: Path) -> tuple[str, int]:
    """HF_HUB_OFFLINE: accept only a complete earlier download of this exact commit."""
    if not COMMIT_RE.fullmatch(args.revision):
        raise DownloadFailed(
            f"HF_HUB_OFFLINE is set: cannot resolve {args.revision!r} to a commit; pass the commit"
        )
    try:
        record = read_hash_record(directory)
    except ValueError as exc:
        raise DownloadFailed(
            f"HF_HUB_OFFLINE is set and {directory} has an unreadable hash record: {exc}"
        ) from exc
    if record is None or record.revision != args.revision or record.repo != args.repo:
        raise DownloadFailed(
            f"HF_HUB_OFFLINE is set and {directory} holds no download of {args.repo}@{args.revision}; "
            "unset HF_HUB_OFFLINE to fetch it"
        )
    missing = [p for p, r in record.files.items() if not (directory / p).is_file()
               or (r.size is not None and (directory / p).stat().st_size != r.size)]  # fmt: skip
    if missing:
        raise DownloadFailed(
            f"HF_HUB_OFFLINE is set and the download in {directory} is incomplete "
            f"({len(missing)} files missing or short: {', '.join(sorted(missing)[:5])}); "
            "unset HF_HUB_OFFLINE to finish it"
        )
    return args.revision, sum(r.size or 0 for r in record.files.values())


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    # 1. the binding comes first: every page this process caches from here on lands on these nodes
    membind = checkpoint_args.membind(args, "download")
    if membind:
        print(f"station download: memory bound to {membind} (kernel read-back)", file=sys.stderr)
    expect = checkpoint_args.expectations(args)
    if not COMMIT_RE.fullmatch(args.revision) and not args.allow_branch:
        raise UsageError(
            f"--revision {args.revision!r} is not a 40-hex commit: branches and tags move, so the checkpoint "
            "would not be reproducible; pin the commit, or pass --allow-branch to resolve it now and record "
            "the commit"
        )
    token, token_origin = read_token(args.token_file)
    directory: Path = args.dir
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DownloadFailed(f"cannot create {directory}: {exc.strerror or exc}") from exc

    if _truthy(os.environ.get("HF_HUB_OFFLINE")):
        commit, total = offline(args, directory)
        report = DownloadReport(
            repo=args.repo, requested_revision=args.revision, revision=commit, dir=str(directory),
            membind=membind,
            files=0, bytes=total, downloaded_files=0, skipped_files=0, seconds=0.0, offline=True,
        )  # fmt: skip
        return _finish(args, report, expect, started)

    from huggingface_hub import hf_hub_download

    endpoint = args.endpoint or (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    ctx = {"repo": args.repo, "revision": args.revision, "endpoint": endpoint, "token_origin": token_origin}
    commit, listed = list_hub_files(endpoint, args.repo, args.revision, token, token_origin)
    if COMMIT_RE.fullmatch(args.revision) and commit != args.revision:
        raise DownloadFailed(f"asked for commit {args.revision}, the hub answered with {commit}")
    if commit != args.revision:
        print(
            f"station download: --allow-branch: {args.revision} is commit {commit} (recorded)",
            file=sys.stderr,
        )
    files = _select(listed, args.include)

    freed = remove_partials(directory)
    if freed:
        print(
            f"station download: removed {_gb(freed)} of partial files left by an earlier run", file=sys.stderr
        )
    check_space(directory, files)
    # a half-downloaded directory must never look verified: its stamp goes before any file changes
    try:
        remove_stamp(directory)
    except OSError as exc:
        raise DownloadFailed(
            f"cannot remove {directory / STAMP_NAME} before downloading over it: {exc.strerror or exc}"
        ) from exc
    previous = None
    with contextlib.suppress(ValueError):
        previous = read_hash_record(directory)
    if previous is not None and previous.revision not in (None, commit):
        print(
            f"station download: {directory} held {previous.revision}; replacing it with {commit}",
            file=sys.stderr,
        )
    write_hash_record(
        directory,
        HashRecord(
            repo=args.repo, revision=commit, requested_revision=args.revision, endpoint=endpoint,
            files={f.path: RecordedFile(size=f.size, sha256=f.sha256,
                                        git_blob_sha1=None if f.sha256 else f.blob_id)
                   for f in files},
        ),
    )  # fmt: skip

    downloaded = skipped = 0
    total_bytes = sum(f.size for f in files)
    ctx["revision"] = commit
    for i, f in enumerate(files, 1):
        t0 = time.monotonic()
        before = _is_complete(directory, f)
        try:
            hf_hub_download(
                repo_id=args.repo, filename=f.path, revision=commit, local_dir=str(directory), token=token,
                endpoint=endpoint, etag_timeout=ETAG_TIMEOUT_S,
            )  # fmt: skip
        except KeyboardInterrupt:
            # huggingface_hub removes its partial file on the way out, unless the signal lands where its
            # cleanup does not run (seen on a loaded machine): ours runs whatever the timing
            remove_partials(directory)
            raise
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                free = shutil.disk_usage(directory).free
                raise DownloadFailed(
                    f"disk full while writing {f.path} ({_gb(f.size)}) into {directory} "
                    f"({_gb(free)} free now): "
                    f"{i - 1}/{len(files)} files are complete and kept; free space and rerun the same command"
                ) from exc
            if _status_of(exc) is not None:
                raise hub_error(exc, what=f.path, **ctx) from exc
            raise _interrupted(directory, f, i - 1, len(files), exc) from exc
        except Exception as exc:
            if _status_of(exc) is not None:
                raise hub_error(exc, what=f.path, **ctx) from exc
            raise _interrupted(directory, f, i - 1, len(files), exc) from exc
        dt = time.monotonic() - t0
        if before:
            skipped += 1
        else:
            downloaded += 1
        rate = f" at {f.size / dt / 1e6:,.0f} MB/s" if dt > 0 and not before else ""
        state = "already complete" if before else f"done in {dt:.1f} s{rate}"
        print(f"[{i}/{len(files)}] {f.path} ({_gb(f.size)}): {state}", file=sys.stderr)

    report = DownloadReport(
        repo=args.repo, requested_revision=args.revision, revision=commit, dir=str(directory),
        membind=membind,
        files=len(files), bytes=total_bytes, downloaded_files=downloaded, skipped_files=skipped, seconds=0.0,
    )  # fmt: skip
    return _finish(args, report, expect, started)


def _finish(args: argparse.Namespace, report: DownloadReport, expect: Expectations, started: float) -> int:
    result = verify_checkpoint(
        Path(report.dir), expect, sha256=args.sha256, repo=report.repo, revision=report.revision
    )
    result.membind = report.membind if args.sha256 else None
    report.verify = result
    report.seconds = round(time.monotonic() - started, 3)
    if args.json:
        dump_json(report)
    else:
        print(
            f"download {report.repo}@{report.revision} → {report.dir}: {report.downloaded_files} fetched, "
            f"{report.skipped_files} already complete, {_gb(report.bytes)}, "
            f"membind {report.membind or 'none'}"
            f"{' (offline)' if report.offline else ''}, {report.seconds:.1f} s"
        )
        print(report_text(result))
        for w in result.warnings:
            print(f"warning: {w}", file=sys.stderr)
    if not result.ok:
        raise CheckFailed("download finished but " + failure_message(result))
    return 0
