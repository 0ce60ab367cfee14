"""benchmarks/README.md maps every benchmark to its results, and no script imports another.

The map's "last run" cells name commits that changed the row's results files, and its "Retired studies" name, for
each retired script, a commit that has it (and the results file names that commit too); both read git history, and
skip when there is none (no ``git``, not a clone, or a shallow one).

Scripts (``benchmarks/*.py``, ``examples/*.py``, the top-level ``train*.py`` and ``evaluate.py``) import the
library (``agents``, ``gpu_env``) only; the library imports no script.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "benchmarks" / "README.md"
SCRIPT_MODULES = {"benchmarks", "examples", "train", "train_live", "train_stepwise", "evaluate"}
RETIRED = "## Retired studies"
ROW = re.compile(r"^\| `([a-z0-9_]+\.py)` \|(.*)$", flags=re.MULTILINE)
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")
RESULT = re.compile(r"\]\(results/([^)#]+)\)|`([A-Za-z0-9_]+\.(?:md|json|png|log))`")


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


def _rows(text: str) -> dict[str, list[str]]:
    """Each table row of ``text`` that names a script: the script's file name, and its cells after the first."""
    return {
        m.group(1): [cell.strip() for cell in m.group(2).strip().strip("|").split(" | ")] for m in ROW.finditer(text)
    }


def _map() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The map's rows: the scripts in the tree, and the retired ones (the section "Retired studies")."""
    text = MAP.read_text()
    assert RETIRED in text, f"benchmarks/README.md has no section {RETIRED!r}"
    current, retired = text.split(RETIRED, 1)
    return _rows(current), _rows(retired)


def _results(cell: str) -> list[str]:
    """The results files a cell names: its links into results/ and the file names it quotes."""
    return [link or quoted for link, quoted in RESULT.findall(cell)]


def test_every_benchmark_has_a_row_and_every_linked_result_exists():
    text = MAP.read_text()
    rows, retired = _map()
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert scripts - set(rows) == set(), "benchmarks without a row in benchmarks/README.md"
    assert set(rows) - scripts == set(), "rows in benchmarks/README.md for scripts that are gone"
    assert set(retired) & scripts == set(), "retired studies whose script is still in benchmarks/"
    for link in re.findall(r"\]\(((?:results|\.\./docs)/[^)#]+)", text):
        assert (MAP.parent / link).exists(), f"benchmarks/README.md links {link}, which does not exist"


@pytest.fixture(scope="module")
def git():
    """``git -C ROOT ARGS...``'s output; skips when there is no git or no full history to read."""
    if shutil.which("git") is None:
        pytest.skip("no git: the map's commits are not checked")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=check, timeout=60)

    inside = run("rev-parse", "--is-shallow-repository", check=False)
    if inside.returncode != 0:
        pytest.skip("not a git clone: the map's commits are not checked")
    if inside.stdout.strip() != "false":
        pytest.skip("a shallow clone: the map's commits are not checked (clone with the full history)")
    return run


def test_every_last_run_names_a_commit_that_changed_the_rows_results(git):
    rows, _ = _map()
    wrong = []
    for script, cells in rows.items():
        results, last = cells[2], cells[3]
        files = [f"benchmarks/results/{name}" for name in _results(results)]
        commits = COMMIT.findall(last)
        if not commits:
            continue
        assert files, f"{script}: a last run {last!r} but no results file"
        changed = git("log", "--format=%H", "--", *files).stdout.split()
        for commit in commits:
            if git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
                wrong.append(f"{script}: {commit} is no commit")
            elif not any(full.startswith(commit) for full in changed):
                wrong.append(f"{script}: {commit} changed none of {', '.join(files)}")
    assert wrong == []


def test_no_last_run_is_stale(git):
    """Each commit a "last run" cell names is the newest commit of one of the row's results files.

    A results file rerun and committed without its row's cell brought up to date fails here.
    """
    rows, _ = _map()
    stale = []
    for script, cells in rows.items():
        files = [f"benchmarks/results/{name}" for name in _results(cells[2])]
        newest = {git("log", "-1", "--format=%H", "--", path).stdout.strip() for path in files} - {""}
        for commit in COMMIT.findall(cells[3]):
            if not any(full.startswith(commit) for full in newest):
                stale.append(f"{script}: {commit} is the last run of none of {', '.join(files)}")
    assert stale == []


def test_every_retired_study_names_a_commit_that_has_its_script(git):
    _, retired = _map()
    assert retired, "the section Retired studies lists no script"
    wrong = []
    for script, cells in retired.items():
        commits = COMMIT.findall(cells[-1])
        if len(commits) != 1:
            wrong.append(f"{script}: the commit cell {cells[-1]!r} names {len(commits)} commits, not one")
            continue
        (commit,) = commits
        if git("cat-file", "-e", f"{commit}:benchmarks/{script}", check=False).returncode != 0:
            wrong.append(f"{script}: commit {commit} has no benchmarks/{script}")
        for name in _results(cells[1]):
            path = ROOT / "benchmarks" / "results" / name
            if path.suffix == ".md" and commit not in path.read_text():
                wrong.append(f"{script}: results/{name} does not name commit {commit}")
    assert wrong == []


@pytest.mark.parametrize("path", _scripts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_script_imports_the_library_only(path):
    assert _imported_roots(path) & SCRIPT_MODULES == set()


def test_the_library_imports_no_script():
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & SCRIPT_MODULES) for p in _library()}
    assert {k: v for k, v in offenders.items() if v} == {}
