"""Pictures of plans: a text grid for terminals and matplotlib figures for reports.

The grid is GPUs (rows, highest index on top) by slots (columns). Jobs are drawn
where the plan puts them. Real-time capacity is a count per slot (SPEC rule 7:
replicas take any free GPUs), so it is drawn on the top free GPUs of each slot:
first the GPU-slots that serve demand, then those reserved above demand, which
stay idle and do not count as utilisation.

matplotlib is imported inside the plotting functions (Agg backend), so the text
grid and the environment's ``ansi`` rendering never load it.

>>> from gpu_env.generators import generate
>>> from gpu_env.plan import Plan
>>> scenario = generate("training-heavy", seed=0)
>>> print(text_grid(scenario, Plan(scenario.name, "idle", [], {})).splitlines()[0])  # doctest: +ELLIPSIS
idle on training-heavy: 8 GPUs x 24 slots...
"""

from __future__ import annotations

import functools
import os
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from gpu_env.files import atomic_path
from gpu_env.metrics import Metrics, compute_metrics
from gpu_env.plan import Plan
from gpu_env.scenario import Scenario

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# ----------------------------------------------------------------------------- the grid as numbers

FREE = -1  # no job in this cell
SERVED = -2  # real-time capacity that serves demand
RESERVED = -3  # real-time capacity above demand: reserved, idle
CLASH = -4  # two jobs on one GPU-slot (an invalid plan)

JOB_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
CELL_CHARS = {FREE: ".", SERVED: "~", RESERVED: "+", CLASH: "#"}


def job_char(index: int) -> str:
    """The character of the index-th job of a scenario (cycles after 62 jobs)."""
    return JOB_CHARS[index % len(JOB_CHARS)]


def _placements(scenario: Scenario, plan: Plan) -> list[tuple[int, int, tuple[int, ...]]]:
    """(job index, start, gpus) of every placement of a known job, first one per job."""
    out = []
    seen: set[int] = set()
    for p in plan.placements:
        index = scenario.job_index(p.job)
        if index < 0 or index in seen:
            continue
        seen.add(index)
        out.append((index, p.start, tuple(p.gpus)))
    return out


def _curves(scenario: Scenario, plan: Plan) -> np.ndarray:
    """The plan's real-time curves, shape (apps, T), negatives and missing ones as 0."""
    T = scenario.slots
    curves = np.zeros((len(scenario.apps), T), dtype=np.int64)
    for i, app in enumerate(scenario.apps):
        r = plan.curve(app.name, T)
        n = min(T, r.size)
        curves[i, :n] = np.maximum(r[:n], 0)
    return curves


def cell_grid(scenario: Scenario, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The plan as a GPU x slot grid inside the horizon.

    Returns:
        ``(cells, app)``, both of shape (G, T). ``cells`` holds the job index
        in each cell, or FREE, SERVED, RESERVED or CLASH. ``app`` holds the
        real-time application drawn in a SERVED or RESERVED cell, else -1.
        Real-time capacity fills the highest-index free GPUs of each slot,
        application by application in scenario order, serving GPUs first.
    """
    G, T = scenario.gpus, scenario.slots
    cells = np.full((G, T), FREE, dtype=np.int64)
    for index, start, gpus in _placements(scenario, plan):
        job = scenario.jobs[index]
        lo, hi = max(start, 0), min(start + job.duration, T)
        for g in gpus:
            if not 0 <= g < G or hi <= lo:
                continue
            row = cells[g, lo:hi]
            row[(row != FREE) & (row != index)] = CLASH
            row[row == FREE] = index
    app = np.full((G, T), -1, dtype=np.int64)
    curves = _curves(scenario, plan)
    demand = scenario.demand
    for t in range(T):
        free = [g for g in range(G - 1, -1, -1) if cells[g, t] == FREE]
        pos = 0
        for i in range(curves.shape[0]):
            served = int(min(curves[i, t], demand[i, t]))
            for kind, count in ((SERVED, served), (RESERVED, int(curves[i, t]) - served)):
                for g in free[pos : pos + count]:
                    cells[g, t] = kind
                    app[g, t] = i
                pos += count
    return cells, app


# ----------------------------------------------------------------------------- text


def _metrics(scenario: Scenario, plan: Plan) -> Metrics:
    return plan.metrics if plan.metrics is not None else compute_metrics(scenario, plan)


_ANSI_RESET = "\x1b[0m"


def _ansi(char: str, cell: int) -> str:
    if cell >= 0:
        return f"\x1b[38;5;{_ANSI_JOB_COLOURS[cell % len(_ANSI_JOB_COLOURS)]}m{char}{_ANSI_RESET}"
    code = {FREE: "2", SERVED: "36", RESERVED: "2;36", CLASH: "1;31"}[cell]
    return f"\x1b[{code}m{char}{_ANSI_RESET}"


_ANSI_JOB_COLOURS = (33, 166, 34, 127, 136, 31, 160, 70, 99, 172, 37, 162)


def text_grid(scenario: Scenario, plan: Plan, *, color: bool = False, legend: bool = True) -> str:
    """The plan as text: one row per GPU (highest index on top), one column per slot.

    A job is its letter (``job_char`` of its position in the scenario), ``~``
    real-time capacity serving demand, ``+`` real-time capacity reserved above
    demand (idle), ``.`` an idle GPU, ``#`` two jobs on one GPU-slot. Node
    boundaries are drawn as lines between rows. Every grid row starts with
    ``gpu`` and holds exactly T cells between ``|`` bars.

    Args:
        scenario: The scenario the plan is for.
        plan: The plan (valid or not).
        color: Colour the cells with ANSI escape codes (for terminals).
        legend: Add the legend of job letters below the grid.

    Returns:
        The grid, lines joined by newlines, without a trailing newline.
    """
    G, T = scenario.gpus, scenario.slots
    cells, _ = cell_grid(scenario, plan)
    m = _metrics(scenario, plan)
    head = (
        f"{plan.scheduler or 'plan'} on {scenario.name}: {G} GPUs x {T} slots of {scenario.slot_minutes:g} min; "
        f"objective {m.objective:.1f}, utilisation {100 * m.utilization:.1f} %, "
        f"placed {m.placed}/{m.jobs}, shortfall {m.shortfall}"
    )
    width = len(str(G - 1))
    pad = " " * (len("gpu ") + width + 1)
    lines = [head]
    if T >= 10:
        lines.append(pad + "".join(str(t // 10 % 10) if t >= 10 else " " for t in range(T)))
    lines.append(pad + "".join(str(t % 10) for t in range(T)))
    rule = pad[:-1] + "+" + "-" * T + "+"
    lines.append(rule)
    for g in range(G - 1, -1, -1):
        row = []
        for t in range(T):
            cell = int(cells[g, t])
            char = job_char(cell) if cell >= 0 else CELL_CHARS[cell]
            row.append(_ansi(char, cell) if color else char)
        lines.append(f"gpu {g:>{width}}|{''.join(row)}|")
        if g % scenario.node_size == 0:
            lines.append(rule)
    if legend:
        lines.extend(_text_legend(scenario, plan))
    return "\n".join(lines)


def _text_legend(scenario: Scenario, plan: Plan) -> list[str]:
    placed = {index: start for index, start, _ in _placements(scenario, plan)}
    entries = []
    for index, job in enumerate(scenario.jobs):
        if index not in placed:
            continue
        mark = "*" if job.running_on is not None else ""
        late = ">" if placed[index] + job.duration > scenario.slots else ""
        entries.append(f"{job_char(index)}={job.id}{mark}{late}")
    unplaced = [job.id for i, job in enumerate(scenario.jobs) if i not in placed]
    lines = textwrap.wrap("jobs: " + "  ".join(entries), width=110, subsequent_indent="  ") if entries else []
    if unplaced:
        lines += textwrap.wrap("unplaced: " + ", ".join(unplaced), width=110, subsequent_indent="  ")
    key = ". idle  ~ real-time serving demand  + real-time reserved above demand (idle)  * inherited  > runs past T"
    lines.append(key)
    return lines


# ----------------------------------------------------------------------------- colours

# One colour per scheduler in every figure; names not listed take the spares in order.
SCHEDULER_COLOURS: dict[str, str] = {
    "fifo": "#8c8c8c",
    "backfill": "#8c564b",
    "greedy": "#1f77b4",
    "cpsat": "#2ca02c",
    "ppo": "#ff7f0e",
    "allocator": "#9467bd",
}
_SPARE_COLOURS = ("#d62728", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#393b79", "#637939")

# Job colours: saturated and light hues alternating, so that neighbours in file order differ.
_JOB_COLOURS = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#a0cbe8", "#ffbe7d", "#8cd17d", "#86bcb6", "#f1ce63", "#d4a6c8", "#fabfd2",
    "#d7b5a6", "#499894", "#b6992d", "#79706e", "#d37295", "#bab0ac", "#c7e9c0", "#9edae5",
)  # fmt: skip

_APP_COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1")

# The allocation figure's legend words (the page of ``gpualloc serve`` shows the same, from :func:`palette`).
_LEGEND = {
    "serving": "serving",
    "reserved": "reserved, idle",
    "inherited": "inherited*",
    "unserved": "unserved demand",
    "past": "past the horizon",
    "clash": "two jobs on one GPU",
}


def scheduler_colours(names: Iterable[str]) -> dict[str, str]:
    """A colour for each scheduler name: the fixed ones first, then spares in order."""
    out: dict[str, str] = {}
    spare = iter(c for c in _SPARE_COLOURS if c not in SCHEDULER_COLOURS.values())
    for name in names:
        if name in out:
            continue
        out[name] = SCHEDULER_COLOURS.get(name) or next(spare, "#555555")
    return out


def job_colour(index: int) -> str:
    """The colour of the index-th job of a scenario, the same in every figure."""
    return _JOB_COLOURS[index % len(_JOB_COLOURS)]


def palette() -> dict[str, Any]:
    """Every colour and legend word of the figures as plain data: what the service's what-if page draws with.

    One definition: :func:`plot_allocation` and :func:`plot_realtime` read the same constants, so the
    page (``gpualloc serve``, ``/v1/palette``) and the report's figures look alike.
    """
    return {
        "schedulers": dict(SCHEDULER_COLOURS),
        "spare": [c for c in _SPARE_COLOURS if c not in SCHEDULER_COLOURS.values()],
        "jobs": list(_JOB_COLOURS),
        "apps": list(_APP_COLOURS),
        "served_alpha": 0.16,
        "edge": "#222222",
        "node_boundary": "#111111",
        "past_horizon": "#eeeeee",
        "horizon_line": "#444444",
        "unserved": "#c53030",
        "clash": "red",
        "demand_fill": "#d9d9d9",
        "demand_line": "#555555",
        "legend": dict(_LEGEND),
    }


def _text_colour(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


_STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def pyplot() -> Any:
    """pyplot, on the Agg backend unless the caller already chose one."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_F = TypeVar("_F", bound=Callable[..., Any])


def _styled(function: _F) -> _F:
    """Run a plotting function under this module's style, leaving the caller's rcParams alone."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        plt = pyplot()
        with plt.rc_context(_STYLE):
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def save_figure(fig: Figure, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Write a figure as PNG atomically (a reader never sees half a file) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format="png", facecolor="white")
    finally:
        plt.close(fig)
    return path


# ----------------------------------------------------------------------------- the allocation grid


def hour_ticks(scenario: Scenario, xmax: float) -> tuple[list[float], list[str]]:
    """Tick positions (slots) and labels (hours) for a time axis from 0 to ``xmax`` slots, at most about 12."""
    hours_per_slot = scenario.slot_minutes / 60.0
    span = xmax * hours_per_slot
    step_h = next((s for s in (0.25, 0.5, 1, 2, 3, 4, 6, 12, 24, 48, 168) if span / s <= 12), 24 * 7 * 4)
    step = max(1, round(step_h / hours_per_slot))
    ticks = list(range(0, int(xmax) + 1, step))
    return [float(t) for t in ticks], [f"{t * hours_per_slot:g}" for t in ticks]


@_styled
def plot_allocation(
    scenario: Scenario, plan: Plan, ax: Axes | None = None, *, title: str | None = None, legend: bool = True
) -> Axes:
    """Draw a plan as GPUs (y) by time (x, hours).

    Each job is a block in its own colour (the same for the same job in every
    figure) with its id written inside when it fits; inherited jobs have a thick
    dashed edge and a ``*``. Real-time capacity is hatched on the top free GPUs
    of each slot (dense hatching: serving demand; dotted: reserved above demand,
    idle). Node boundaries are horizontal lines, the horizon's end a vertical
    line, slots with unserved demand a red mark above the grid.

    Args:
        scenario: The scenario.
        plan: The plan to draw.
        ax: Axes to draw into; a new figure when None.
        title: Axes title; default scheduler, objective and utilisation.
        legend: Draw the legend (real-time, inherited, shortfall) below the axes.

    Returns:
        The axes drawn into.
    """
    plt = pyplot()
    if ax is None:
        fig = plt.figure(figsize=(_grid_width(scenario), _grid_height(scenario)), layout="constrained")
        ax = fig.add_subplot()
    labels, handles = _draw_allocation(scenario, plan, ax, title)
    if legend and handles:
        ax.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.11),
            ncol=min(len(handles), 4),
            frameon=False,
            handlelength=1.6,
            handleheight=1.2,
        )
    _fit_labels(ax.figure, labels)
    return ax


def _draw_allocation(scenario: Scenario, plan: Plan, ax: Axes, title: str | None) -> tuple[list[Any], list[Any]]:
    """Draw the grid into ``ax``; return the job labels (to fit later) and the legend handles."""
    pyplot()  # the backend is chosen before matplotlib's modules are imported
    T = scenario.slots
    placements = _placements(scenario, plan)
    xmax = max([T] + [start + scenario.jobs[i].duration for i, start, _ in placements])
    cells, app = cell_grid(scenario, plan)
    _draw_realtime(scenario, ax, cells, app)
    labels = _draw_jobs(scenario, placements, ax, xmax)
    clashes = _draw_clashes(ax, cells)
    short = _draw_bounds(scenario, plan, ax, xmax)
    _label_axes(scenario, plan, ax, xmax, title)
    handles = _legend_handles(scenario, placements, short, xmax, clashes)
    return labels, handles


def _draw_realtime(scenario: Scenario, ax: Axes, cells: np.ndarray, app: np.ndarray) -> None:
    """Draw real-time capacity: one compound path per app and kind, made of the vertical runs of its cells.

    Args:
        scenario: The scenario.
        ax: Axes to draw into.
        cells: :func:`cell_grid`'s cell kinds (GPUs by slots).
        app: :func:`cell_grid`'s app of each real-time cell.
    """
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path as MplPath

    G, T = scenario.gpus, scenario.slots
    runs: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for t in range(T):
        g = 0
        while g < G:
            kind, which = int(cells[g, t]), int(app[g, t])
            end = g + 1
            while end < G and cells[end, t] == kind and app[end, t] == which:
                end += 1
            if kind in (SERVED, RESERVED):
                runs.setdefault((which, kind), []).append((t, g, end))
            g = end
    for (which, kind), boxes in sorted(runs.items()):
        colour = _APP_COLOURS[which % len(_APP_COLOURS)]
        served = kind == SERVED
        vertices = [[(t, lo), (t + 1, lo), (t + 1, hi), (t, hi), (t, lo)] for t, lo, hi in boxes]
        codes = [MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO, MplPath.LINETO, MplPath.CLOSEPOLY]
        path = MplPath(np.concatenate(vertices).astype(float), codes * len(boxes))
        ax.add_patch(
            PathPatch(
                path, facecolor=colour if served else "white", alpha=0.16 if served else 1.0, linewidth=0, zorder=1
            )
        )
        ax.add_patch(
            PathPatch(
                path,
                fill=False,
                hatch="////" if served else "..",
                edgecolor=colour,
                linewidth=0,
                alpha=0.75 if served else 0.6,
                zorder=1,
            )
        )


def _draw_jobs(
    scenario: Scenario, placements: list[tuple[int, int, tuple[int, ...]]], ax: Axes, xmax: float
) -> list[tuple[Any, Any]]:
    """Draw each placed job as a block with its id inside (inherited jobs: thick dashed edge and ``*``).

    Args:
        scenario: The scenario.
        placements: :func:`_placements` of the plan.
        ax: Axes to draw into.
        xmax: The right end of the time axis (slots).

    Returns:
        The (text, block) pair of each job, for :func:`_fit_labels`.
    """
    from matplotlib.patches import Rectangle

    labels = []
    for index, start, gpus in placements:
        job = scenario.jobs[index]
        if not gpus:
            continue
        lo = min(gpus)
        colour = job_colour(index)
        inherited = job.running_on is not None
        rect = Rectangle(
            (start, lo),
            job.duration,
            len(gpus),
            facecolor=colour,
            edgecolor="#222222",
            linewidth=2.0 if inherited else 0.8,
            linestyle="--" if inherited else "-",
            zorder=3,
        )
        ax.add_patch(rect)
        visible_end = min(start + job.duration, xmax)
        text = ax.text(
            (start + visible_end) / 2,
            lo + len(gpus) / 2,
            job.id + ("*" if inherited else ""),
            ha="center",
            va="center",
            fontsize=8,
            color=_text_colour(colour),
            zorder=7,
            clip_on=True,
        )
        text.set_in_layout(False)
        labels.append((text, rect))
    return labels


def _draw_clashes(ax: Axes, cells: np.ndarray) -> bool:
    """Mark the GPU-slots that two jobs hold; whether there is any.

    Args:
        ax: Axes to draw into.
        cells: :func:`cell_grid`'s cell kinds (GPUs by slots).
    """
    from matplotlib.patches import Rectangle

    clashes = np.argwhere(cells == CLASH)
    for g, t in clashes:
        ax.add_patch(Rectangle((t, g), 1, 1, facecolor="red", edgecolor="black", hatch="xx", zorder=5))
    return bool(len(clashes))


def _draw_bounds(scenario: Scenario, plan: Plan, ax: Axes, xmax: float) -> np.ndarray | None:
    """Draw node boundaries, the horizon's end and the marks of unserved demand.

    Args:
        scenario: The scenario.
        plan: The plan drawn.
        ax: Axes to draw into.
        xmax: The right end of the time axis (slots).

    Returns:
        The unserved demand per slot; None when the scenario has no apps.
    """
    G, T = scenario.gpus, scenario.slots
    for boundary in range(scenario.node_size, G, scenario.node_size):
        ax.axhline(boundary, color="#111111", linewidth=1.4, zorder=6)
    # Past the horizon (seen when a job runs past T, here or in a panel beside this one).
    ax.axvspan(T, T + 10 * (xmax + 1), color="#eeeeee", zorder=0)
    ax.axvline(T, color="#444444", linewidth=1.2, linestyle=":", zorder=6)
    short = np.maximum(0, scenario.demand - _curves(scenario, plan)).sum(axis=0) if scenario.apps else None
    if short is not None and short.any():
        ts = np.flatnonzero(short)
        ax.scatter(ts + 0.5, np.full(ts.size, G + 0.45), marker="v", color="#c53030", s=22, zorder=6, clip_on=False)
    return short


def _label_axes(scenario: Scenario, plan: Plan, ax: Axes, xmax: float, title: str | None) -> None:
    """Set the limits, ticks, axis labels and title.

    Args:
        scenario: The scenario.
        plan: The plan drawn.
        ax: Axes to draw into.
        xmax: The right end of the time axis (slots).
        title: Axes title; default scheduler, objective and utilisation.
    """
    G = scenario.gpus
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, G)
    ticks, names = hour_ticks(scenario, xmax)
    ax.set_xticks(ticks, names)
    ax.set_xlabel("time (h)")
    ystep = next(step for step in (1, 2, 4, 8, 16, 32, 64, 128, G) if G / step <= 16)
    ax.set_yticks([g + 0.5 for g in range(0, G, ystep)], [str(g) for g in range(0, G, ystep)])
    ax.set_ylabel(f"GPU (nodes of {scenario.node_size})" if scenario.node_size < G else "GPU")
    ax.tick_params(axis="y", length=0)
    if title is None:
        m = _metrics(scenario, plan)
        title = f"{plan.scheduler}: objective {m.objective:.1f}, utilisation {100 * m.utilization:.1f} %"
    ax.set_title(title, pad=10)


def _legend_handles(
    scenario: Scenario,
    placements: list[tuple[int, int, tuple[int, ...]]],
    short: np.ndarray | None,
    xmax: float,
    clashes: bool,
) -> list[Any]:
    """The legend's handles: each app's real-time kinds, then each other mark the figure shows.

    Args:
        scenario: The scenario.
        placements: :func:`_placements` of the plan.
        short: Unserved demand per slot (None without apps).
        xmax: The right end of the time axis (slots).
        clashes: Whether two jobs hold a GPU-slot.
    """
    plt = pyplot()
    from matplotlib.patches import Patch

    handles = []
    for i, a in enumerate(scenario.apps):
        colour = _APP_COLOURS[i % len(_APP_COLOURS)]
        handles.append(
            Patch(facecolor=colour + "29", edgecolor=colour, hatch="////", label=f"{a.name}: {_LEGEND['serving']}")
        )
        handles.append(Patch(facecolor="white", edgecolor=colour, hatch="..", label=f"{a.name}: {_LEGEND['reserved']}"))
    if any(scenario.jobs[i].running_on is not None for i, _, _ in placements):
        handles.append(
            Patch(facecolor="#dddddd", edgecolor="#222222", linestyle="--", linewidth=2, label=_LEGEND["inherited"])
        )
    if short is not None and short.any():
        handles.append(plt.Line2D([], [], marker="v", color="#c53030", linestyle="", label=_LEGEND["unserved"]))
    if xmax > scenario.slots:
        handles.append(Patch(facecolor="#eeeeee", edgecolor="#444444", linestyle=":", label=_LEGEND["past"]))
    if clashes:
        handles.append(Patch(facecolor="red", hatch="xx", label=_LEGEND["clash"]))
    return handles


def _grid_width(scenario: Scenario) -> float:
    return float(np.clip(2.5 + 0.25 * scenario.slots, 6.0, 10.0))


def _grid_height(scenario: Scenario) -> float:
    return float(np.clip(2.2 + 0.22 * scenario.gpus, 4.4, 11.0))


def _fit_labels(fig: Figure, labels: Sequence[tuple[Any, Any]]) -> None:
    """Keep each job label inside its block: shrink or turn it, or hide it when it cannot fit.

    Call it once the figure is complete: it lays the figure out to measure.
    """
    if not labels:
        return
    fig.draw_without_rendering()  # runs the layout, so that sizes on screen are final
    renderer = fig.canvas.get_renderer()
    for text, rect in labels:
        box = rect.get_window_extent(renderer)
        fitted = False
        rotations = (0, 90) if box.height > box.width else (0,)
        for size in (8, 7, 6):  # the largest size that fits, read horizontally when both fit
            text.set_fontsize(size)
            for rotation in rotations:
                text.set_rotation(rotation)
                ext = text.get_window_extent(renderer)
                if ext.width <= box.width - 3 and ext.height <= box.height - 2:
                    fitted = True
                    break
            if fitted:
                break
        text.set_visible(fitted)


# ----------------------------------------------------------------------------- comparisons


def _as_plans(plans: Mapping[str, Plan] | Sequence[Plan]) -> dict[str, Plan]:
    if isinstance(plans, Mapping):
        return dict(plans)
    return {p.scheduler: p for p in plans}


def best_plan(scenario: Scenario, plans: Mapping[str, Plan], exclude: str = "fifo") -> str | None:
    """The name of the plan with the highest objective, other than ``exclude`` (None when none)."""
    best = None
    for name, p in plans.items():
        if name == exclude:
            continue
        if best is None or _metrics(scenario, p).objective > _metrics(scenario, plans[best]).objective:
            best = name
    return best


def _change(value: float, base: float) -> str:
    if base > 0:
        return f" ({100 * (value - base) / base:+.1f} % vs FIFO)"
    return ""


@_styled
def plot_comparison(scenario: Scenario, plans: Mapping[str, Plan] | Sequence[Plan]) -> Figure:
    """FIFO beside the best other plan, each titled with objective and utilisation.

    Args:
        scenario: The scenario.
        plans: Plans by scheduler name (or a list, keyed by ``plan.scheduler``).
            Without a ``fifo`` plan the two best plans are shown; a single plan
            is shown alone.

    Returns:
        The figure (save it with :func:`save_figure`).
    """
    plt = pyplot()
    plans = _as_plans(plans)
    if not plans:
        raise ValueError("plot_comparison needs at least one plan")
    left = "fifo" if "fifo" in plans else best_plan(scenario, plans, exclude="")
    right = best_plan(scenario, plans, exclude=left)
    shown = [name for name in (left, right) if name is not None]
    width = _grid_width(scenario)
    fig, axes = plt.subplots(
        1,
        len(shown),
        figsize=(width * len(shown), _grid_height(scenario) + 0.5),
        layout="constrained",
        squeeze=False,
        sharey=True,
    )
    base = _metrics(scenario, plans["fifo"]) if "fifo" in plans else None
    labels: list[Any] = []
    handles: dict[str, Any] = {}
    for ax, name in zip(axes[0], shown, strict=True):
        m = _metrics(scenario, plans[name])
        title = f"{name}: objective {m.objective:.1f}"
        if base is not None and name != "fifo":
            title += _change(m.objective, base.objective)
        title += f"\nutilisation {100 * m.utilization:.1f} %"
        if base is not None and name != "fifo":
            title += f" ({100 * (m.utilization - base.utilization):+.1f} pts)"
        title += f", placed {m.placed}/{m.jobs}, shortfall {m.shortfall}"
        drawn, legend = _draw_allocation(scenario, plans[name], ax, title)
        labels += drawn
        for handle in legend:
            handles.setdefault(handle.get_label(), handle)
        if ax is not axes[0][0]:
            ax.set_ylabel("")
            ax.tick_params(axis="y", labelleft=True)
    right = max(ax.get_xlim()[1] for ax in axes[0])
    for ax in axes[0]:  # the same time axis in both panels
        ax.set_xlim(0, right)
        ticks, names = hour_ticks(scenario, right)
        ax.set_xticks(ticks, names)
    if handles:
        fig.legend(
            handles=list(handles.values()),
            loc="outside lower center",
            ncol=min(len(handles), 6),
            frameon=False,
            handlelength=1.6,
            handleheight=1.2,
        )
    fig.suptitle(f"{scenario.name}: {scenario.gpus} GPUs x {scenario.slots} slots", fontweight="bold")
    _fit_labels(fig, labels)
    return fig


@_styled
def plot_realtime(scenario: Scenario, plans: Mapping[str, Plan] | Sequence[Plan]) -> Figure:
    """Each real-time app's demand against every scheduler's allocation, as step curves.

    The demand is the grey area; each scheduler's curve a coloured line whose
    legend entry gives its shortfall (unserved GPU-slots) and idle reservation
    (GPU-slots reserved above demand).

    Returns:
        The figure; a note instead of axes when the scenario has no real-time app.
    """
    plt = pyplot()
    plans = _as_plans(plans)
    apps = scenario.apps
    if not apps:
        fig = plt.figure(figsize=(6, 1.5))
        fig.text(0.5, 0.5, f"{scenario.name}: no real-time applications", ha="center", va="center")
        return fig
    colours = scheduler_colours(plans)
    fig, axes = plt.subplots(
        len(apps), 1, figsize=(12, 2.9 * len(apps) + 0.6), sharex=True, squeeze=False, layout="constrained"
    )
    edges = np.arange(scenario.slots + 1)
    styles = ("-", "--", "-.", ":")
    for i, (a, ax) in enumerate(zip(apps, axes[:, 0], strict=True)):
        demand = np.asarray(a.demand)
        ax.stairs(demand, edges, fill=True, color="#d9d9d9", label="demand", zorder=1)
        ax.stairs(demand, edges, color="#555555", linewidth=1.0, zorder=2)
        top = int(demand.max())
        for j, (name, p) in enumerate(plans.items()):
            curve = _curves(scenario, p)[i]
            top = max(top, int(curve.max()))
            short = int(np.maximum(0, demand - curve).sum())
            idle = int(np.maximum(0, curve - demand).sum())
            ax.stairs(
                curve,
                edges,
                color=colours[name],
                linewidth=2.0,
                linestyle=styles[j % len(styles)],
                label=f"{name}: shortfall {short}, reserved idle {idle}",
                zorder=3 + j,
            )
        ax.set_ylim(0, top * 1.12 + 0.5)
        ax.set_xlim(0, scenario.slots)
        ax.set_ylabel("GPUs")
        ax.set_title(f"{a.name}: ramp {a.ramp} GPUs/slot, penalty {a.penalty:g} per unserved GPU-slot")
        ax.grid(axis="y", color="#eeeeee", zorder=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ticks, names = hour_ticks(scenario, scenario.slots)
    axes[-1, 0].set_xticks(ticks, names)
    axes[-1, 0].set_xlabel("time (h)")
    fig.suptitle(f"{scenario.name}: real-time demand and allocation", fontweight="bold")
    return fig


@_styled
def plot_summary(results: Sequence[Mapping[str, Any]]) -> Figure:
    """Bars per scenario and scheduler: objective change vs FIFO (%) and utilisation (%).

    Args:
        results: One mapping per (scenario, scheduler) with at least the keys
            ``scenario``, ``scheduler``, ``objective`` and ``utilization``
            (a fraction), as in ``results.json`` of ``evaluate.py``; an optional
            ``valid`` (False marks the bar with a cross).

    Returns:
        The figure.
    """
    plt = pyplot()
    scenarios = list(dict.fromkeys(r["scenario"] for r in results))
    names = list(dict.fromkeys(r["scheduler"] for r in results))
    colours = scheduler_colours(names)
    table = {(r["scenario"], r["scheduler"]): r for r in results}
    others = [n for n in names if n != "fifo"] if "fifo" in names else names
    width = float(np.clip(2.5 + len(scenarios) * (0.45 + 0.3 * len(names)), 8.0, 14.0))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 7.8), layout="constrained", sharex=True)
    x = np.arange(len(scenarios))

    def bars(ax: Axes, series: list[str], value: Any, fmt: str) -> None:
        group = min(0.8, 0.2 + 0.22 * len(series))
        width = group / max(1, len(series))
        for j, name in enumerate(series):
            ys, hatches = [], []
            for s in scenarios:
                r = table.get((s, name))
                ys.append(np.nan if r is None else value(s, r))
                hatches.append("xx" if r is not None and r.get("valid") is False else "")
            pos = x - group / 2 + width * (j + 0.5)
            drawn = ax.bar(pos, np.nan_to_num(ys), width * 0.92, color=colours[name], label=name, zorder=2)
            for patch, h in zip(drawn, hatches, strict=True):
                if h:
                    patch.set_hatch(h)
                    patch.set_edgecolor("#c53030")
            for xp, y in zip(pos, ys, strict=True):
                if np.isfinite(y):
                    ax.annotate(
                        fmt.format(y),
                        (xp, y),
                        xytext=(0, 2 if y >= 0 else -2),
                        textcoords="offset points",
                        ha="center",
                        va="bottom" if y >= 0 else "top",
                        fontsize=7,
                        rotation=90 if len(series) > 2 else 0,
                    )
        ax.set_xticks(x, scenarios, rotation=20, ha="right")
        ax.tick_params(axis="x", labelbottom=ax is bottom)
        ax.grid(axis="y", color="#eeeeee", zorder=0)
        ax.legend(frameon=False, ncol=len(series), loc="upper left")

    def vs_fifo(s: str, r: Mapping[str, Any]) -> float:
        base = table.get((s, "fifo"))
        if base is None or base["objective"] <= 0:
            return np.nan
        return 100.0 * (r["objective"] - base["objective"]) / base["objective"]

    if "fifo" in names and others:
        bars(top, others, vs_fifo, "{:+.1f}")
        top.axhline(0, color="#333333", linewidth=0.8)
        top.set_ylabel("objective vs FIFO (%)")
        top.set_title("Priority-weighted value: change against FIFO")
        lo, hi = top.get_ylim()
        top.set_ylim(min(lo, 0) - 0.08 * (hi - lo), hi + 0.14 * (hi - lo))
    else:
        bars(top, names, lambda s, r: r["objective"], "{:.0f}")
        top.set_ylabel("objective")
        top.set_title("Priority-weighted value")
    bars(bottom, names, lambda s, r: 100.0 * r["utilization"], "{:.1f}")
    bottom.set_ylabel("utilisation (%)")
    bottom.set_ylim(0, 112)
    bottom.set_title("Utilisation (GPU-slots held by jobs or serving demand)")
    return fig
