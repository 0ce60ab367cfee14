"""gpu_env.files: the one atomic writer, and that every writer goes through it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpu_env.files import atomic_path, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]


def test_write_text_atomic_creates_folders_and_replaces(tmp_path):
    target = tmp_path / "a" / "b" / "out.json"
    write_text_atomic(target, "one\n")
    write_text_atomic(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]  # no temporary file left


def test_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "out.png"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half way"), atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png"
        tmp.write_text("half")
        raise RuntimeError("half way")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_written_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "x.txt", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "x.txt").stat().st_mode) == 0o644


def test_no_other_module_renames_temporary_files_itself():
    """One writer: os.replace and mkstemp appear only in gpu_env/files.py."""
    sources = [*ROOT.glob("*.py"), *(ROOT / "agents").rglob("*.py"), *(ROOT / "gpu_env").rglob("*.py")]
    sources += list((ROOT / "benchmarks").rglob("*.py"))
    offending = [
        str(path.relative_to(ROOT))
        for path in sources
        if path != ROOT / "gpu_env" / "files.py"
        and any(word in path.read_text(encoding="utf-8") for word in ("os.replace(", "mkstemp(", "os.rename("))
    ]
    assert offending == []
