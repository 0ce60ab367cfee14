"""Fit the runtime model: ``actual runtime / time limit`` measured on a log that records both.

Reads a log in the Standard Workload Format of the Parallel Workloads Archive
(field 4: run time, field 9: requested time, field 11: status, in seconds) and
fits :class:`agents.rolling.runtimes.RuntimeDistribution`:

1. keep the jobs that ran (run time > 0) and asked for at least
   ``--min-limit-hours`` (default 1 h, one slot of the hourly scenarios);
2. ``ratio = min(run time / requested time, 1)``;
3. ``at_limit``: the share with ``ratio >= --at-limit`` (default 0.99: a job
   killed at its limit is logged a few seconds to minutes before it);
4. ``quantiles``: the quantiles of the ratio among the other jobs at
   ``--points`` evenly spaced probabilities (default 51: every 2 %).

It prints the figures and the Python constant to paste into
``agents/rolling/runtimes.py`` as ``TRACE_RUNTIMES``, and writes the table to
``--out`` (default ``benchmarks/results/runtimes.md``). The log is never
read at run time or in tests: only the fitted constant ships.

Run (``docs/runtimes.md`` says where the log comes from):
``.venv/bin/python benchmarks/fit_runtimes.py PATH/KTH-SP2-1996-2.1-cln.swf``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.rolling.runtimes import RuntimeDistribution  # noqa: E402
from gpu_env.files import write_text_atomic  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "runtimes.md"
SUMMARY_PROBS = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)
LIMIT_CLASSES_H = ((0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, None))


@dataclass(frozen=True)
class Log:
    """The columns of an SWF log that the fit reads, one entry per job line."""

    run: np.ndarray  # (jobs,) run time, s
    requested: np.ndarray  # (jobs,) requested time (the limit), s
    status: np.ndarray  # (jobs,) 1 completed, 0 failed or killed, 5 cancelled, -1 unknown


def read_swf(path: Path) -> Log:
    """The run time, requested time and status of every job line of an SWF file."""
    run, requested, status = [], [], []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip() or line.lstrip().startswith(";"):
                continue
            fields = line.split()
            if len(fields) < 11:
                raise ValueError(f"{path}:{number}: an SWF job line has 18 fields, this one {len(fields)}")
            run.append(float(fields[3]))
            requested.append(float(fields[8]))
            status.append(int(float(fields[10])))
    return Log(np.array(run), np.array(requested), np.array(status, dtype=np.int64))


def figures(ratio: np.ndarray, at_limit: float) -> dict[str, float]:
    """Mean, share at the limit, share below 0.5 and the summary quantiles of ratios clipped to 1."""
    x = np.where(ratio >= at_limit, 1.0, ratio)
    out = {"jobs": float(x.size), "mean": float(x.mean()), "at_limit": float((x >= 1.0).mean())}
    out["below_half"] = float((x < 0.5).mean())
    out.update({f"q{round(p * 100):02d}": float(np.quantile(x, p)) for p in SUMMARY_PROBS})
    return out


def table_figures(dist: RuntimeDistribution) -> dict[str, float]:
    """The same figures of the fitted table, computed from its quantile function."""
    u = np.array(SUMMARY_PROBS)
    below = float(dist.ratio_cdf(np.nextafter(0.5, 0.0)))
    out = {"mean": dist.mean_ratio(), "at_limit": dist.at_limit, "below_half": below}
    out.update({f"q{round(p * 100):02d}": float(q) for p, q in zip(SUMMARY_PROBS, dist.ratio_quantile(u), strict=True)})
    return out


def fit(log: Log, min_limit_s: float, at_limit: float, points: int, source: str) -> RuntimeDistribution:
    """The fitted distribution of the jobs that ran with a limit of at least ``min_limit_s``."""
    keep = (log.run > 0) & (log.requested >= max(min_limit_s, 1e-9))
    ratio = np.minimum(log.run[keep] / log.requested[keep], 1.0)
    hit = ratio >= at_limit
    rest = ratio[~hit]
    quantiles = np.quantile(rest, np.linspace(0.0, 1.0, points))
    quantiles = np.maximum(np.round(quantiles, 6), 1e-6)
    return RuntimeDistribution(
        at_limit=round(float(hit.mean()), 6), quantiles=tuple(float(q) for q in quantiles), source=source
    )


def _fmt(row: dict[str, float], keys: list[str]) -> str:
    return " | ".join(f"{row[k]:.3f}" if k != "jobs" else f"{int(row[k]):,}" for k in keys)


def report(log: Log, dist: RuntimeDistribution, args: argparse.Namespace, digest: str) -> str:
    """The Markdown page of the fit."""
    min_s = args.min_limit_hours * 3600.0
    ran = log.run > 0
    keep = ran & (log.requested >= max(min_s, 1e-9))
    ratio = np.minimum(log.run[keep] / log.requested[keep], 1.0)
    hit = ratio >= args.at_limit
    killed = float((log.status[keep][hit] == 0).mean()) if hit.any() else 0.0
    data = figures(ratio, args.at_limit)
    table = table_figures(dist)
    keys = ["mean", "at_limit", "below_half"] + [f"q{round(p * 100):02d}" for p in SUMMARY_PROBS]
    lines = [
        "# Runtime model: the fit",
        "",
        f"Written by `benchmarks/fit_runtimes.py` from `{Path(args.swf).name}` (sha256 `{digest}`),",
        f"with `--min-limit-hours {args.min_limit_hours} --at-limit {args.at_limit} --points {args.points}`.",
        "",
        f"- job lines: {log.run.size:,}; ran (run time > 0): {int(ran.sum()):,};"
        f" and asked for at least {args.min_limit_hours:g} h: **{int(keep.sum()):,}** (the fit).",
        f"- at the limit (ratio >= {args.at_limit}): {int(hit.sum()):,} jobs,"
        f" {killed:.1%} of them with status 0 (failed or killed).",
        "",
        "ratio = runtime / requested time, clipped to 1; a ratio at or above the at-limit threshold counts as 1.",
        "",
        "| | " + " | ".join(keys) + " |",
        "| --- | " + " | ".join("---:" for _ in keys) + " |",
        "| log | " + _fmt(data, keys) + " |",
        "| fitted table | " + _fmt(table, keys) + " |",
        "",
        "By requested time (all jobs that ran, under the cut too; the table pools the rows from the cut on):",
        "",
        "| limit | jobs | mean | at_limit | below_half | q50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lo, hi in LIMIT_CLASSES_H:
        sel = ran & (log.requested >= lo * 3600.0) & ((log.requested < hi * 3600.0) if hi else True)
        if not sel.any():
            continue
        f = figures(np.minimum(log.run[sel] / log.requested[sel], 1.0), args.at_limit)
        name = f"{lo}-{hi} h" if hi else f">= {lo} h"
        lines.append(f"| {name} | {_fmt(f, ['jobs', 'mean', 'at_limit', 'below_half', 'q50'])} |")
    lines += [
        "",
        f"The continuous part's quantiles (probabilities 0, {1 / (args.points - 1):.2f}, ..., 1):",
        "",
        "```",
        ", ".join(f"{q:g}" for q in dist.quantiles),
        "```",
        "",
    ]
    return "\n".join(lines)


def constant(dist: RuntimeDistribution) -> str:
    """The Python constant of the fitted table."""
    rows = []
    for i in range(0, len(dist.quantiles), 6):
        rows.append("        " + ", ".join(f"{q!r}" for q in dist.quantiles[i : i + 6]) + ",")
    return "\n".join(
        [
            "TRACE_RUNTIMES = RuntimeDistribution(",
            f"    at_limit={dist.at_limit!r},",
            "    quantiles=(",
            *rows,
            "    ),",
            "    source=(",
            *[f"        {json.dumps(part)}" for part in _pieces(dist.source)],
            "    ),",
            ")  # fmt: skip",
        ]
    )


def _pieces(text: str, width: int = 100) -> list[str]:
    """``text`` cut after "; " into pieces that fit a line (adjacent string literals join again)."""
    pieces = [""]
    for part in text.split("; "):
        if pieces[-1] and len(pieces[-1]) + len(part) > width:
            pieces.append("")
        pieces[-1] += part + "; "
    pieces[-1] = pieces[-1][:-2]
    return pieces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("swf", help="an SWF log with requested times, e.g. KTH-SP2-1996-2.1-cln.swf")
    parser.add_argument("--min-limit-hours", type=float, default=1.0, help="keep jobs that asked for at least this")
    parser.add_argument("--at-limit", type=float, default=0.99, help="a ratio at or above this counts as 1")
    parser.add_argument("--points", type=int, default=51, help="quantiles of the continuous part (>= 2)")
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown table (default %(default)s)")
    args = parser.parse_args(argv)
    path = Path(args.swf)
    if not path.is_file():
        print(f"fit_runtimes: {path}: no such file (docs/runtimes.md says where the log comes from)", file=sys.stderr)
        return 2
    if args.points < 2 or not 0.0 < args.at_limit <= 1.0:
        print("fit_runtimes: --points must be >= 2 and --at-limit in (0, 1]", file=sys.stderr)
        return 2
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    log = read_swf(path)
    source = (
        f"{path.name} (Parallel Workloads Archive), jobs that ran with a requested time >= "
        f"{args.min_limit_hours:g} h; at limit: ratio >= {args.at_limit}"
    )
    dist = fit(log, args.min_limit_hours * 3600.0, args.at_limit, args.points, source)
    page = report(log, dist, args, digest)
    write_text_atomic(args.out, page)
    print(page)
    print(constant(dist))
    return 0


if __name__ == "__main__":
    sys.exit(main())
