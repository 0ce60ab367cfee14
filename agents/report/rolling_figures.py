"""Pictures of the rolling-horizon simulation: one simulated day, and realised objective against forecast error.

matplotlib is loaded lazily through :func:`gpu_env.render.pyplot` (Agg backend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_env.render import hour_ticks, pyplot, scheduler_colours

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from agents.simulator import Hindsight, Simulation
    from gpu_env.plan import Plan
    from gpu_env.scenario import Scenario

_ROLLING = "#2b6cb0"
_OPEN = "#c05621"
_HINDSIGHT = "#2f855a"  # green, beside the blue rolling and orange open loop
_HINDSIGHT_STYLE = (0, (4, 1.5))  # dashes, apart from the forecast's "--" (dark grey) and open loop's "-."


def _job_load(sc: Scenario, plan: Plan) -> np.ndarray:
    """GPUs held by the jobs of ``plan`` in each slot of the (realized) day ``sc``, shape (T,)."""
    load = np.zeros(sc.slots, dtype=np.int64)
    for p in plan.placements:
        job = sc.jobs[sc.job_index(p.job)]
        load[p.start : min(sc.slots, p.start + job.duration)] += job.gpus
    return load


def plot_simulation(roll: Simulation, fixed: Simulation | None = None, hindsight: Hindsight | None = None) -> Figure:
    """Forecast, actual demand and allocation over time, one panel per app, and the GPUs held by jobs.

    Each app's panel shows the actual demand (grey area), the forecast made
    before the day (dashed), the forecast the rolling planner saw for each slot
    when it committed it (dotted), and the allocation of the rolling and the
    open-loop schedules, and of the hindsight plan when given; the bottom panel
    the GPUs held by jobs in each.

    Args:
        roll: The rolling simulation.
        fixed: The open-loop simulation on the same actual demand, if any.
        hindsight: The realized day planned with hindsight (:func:`agents.simulator.plan_hindsight`), if any.

    Returns:
        The figure.
    """
    plt = pyplot()
    sc = roll.actual
    apps = sc.apps
    T = sc.slots
    edges = np.arange(T + 1)
    n = len(apps) + 1
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.6 * n + 0.8), sharex=True, squeeze=False, layout="constrained")
    axes = axes[:, 0]
    forecast = roll.forecast.demand
    actual = sc.demand
    seen = np.array([[r.forecast[a.name] for r in roll.slots] for a in apps]).reshape(len(apps), -1)
    for i, (app, ax) in enumerate(zip(apps, axes, strict=False)):
        ax.stairs(actual[i], edges, fill=True, color="#d9d9d9", label="actual demand", zorder=1)
        ax.stairs(forecast[i], edges, color="#333333", linestyle="--", linewidth=1.2, label="forecast", zorder=2)
        if seen.shape[1] == T:
            ax.stairs(seen[i], edges, color="#6b46c1", linestyle=":", linewidth=1.4, label="corrected forecast")
        curve = np.asarray(roll.executed.curves[app.name])
        short = int(np.maximum(0, actual[i] - curve).sum())
        ax.stairs(curve, edges, color=_ROLLING, linewidth=2.0, label=f"rolling allocation (shortfall {short})")
        top = max(int(actual[i].max()), int(forecast[i].max()), int(curve.max()), int(seen[i].max(initial=0)))
        if fixed is not None:
            other = np.asarray(fixed.executed.curves[app.name])
            short = int(np.maximum(0, actual[i] - other).sum())
            ax.stairs(other, edges, color=_OPEN, linewidth=1.6, linestyle="-.", label=f"open loop (shortfall {short})")
            top = max(top, int(other.max()))
        if hindsight is not None:
            best = np.asarray(hindsight.plan.curves[app.name])
            short = int(np.maximum(0, actual[i] - best).sum())
            ax.stairs(
                best,
                edges,
                color=_HINDSIGHT,
                linewidth=1.6,
                linestyle=_HINDSIGHT_STYLE,
                label=f"hindsight (shortfall {short})",
                zorder=3,
            )
            top = max(top, int(best.max()))
        ax.set_ylim(0, top * 1.45 + 0.5)  # head-room for the legend
        ax.set_ylabel("GPUs")
        ax.set_title(f"{app.name}: ramp {app.ramp}/slot, penalty {app.penalty:g} per unserved GPU-slot")
        ax.grid(axis="y", color="#eeeeee", zorder=0)
        ax.legend(loc="upper left", frameon=False, ncol=2, fontsize=7.5)
    ax = axes[-1]
    ax.stairs(_job_load(sc, roll.executed), edges, color=_ROLLING, linewidth=2.0, label="jobs, rolling")
    if fixed is not None:
        load = _job_load(sc, fixed.executed)
        ax.stairs(load, edges, color=_OPEN, linewidth=1.6, linestyle="-.", label="jobs, open loop")
    if hindsight is not None:
        load = _job_load(sc, hindsight.plan)
        ax.stairs(load, edges, color=_HINDSIGHT, linewidth=1.6, linestyle=_HINDSIGHT_STYLE, label="jobs, hindsight")
    ax.axhline(sc.gpus, color="#999999", linewidth=0.8)
    ax.set_ylim(0, sc.gpus * 1.1)
    ax.set_ylabel("GPUs held by jobs")
    ax.legend(loc="upper left", frameon=False, ncol=3, fontsize=7.5)
    ax.grid(axis="y", color="#eeeeee", zorder=0)
    ticks, names = hour_ticks(sc, T)
    ax.set_xticks(ticks, names)
    ax.set_xlim(0, T)
    ax.set_xlabel("time (h)")
    title = f"{roll.forecast.name}, {roll.scheduler}: realised objective rolling {roll.metrics.objective:.1f}"
    if fixed is not None:
        title += f", open loop {fixed.metrics.objective:.1f}"
    if hindsight is not None:
        share = hindsight.share(roll.metrics.objective)
        what = "optimum" if hindsight.optimal else f"plan ({hindsight.status})"
        title += f"\nhindsight {what} {hindsight.objective:.1f}"
        if share is not None:
            title += f": rolling reached {share:.3f} of it"
    fig.suptitle(title, fontweight="bold")
    return fig


def plot_rolling_curve(summary: Sequence[Mapping[str, Any]], pooled: Sequence[Mapping[str, Any]] = ()) -> Figure:
    """Realised objective against forecast error: one panel per scenario, open loop dashed, rolling solid.

    Bands are 95 % confidence intervals over seeds. With ``pooled``
    (:func:`agents.report.rolling.pooled`) a last panel shows rolling's gain over open
    loop in % pooled over scenarios.

    Args:
        summary: Rows of :func:`agents.report.rolling.summarise`.
        pooled: Rows of :func:`agents.report.rolling.pooled`.

    Returns:
        The figure.
    """
    plt = pyplot()
    scenarios = list(dict.fromkeys(e["scenario"] for e in summary))
    names = list(dict.fromkeys(e["scheduler"] for e in summary))
    colours = scheduler_colours(names)
    panels = len(scenarios) + (1 if pooled else 0)
    cols = min(3, panels)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows + 0.6), squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax, scenario in zip(flat, scenarios, strict=False):
        for name in names:
            entries = sorted(
                (e for e in summary if e["scenario"] == scenario and e["scheduler"] == name), key=lambda e: e["sigma"]
            )
            if not entries:
                continue
            x = np.array([e["sigma"] for e in entries])
            for mode, style in (("open", "--"), ("rolling", "-")):
                y = np.array([e[f"{mode}_objective"] for e in entries])
                ci = np.nan_to_num(np.array([e[f"{mode}_ci"] for e in entries]))
                ax.plot(x, y, style, color=colours[name], marker="o", markersize=3, label=f"{name} {mode}")
                ax.fill_between(x, y - ci, y + ci, color=colours[name], alpha=0.12, linewidth=0)
        ax.set_title(scenario)
        ax.set_xlabel("forecast error sigma")
        ax.set_ylabel("realised objective")
        ax.grid(color="#eeeeee")
    if pooled:
        ax = flat[len(scenarios)]
        for name in names:
            entries = sorted((e for e in pooled if e["scheduler"] == name), key=lambda e: e["sigma"])
            if not entries:
                continue
            x = np.array([e["sigma"] for e in entries])
            y = np.array([e["gain_pct"] for e in entries])
            ci = np.nan_to_num(np.array([e["gain_pct_ci"] for e in entries]))
            ax.plot(x, y, "-", color=colours[name], marker="o", markersize=3, label=name)
            ax.fill_between(x, y - ci, y + ci, color=colours[name], alpha=0.15, linewidth=0)
        ax.axhline(0, color="#333333", linewidth=0.8)
        ax.set_title("rolling - open loop, all scenarios (%)")
        ax.set_xlabel("forecast error sigma")
        ax.set_ylabel("gain over open loop (%)")
        ax.grid(color="#eeeeee")
        ax.legend(frameon=False, fontsize=7.5)
    for ax in flat[panels:]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(6, len(labels)), frameon=False, fontsize=8)
    fig.suptitle("Realised objective against forecast error: open loop (dashed) and rolling (solid)", fontweight="bold")
    return fig
