"""The runtime model: draws per job, the slot discretisation and the conditional remaining runtime.

The fit script (benchmarks/fit_runtimes.py) is retired: `git checkout 0ac3cc4 -- benchmarks/fit_runtimes.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.live.runtimes import (
    TRACE_RUNTIMES,
    RuntimeDistribution,
    RuntimeModel,
    draw_runtimes,
    job_uniform,
)
from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import Job, JobType
from tests.conftest import HANG_GUARD_S, make_scenario

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 7)

# ratio 0.5 with probability 0.5, 1.0 (the limit) with probability 0.5
TWO_POINT = RuntimeDistribution(at_limit=0.5, quantiles=(0.5, 0.5))
# ratio uniform on [0.25, 1], nothing at the limit
UNIFORM = RuntimeDistribution(at_limit=0.0, quantiles=(0.25, 1.0))


def _jobs(n: int, duration: int, prefix: str = "j") -> list[dict]:
    return [{"id": f"{prefix}{i}", "type": "training", "gpus": 1, "duration": duration} for i in range(n)]


# ----------------------------------------------------------------------------- draw_runtimes on scenarios


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_exact_runs_every_job_to_its_limit(family):
    sc = generate(family, 3)
    assert draw_runtimes(sc, RuntimeModel.EXACT, 0) == {job.id: job.duration for job in sc.jobs}
    assert draw_runtimes(sc, "exact", 5) == {job.id: job.duration for job in sc.jobs}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_trace_runtimes_lie_between_one_slot_and_the_limit(family):
    inherited = 0
    for seed in SEEDS:
        sc = generate(family, seed)
        runtimes = draw_runtimes(sc, "trace", seed)
        assert set(runtimes) == {job.id for job in sc.jobs}
        for job in sc.jobs:
            assert type(runtimes[job.id]) is int
            assert 1 <= runtimes[job.id] <= job.duration, job
            inherited += job.running_on is not None
    if FAMILIES[family].inherited[1] > 0:
        assert inherited > 0  # the families that draw inherited jobs had some, and they were drawn too


def test_some_jobs_end_early_and_some_reach_their_limit():
    sc = generate("scale-64x30", 2026)
    runtimes = draw_runtimes(sc, "trace", 11)
    long_jobs = [job for job in sc.jobs if job.duration >= 4]
    assert any(runtimes[j.id] < j.duration for j in long_jobs)
    assert any(runtimes[j.id] == j.duration for j in long_jobs)


def test_the_same_seed_gives_the_same_draws_and_another_seed_others():
    sc = generate("scale-64x30", 2026)
    assert draw_runtimes(sc, "trace", 4) == draw_runtimes(sc, "trace", 4)
    assert draw_runtimes(sc, "trace", 4) != draw_runtimes(sc, "trace", 5)


def test_adding_removing_or_reordering_jobs_leaves_the_others_draws_alone():
    sc = generate("mixed-control", 2026)
    before = draw_runtimes(sc, "trace", 9)
    extra = Job(id="late-arrival", type=JobType.TRAINING, gpus=1, duration=12)
    grown = replace(sc, jobs=(*sc.jobs, extra))
    after = draw_runtimes(grown, "trace", 9)
    assert {k: v for k, v in after.items() if k != "late-arrival"} == before
    shrunk = replace(sc, jobs=tuple(reversed(sc.jobs[1:])))
    assert draw_runtimes(shrunk, "trace", 9) == {k: v for k, v in before.items() if k != sc.jobs[0].id}


def test_an_inherited_job_is_drawn_on_what_remains_of_its_limit():
    # Two jobs with the same id and remaining limit, one inherited: the same draw, bounded by that remainder.
    plain = make_scenario(jobs=[{"id": "a", "type": "training", "gpus": 2, "duration": 5}])
    held = make_scenario(jobs=[{"id": "a", "type": "training", "gpus": 2, "duration": 5, "running_on": [0, 1]}])
    for seed in range(30):
        r = draw_runtimes(held, "trace", seed)["a"]
        assert r == draw_runtimes(plain, "trace", seed)["a"]
        assert 1 <= r <= 5


def test_a_job_draw_does_not_depend_on_the_process_hash_salt():
    code = "from agents.live.runtimes import job_uniform; print(repr(job_uniform(3, 'train-1')))"
    outs = set()
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=HANG_GUARD_S
        )
        outs.add(done.stdout.strip())
    assert outs == {repr(job_uniform(3, "train-1"))}
    assert 0.0 <= job_uniform(3, "train-1") < 1.0
    assert job_uniform(3, "train-1") != job_uniform(3, "train-2") != job_uniform(4, "train-2")


def test_the_mean_runtime_over_many_jobs_matches_the_table():
    # 4,000 jobs with a 10-slot limit, seed fixed: the mean slot count is expected_runtime(10) within a tolerance
    # of about 4 standard errors (sd of the runtime about 3.6 slots: 4 x 3.6 / sqrt(4000) = 0.23).
    sc = make_scenario(jobs=_jobs(4000, 10))
    runtimes = np.array(list(draw_runtimes(sc, "trace", 2026).values()))
    assert runtimes.mean() == pytest.approx(TRACE_RUNTIMES.expected_runtime(10), abs=0.25)
    p = TRACE_RUNTIMES.runtime_distribution(10)
    assert (runtimes == 10).mean() == pytest.approx(p[-1], abs=0.03)


def test_the_mean_sampled_ratio_matches_the_table():
    ratios = TRACE_RUNTIMES.sample_ratio(np.random.default_rng(2026), 200_000)
    assert ratios.shape == (200_000,)
    assert ((ratios > 0) & (ratios <= 1)).all()
    # sd of the ratio about 0.4: 4 standard errors at n = 200,000 are 0.0036
    assert ratios.mean() == pytest.approx(TRACE_RUNTIMES.mean_ratio(), abs=0.004)
    assert (ratios == 1.0).mean() == pytest.approx(TRACE_RUNTIMES.at_limit, abs=0.004)


def test_the_shipped_table_has_the_documented_figures():
    d = TRACE_RUNTIMES
    assert d.at_limit == pytest.approx(0.221, abs=5e-4)
    assert d.mean_ratio() == pytest.approx(0.603, abs=5e-4)
    assert float(d.ratio_cdf(np.nextafter(0.5, 0))) == pytest.approx(0.372, abs=5e-4)  # share below 0.5
    assert float(d.ratio_quantile(np.array(0.5))) == pytest.approx(0.748, abs=5e-4)  # median
    assert len(d.quantiles) == 51
    assert "KTH" in d.source


# ----------------------------------------------------------------------------- hand-worked distributions


def test_two_point_distribution_by_hand():
    d = TWO_POINT
    np.testing.assert_allclose(d.ratio_quantile(np.array([0.0, 0.49, 0.5, 1.0])), [0.5, 0.5, 1.0, 1.0])
    assert d.mean_ratio() == pytest.approx(0.75)
    # limit 4: ceil(0.5 x 4) = 2 slots with probability 0.5, 4 slots with probability 0.5
    assert d.runtime_slots(4, 0.2) == 2
    assert d.runtime_slots(4, 0.7) == 4
    np.testing.assert_allclose(d.runtime_distribution(4), [0.0, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(d.remaining_distribution(4, 0), [0.0, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(d.remaining_distribution(4, 1), [0.5, 0.0, 0.5])  # r = 2, 3, 4
    # it has run 2 slots and not ended: it is the long kind, 2 slots remain for sure
    np.testing.assert_allclose(d.remaining_distribution(4, 2), [0.0, 1.0])
    np.testing.assert_allclose(d.remaining_distribution(4, 3), [1.0])
    rng = np.random.default_rng(0)
    assert {d.sample_remaining(4, 2, rng) for _ in range(50)} == {2}
    assert {d.sample_remaining(4, 0, rng) for _ in range(200)} == {2, 4}
    assert d.expected_runtime(4) == pytest.approx(3.0)
    # limit 3: ceil(1.5) = 2 slots or 3 slots
    np.testing.assert_allclose(d.runtime_distribution(3), [0.0, 0.5, 0.5])


def test_uniform_distribution_by_hand():
    d = UNIFORM  # ratio uniform on [0.25, 1]: P(ratio <= x) = (x - 0.25) / 0.75
    assert d.mean_ratio() == pytest.approx(0.625)
    np.testing.assert_allclose(d.ratio_cdf(np.array([0.1, 0.25, 0.625, 1.0, 2.0])), [0.0, 0.0, 0.5, 1.0, 1.0])
    # limit 2: one slot when ratio <= 0.5, probability 1/3
    np.testing.assert_allclose(d.runtime_distribution(2), [1 / 3, 2 / 3])
    # limit 4: r = 1 when ratio <= 1/4 (probability 0), r = 2 up to 1/2 (1/3), r = 3 up to 3/4 (1/3), r = 4 (1/3)
    np.testing.assert_allclose(d.runtime_distribution(4), [0.0, 1 / 3, 1 / 3, 1 / 3], atol=1e-8)  # 1e-9 slack
    np.testing.assert_allclose(d.remaining_distribution(4, 2), [0.5, 0.5])
    assert d.expected_runtime(4) == pytest.approx(3.0)
    assert d.runtime_slots(4, 0.5) == 3  # ratio 0.625: ceil(2.5)


def test_discretisation_counts_a_whole_product_as_whole():
    d = RuntimeDistribution(at_limit=0.0, quantiles=(0.28, 0.28))
    assert 0.28 * 25 > 7  # 7.000000000000001 in floating point
    assert d.runtime_slots(25, 0.5) == 7
    np.testing.assert_allclose(d.runtime_distribution(25)[6], 1.0)


def test_a_one_slot_limit_always_runs_one_slot():
    for d in (TRACE_RUNTIMES, TWO_POINT, UNIFORM):
        assert d.runtime_slots(1, 0.0) == d.runtime_slots(1, 0.999) == 1
        np.testing.assert_allclose(d.remaining_distribution(1, 0), [1.0])
        assert d.expected_runtime(1) == 1.0


def test_a_job_that_outlived_the_table_runs_to_its_limit():
    short = RuntimeDistribution(at_limit=0.0, quantiles=(0.1, 0.2))  # every job ends within 20 % of its limit
    np.testing.assert_allclose(short.remaining_distribution(10, 5), [0, 0, 0, 0, 1.0])
    assert short.sample_remaining(10, 5, np.random.default_rng(1)) == 5


# ----------------------------------------------------------------------------- properties

distributions = st.builds(
    lambda at_limit, values: RuntimeDistribution(at_limit=at_limit, quantiles=tuple(sorted(values))),
    st.floats(0.0, 1.0),
    st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=12),
)
ANY = st.one_of(st.just(TRACE_RUNTIMES), st.just(TWO_POINT), st.just(UNIFORM), distributions)


@st.composite
def limit_elapsed(draw):
    limit = draw(st.integers(1, 400))
    return limit, draw(st.integers(0, limit - 1))


@given(ANY, limit_elapsed(), st.integers(0, 2**32 - 1))
def test_remaining_is_a_distribution_over_the_slots_left(d, le, seed):
    limit, elapsed = le
    p = d.remaining_distribution(limit, elapsed)
    assert p.shape == (limit - elapsed,)
    assert (p >= 0).all()
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    tail = d.runtime_distribution(limit)[elapsed:]
    if tail.sum() > 1e-6:  # conditioning: the unconditional law past `elapsed`, renormalised
        np.testing.assert_allclose(p, tail / tail.sum(), atol=1e-9)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        left = d.sample_remaining(limit, elapsed, rng)
        assert type(left) is int
        assert 1 <= left <= limit - elapsed
        assert p[left - 1] > 0
    assert 1.0 <= d.expected_runtime(limit) <= limit + 1e-9


@given(ANY, st.integers(1, 400), st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20))
def test_runtime_slots_is_monotone_and_bounded(d, limit, us):
    slots = [d.runtime_slots(limit, u) for u in sorted(us)]
    assert all(1 <= r <= limit for r in slots)
    assert slots == sorted(slots)


@given(ANY, st.integers(1, 60))
def test_runtime_slots_has_the_law_of_runtime_distribution(d, limit):
    # {u : runtime_slots(limit, u) <= r} is [0, F(r)]: just below F(r) it is at most r, just above it more.
    cdf = np.cumsum(d.runtime_distribution(limit))
    for r in range(1, limit):
        f = float(cdf[r - 1])
        if f > 1e-5:
            assert d.runtime_slots(limit, f - 1e-6) <= r
        if f < 1 - 1e-5:
            assert d.runtime_slots(limit, f + 1e-6) > r


@given(ANY, st.lists(st.floats(0.0, 1.0), min_size=1, max_size=20))
def test_ratio_quantile_and_cdf_are_inverse(d, us):
    u = np.array(us)
    x = d.ratio_quantile(u)
    assert ((x > 0) & (x <= 1)).all()
    assert (d.ratio_cdf(x) >= u - 1e-9).all()  # F(Q(u)) >= u


# ----------------------------------------------------------------------------- bad input


def test_bad_input_names_the_field():
    sc = make_scenario(jobs=_jobs(2, 3))
    with pytest.raises(ValueError, match="runtime model"):
        draw_runtimes(sc, "lognormal", 0)
    with pytest.raises(ValueError, match="seed"):
        draw_runtimes(sc, "trace", -1)
    d = TRACE_RUNTIMES
    for elapsed in (4, 5, -1):
        with pytest.raises(ValueError, match="elapsed"):
            d.remaining_distribution(4, elapsed)
        with pytest.raises(ValueError, match="elapsed"):
            d.sample_remaining(4, elapsed, np.random.default_rng(0))
    with pytest.raises(ValueError, match="limit"):
        d.runtime_slots(0, 0.5)
    with pytest.raises(ValueError, match="limit"):
        d.expected_runtime(0)
    with pytest.raises(ValueError, match="u must"):
        d.ratio_quantile(np.array([1.5]))
    with pytest.raises(ValueError, match="u must"):
        d.runtime_slots(3, -0.1)
    with pytest.raises(ValueError, match="at_limit"):
        RuntimeDistribution(at_limit=1.5, quantiles=(0.5, 0.6))
    with pytest.raises(ValueError, match="quantiles"):
        RuntimeDistribution(at_limit=0.1, quantiles=(0.6, 0.5))
    with pytest.raises(ValueError, match="quantiles"):
        RuntimeDistribution(at_limit=0.1, quantiles=(0.0, 0.5))
    with pytest.raises(ValueError, match="quantiles"):
        RuntimeDistribution(at_limit=0.1, quantiles=(0.5,))
