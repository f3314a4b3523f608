"""The preflight check registry: results, configuration, context and the runner.

A check is a function `(ctx: Context) -> CheckResult` registered with `@check(name, group=...)`.
Checks are independent: one that raises never stops the others — it becomes a FAIL naming the error
(or a SKIP when it raises `SkipCheck`). Group "station" holds the one-station checks
(`vllm_station.commands.preflight.checks`); group "pair" (`vllm_station.commands.preflight.pair`,
two-station issue) runs only when the configuration has a `pair` section.

Adding a module of checks::

    from vllm_station.commands.preflight.core import CheckResult, Context, check
    from vllm_station.status import Status

    @check("rail-link", group="pair", description="rail interface up, MTU 9000")
    def rail_link(ctx: Context) -> CheckResult:
        ...
        return CheckResult("rail-link", Status.PASS, "cx8r1 up, MTU 9000", threshold="MTU 9000")

and list the module in `CHECK_MODULES` below.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import time
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from vllm_station import bounded
from vllm_station.errors import StationError, UsageError
from vllm_station.status import Status

log = logging.getLogger(__name__)

# Modules whose import registers checks, in run order. Every one must import (load_checks).
CHECK_MODULES: tuple[str, ...] = (
    "vllm_station.commands.preflight.checks",
    "vllm_station.commands.preflight.pair",
)

GiB = 1024**3


# What a preflight check gives (vllm_station.status: no PENDING here), in the order of the JSON's summary.
STATUSES: tuple[Status, ...] = (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP)


@dataclass
class CheckResult:
    """One check's verdict. `figure` is what was measured, `threshold` what it was compared with,
    `fix` what an operator does about it (set for every non-PASS), `details` the raw figures."""

    name: str
    status: Status
    figure: str
    threshold: str | None = None
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    group: str = "station"
    elapsed_ms: float = 0.0


class SkipCheck(Exception):
    """Raise inside a check to report SKIP with `reason` (and an optional fix that would enable it)."""

    def __init__(self, reason: str, fix: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
        self.details = details or {}


# --- configuration -------------------------------------------------------------------------------


@dataclass
class PathsConfig:
    state: str
    cache: str
    logs: str


@dataclass
class PairConfig:
    role: str
    rank: int
    head_address: str | None
    worker_address: str | None
    rail_interface: str | None
    rail_hca: str | None
    gid_index: int
    master_port: int
    beacon_port: int | None  # null: no beacon (rail-peer probes peerStampUrl's port or masterPort)
    peer_stamp_url: str | None


@dataclass
class PreflightConfig:
    """The JSON the Nix module writes (`/etc/vllm-station/preflight.json`), read strictly: every key
    below is required (camelCase), an unknown key is a usage error, and so is a wrong type. A vLLM setting
    the module leaves unset is written as null and means vLLM's default (`VLLM_DEFAULTS`)."""

    host: str
    port: int
    model: str
    model_dir: str | None
    revision: str | None
    gpu_node: int
    max_file_pages_gib: float
    gpu_memory_utilization: float
    max_model_len: int | None  # null: the model's own context length
    max_num_seqs: int | None  # null: not set, vLLM picks its own
    kv_cache_dtype: str  # "auto" (null): what the checkpoint's configuration says, else the model dtype
    tool_call_parser: str | None  # vLLM's --tool-call-parser; null: none (tool calls stay text)
    reasoning_parser: str | None  # vLLM's --reasoning-parser; null: none
    runtime: str | None
    image: str | None
    paths: PathsConfig
    pair: PairConfig | None
    # the whole parsed JSON, for check modules that read keys of their own (OPTIONAL_KEYS)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PreflightConfig:
        if not isinstance(data, Mapping):
            raise UsageError(f"preflight config: expected a JSON object, got {type(data).__name__}")
        values = _load_fields(cls, data, "", nested={"paths", "pair"}, optional=OPTIONAL_KEYS[""])
        paths_raw = data["paths"]
        if not isinstance(paths_raw, Mapping):
            raise UsageError("preflight config: 'paths' must be an object")
        paths = PathsConfig(**_load_fields(PathsConfig, paths_raw, "paths."))
        pair_raw = data["pair"]
        pair: PairConfig | None = None
        if pair_raw is not None:
            if not isinstance(pair_raw, Mapping):
                raise UsageError("preflight config: 'pair' must be an object or null")
            pair = PairConfig(**_load_fields(PairConfig, pair_raw, "pair.", optional=OPTIONAL_KEYS["pair."]))
        return cls(**values, paths=paths, pair=pair, raw=dict(data))

    @classmethod
    def load(cls, path: Path) -> PreflightConfig:
        try:
            text = bounded.read_text(path, limit=bounded.CONFIG_LIMIT)
        except OSError as err:
            raise UsageError(f"cannot read preflight config {path}: {err.strerror or err}") from err
        try:
            data = bounded.loads_json(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"preflight config {path} is not valid JSON: {err}") from err
        try:
            return cls.from_mapping(data)
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from err


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# special spellings of camelCase keys that the simple rule does not produce
_KEY_OVERRIDES = {"max_file_pages_gib": "maxFilePagesGiB"}

# Keys a check module reads from `raw` when present (preflight-only settings the module does not write).
OPTIONAL_KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"diskMinFreeGiB"}),
    "pair.": frozenset({"mtu", "peerTimeoutSeconds"}),
}


def config_keys(cls: type, skip: Iterable[str] = ("raw",)) -> list[str]:
    """The camelCase keys a config dataclass requires, in field order."""
    skipped = set(skip)
    return [
        _KEY_OVERRIDES.get(f.name, camel(f.name)) for f in dataclasses.fields(cls) if f.name not in skipped
    ]


def _load_fields(
    cls: type,
    data: Mapping[str, Any],
    prefix: str,
    nested: Iterable[str] = (),
    optional: Iterable[str] = (),
) -> dict[str, Any]:
    """The values of `cls`'s fields from `data`: every key required, unknown keys refused."""
    hints = typing.get_type_hints(cls)
    known = config_keys(cls)
    extra = set(optional)
    unknown = sorted(k for k in data if k not in known and k not in extra)
    if unknown:
        raise UsageError(
            f"preflight config: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(prefix + k) for k in unknown)}; known keys"
            f"{' of ' + repr(prefix.rstrip('.')) if prefix else ''}: {', '.join(known + sorted(extra))}"
        )
    missing = [k for k in known if k not in data]
    if missing:
        raise UsageError(
            f"preflight config: missing key{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(prefix + k) for k in missing)} (the NixOS module writes every key; "
            "is this file from another version of vllm-station?)"
        )
    skipped = set(nested) | {"raw"}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skipped:
            continue
        key = _KEY_OVERRIDES.get(f.name, camel(f.name))
        out[f.name] = _coerce(f"{prefix}{key}", data[key], hints[f.name])
    return out


# The module writes null for a vLLM setting left unset ("null: vLLM's default"). These stand for it.
VLLM_DEFAULTS: dict[str, Any] = {
    "gpuMemoryUtilization": 0.9,
    "kvCacheDtype": "auto",
    "maxNumSeqs": None,
    "maxModelLen": None,
}


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Type-check one value against its field's type (null allowed where the type is optional)."""
    args = typing.get_args(hint)
    nullable = type(None) in args
    kind = next((a for a in args if a is not type(None)), hint) if args else hint
    if value is None:
        if key in VLLM_DEFAULTS:
            return VLLM_DEFAULTS[key]
        if nullable:
            return None
        raise UsageError(f"preflight config: '{key}' must not be null")
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        expected = "a string" if kind is str else kind.__name__
        raise UsageError(f"preflight config: '{key}' must be {expected}, got {json.dumps(value)}")
    return value


# --- context -------------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass
class Context:
    """What every check gets: the root of the host's filesystem (`/`, or a prepared tree in tests),
    the configuration, and a cache so readers shared by several checks run once."""

    config: PreflightConfig
    root: Path = Path("/")
    cache: dict[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    def cached(self, key: str, fn: Callable[[], T]) -> T:
        """`fn()` once per run; an exception is cached too and re-raised to every caller."""
        if key not in self.cache:
            try:
                self.cache[key] = (True, fn())
            except Exception as err:
                self.cache[key] = (False, err)
        ok, value = self.cache[key]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def prime(self, key: str, value: Any) -> None:
        """Provide a reading up front (a caller that already has it; tests with recorded data)."""
        self.cache[key] = (True, value)

    def host_path(self, path: str | Path) -> Path:
        """A host path (as the config names it) inside `root`."""
        p = Path(path)
        return self.root / p.relative_to("/") if p.is_absolute() else self.root / p

    @property
    def live(self) -> bool:
        """True when checking the running machine (root is /), so sockets and NVML mean this host."""
        return self.root.resolve() == Path("/")


# --- registry ------------------------------------------------------------------------------------

CheckFn = Callable[[Context], CheckResult]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    group: str
    fn: CheckFn
    description: str


REGISTRY: dict[str, CheckSpec] = {}


def check(name: str, group: str = "station", description: str = "") -> Callable[[CheckFn], CheckFn]:
    """Register a check. Names are unique across groups (they are what `--only` takes)."""

    def register(fn: CheckFn) -> CheckFn:
        existing = REGISTRY.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"preflight check {name!r} registered twice")
        REGISTRY[name] = CheckSpec(name, group, fn, description or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return register


def load_checks(modules: Sequence[str] = CHECK_MODULES) -> dict[str, CheckSpec]:
    """Import the check modules (registering their checks). A module that cannot be imported is an
    error: a preflight that silently ran fewer checks would pass a start it should refuse."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise StationError(
                f"the preflight check module {module} cannot be imported ({err}): a broken installation"
            ) from err
    return REGISTRY


def select(only: Sequence[str] | None, registry: Mapping[str, CheckSpec]) -> list[CheckSpec]:
    """Check specs for `--only` (check names or group names); all when None. Unknown → UsageError."""
    if not only:
        return list(registry.values())
    groups = {spec.group for spec in registry.values()}
    chosen: list[CheckSpec] = []
    for item in only:
        if item in registry:
            matches = [registry[item]]
        elif item in groups:
            matches = [s for s in registry.values() if s.group == item]
        else:
            known = ", ".join(sorted(registry)) or "none"
            raise UsageError(
                f"unknown check {item!r}; known checks: {known}; groups: {', '.join(sorted(groups))}"
            )
        chosen.extend(m for m in matches if m not in chosen)
    return [spec for spec in registry.values() if spec in chosen]  # registration order


def run_one(spec: CheckSpec, ctx: Context) -> CheckResult:
    start = time.perf_counter()
    try:
        result = spec.fn(ctx)
    except SkipCheck as skip:
        result = CheckResult(spec.name, Status.SKIP, skip.reason, fix=skip.fix, details=skip.details)
    except Exception as err:  # a broken check is a FAIL with its error, never a crash
        log.debug("preflight check %s raised", spec.name, exc_info=True)
        result = CheckResult(
            spec.name,
            Status.FAIL,
            f"check error: {type(err).__name__}: {err}",
            fix="the check itself could not run; fix the cause above (or report a bug with `--debug` output)",
            details={"error": type(err).__name__, "message": str(err)},
        )
    result = dataclasses.replace(result, name=spec.name, group=spec.group)
    result.elapsed_ms = round((time.perf_counter() - start) * 1000, 3)
    return result


def run_checks(ctx: Context, only: Sequence[str] | None = None) -> list[CheckResult]:
    """Run the selected checks in registration order. Group "pair" runs only when `config.pair` is
    set; asked for by name without a pair configured, its checks report SKIP."""
    registry = load_checks()
    specs = select(only, registry)
    results: list[CheckResult] = []
    for spec in specs:
        if spec.group == "pair" and ctx.config.pair is None:
            if not only:
                continue
            results.append(
                CheckResult(
                    spec.name,
                    Status.SKIP,
                    "no pair configured (config 'pair' is null)",
                    fix="set services.vllm-station.pair (or 'pair' in the config) for two-station checks",
                    group=spec.group,
                )
            )
            continue
        results.append(run_one(spec, ctx))
    return results


def exit_code(results: Iterable[CheckResult]) -> int:
    """0 when no check failed, 1 otherwise."""
    return 1 if any(r.status is Status.FAIL for r in results) else 0
