"""benchmarks/README.md maps every benchmark to its results, and no script imports another.

Scripts (``benchmarks/*.py``, ``examples/*.py``, the top-level ``train*.py`` and ``evaluate.py``) import the
library (``agents``, ``gpu_env``) only; the library imports no script.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "benchmarks" / "README.md"
SCRIPT_MODULES = {"benchmarks", "examples", "train", "train_live", "train_stepwise", "evaluate"}


def _scripts() -> list[Path]:
    tops = [ROOT / f"{name}.py" for name in ("train", "train_live", "train_stepwise", "evaluate")]
    return sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "examples").glob("*.py")) + tops


def _library() -> list[Path]:
    return sorted((ROOT / "agents").rglob("*.py")) + sorted((ROOT / "gpu_env").rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    """The first component of every module ``path`` imports, at any depth of its code."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_every_benchmark_has_a_row_and_every_linked_result_exists():
    text = MAP.read_text()
    rows = set(re.findall(r"^\| `([a-z0-9_]+\.py)` \|", text, flags=re.MULTILINE))
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert scripts - rows == set(), "benchmarks without a row in benchmarks/README.md"
    assert rows - scripts == set(), "rows in benchmarks/README.md for scripts that are gone"
    for link in re.findall(r"\]\(((?:results|\.\./docs)/[^)#]+)", text):
        assert (MAP.parent / link).exists(), f"benchmarks/README.md links {link}, which does not exist"


@pytest.mark.parametrize("path", _scripts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_script_imports_the_library_only(path):
    assert _imported_roots(path) & SCRIPT_MODULES == set()


def test_the_library_imports_no_script():
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & SCRIPT_MODULES) for p in _library()}
    assert {k: v for k, v in offenders.items() if v} == {}
