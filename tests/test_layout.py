"""The layering of the packages: the problem package stays below the planners."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, at any depth (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_gpu_env_imports_nothing_from_agents():
    files = sorted((ROOT / "gpu_env").rglob("*.py"))
    assert files
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in _imported_modules(path)
        if module == "agents" or module.startswith("agents.")
    ]
    assert offending == []


def test_pyproject_lists_every_package():
    """A package left out of [tool.setuptools] packages would be missing from the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("agents", "gpu_env")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed


def test_the_layout_drawing_reads_the_packages_and_their_imports(tmp_path):
    """lab/layout.py (docs/layout.md): the packages, the edges between them, and an SVG drawn from them."""
    from lab.layout import draw, package_edges, package_modules, shipped_packages

    packages = package_modules(ROOT)
    assert {"agents", "agents.live", "agents.simulator", "gpu_env", "lab", "lab.training"} <= set(packages)
    assert "anticipate" in packages["agents.live"]
    edges = package_edges(ROOT, packages)
    assert edges["agents.simulator", "agents.live"] > 0 and edges["lab.training", "agents"] > 0
    assert not [(a, b) for a, b in edges if not a.startswith("lab") and b.startswith("lab")]
    assert "lab" not in shipped_packages(ROOT) and "agents.live" in shipped_packages(ROOT)
    draw(ROOT, "test", tmp_path / "layout.svg")
    assert (tmp_path / "layout.svg").read_text().startswith("<?xml")
