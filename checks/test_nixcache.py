"""The content-keyed cache of Nix evaluations (checks/nixcache.py), with the real nix-instantiate on a
scratch checkout: an unchanged evaluation is answered from the cache, any change to what it reads is not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import nixcache
import pytest
from nixenv import nix_bin


@pytest.fixture
def nix() -> Path:
    d = nix_bin()
    if d is None:
        pytest.skip("no Nix: scripts/install-nix installs it (scripts/check runs it first)")
    return d / "nix-instantiate"


class Checkout:
    def __init__(self, tmp: Path, nix: Path) -> None:
        self.repo, self.tree, self.nix = tmp / "repo", tmp / "trees" / "t", nix
        self.tree.mkdir(parents=True)
        (self.tree / "lib.nix").write_text("{ answer = 42; }\n")
        self.repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=self.repo, check=True)
        (self.repo / "main.nix").write_text(
            '{ tree }: builtins.trace "a warning on stderr" ({ value = (import (tree + "/lib.nix")).answer; }'
            ' // import ./part.nix // { where = toString ./.; })\n'
        )
        (self.repo / "part.nix").write_text("{ part = 1; }\n")
        self.cache = nixcache.EvalCache(tmp / "cache")
        self.log = tmp / "log"
        self.env = {"STATION_NIX_EVAL_LOG": str(self.log), "HOME": str(tmp)}
        self.roots = nixcache.Roots(repo=self.repo, snapshots=(), trees=(self.tree, self.tree.parent / "u"))
        self.digests = 0

    def digest(self, root: Path) -> str:
        self.digests += 1
        return nixcache.files_digest(root, nixcache.repo_files(root))

    def eval(self, *extra: str, tree: Path | None = None) -> subprocess.CompletedProcess[str]:
        argv = [str(self.nix), "--eval", "--strict", "--json", str(self.repo / "main.nix"),
                "--argstr", "tree", str(tree or self.tree), *extra]  # fmt: skip
        return nixcache.run(argv, timeout=120, cwd=None, env=self.env, roots=self.roots, cache=self.cache,
                            digest=self.digest)  # fmt: skip

    def outcomes(self) -> list[str]:
        return [line.split("\t")[0] for line in self.log.read_text().splitlines()]


@pytest.fixture
def co(tmp_path: Path, nix: Path) -> Checkout:
    return Checkout(tmp_path, nix)


def test_an_unchanged_evaluation_is_answered_from_the_cache_with_its_warnings(co: Checkout) -> None:
    first = co.eval()
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"value": 42, "part": 1, "where": str(co.repo)}
    again = co.eval()
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, first.stderr)
    assert "a warning on stderr" in again.stderr
    assert co.outcomes() == ["miss", "hit"]


def test_a_changed_file_an_argument_or_a_replaced_tree_is_evaluated_again(co: Checkout) -> None:
    assert co.eval().returncode == 0
    (co.repo / "part.nix").write_text("{ part = 2; }\n")  # a file the expression imports, not named in argv
    assert json.loads(co.eval().stdout)["part"] == 2
    assert json.loads(co.eval("--argstr", "unused", "x").stdout)["part"] == 2  # another argv
    other = co.tree.parent / "u"
    other.mkdir()
    (other / "lib.nix").write_text("{ answer = 7; }\n")
    assert json.loads(co.eval(tree=other).stdout)["value"] == 7  # another tree
    assert json.loads(co.eval().stdout)["part"] == 2  # unchanged since the second run
    # the tree fetched again (a new directory, another revision)
    (co.tree / "lib.nix").rename(other / "old.nix")
    co.tree.rmdir()
    co.tree.mkdir()
    (co.tree / "lib.nix").write_text("{ answer = 43; }\n")
    assert json.loads(co.eval().stdout)["value"] == 43
    assert co.outcomes() == ["miss", "miss", "miss", "miss", "hit", "miss"]


def test_a_path_outside_the_roots_and_a_failure_are_never_kept(co: Checkout, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "lib.nix").write_text("{ answer = 1; }\n")
    for _ in range(2):
        assert json.loads(co.eval(tree=outside).stdout)["value"] == 1
    (co.repo / "part.nix").write_text("{ part = throw \"broken\"; }\n")
    for _ in range(2):
        r = co.eval()
        assert r.returncode == 1 and "broken" in r.stderr
    assert co.outcomes() == ["uncached", "uncached", "miss", "miss"]


def test_the_cache_can_be_turned_off(co: Checkout) -> None:
    co.env["STATION_NIX_EVAL_CACHE"] = "0"
    assert co.eval().returncode == 0 and co.eval().returncode == 0
    assert co.outcomes() == ["uncached", "uncached"] and co.digests == 0


def test_a_collected_derivation_makes_a_miss_only_where_the_evaluation_wrote_it(tmp_path: Path) -> None:
    cache = nixcache.EvalCache(tmp_path)
    gone = "/nix/store/" + "a" * 32 + "-gone.drv"
    cache.put("k" * 64, json.dumps({"drv": gone}), "")
    assert cache.get("k" * 64, writes_drvs=True) is None
    assert cache.get("k" * 64, writes_drvs=False) == (json.dumps({"drv": gone}), "")


def test_the_cache_is_bounded_least_recently_used_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nixcache, "MAX_ENTRIES", 3)
    cache = nixcache.EvalCache(tmp_path)
    for n in range(3):
        cache.put(f"{n:064d}", str(n), "")
    os.utime(cache._file(f"{0:064d}"), ns=(1, 1))  # the oldest, then read again: the newest
    assert cache.get(f"{0:064d}", writes_drvs=False) == ("0", "")
    os.utime(cache._file(f"{1:064d}"), ns=(2, 2))
    cache.put(f"{3:064d}", "3", "")
    assert sorted(f.stem[-1] for f in tmp_path.glob("*/*.json")) == ["0", "2", "3"]


def test_only_evaluations_are_cached() -> None:
    assert nixcache.is_evaluation(["/x/nix-instantiate", "--eval", "f.nix"])
    assert nixcache.is_evaluation(["/x/nix", "eval", "path:/a#b"])
    assert not nixcache.is_evaluation(["/x/nix-instantiate", "f.nix"])  # instantiates derivations
    assert not nixcache.is_evaluation(["/x/nix", "store", "add-path", "/a"])
    assert not nixcache.is_evaluation(["/x/nix", "hash", "path", "/a"])


def test_paths_are_found_inside_arguments_and_expressions(tmp_path: Path) -> None:
    roots = nixcache.Roots(repo=tmp_path / "r", snapshots=(tmp_path / "s",), trees=(tmp_path / "t",))
    digest = {roots.repo: "R", tmp_path / "s": "S"}.__getitem__
    (tmp_path / "t").mkdir()
    ids = nixcache.path_identities(
        ["nix", f"path:{tmp_path}/s#x", "-E", f'import "{tmp_path}/r/a.nix" {{ t = {tmp_path}/t/lib; }}',
         "/nix/store/" + "b" * 32 + "-source/lib"], roots, digest,
    )  # fmt: skip
    assert ids is not None and [i.split(":")[0] for i in ids] == ["repo", "snapshot", "store", "tree"]
    assert "repo:R" in ids and "snapshot:S" in ids
    assert nixcache.path_identities(["nix", "--argstr", "hub", "http://127.0.0.1:8/x"], roots, digest) is None


def test_another_clone_of_the_same_files_shares_the_keys_and_gets_its_own_paths(co: Checkout) -> None:
    """CI's clone lives elsewhere: the same files give the same keys, and an output naming the checkout
    names the clone that asks."""
    assert co.eval().returncode == 0
    clone = co.repo.parent / "clone"
    shutil.copytree(co.repo, clone)
    co.roots = nixcache.Roots(repo=clone, snapshots=(), trees=co.roots.trees)
    co.repo = clone
    r = co.eval()
    assert co.outcomes() == ["miss", "hit"]
    assert json.loads(r.stdout) == {"value": 42, "part": 1, "where": str(clone)}
