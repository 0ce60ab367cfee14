"""The wheel ships the product only: every module in it is reached from the product's entry points.

Usage: python .ci/wheel_modules.py WHEEL      (or a folder that holds the packages, for the tests)

The walk starts at the wheel's entry points (``entry_points.txt``: the ``gpualloc`` command, ``agents.cli``) and at
its top-level packages (``import agents``, ``import gpu_env``: what a user imports), and follows every static import
of every module it reaches: at the top, inside functions, under ``if TYPE_CHECKING:``, relative ones, and names
given as text: ``importlib.import_module("...")`` and any string that names a module of the wheel, alone or as
``"module:attribute"`` (the scheduler registry, ``agents.registry.SCHEDULERS``, and Gymnasium's entry points in
``gpu_env/__init__.py`` load their modules so). Importing a module imports its packages too. It fails listing every
module of the wheel that the walk does not reach: one that only the benchmarks, the training scripts or the tests
import belongs to ``lab/`` (docs/layout.md). Standard library only: it runs in check-wheel's fresh environment.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import sys
import zipfile
from pathlib import Path

EXEMPT: dict[str, str] = {}  # module -> why it ships though no entry point reaches it (none)


def read_sources(where: Path) -> tuple[dict[str, str], dict[str, bool], list[str]]:
    """Module name -> source, module name -> is a package, and the entry points' modules, of a wheel or a folder."""
    sources: dict[str, str] = {}
    packages: dict[str, bool] = {}
    entries: list[str] = []
    if where.is_file():
        with zipfile.ZipFile(where) as wheel:
            files = {name: wheel.read(name) for name in wheel.namelist()}
    else:
        files = {p.relative_to(where).as_posix(): p.read_bytes() for p in where.rglob("*") if p.is_file()}
    for name, data in files.items():
        if name.endswith(".py") and ".dist-info/" not in name:
            parts = name[:-3].split("/")
            package = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if package else parts)
            sources[module] = data.decode("utf-8")
            packages[module] = package
        elif name.endswith(".dist-info/entry_points.txt"):
            config = configparser.ConfigParser()
            config.read_string(data.decode("utf-8"))
            entries += [value.partition(":")[0].strip() for section in config.values() for value in section.values()]
    return sources, packages, entries


def edges(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that one module imports, by statement or by name."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str) -> None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):  # the longest prefix that is a module, and the packages above it
            if ".".join(parts[:end]) in known:
                found.update(".".join(parts[:k]) for k in range(1, end + 1) if ".".join(parts[:k]) in known)
                return

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            origin = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            add(origin)
            for alias in node.names:
                if f"{origin}.{alias.name}" in known:
                    add(f"{origin}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.partition(":")[0]
            if text in known:
                add(text)
    found.discard(module)
    return found


def unreached(where: Path) -> tuple[list[str], int]:
    """The wheel's modules that no entry point reaches (EXEMPT aside), and how many modules it holds."""
    sources, packages, entries = read_sources(where)
    known = set(sources)
    roots = [m for m in entries if m in known] + [m for m in known if "." not in m]
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += edges(module, sources[module], packages[module], known) - seen
    return sorted(known - seen - set(EXEMPT)), len(known)


def main() -> int:
    """Check the wheel or folder named on the command line; 0 when every module is reached."""
    where = Path(sys.argv[1])
    missing, total = unreached(where)
    if missing:
        print(f"{where.name}: {len(missing)} of {total} modules reached from no entry point of the product:")
        for module in missing:
            print(f"  {module}")
        print("a module that only benchmarks, training scripts or tests import belongs to lab/ (docs/layout.md)")
        return 1
    print(f"{where.name}: every one of {total} modules is reached from the product's entry points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
