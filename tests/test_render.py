"""Rendering: the text grid cell by cell on a hand-worked plan, and every figure as a non-empty PNG."""

from __future__ import annotations

import re

import matplotlib.image
import pytest

from agents.fifo import plan as fifo_plan
from gpu_env import render
from gpu_env.metrics import compute_metrics
from gpu_env.plan import Placement, Plan
from gpu_env.validation import validate
from tests.conftest import make_scenario


def scenario():
    # G=4 (one node), T=4; job a (2 GPUs x 2 slots), job b (1 GPU x 3 slots, inherited on GPU 2); one app.
    return make_scenario(
        cluster={"gpus": 4},
        horizon={"slots": 4},
        realtime=[{"name": "chat", "demand": [1, 1, 1, 1], "ramp": 1, "initial": 1, "penalty": 5}],
        jobs=[
            {"id": "a", "type": "training", "gpus": 2, "duration": 2, "release": 1},
            {"id": "b", "type": "batch_inference", "gpus": 1, "duration": 3, "running_on": [2]},
        ],
    )


def hand_plan():
    return Plan(
        "tiny",
        "hand",
        [Placement("b", 0, (2,)), Placement("a", 1, (0, 1))],
        {"chat": [2, 1, 1, 0]},
    )


# Worked by hand: real-time fills the highest free GPUs, serving first. Slot 0: free 3, 1, 0 -> GPU 3
# serves (D=1), GPU 1 reserved above demand. Slots 1-2: only GPU 3 free, it serves. Slot 3: r=0, all idle.
EXPECTED_ROWS = {  # GPU -> cells over slots 0..3
    3: "~~~.",
    2: "BBB.",
    1: "+AA.",
    0: ".AA.",
}


def grid_rows(text):
    """GPU -> the T cells between the bars, from the lines that start with 'gpu'."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"gpu\s*(\d+)\|(.*)\|$", line)
        if m:
            rows[int(m.group(1))] = m.group(2)
    return rows


def test_hand_plan_is_valid():
    assert validate(scenario(), hand_plan()) == []


def test_cell_grid_by_hand():
    cells, app = render.cell_grid(scenario(), hand_plan())
    assert cells.shape == (4, 4)
    assert cells[3].tolist() == [render.SERVED] * 3 + [render.FREE]
    assert cells[1, 0] == render.RESERVED and app[1, 0] == 0 and app[3, 0] == 0
    assert cells[0].tolist() == [render.FREE, 0, 0, render.FREE]
    assert cells[2].tolist() == [1, 1, 1, render.FREE]
    assert app[0].tolist() == [-1] * 4


def test_text_grid_cells_and_dimensions():
    sc = scenario()
    text = render.text_grid(sc, hand_plan())
    rows = grid_rows(text)
    assert rows == EXPECTED_ROWS
    gpu_lines = [line for line in text.splitlines() if line.startswith("gpu")]
    assert [int(line.split("|")[0][3:]) for line in gpu_lines] == [3, 2, 1, 0]  # highest GPU on top
    assert "A=a" in text and "B=b*" in text  # legend; * marks inherited work


def test_text_grid_dimensions_on_generated_scenario():
    from gpu_env.generators import generate

    sc = generate("mixed-control", seed=1)
    rows = grid_rows(render.text_grid(sc, fifo_plan(sc)))
    assert sorted(rows) == list(range(sc.gpus))
    assert all(len(cells) == sc.slots for cells in rows.values())


def test_text_grid_colour_strips_to_the_plain_grid():
    sc = scenario()
    coloured = render.text_grid(sc, hand_plan(), color=True)
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == render.text_grid(sc, hand_plan())


def test_text_grid_marks_two_jobs_on_one_gpu():
    sc = scenario()
    clash = Plan("tiny", "bad", [Placement("b", 0, (2,)), Placement("a", 1, (1, 2))], {"chat": [1, 1, 1, 1]})
    rows = grid_rows(render.text_grid(sc, clash))
    assert rows[2][1:3] == "##"
    assert rows[1][1:3] == "AA"


def test_text_grid_lists_unplaced_jobs():
    sc = scenario()
    text = render.text_grid(sc, Plan("tiny", "p", [Placement("b", 0, (2,))], {"chat": [1, 1, 1, 1]}))
    assert "unplaced: a" in text


def is_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert image.std() > 0.01  # not blank
    return True


def two_plans():
    sc = scenario()
    fifo = fifo_plan(sc)
    fifo.metrics = compute_metrics(sc, fifo)
    other = hand_plan()
    other.scheduler = "greedy"
    other.metrics = compute_metrics(sc, other)
    return sc, {"fifo": fifo, "greedy": other}


def test_plot_allocation_png(tmp_path):
    sc = scenario()
    ax = render.plot_allocation(sc, hand_plan())
    path = render.save_figure(ax.figure, tmp_path / "alloc.png")
    assert is_png(path)
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_plot_allocation_into_given_axes(tmp_path):
    import matplotlib.pyplot as plt

    sc = scenario()
    fig, axes = plt.subplots(1, 2)
    assert render.plot_allocation(sc, hand_plan(), ax=axes[1], legend=False) is axes[1]
    assert is_png(render.save_figure(fig, tmp_path / "given.png"))


def test_labels_that_cannot_fit_are_hidden():
    sc = make_scenario(
        cluster={"gpus": 64},
        horizon={"slots": 48},
        jobs=[{"id": "a-very-long-job-name-indeed", "type": "quantization", "gpus": 1, "duration": 1}],
    )
    ax = render.plot_allocation(sc, Plan("tiny", "p", [Placement("a-very-long-job-name-indeed", 0, (0,))]))
    label = next(t for t in ax.texts if t.get_text().startswith("a-very"))
    assert not label.get_visible()


def test_plot_comparison_and_realtime_png(tmp_path):
    sc, plans = two_plans()
    assert is_png(render.save_figure(render.plot_comparison(sc, plans), tmp_path / "cmp.png"))
    assert is_png(render.save_figure(render.plot_realtime(sc, plans), tmp_path / "rt.png"))


def test_plot_comparison_takes_a_list_and_a_single_plan(tmp_path):
    sc, plans = two_plans()
    fig = render.plot_comparison(sc, [plans["fifo"]])
    assert len(fig.axes) == 1
    assert is_png(render.save_figure(fig, tmp_path / "one.png"))
    with pytest.raises(ValueError):
        render.plot_comparison(sc, [])


def test_best_plan_skips_fifo():
    sc, plans = two_plans()
    assert render.best_plan(sc, plans) == "greedy"


def test_plot_realtime_without_apps(tmp_path):
    sc = make_scenario(jobs=[{"id": "a", "type": "training", "gpus": 1, "duration": 1}])
    fig = render.plot_realtime(sc, {"fifo": fifo_plan(sc)})
    assert (tmp_path / "x.png").exists() is False
    assert render.save_figure(fig, tmp_path / "x.png").stat().st_size > 0


def test_plot_summary_png(tmp_path):
    rows = [
        {"scenario": s, "scheduler": n, "objective": obj, "utilization": u, "valid": n != "bad"}
        for s, base in (("one", 100.0), ("two", 50.0))
        for n, obj, u in (("fifo", base, 0.6), ("greedy", base * 1.3, 0.8), ("bad", base * 2, 0.9))
    ]
    assert is_png(render.save_figure(render.plot_summary(rows), tmp_path / "summary.png"))


def test_scheduler_colours_fixed_and_distinct():
    colours = render.scheduler_colours(["fifo", "mystery", "greedy", "other"])
    assert colours["fifo"] == render.SCHEDULER_COLOURS["fifo"]
    assert colours["greedy"] == render.SCHEDULER_COLOURS["greedy"]
    assert len(set(colours.values())) == 4
