"""The anytime trace of the exact and full modes as a picture: objective and bound against seconds.

The trace is ``plan.info["trace"]`` (:func:`agents.cpsat.trace_info`): its first point is the
hint in full mode (marked), a bound of null means none was proved yet. matplotlib is loaded
lazily through :func:`gpu_env.render.pyplot` (Agg backend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpu_env.render import pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_trace(info: Mapping[str, Any], title: str = "") -> Figure:
    """Objective and bound of a plan's trace against seconds, steps held between points.

    Args:
        info: The plan's ``info``: its ``"trace"`` and, when present, ``"hint"``, ``"mode"``,
            ``"bound_source"`` and ``"gap"``.
        title: The figure's title (the scenario's name, say).

    Raises:
        ValueError: ``info`` has no trace (only ``cpsat`` and ``full`` record one).
    """
    trace = info.get("trace")
    if not trace or not trace.get("seconds"):
        raise ValueError("the plan has no trace (only the cpsat and full schedulers record one)")
    plt = pyplot()
    seconds = list(trace["seconds"])
    objective = list(trace["objective"])
    bound = [math.nan if b is None else b for b in trace["bound"]]
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    ax.step(seconds, objective, where="post", color="#2b6cb0", label="objective (best plan)")
    if any(math.isfinite(b) for b in bound):
        ax.step(seconds, bound, where="post", color="#c05621", label=f"bound ({info.get('bound_source', 'solver')})")
    if "hint" in info:
        name = info["hint"].get("scheduler", "hint") if isinstance(info["hint"], Mapping) else "hint"
        ax.plot([seconds[0]], [objective[0]], "o", color="#2f855a", label=f"hint ({name})")
    ax.set_xlabel("seconds since the call began")
    ax.set_ylabel("objective (priority-weighted value)")
    gap = info.get("gap")
    details = [str(info[key]) for key in ("mode", "status") if info.get(key)]
    if gap is not None:
        details.append(f"gap {100 * gap:.2f} %")
    ax.set_title(" - ".join(part for part in (title, ", ".join(details)) if part))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
