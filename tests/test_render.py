"""Rendering: the text grid cell by cell on a hand-worked plan; each figure at its size, drawing what it should."""

from __future__ import annotations

import re

import matplotlib.image
import numpy as np
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


# Figure sizes the plotting functions ask for, in inches, worked from their rules for the hand scenario
# (G = 4, T = 4, one app): a grid is clip(2.5 + 0.25 T, 6, 10) wide and clip(2.2 + 0.22 G, 4.4, 11) high.
GRID_W, GRID_H = 6.0, 4.4
DPI = 120  # save_figure's default


def read_png(path, width_in, height_in, dpi=DPI):
    """The decoded picture of a PNG file, after checking its signature, its size in pixels and that it is not blank."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (round(height_in * dpi), round(width_in * dpi))  # rows, columns
    assert image[..., :3].std() > 0.01  # not blank
    return image[..., :3]


def pixel(image, ax, x, y, dpi=DPI):
    """The RGB colour of the saved picture at data point (x, y) of ``ax`` (after the figure was saved)."""
    px, py = ax.transData.transform((x, y)) * (dpi / ax.figure.dpi)
    return image[int(np.rint(image.shape[0] - py)), int(np.rint(px))]


def hex_rgb(colour):
    return np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])


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
    assert tuple(ax.figure.get_size_inches()) == (GRID_W, GRID_H)
    read_png(render.save_figure(ax.figure, tmp_path / "alloc.png"), GRID_W, GRID_H)
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind
    ax = render.plot_allocation(sc, hand_plan())
    read_png(render.save_figure(ax.figure, tmp_path / "small.png", dpi=50), GRID_W, GRID_H, dpi=50)  # 300 x 220


def test_plot_allocation_draws_the_plan(tmp_path):
    """Idle cells are white, each job's block is filled with one solid colour of its own (report.md)."""
    sc = scenario()
    ax = render.plot_allocation(sc, hand_plan())
    image = read_png(render.save_figure(ax.figure, tmp_path / "alloc.png"), GRID_W, GRID_H)
    white = np.ones(3)
    # EXPECTED_ROWS: GPU 0 is idle in slots 0 and 3, GPU 2 in slot 3.
    for x, y in ((0.5, 0.5), (3.5, 0.5), (3.5, 2.5)):
        np.testing.assert_allclose(pixel(image, ax, x, y), white, atol=1e-6, err_msg=f"idle cell at {x, y}")
    # Job a on GPUs 0-1 in slots 1-2, job b on GPU 2 in slots 0-2: the same colour all over each block
    # (away from the centred label), and not the same colour for the two.
    a = [pixel(image, ax, x, y) for x, y in ((1.2, 0.2), (2.8, 0.2), (1.2, 1.8), (2.8, 1.8))]
    b = [pixel(image, ax, x, y) for x, y in ((0.3, 2.3), (2.7, 2.3), (0.3, 2.7), (2.7, 2.7))]
    for block in (a, b):
        assert all(np.allclose(c, block[0], atol=1 / 255) for c in block)
        assert not np.allclose(block[0], white, atol=0.1)
    assert not np.allclose(a[0], b[0], atol=0.1)
    # The colour is the job's own colour (the one every figure of the scenario uses), opaque.
    np.testing.assert_allclose(a[0], hex_rgb(render.job_colour(0)), atol=1 / 255)
    np.testing.assert_allclose(b[0], hex_rgb(render.job_colour(1)), atol=1 / 255)


def test_same_plan_same_picture_other_plan_other_picture(tmp_path):
    sc = scenario()
    moved = Plan("tiny", "hand", [Placement("b", 0, (2,)), Placement("a", 2, (0, 1))], {"chat": [2, 1, 1, 0]})
    assert validate(sc, moved) == []
    pictures = []
    for name, plan in (("one", hand_plan()), ("again", hand_plan()), ("moved", moved)):
        ax = render.plot_allocation(sc, plan, title="same title")  # titles carry the metrics: keep them equal
        pictures.append(read_png(render.save_figure(ax.figure, tmp_path / f"{name}.png"), GRID_W, GRID_H))
    one, again, other = pictures
    assert np.array_equal(one, again)  # rendering is deterministic
    differs = np.any(one != other, axis=2)
    assert differs.mean() > 0.01  # a block moved a slot: a visible share of the picture changed


def test_plot_allocation_into_given_axes(tmp_path):
    import matplotlib.pyplot as plt

    sc = scenario()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    assert render.plot_allocation(sc, hand_plan(), ax=axes[1], legend=False) is axes[1]
    image = read_png(render.save_figure(fig, tmp_path / "given.png"), 8, 3)  # the caller's figure size
    # Drawn into the right-hand axes only: job a's colour is there and not in the left half.
    colour = hex_rgb(render.job_colour(0))
    np.testing.assert_allclose(pixel(image, axes[1], 1.2, 0.2), colour, atol=1 / 255)
    left = image[:, : image.shape[1] // 2]
    assert not np.all(np.isclose(left, colour, atol=1 / 255), axis=2).any()


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
    fig = render.plot_comparison(sc, plans)
    axes = list(fig.axes)
    image = read_png(render.save_figure(fig, tmp_path / "cmp.png"), 2 * GRID_W, GRID_H + 0.5)  # 1440 x 588
    # FIFO left, greedy right; each job in the same colour in both panels (report.md).
    for index, job in enumerate(sc.jobs):
        colour = hex_rgb(render.job_colour(index))
        for ax, name in zip(axes, ("fifo", "greedy"), strict=True):
            p = next(p for p in plans[name].placements if p.job == job.id)
            np.testing.assert_allclose(
                pixel(image, ax, p.start + 0.2, min(p.gpus) + 0.2), colour, atol=1 / 255, err_msg=f"{job.id} {name}"
            )
    read_png(render.save_figure(render.plot_realtime(sc, plans), tmp_path / "rt.png"), 12, 2.9 + 0.6)  # one app


def test_plot_comparison_takes_a_list_and_a_single_plan(tmp_path):
    sc, plans = two_plans()
    fig = render.plot_comparison(sc, [plans["fifo"]])
    assert len(fig.axes) == 1
    read_png(render.save_figure(fig, tmp_path / "one.png"), GRID_W, GRID_H + 0.5)
    with pytest.raises(ValueError):
        render.plot_comparison(sc, [])


def test_best_plan_skips_fifo():
    sc, plans = two_plans()
    assert render.best_plan(sc, plans) == "greedy"


def test_plot_realtime_without_apps(tmp_path):
    sc = make_scenario(jobs=[{"id": "a", "type": "training", "gpus": 1, "duration": 1}])
    fig = render.plot_realtime(sc, {"fifo": fifo_plan(sc)})
    assert not fig.axes and "no real-time applications" in fig.texts[0].get_text()
    read_png(render.save_figure(fig, tmp_path / "x.png"), 6, 1.5)  # a note, not an empty frame of axes


def summary_rows():
    return [
        {"scenario": s, "scheduler": n, "objective": obj, "utilization": u, "valid": n != "bad"}
        for s, base in (("one", 100.0), ("two", 50.0))
        for n, obj, u in (("fifo", base, 0.6), ("greedy", base * 1.3, 0.8), ("bad", base * 2, 0.9))
    ]


def test_plot_summary_png(tmp_path):
    fig = render.plot_summary(summary_rows())
    top, bottom = fig.axes[:2]
    # Bars: objective change vs FIFO on top (+30 % for greedy in both scenarios), utilisation below.
    heights = {c.get_label(): [round(b.get_height(), 6) for b in c] for c in top.containers}
    assert heights == {"greedy": [30.0, 30.0], "bad": [100.0, 100.0]}
    heights = {c.get_label(): [round(b.get_height(), 6) for b in c] for c in bottom.containers}
    assert heights == {"fifo": [60.0, 60.0], "greedy": [80.0, 80.0], "bad": [90.0, 90.0]}
    assert all(b.get_hatch() == "xx" for c in bottom.containers if c.get_label() == "bad" for b in c)
    # 2 scenarios x 3 schedulers: clip(2.5 + 2 * (0.45 + 0.3 * 3), 8, 14) = 8 wide, 7.8 high
    read_png(render.save_figure(fig, tmp_path / "summary.png"), 8, 7.8)


def test_scheduler_colours_are_one_per_scheduler_in_every_figure():
    import matplotlib.colors as mcolors

    # FIFO is grey (report.md: "FIFO in grey"); the others are not, and all differ.
    fixed = ["fifo", "greedy", "cpsat", "ppo", "allocator"]
    colours = render.scheduler_colours([*fixed, "mystery", "other"])
    r, g, b = mcolors.to_rgb(colours["fifo"])
    assert r == g == b
    assert all(len(set(mcolors.to_rgb(colours[n]))) > 1 for n in colours if n != "fifo")
    assert len(set(colours.values())) == len(colours)
    # A known scheduler keeps its colour whatever else is drawn beside it, in any order.
    for names in (["greedy"], ["mystery", "greedy", "fifo"], ["ppo", "other", "cpsat", "greedy"]):
        for name, colour in render.scheduler_colours(names).items():
            if name in fixed:
                assert colour == colours[name], (names, name)
    # The realtime figure's lines and the summary's bars use the same colour for the same scheduler.
    sc, plans = two_plans()
    fig = render.plot_realtime(sc, {"greedy": plans["greedy"], "fifo": plans["fifo"]})
    lines = {p.get_label().split(":")[0]: mcolors.to_hex(p.get_edgecolor()) for p in fig.axes[0].patches}
    bars = {
        c.get_label(): mcolors.to_hex(c[0].get_facecolor())
        for c in render.plot_summary(summary_rows()).axes[1].containers
    }
    assert lines["fifo"] == bars["fifo"] and lines["greedy"] == bars["greedy"] and lines["fifo"] != lines["greedy"]
