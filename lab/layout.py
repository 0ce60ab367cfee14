"""The project's layout drawn from its own imports: one box per package, an arrow per package it imports.

    python -m lab.layout --out docs/layout-after.svg                     # this tree
    python -m lab.layout --root /tmp/old --out docs/layout-before.svg    # another checkout (git archive COMMIT)

Each box is a package of ``agents``, ``gpu_env`` or ``lab`` with its modules; a box is blue where the wheel ships
it (``[tool.setuptools] packages`` of the tree's pyproject.toml) and grey where it stays in the repository. An arrow
goes from a package to one it imports (any import of any of its modules, at any depth, ``importlib`` by name
included), labelled with the number of module pairs. Rows: the laboratory above, the planners in the middle, the
problem package below; within a row, packages in name order. Plain SVG, no dependency (docs/layout.md).
"""

from __future__ import annotations

import argparse
import ast
import tomllib
from collections import Counter
from pathlib import Path

TOPS = ("lab", "agents", "gpu_env")
BOX_W, LINE_H, PAD, GAP_X, GAP_Y = 190, 13, 8, 34, 120
SHIPPED, LAB = ("#dbe9f6", "#2c6fad"), ("#eeeeee", "#777777")  # fill, edge


def package_modules(root: Path) -> dict[str, list[str]]:
    """Package (dotted) -> the names of its modules (``__init__`` aside), for every package under ``TOPS``."""
    found: dict[str, list[str]] = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            package = ".".join(path.parent.relative_to(root).parts)
            found.setdefault(package, [])
            if path.name != "__init__.py":
                found[package].append(path.stem)
    return found


def _module_of(name: str, modules: set[str]) -> str | None:
    """The longest prefix of a dotted name that is a module or package of the tree."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def package_edges(root: Path, packages: dict[str, list[str]]) -> Counter[tuple[str, str]]:
    """(importing package, imported package) -> how many (module, module) imports join them."""
    modules = set(packages) | {f"{p}.{m}" for p, names in packages.items() for m in names}
    package_of = {f"{p}.{m}": p for p, names in packages.items() for m in names} | {p: p for p in packages}
    edges: Counter[tuple[str, str]] = Counter()
    for package, names in packages.items():
        for stem in [*names, "__init__"]:
            path = root.joinpath(*package.split("."), f"{stem}.py")
            if not path.is_file():
                continue
            targets: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names_here: list[str] = []
                if isinstance(node, ast.Import):
                    names_here = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                    origin = ".".join([*base, node.module] if node.module else base)
                    names_here = [f"{origin}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == (
                    "import_module"
                ):
                    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                        names_here = [node.args[0].value]
                targets |= {t for t in (_module_of(n, modules) for n in names_here) if t is not None}
            for target in targets:
                if package_of[target] != package:
                    edges[package, package_of[target]] += 1
    return edges


def shipped_packages(root: Path) -> set[str]:
    """The packages the tree's pyproject.toml puts in the wheel."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return set(project["tool"]["setuptools"]["packages"])


def _wrap(names: list[str], width: int) -> list[str]:
    """Module names joined by commas into lines of at most ``width`` characters."""
    lines, line = [], ""
    for name in names:
        piece = name if not line else f"{line}, {name}"
        if len(piece) > width and line:
            lines.append(line + ",")
            line = name
        else:
            line = piece
    return [*lines, line] if line else lines


def draw(root: Path, title: str, out: Path) -> None:
    """Draw the tree's layout into ``out`` (SVG, or PNG by its suffix) with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    packages = package_modules(root)
    edges = package_edges(root, packages)
    shipped = shipped_packages(root)
    rows = [sorted(p for p in packages if p.split(".")[0] == top) for top in TOPS]
    rows = [row for row in rows if row]
    texts = {p: _wrap(packages[p], 30) for p in packages}
    heights = [max(PAD * 2 + LINE_H * (2 + len(texts[p])) for p in row) for row in rows]
    width = max(len(row) for row in rows) * (BOX_W + GAP_X) + GAP_X
    boxes: dict[str, tuple[float, float, float]] = {}  # package -> x, y (top, downwards), height
    y = 115.0
    for row, height in zip(rows, heights, strict=True):
        x = (width - len(row) * (BOX_W + GAP_X) + GAP_X) / 2
        for package in row:
            boxes[package] = (x, y, height)
            x += BOX_W + GAP_X
        y += height + GAP_Y
    total_h = y - GAP_Y + 30

    plt.rcParams["svg.hashsalt"] = "gpualloc-layout"  # the same tree draws the same file
    fig = plt.figure(figsize=(width / 100, total_h / 100), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(total_h, 0)
    ax.axis("off")
    ax.text(GAP_X, 28, title, fontsize=13, fontweight="bold", va="center")
    ax.text(
        GAP_X,
        50,
        "blue: in the wheel; grey: stays in the repository; arrow: imports (label: module pairs); "
        "red: the product importing the laboratory",
        fontsize=9,
        color="#444",
        va="center",
    )
    for package, (x, y, height) in boxes.items():
        fill, stroke = SHIPPED if package in shipped else LAB
        ax.add_patch(
            FancyBboxPatch(
                (x, y), BOX_W, height, boxstyle="round,pad=0,rounding_size=6", fc=fill, ec=stroke, lw=1.5, zorder=2
            )
        )
        ax.text(x + PAD, y + PAD + 6, f"{package}/", fontsize=9.5, fontweight="bold", va="center", zorder=3)
        ax.text(
            x + BOX_W - PAD, y + PAD + 6, f"{len(packages[package])}", fontsize=8, color="#555", ha="right", va="center"
        )
        for i, line in enumerate(texts[package]):
            ax.text(x + PAD, y + PAD + 6 + LINE_H * (i + 1.3), line, fontsize=7.2, color="#222", va="center", zorder=3)
    for k, ((source, target), count) in enumerate(sorted(edges.items())):
        sx, sy, sh = boxes[source]
        tx, ty, th = boxes[target]
        if (
            abs(sy - ty) < 1
        ):  # same row: an arc above the boxes, from the right half of one to the left half of the other
            start, end = (sx + BOX_W * (0.62 if tx > sx else 0.38), sy), (tx + BOX_W * (0.38 if tx > sx else 0.62), ty)
            lift = 14 + 5 * round(abs(tx - sx) / (BOX_W + GAP_X))
            bend = -2 * lift / (end[0] - start[0])  # the arc's apex ``lift`` above the row
            label = ((start[0] + end[0]) / 2, sy - lift - 3)
        else:
            start, end = ((sx + BOX_W / 2, sy + sh), (tx + BOX_W / 2, ty))
            if ty < sy:
                start, end = (sx + BOX_W / 2, sy), (tx + BOX_W / 2, ty + th)
            bend, t = 0.0, 0.18 + 0.14 * (k % 4)
            label = (start[0] + (end[0] - start[0]) * t, start[1] + (end[1] - start[1]) * t)
        colour = "#c0392b" if source.split(".")[0] != "lab" and target.split(".")[0] == "lab" else "#555555"
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                connectionstyle=f"arc3,rad={bend}",
                arrowstyle="-|>",
                mutation_scale=9,
                color=colour,
                alpha=0.6,
                lw=1.0,
                zorder=1,
            )
        )
        ax.text(
            *label,
            str(count),
            fontsize=7,
            color=colour,
            ha="center",
            va="center",
            zorder=4,
            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    fig.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Write the layout of a tree as SVG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the tree")
    parser.add_argument("--out", type=Path, required=True, help="the SVG file")
    parser.add_argument("--title", default=None, help="the title (default: the tree's folder)")
    args = parser.parse_args(argv)
    draw(args.root, args.title or f"layout of {args.root.name}", args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
