"""Two-dimensional knapsack (2KP) instances as scenarios (SPEC section 6).

An instance of ``benchmarks/data/2kp/`` is one W x H bin and item types of
``width`` x ``height`` with a ``profit`` and at most ``copies`` copies each,
packed without rotation. As a scenario, the bin is ``G = W`` GPUs (one node) by
``T = H`` slots, and each copy of an item is one job of ``k = width`` GPUs for
``d = height`` slots, released at 0, with deadline T and ``value = profit``;
there is no real-time and no decay. The scenario's best objective is then the
instance's optimum.

>>> inst = knapsack_from_dict({"name": "toy", "bin": {"width": 2, "height": 2},
...     "items": [{"width": 1, "height": 2, "profit": 3, "copies": 2}]})
>>> [job.id for job in to_scenario(inst).jobs]
['item1-1', 'item1-2']
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_env.scenario import FieldReader, Job, JobType, Scenario, ScenarioError, parse_file


@dataclass(frozen=True)
class Item:
    """One item type: a ``width`` x ``height`` rectangle worth ``profit``, at most ``copies`` times."""

    width: int
    height: int
    profit: float
    copies: int


@dataclass(frozen=True)
class KnapsackInstance:
    """A 2KP instance as stored in ``benchmarks/data/2kp/*.json`` (sources and optima in its README).

    Attributes:
        name: Instance name.
        width: Bin width W (becomes the GPUs).
        height: Bin height H (becomes the slots).
        items: Item types, in file order.
        optimum: The literature optimum, or None when unknown.
        source: The file it was read from (for messages).
    """

    name: str
    width: int
    height: int
    items: tuple[Item, ...]
    optimum: float | None = None
    source: str = "<dict>"

    @property
    def pieces(self) -> int:
        """Sum of copies over item types."""
        return sum(item.copies for item in self.items)


_TOP_KEYS = {"name", "bin", "items", "rotation", "optimum", "optimum_source", "instance_source"}
_BIN_KEYS = {"width", "height"}
_ITEM_KEYS = {"width", "height", "profit", "copies"}


def knapsack_from_dict(data: Any, source: str = "<dict>") -> KnapsackInstance:
    """Check a parsed 2KP document and build the instance.

    Raises:
        ScenarioError: A missing, unknown or mistyped field, named with the file; rotation asked for.
    """
    r = FieldReader(source)
    top = r.mapping(data, "", _TOP_KEYS, {"name", "bin", "items"})
    name = r.string(top["name"], "name")
    if top.get("rotation", False) is not False:
        raise r.fail("rotation", f"only rotation: false is supported (jobs do not rotate), got {top['rotation']!r}")
    box = r.mapping(top["bin"], "bin", _BIN_KEYS, _BIN_KEYS)
    width = r.integer(box["width"], "bin.width", 1)
    height = r.integer(box["height"], "bin.height", 1)
    raw_items = top["items"]
    if not isinstance(raw_items, list):
        raise r.fail("items", "expected a list of items")
    items = []
    for i, raw in enumerate(raw_items):
        path = f"items[{i}]"
        entry = r.mapping(raw, path, _ITEM_KEYS, {"width", "height", "profit"})
        w = r.integer(entry["width"], f"{path}.width", 1)
        h = r.integer(entry["height"], f"{path}.height", 1)
        if w > width:
            raise r.fail(f"{path}.width", f"item of width {w} is wider than the bin ({width}): it can never be packed")
        profit = r.number(entry["profit"], f"{path}.profit", positive=True)
        copies = r.integer(entry.get("copies", 1), f"{path}.copies", 0)
        items.append(Item(w, h, profit, copies))
    optimum = top.get("optimum")
    if optimum is not None:
        optimum = r.number(optimum, "optimum")
    return KnapsackInstance(name, width, height, tuple(items), optimum, source)


def load_knapsack(path: str | os.PathLike[str]) -> KnapsackInstance:
    """Read and check a 2KP JSON file.

    Raises:
        ScenarioError: The file is missing, not JSON, or breaks the format (the message names the field).
    """
    path = Path(path)
    source = str(path)
    data = parse_file(path, json_only=True)
    return knapsack_from_dict(data, source)


def to_scenario(instance: KnapsackInstance) -> Scenario:
    """The scenario of SPEC section 6: bin W x H as W GPUs x H slots, one job per copy.

    Jobs are released at 0 with deadline H, worth their profit (``value``); the
    cluster is one node, there is no real-time and no decay. Job ids are
    ``item<type>-<copy>``, both counted from 1.
    """
    jobs = []
    for i, item in enumerate(instance.items, start=1):
        for c in range(1, item.copies + 1):
            jobs.append(
                Job(
                    id=f"item{i}-{c}",
                    type=JobType.TRAINING,
                    gpus=item.width,
                    duration=item.height,
                    deadline=instance.height,
                    value=_plain(item.profit),
                )
            )
    try:  # construction checks the scenario; errors name the instance's file
        return Scenario(name=instance.name, gpus=instance.width, slots=instance.height, jobs=tuple(jobs))
    except ScenarioError as exc:
        raise ScenarioError(instance.source, exc.field, exc.reason) from None


def convert_2kp(path: str | os.PathLike[str]) -> Scenario:
    """Read a 2KP JSON file and return its scenario (see :func:`to_scenario`)."""
    return to_scenario(load_knapsack(path))


def _plain(x: float) -> float:
    return float(int(x)) if float(x).is_integer() and math.isfinite(x) else float(x)
