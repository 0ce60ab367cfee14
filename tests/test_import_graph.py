"""The import graph of the project's packages (``agents``, ``gpu_env``, ``lab``) has no cycle; the product never
imports the laboratory.

Every import counts, wherever it stands: at the top of a module, inside a function ("import late to keep one
direction at load time" still ties the two modules together), under ``if TYPE_CHECKING:``, and
``importlib.import_module("...")`` with a literal name. ``from gpu_env import rules`` is an edge to the submodule
``gpu_env.rules``; ``from gpu_env.plan import Plan`` one to ``gpu_env.plan``; a package's ``__init__`` importing
its submodules gives edges from the package. A module importing itself (a ``__main__`` block that runs the module
under its package name, so that pickles name it) is not a cycle.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "gpu_env", "lab")
PRODUCT = ("agents", "gpu_env")  # what the wheel ships; lab/ is the laboratory (docs/layout.md)

Graph = dict[str, dict[str, int]]  # module -> {imported module: first line that imports it}


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name, for its ``__init__.py``)."""
    found = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is a module of the packages (None outside them)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in known:
            return prefix
    return None


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The modules of the packages that one module imports, each with the first line that does."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != name:
            found[target] = min(line, found.get(target, line))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_known(alias.name, known), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in known else _known(source, known), node.lineno)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            add(_known(node.args[0].value, known), node.lineno)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> Graph:
    known = modules(root, packages)
    return {name: imports(name, path, known) for name, path in known.items()}


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle of the graph as its modules in order, the first repeated at the end; None when there is none."""
    done: set[str] = set()  # modules on no cycle
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                done.add(path.pop())
            elif target in path:
                return [*path[path.index(target) :], target]
            elif target not in done:
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return None


def describe(cycle: list[str], graph: Graph) -> str:
    """``a:LINE -> b:LINE -> a``: each module with the line that imports the next."""
    return " -> ".join(f"{a}:{graph[a][b]}" for a, b in itertools.pairwise(cycle)) + f" -> {cycle[-1]}"


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert {"agents", "gpu_env", "gpu_env.rules", "agents.fanout"} <= set(graph)
    assert "gpu_env.scenario" in graph["gpu_env"]  # a package's __init__ counts
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {describe(cycle, graph)}"


def test_the_product_never_imports_the_laboratory():
    """No module of ``agents`` or ``gpu_env`` imports ``lab``, at any depth (the wheel has no ``lab``)."""
    graph = import_graph()
    assert "lab" in graph and "lab.training.training" in graph
    offending = [
        f"{module}:{line} imports {target}"
        for module, targets in sorted(graph.items())
        if module.partition(".")[0] in PRODUCT
        for target, line in sorted(targets.items())
        if target.partition(".")[0] == "lab"
    ]
    assert offending == []


def test_the_laboratory_has_no_cycle():
    graph = import_graph(ROOT, ("lab",))
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle in lab: {describe(cycle, graph)}"


def test_no_two_modules_share_a_name():
    """A module's file name says what it holds, once: no two modules of agents/, gpu_env/, lab/ share one
    (``__init__.py`` aside)."""
    allowed = {"__init__.py": None}
    by_name: dict[str, set[str]] = {}
    for path in modules(ROOT).values():
        by_name.setdefault(path.name, set()).add(path.relative_to(ROOT).as_posix())
    shared = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert {name: paths for name, paths in shared.items() if name not in allowed} == {}
    assert all(allowed[name] is None or set(paths) == allowed[name] for name, paths in shared.items())


def test_the_checker_sees_late_typing_and_importlib_imports(tmp_path):
    """A cycle closed only by an import inside a function, under TYPE_CHECKING or by import_module is found."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "A = 1\n\ndef f():\n    from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "import importlib\n\ndef g():\n    return importlib.import_module('pkg.a')\n",
        "d.py": "from . import a\nfrom .sub import c\nimport pkg.d\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg"] == {"pkg.a": 1}
    assert graph["pkg.d"] == {"pkg.a": 1, "pkg.sub.c": 2}  # relative imports resolved, the self-import left out
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]
    (package / "sub/c.py").write_text("")
    assert find_cycle(import_graph(tmp_path, ("pkg",))) is None
