"""What the wheel ships: the product only (.ci/check-wheel builds it; these checks run on the source tree).

Every module of the packages that pyproject.toml ships is reached from the product's entry points
(``.ci/wheel_modules.py``, the walk check-wheel runs on the built wheel); the model that no scheduler offers, the
live chooser, is in the laboratory and loads from there without torch (check-wheel loaded it from the wheel before
issue 49 moved it out).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _wheel_modules():
    spec = importlib.util.spec_from_file_location("wheel_modules", ROOT / ".ci" / "wheel_modules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_tree(where: Path) -> Path:
    """The modules pyproject.toml's packages put in the wheel, copied into a folder with the console script."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in project["tool"]["setuptools"]["packages"]:
        source = ROOT.joinpath(*package.split("."))
        target = where.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in source.glob("*.py"):
            shutil.copy(path, target / path.name)
    info = where / "gpualloc-0.dist-info"
    info.mkdir()
    scripts = "".join(f"{name} = {entry}\n" for name, entry in project["project"]["scripts"].items())
    (info / "entry_points.txt").write_text(f"[console_scripts]\n{scripts}")
    return where


def test_every_shipped_module_is_reached_from_an_entry_point(tmp_path):
    missing, total = _wheel_modules().unreached(_shipped_tree(tmp_path))
    assert total > 50
    assert missing == [], f"shipped but only the laboratory imports them (move them to lab/): {missing}"


def test_the_walk_finds_a_module_only_tests_import(tmp_path):
    tree = _shipped_tree(tmp_path)
    (tree / "agents" / "only_a_benchmark_uses_me.py").write_text('"""A stray."""\n')
    missing, _ = _wheel_modules().unreached(tree)
    assert missing == ["agents.only_a_benchmark_uses_me"]


def test_the_walk_follows_imports_by_name(tmp_path):
    """The registry's ``"module:function"`` strings and Gymnasium's entry points reach their modules."""
    tree = _shipped_tree(tmp_path)
    (tree / "agents" / "registry.py").write_text(
        (tree / "agents" / "registry.py").read_text().replace('"agents.fifo:plan"', '"agents.greedy:plan"')
    )
    missing, _ = _wheel_modules().unreached(tree)
    assert missing == ["agents.fifo"]


def test_the_live_chooser_is_not_shipped_and_loads_from_the_laboratory_without_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert not any(
        "live_chooser" in name for names in project["tool"]["setuptools"]["package-data"].values() for name in names
    )
    assert not (ROOT / "agents" / "policies" / "live_chooser.onnx").exists()
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from lab.live_chooser import load_policy\n"
        "p = load_policy(); print(p.path.relative_to(sys.argv[1]).as_posix())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "lab/policies/live_chooser.onnx"
