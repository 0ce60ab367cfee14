"""The batched Occupancy queries behind the environment's masks agree with the plain ones."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_env import rules
from gpu_env.generators import FAMILIES, generate
from gpu_env.occupancy import Occupancy


def bits(row: np.ndarray) -> int:
    return sum(1 << int(a) for a in np.flatnonzero(row))


@settings(max_examples=30, deadline=None)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(0, 10_000),
    gpus=st.sampled_from([4, 8, 12, 16]),
    jobs=st.integers(3, 10),
)
def test_bitmask_queries_match_the_boolean_ones(family: str, seed: int, gpus: int, jobs: int):
    sc = generate(family, seed, gpus=gpus, num_jobs=jobs)
    rng = np.random.default_rng(seed)
    occ = Occupancy(sc)
    occ.place_inherited()
    for j, job in enumerate(sc.jobs):
        if j in occ.placed:
            continue
        slack = occ.slack() - rng.integers(0, 3, sc.slots)
        # feasible_at agrees with feasible() on the allowed blocks, and next_feasible_mask with feasible_at.
        full = occ.feasible(job)
        starts = rules.allowed_block_starts(job.gpus, sc.gpus, sc.node_size)
        for t in range(sc.slots):
            row = occ.feasible_at([j], [t])[0]
            assert bits(row) == sum(1 << int(a) for a, ok in zip(starts, full[t], strict=True) if ok)
            want = occ.feasible_at([j], [t], slack)[0]
            got_start, got = occ.next_feasible_mask(j, t, t + 1, slack.tolist())
            assert (got_start, got) == ((t, bits(want)) if want.any() else (-1, 0))
        # After placing the job, narrowing earlier answers equals asking again.
        spot = occ.earliest(job)
        if spot is None:
            continue
        others = [i for i in range(len(sc.jobs)) if i not in occ.placed and i != j]
        when = [int(rng.integers(0, sc.slots)) for _ in others]
        before = occ.feasible_at(others, when) if others else np.zeros((0, sc.gpus), bool)
        occ.place(j, *spot)
        if others:
            again = occ.feasible_at(others, when)
            assert (occ.narrow_feasible(before, others, when, j) == again).all()
            assert occ.narrow_masks([bits(r) for r in before], others, when, j) == [bits(r) for r in again]
