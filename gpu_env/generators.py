"""Seeded generators for the seven scenario families of SPEC section 5.

Each family is a :class:`Family`: cluster shape, real-time apps with day-shaped
demand, and a job mix. :func:`generate` draws one instance from a family and a
seed; the same seed gives the same scenario. ``configs/scenarios/`` holds the
seven benchmark instances drawn with :data:`BENCHMARK_SEEDS`.

>>> from gpu_env.generators import generate
>>> generate("training-heavy", seed=0).gpus
8
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpu_env import rules
from gpu_env.scenario import App, DrawError, Job, JobType, Scenario


@dataclass(frozen=True)
class AppShape:
    """A day-shaped demand curve: a trough, one or two peaks, as fractions of the cluster."""

    name: str
    trough: float  # demand at night, fraction of G
    peak: float  # demand at the peak, fraction of G
    peak_hours: tuple[float, ...]  # hours of the peaks
    width: float  # hours: the spread of each peak
    ramp: float  # R as a fraction of G (at least 1 GPU)


@dataclass(frozen=True)
class Family:
    """How one family draws scenarios.

    Attributes:
        name: The family name (SPEC section 5).
        gpus: G of the benchmark instance.
        node_size: GPUs per node.
        slots: T.
        decay: Per-slot decay of job value.
        apps: The real-time apps.
        jobs_per_gpu: Jobs drawn per GPU of the cluster (scaled with G).
        type_mix: Probabilities of training, batch_inference, quantization.
        sizes: Job sizes as multiples of node_size (powers of two), with weights.
        durations: Range (low, high) of durations per type, in slots.
        release_span: Fraction of the horizon over which jobs are released.
        priorities: Priority choices and weights; one value makes them uniform.
        value_fraction: Share of jobs that state a total ``value`` instead of a priority.
        deadline_fraction: Share of jobs with a deadline.
        inherited: Range of running jobs inherited at slot 0.
        penalty: Range of the real-time penalty as a multiple of the mean priority.
        inversion: Long low-priority jobs first, valuable short ones just after.
    """

    name: str
    gpus: int
    node_size: int
    slots: int = 24
    decay: float = 0.99
    apps: tuple[AppShape, ...] = ()
    jobs_per_gpu: float = 1.0
    type_mix: tuple[float, float, float] = (0.4, 0.35, 0.25)
    sizes: tuple[tuple[float, float], ...] = ((1 / 8, 0.3), (1 / 4, 0.3), (1 / 2, 0.25), (1.0, 0.15))
    durations: dict[JobType, tuple[int, int]] | None = None
    release_span: float = 0.5
    priorities: tuple[tuple[float, float], ...] = ((1, 0.35), (2, 0.3), (3, 0.2), (5, 0.15))
    value_fraction: float = 0.0
    deadline_fraction: float = 0.2
    inherited: tuple[int, int] = (1, 2)
    penalty: tuple[float, float] = (5.0, 10.0)
    inversion: bool = False

    def duration_range(self, kind: JobType) -> tuple[int, int]:
        """Inclusive duration range of a job type."""
        table = self.durations or _DEFAULT_DURATIONS
        return table[kind]


_DEFAULT_DURATIONS = {
    JobType.TRAINING: (6, 14),
    JobType.BATCH_INFERENCE: (2, 6),
    JobType.QUANTIZATION: (1, 4),
}

_CHAT = AppShape("chat", trough=0.12, peak=0.45, peak_hours=(13.0,), width=4.0, ramp=0.125)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "mixed-control",
            gpus=16,
            node_size=8,
            apps=(_CHAT,),
            jobs_per_gpu=1.3,
            value_fraction=0.25,
            deadline_fraction=0.2,
        ),
        Family(
            "training-heavy",
            gpus=8,
            node_size=8,
            apps=(AppShape("assistant", trough=0.125, peak=0.5, peak_hours=(14.0,), width=3.5, ramp=0.25),),
            jobs_per_gpu=1.1,
            type_mix=(0.8, 0.1, 0.1),
            sizes=((1 / 8, 0.2), (1 / 4, 0.35), (1 / 2, 0.3), (1.0, 0.15)),
            durations={JobType.TRAINING: (4, 12), JobType.BATCH_INFERENCE: (2, 5), JobType.QUANTIZATION: (1, 3)},
            priorities=((1, 0.4), (2, 0.25), (4, 0.2), (8, 0.15)),
            inherited=(1, 1),
        ),
        Family(
            "realtime-diurnal",
            gpus=32,
            node_size=8,
            apps=(
                AppShape("chat", trough=0.08, peak=0.35, peak_hours=(11.0,), width=3.0, ramp=0.0625),
                AppShape("search", trough=0.06, peak=0.3, peak_hours=(20.0,), width=2.5, ramp=0.0625),
            ),
            jobs_per_gpu=0.6,
            release_span=0.6,
            inherited=(1, 3),
        ),
        Family(
            "batch-fragmentation",
            gpus=16,
            node_size=8,
            apps=(AppShape("api", trough=0.06, peak=0.2, peak_hours=(15.0,), width=4.0, ramp=0.125),),
            jobs_per_gpu=1.6,
            type_mix=(0.15, 0.5, 0.35),
            sizes=((1 / 8, 0.2), (1 / 4, 0.25), (1 / 2, 0.3), (1.0, 0.2), (2.0, 0.05)),
            durations={JobType.TRAINING: (4, 10), JobType.BATCH_INFERENCE: (2, 8), JobType.QUANTIZATION: (1, 5)},
            release_span=0.4,
            inherited=(1, 3),
        ),
        Family(
            "priority-inversion",
            gpus=24,
            node_size=8,
            apps=(AppShape("chat", trough=0.08, peak=0.3, peak_hours=(12.0,), width=4.0, ramp=0.125),),
            jobs_per_gpu=0.75,
            priorities=((1, 0.5), (8, 0.5)),
            inversion=True,
            deadline_fraction=0.15,
        ),
        Family(
            "uniform-priority",
            gpus=16,
            node_size=8,
            apps=(_CHAT,),
            jobs_per_gpu=1.0,
            priorities=((1, 1.0),),
            deadline_fraction=0.15,
        ),
        Family(
            "scale-64x30",
            gpus=64,
            node_size=8,
            apps=(
                AppShape("chat", trough=0.06, peak=0.22, peak_hours=(13.0,), width=4.0, ramp=0.0625),
                AppShape("batch-api", trough=0.04, peak=0.12, peak_hours=(19.0,), width=3.0, ramp=0.0625),
            ),
            jobs_per_gpu=30 / 64,  # 30 jobs at 64 GPUs
            sizes=((1 / 8, 0.2), (1 / 4, 0.25), (1 / 2, 0.25), (1.0, 0.25), (2.0, 0.05)),
            release_span=0.5,
            inherited=(2, 3),
        ),
    )
}

# The seeds that draw configs/scenarios/<family>.yaml.
BENCHMARK_SEEDS: dict[str, int] = dict.fromkeys(FAMILIES, 2026)


def generate(
    family: str | Family,
    seed: int,
    *,
    gpus: int | None = None,
    num_jobs: int | None = None,
    name: str | None = None,
) -> Scenario:
    """Draw one scenario of a family.

    Args:
        family: A family name of :data:`FAMILIES` or a :class:`Family`.
        seed: Seed of every random draw; the same seed gives the same scenario.
        gpus: Cluster size instead of the family's (a multiple of its node size,
            or smaller than one node).
        num_jobs: Number of jobs, inherited ones included, instead of ``jobs_per_gpu * G``.
        name: Scenario name; default the family name.

    Raises:
        KeyError: Unknown family name.
        DrawError: Sizes the family cannot draw.
    """
    if isinstance(family, str) and family.startswith("trace-"):  # drawn from real traces: gpu_env/traces.py
        from gpu_env import traces

        return traces.generate(family, seed, gpus=gpus, num_jobs=num_jobs, name=name)
    fam = FAMILIES[family] if isinstance(family, str) else family
    if gpus is not None:
        if gpus < 1:
            raise DrawError(f"gpus must be positive, got {gpus}")
        fam = replace(fam, gpus=gpus, node_size=min(fam.node_size, gpus))
    rng = np.random.default_rng(seed)
    G, T = fam.gpus, fam.slots
    n_jobs = num_jobs if num_jobs is not None else max(1, round(fam.jobs_per_gpu * G))

    apps = tuple(_draw_app(rng, shape, G, T, fam.priorities, fam.penalty) for shape in fam.apps)
    jobs = _draw_jobs(rng, fam, n_jobs, apps)
    return Scenario(
        name=name or fam.name,
        gpus=G,
        slots=T,
        node_size=fam.node_size,
        slot_minutes=60.0,
        decay=fam.decay,
        apps=apps,
        jobs=jobs,
        family=fam.name,
        seed=seed,
    )


def _draw_app(
    rng: np.random.Generator,
    shape: AppShape,
    G: int,
    T: int,
    priorities: tuple[tuple[float, float], ...],
    penalty: tuple[float, float],
) -> App:
    hours = np.arange(T, dtype=np.float64)
    shift = rng.uniform(-1.0, 1.0)
    bump = np.zeros(T)
    for peak_hour in shape.peak_hours:
        dist = np.abs(hours - (peak_hour + shift))
        dist = np.minimum(dist, 24.0 - dist)  # a day wraps around
        bump = np.maximum(bump, np.exp(-0.5 * (dist / shape.width) ** 2))
    scale = rng.uniform(0.9, 1.1)
    level = shape.trough + (shape.peak - shape.trough) * bump
    noise = rng.normal(0.0, 0.02, T)
    demand = np.clip(np.round((level * scale + noise) * G), 1 if G >= 8 else 0, G).astype(np.int64)
    ramp = max(1, round(shape.ramp * G))
    values = np.array([p for p, _ in priorities])
    weights = np.array([w for _, w in priorities])
    mean_priority = float((values * weights).sum() / weights.sum())
    p = round(rng.uniform(*penalty) * mean_priority, 1)
    return App(shape.name, tuple(int(x) for x in demand), ramp, int(demand[0]), p)


def _choice(rng: np.random.Generator, table: tuple[tuple[float, float], ...]) -> float:
    values = [v for v, _ in table]
    weights = np.array([w for _, w in table], dtype=np.float64)
    return values[int(rng.choice(len(values), p=weights / weights.sum()))]


def _job_size(rng: np.random.Generator, fam: Family, G: int) -> int:
    while True:
        k = round(_choice(rng, fam.sizes) * fam.node_size)
        k = max(1, 1 << (max(k, 1).bit_length() - 1))  # a power of two
        if k <= G and rules.allowed_block_starts(k, G, fam.node_size).size:
            return k


def _draw_jobs(rng: np.random.Generator, fam: Family, n_jobs: int, apps: tuple[App, ...]) -> tuple[Job, ...]:
    G, T = fam.gpus, fam.slots
    kinds = list(JobType)
    jobs: list[Job] = []
    counters = dict.fromkeys(kinds, 0)

    # Inherited work: running jobs on disjoint blocks that leave room for the real-time peaks.
    room = G - sum(max(app.demand) for app in apps)
    owner = np.zeros(G, dtype=bool)
    n_inherited = int(rng.integers(fam.inherited[0], fam.inherited[1] + 1))
    for _ in range(n_inherited):
        for _attempt in range(20):
            k = _job_size(rng, fam, G)
            if k > room:
                continue
            starts = [a for a in rules.allowed_block_starts(k, G, fam.node_size) if not owner[a : a + k].any()]
            if not starts:
                continue
            a = int(rng.choice(starts))
            owner[a : a + k] = True
            room -= k
            kind = kinds[int(rng.choice(3, p=fam.type_mix))]
            lo, hi = fam.duration_range(kind)
            counters[kind] += 1
            jobs.append(
                Job(
                    id=f"{_PREFIX[kind]}-run{counters[kind]}",
                    type=kind,
                    gpus=k,
                    duration=int(rng.integers(max(1, lo // 2), hi + 1)),
                    priority=float(_choice(rng, fam.priorities)),
                    running_on=tuple(range(a, a + k)),
                )
            )
            break

    # Pending jobs, in arrival order.
    n_jobs = max(0, n_jobs - len(jobs))
    latest_release = max(0, int(fam.release_span * T) - 1)
    pending: list[Job] = []
    for i in range(n_jobs):
        kind = kinds[int(rng.choice(3, p=fam.type_mix))]
        k = _job_size(rng, fam, G)
        lo, hi = fam.duration_range(kind)
        d = int(rng.integers(lo, hi + 1))
        priority = float(_choice(rng, fam.priorities))
        release = int(rng.integers(0, latest_release + 1))
        if fam.inversion:
            low_first = i < n_jobs // 2
            priority = min(v for v, _ in fam.priorities) if low_first else max(v for v, _ in fam.priorities)
            if low_first:
                kind = JobType.TRAINING
                d = int(rng.integers(10, 17))
                release = int(rng.integers(0, 2))
            else:
                d = int(rng.integers(2, 7))
                release = int(rng.integers(1, 4))
        deadline = None
        if rng.random() < fam.deadline_fraction:
            deadline = min(T, release + d + int(rng.integers(0, 8)))
            if deadline < release + d:
                deadline = None
        value = None
        if rng.random() < fam.value_fraction:
            value = float(round(priority * k * d * rng.uniform(0.8, 1.25), 1))
        counters[kind] += 1
        pending.append(
            Job(
                id=f"{_PREFIX[kind]}-{counters[kind]}",
                type=kind,
                gpus=k,
                duration=d,
                release=release,
                priority=priority,
                deadline=deadline,
                value=value,
            )
        )
    pending.sort(key=lambda job: job.release)  # the file lists jobs in arrival order
    return tuple(jobs + pending)


_PREFIX = {JobType.TRAINING: "train", JobType.BATCH_INFERENCE: "infer", JobType.QUANTIZATION: "quant"}
