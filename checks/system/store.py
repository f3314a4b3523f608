"""Map the /nix/store paths that rendered units name onto this machine, one store path at a time.

A unit rendered by NixOS names store paths: packages (`…-coreutils-9.5/bin`, `…-docker-27.3.1/bin/docker`,
`…-vllm-station-0.1.0/bin/station`) and text files (`writeShellScript`). A station has exactly those; a
test here must too, no more: each package's directory holds links to *this machine's* equivalent of
that package only (its Debian package's programs, or the `station` venv), and each text file is
written from the text Nix would write. A PATH that lacks the runtime on a station lacks it here too.

What a store path is comes from its derivation (`nix derivation show`): `pname` for packages, `text`
for text files. An unmapped package fails the tier, naming it: add it to PACKAGES.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

STORE_PATH = re.compile(r"/nix/store/[0-9a-z]{32}-[^/\s\"'`;:$]+")


@dataclass(frozen=True)
class Debian:
    """The programs (bin/, sbin/) of a Debian package, linked into the store path's bin/ and sbin/; `also`:
    (package, program) pairs nixpkgs' package bundles and Debian ships elsewhere (coreutils' `kill` is
    procps' there), those programs only."""

    package: str
    also: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Links:
    """Explicit links: relative path inside the store path -> absolute path on this machine. `copies`: the
    same, copied in instead: files under this machine's /etc, which a booted test machine does not see
    (its /etc is its own: machine.py)."""

    links: tuple[tuple[str, str], ...]
    copies: tuple[tuple[str, str], ...] = ()


Mapping = Debian | Links | Callable[["Derivation"], Links]

# nixpkgs pname -> what stands for it here. Keep this small and explicit: an unmapped pname fails.
PACKAGES: dict[str, Mapping] = {
    "coreutils": Debian("coreutils", also=(("procps", "kill"),)),
    "coreutils-full": Debian("coreutils", also=(("procps", "kill"),)),
    "findutils": Debian("findutils"),
    "gnugrep": Debian("grep"),
    "gnused": Debian("sed"),
    "systemd": Debian("systemd"),
    "systemd-minimal": Debian("systemd"),
    "bash": Debian("bash"),
    "bash-interactive": Debian("bash"),
    "docker": Debian("docker.io"),
    "podman": Debian("podman"),
    "iproute2": Debian("iproute2"),
    "numactl": Debian("numactl"),
    "rsync": Debian("rsync"),
    "tzdata": Links((("share/zoneinfo", "/usr/share/zoneinfo"),)),
    # the gateway (render.nix with `gateway`): Debian's nginx 1.22 and the files nginx.conf includes
    "nginx": Links(
        (("bin/nginx", "/usr/sbin/nginx"),),
        copies=(
            ("conf/fastcgi.conf", "/etc/nginx/fastcgi.conf"),
            ("conf/uwsgi_params", "/etc/nginx/uwsgi_params"),
        ),
    ),
    "mailcap": Links((), copies=(("etc/nginx/mime.types", "/etc/nginx/mime.types"),)),
    "glibc-locales": Links(
        (("lib/locale/locale-archive", "/usr/lib/locale/locale-archive"),)
    ),
}
# pname of the project's own package: its programs are the station venv's entry points (station.py).
STATION_PNAME = "vllm-station"


class UnmappedStorePath(AssertionError):
    pass


@dataclass
class Derivation:
    drv: str
    outputs: dict[str, str]
    env: dict[str, str]
    input_drvs: list[str]

    @property
    def pname(self) -> str:
        if "pname" in self.env:
            return self.env["pname"]
        name = self.env.get("name", "")
        return re.sub(r"-[0-9][^-]*$", "", name)

    @property
    def is_text(self) -> bool:
        return "text" in self.env and "text" in self.env.get("passAsFile", "").split()


def show_derivations(
    nix: Callable[[list[str]], str], drvs: Iterable[str]
) -> dict[str, Derivation]:
    """`nix derivation show` of `drvs` and their direct inputs (enough to resolve text files' references)."""
    wanted = sorted(set(drvs))
    data: dict[str, object] = (
        json.loads(nix(["nix", "derivation", "show", *wanted])) if wanted else {}
    )
    result = {k: _derivation(k, v) for k, v in data.items()}
    inputs = sorted(
        {i for d in result.values() if d.is_text for i in d.input_drvs} - set(result)
    )
    if inputs:
        more: dict[str, object] = json.loads(
            nix(["nix", "derivation", "show", *inputs])
        )
        result.update({k: _derivation(k, v) for k, v in more.items()})
    return result


def _derivation(drv: str, raw: object) -> Derivation:
    assert isinstance(raw, dict)
    outputs = {name: str(o["path"]) for name, o in raw["outputs"].items()}
    return Derivation(
        drv=drv,
        outputs=outputs,
        env=dict(raw["env"]),
        input_drvs=sorted(raw.get("inputDrvs", {})),
    )


def debian_programs(package: str) -> dict[str, str]:
    """bin/NAME and sbin/NAME -> the real file on this machine, for every program a Debian package installs."""
    proc = subprocess.run(
        ["dpkg", "-L", package], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise UnmappedStorePath(
            f"Debian package {package!r} is not installed here: {proc.stderr.strip()}"
        )
    links: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"(?:/usr)?/(s?bin)/([^/]+)", line)
        if m and os.path.exists(line):
            links.setdefault(f"{m.group(1)}/{m.group(2)}", os.path.realpath(line))
    return links


class StoreMap:
    """Builds `root` (mounted at /nix/store in the machine) with one directory per referenced store path."""

    def __init__(
        self, root: Path, derivations: dict[str, Derivation], station_bin: Path
    ) -> None:
        self.root = root
        self.station_bin = station_bin
        self.by_output: dict[str, Derivation] = {}
        for d in derivations.values():
            for path in d.outputs.values():
                self.by_output[path] = d
        self.made: dict[
            str, str
        ] = {}  # store path -> what it was mapped to (for the test report)

    def materialize_texts(self, texts: Iterable[str]) -> None:
        for text in texts:
            for path in sorted(set(STORE_PATH.findall(text))):
                self.materialize(path)

    def materialize(self, path: str) -> None:
        if path in self.made:
            return
        d = self.by_output.get(path)
        if d is None:
            raise UnmappedStorePath(
                f"{path} is named by a rendered file but no derivation in its context has it"
            )
        target = self.root / Path(path).name
        target.mkdir(parents=True, exist_ok=True)
        if d.is_text:
            # writeTextFile's `destination` (writeShellScriptBin, systemd's unit scripts: `$out/bin/NAME`)
            # is in its build command as `target=$out/…`; none: the store path is the file itself.
            dest = re.search(r"^target=\$out(/\S+)?$", d.env.get("buildCommand", ""), re.MULTILINE)
            file = target / dest.group(1).lstrip("/") if dest and dest.group(1) else target
            if file == target:
                target.rmdir()
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(d.env["text"])
            if d.env.get("executable") == "1":
                file.chmod(0o755)
            self.made[path] = "text"
            self.materialize_texts([d.env["text"]])
            return
        links = self._links(d)
        mapping = PACKAGES.get(d.pname)
        for rel, real in mapping.copies if isinstance(mapping, Links) else ():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(Path(real).read_bytes())
        for rel, real in links.items():
            link = target / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(real)
        self.made[path] = f"{d.pname}: {len(links)} links"

    def _links(self, d: Derivation) -> dict[str, str]:
        if d.pname == STATION_PNAME:
            return {
                f"bin/{p.name}": str(p)
                for p in sorted(self.station_bin.iterdir())
                if p.name == "station" or p.name.startswith("station-")
            }
        mapping = PACKAGES.get(d.pname)
        if mapping is None:
            raise UnmappedStorePath(
                f"the rendered units name {d.env.get('name')} (pname {d.pname!r}), which has no stand-in "
                "here: add it to PACKAGES in checks/system/store.py"
            )
        if callable(mapping):
            mapping = mapping(d)
        if isinstance(mapping, Debian):
            programs = debian_programs(mapping.package)
            for package, program in mapping.also:
                for rel, real in debian_programs(package).items():
                    if rel.rsplit("/", 1)[-1] == program:
                        programs.setdefault(rel, real)
            return programs
        return dict(mapping.links)
