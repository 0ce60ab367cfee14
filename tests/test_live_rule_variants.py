"""benchmarks/live_rule_variants.py: the day-by-day summary against rolling greedy, on hand-made rows."""

from __future__ import annotations

from benchmarks import live_rule_variants as variants
from gpu_env.generators import FAMILIES


def _row(family: str, seed: int, greedy: float, live: float) -> dict:
    timing = {"ms_per_slot": 1.0, "max_cycle_ms": 2.0, "calls": 4, "departures": 1}
    return {
        "family": family,
        "seed": seed,
        "sigma": 0.3,
        "runtime": "exact",
        "planners": {"rolling greedy": {"ratio": greedy, **timing}, "live": {"ratio": live, **timing}},
    }


def test_summary_counts_the_lost_days_and_names_the_worst() -> None:
    """One family-day lost by 0.05, one won by 0.03, the rest level: lost 1, won 1, the worst day named."""
    rows = [_row(f, 1, 0.9, 0.9) for f in FAMILIES]
    rows[0] = _row(rows[0]["family"], 7, 0.9, 0.85)
    rows[1] = _row(rows[1]["family"], 8, 0.8, 0.83)
    lines = variants.summary(rows, ["rolling greedy", "live"])
    assert lines[0] == f"== sigma 0.3, exact runtimes: {len(FAMILIES)} days"
    live = lines[2]
    assert "lost 1 won 1" in live and f"worst -0.050 ({rows[0]['family']} 7)" in live
    assert "departures 7/28" in live


def test_seed_ranges() -> None:
    assert variants.parse_seeds("5-7") == [5, 6, 7]
    assert variants.parse_seeds("1,3") == [1, 3]
