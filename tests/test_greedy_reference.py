"""Greedy and the decoder against the plans recorded from the Python sweep (``tests/greedy_reference.py``).

Every case's greedy plan must equal the recorded one placement by placement, with the same real-time curves, the
same objective and the same winning sweep; each recorded single sweep of a random order must be what the decoder
makes of that order in that mode. The fixture, ``tests/data/greedy_plans.json``, is regenerated only when a change
to the plans is intended: ``PYTHONPATH=. .venv/bin/python tests/greedy_reference.py`` (from a version of
``agents/greedy.py`` that still has the Python sweep).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import numpy as np
import pytest

from agents import greedy
from gpu_env.listsched import MODES, ListInstance, decode
from gpu_env.scenario import Scenario
from tests.greedy_reference import CONFIGS, FIXTURE, SWEEP_ORDERS, cases, curves_hash, placements, sweep_orders


@cache
def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


@cache
def scenarios() -> dict[str, Scenario]:
    return {name: sc for name, sc, _ in cases()}


def test_fixture_covers_every_case():
    assert list(fixture()["cases"]) == [name for name, _, _ in cases()]
    recorded = {config for plans in fixture()["cases"].values() for config in plans}
    assert recorded == set(CONFIGS)


@pytest.mark.parametrize("name", [name for name, _, _ in cases()])
def test_greedy_plans_equal_the_recorded_ones(name: str):
    sc = scenarios()[name]
    for config_name, expected in fixture()["cases"][name].items():
        result = greedy.solve(sc, CONFIGS[config_name])
        where = f"{name} {config_name}"
        assert placements(result.plan, sc) == expected["placements"], where
        assert curves_hash(result.plan, sc) == expected["curves"], where
        assert result.objective == pytest.approx(expected["objective"], rel=1e-9, abs=1e-6), where
        assert (result.ordering, result.guard_fired) == (expected["ordering"], expected["guard_fired"]), where


@pytest.mark.parametrize("name", list(fixture()["sweeps"]))
def test_decoded_sweeps_equal_the_recorded_ones(name: str):
    sc = scenarios()[name]
    case = [n for n, _, _ in cases()].index(name)
    rows = fixture()["sweeps"][name]
    modes = len(rows) // SWEEP_ORDERS  # rows: each order in every trade mode
    orders = [order for order in sweep_orders(sc, case) for _ in range(modes)]
    dec = decode(ListInstance.build(sc), np.array(orders), np.array([MODES[row["mode"]] for row in rows]))
    for i, row in enumerate(rows):
        placed = np.flatnonzero(dec.start[i] >= 0)
        got = [[int(j), int(dec.start[i, j]), int(dec.first[i, j])] for j in placed]
        assert got == row["placements"], f"{name} row {i} ({row['mode']})"
        assert dec.objective[i] == pytest.approx(row["objective"], rel=1e-9, abs=1e-6)
