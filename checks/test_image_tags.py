"""The system tier's image tags (checks/system/images.py): the same sources in another checkout reuse the
image; a changed byte builds a new one. A tag that named the checkout's path rebuilt the 2.5 GB vLLM image
(~4.5 min) in every worktree and in CI's clone."""

from __future__ import annotations

from pathlib import Path

from system.images import _tree_hash


def _tree(root: Path, body: str) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text(body)
    (root / "images.py").write_text("tag me\n")
    return root


def test_same_sources_elsewhere_same_tag(tmp_path: Path) -> None:
    one, two = _tree(tmp_path / "main", "x = 1\n"), _tree(tmp_path / "clone" / "deeper", "x = 1\n")
    assert _tree_hash([one / "src", one / "images.py"]) == _tree_hash([two / "src", two / "images.py"])


def test_a_changed_byte_or_name_changes_the_tag(tmp_path: Path) -> None:
    one, two = _tree(tmp_path / "main", "x = 1\n"), _tree(tmp_path / "clone", "x = 2\n")
    assert _tree_hash([one / "src"]) != _tree_hash([two / "src"])
    (two / "src" / "pkg" / "a.py").write_text("x = 1\n")
    assert _tree_hash([one / "src"]) == _tree_hash([two / "src"])
    (two / "src" / "pkg" / "a.py").rename(two / "src" / "pkg" / "b.py")
    assert _tree_hash([one / "src"]) != _tree_hash([two / "src"])


def test_by_stat_the_path_counts(tmp_path: Path) -> None:
    """A tree hashed by sizes and mtimes (the vLLM venv, one place on the machine) is named by its path."""
    one, two = _tree(tmp_path / "a", "x = 1\n"), _tree(tmp_path / "b", "x = 1\n")
    assert _tree_hash([one / "src"], contents=False) != _tree_hash([two / "src"], contents=False)
