"""Where an environment's scenarios come from: one fixed scenario, or a fresh draw at every reset.

>>> import numpy as np
>>> sampler = ScenarioSampler.from_spec({"families": {"training-heavy": 1, "mixed-control": 3}, "gpus": [8, 16]})
>>> sampler.draw(np.random.default_rng(0)).family in {"training-heavy", "mixed-control"}
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_env.generators import FAMILIES, generate
from gpu_env.scenario import Scenario, load_scenario, scenario_from_dict


@dataclass(frozen=True)
class ScenarioSampler:
    """Draws one scenario per reset: a family by weight, then a cluster size and a job count.

    Attributes:
        families: (family name, weight) pairs; weights need not add up to 1.
        gpus: Inclusive range of cluster sizes, or None for each family's own.
            A draw of at least one node is rounded down to whole nodes.
        jobs: Inclusive range of job counts (inherited ones included), or None
            for the family's jobs per GPU.
    """

    families: tuple[tuple[str, float], ...]
    gpus: tuple[int, int] | None = None
    jobs: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.families:
            raise ValueError("scenario: expected at least one generator family")
        for name, weight in self.families:
            if name not in FAMILIES:
                raise ValueError(f"scenario: unknown family {name!r} (expected one of: {', '.join(FAMILIES)})")
            if not weight > 0:
                raise ValueError(f"scenario: family {name!r} needs a positive weight, got {weight}")
        for field, bounds in (("gpus", self.gpus), ("jobs", self.jobs)):
            if bounds is not None and not 1 <= bounds[0] <= bounds[1]:
                raise ValueError(f"scenario: {field} range must be 1 <= low <= high, got {list(bounds)}")

    @classmethod
    def from_spec(cls, spec: str | Sequence[Any] | Mapping[str, Any]) -> ScenarioSampler:
        """A sampler from a family name, a list of names or (name, weight) pairs, or a mapping.

        A mapping holds ``families`` (a name, a list, or a mapping name -> weight)
        and optionally ``gpus`` and ``jobs`` (an int or a ``[low, high]`` range).

        Raises:
            ValueError: An unknown family, a non-positive weight or a bad range.
        """
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"families", "family", "gpus", "jobs"}
            if unknown:
                raise ValueError(f"scenario: unknown sampler keys {sorted(unknown)} (expected families, gpus, jobs)")
            families = spec.get("families", spec.get("family"))
            if families is None:
                raise ValueError("scenario: a sampler needs 'families'")
            return cls(_families(families), _range(spec.get("gpus"), "gpus"), _range(spec.get("jobs"), "jobs"))
        return cls(_families(spec))

    def draw(self, rng: np.random.Generator) -> Scenario:
        """One scenario; every random draw comes from ``rng``."""
        weights = np.array([w for _, w in self.families], dtype=np.float64)
        name = self.families[int(rng.choice(len(self.families), p=weights / weights.sum()))][0]
        family = FAMILIES[name]
        gpus = None
        if self.gpus is not None:
            gpus = int(rng.integers(self.gpus[0], self.gpus[1] + 1))
            if gpus >= family.node_size:
                gpus -= gpus % family.node_size
        jobs = None if self.jobs is None else int(rng.integers(self.jobs[0], self.jobs[1] + 1))
        return generate(name, int(rng.integers(2**31 - 1)), gpus=gpus, num_jobs=jobs)

    def limits(self) -> dict[str, int]:
        """The largest sizes a draw can have: max_gpus, max_jobs, max_slots, max_apps."""
        fams = [FAMILIES[name] for name, _ in self.families]
        gpus = max(self.gpus[1] if self.gpus else fam.gpus for fam in fams)
        if self.jobs is not None:
            jobs = self.jobs[1]
        else:
            jobs = max(max(1, round(fam.jobs_per_gpu * (self.gpus[1] if self.gpus else fam.gpus))) for fam in fams)
        return {
            "max_gpus": gpus,
            "max_jobs": jobs,
            "max_slots": max(fam.slots for fam in fams),
            "max_apps": max(len(fam.apps) for fam in fams),
        }


def _families(value: Any) -> tuple[tuple[str, float], ...]:
    if isinstance(value, str):
        return ((value, 1.0),)
    if isinstance(value, Mapping):
        return tuple((str(k), float(v)) for k, v in value.items())
    if isinstance(value, Sequence):
        out = []
        for item in value:
            if isinstance(item, str):
                out.append((item, 1.0))
            elif isinstance(item, Sequence) and len(item) == 2:
                out.append((str(item[0]), float(item[1])))
            else:
                raise ValueError(f"scenario: expected a family name or a (name, weight) pair, got {item!r}")
        return tuple(out)
    raise ValueError(f"scenario: expected family names, got {value!r}")


def _range(value: Any, field: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    raise ValueError(f"scenario: {field} must be an int or a [low, high] range, got {value!r}")


def resolve_source(spec: Any) -> Scenario | ScenarioSampler:
    """What ``scenario=`` of the environment names.

    Args:
        spec: A :class:`Scenario`; a :class:`ScenarioSampler`; a path to a scenario
            file; a family name (a string that is not an existing file); a list of
            family names or (name, weight) pairs; a mapping with ``families``
            (a sampler) or with ``cluster`` (a scenario document).

    Raises:
        ValueError: Nothing usable was given.
        gpu_env.scenario.ScenarioError: A scenario file or document breaks the format.
    """
    if isinstance(spec, Scenario | ScenarioSampler):
        return spec
    if isinstance(spec, os.PathLike):
        return load_scenario(spec)
    if isinstance(spec, str):
        if spec in FAMILIES and not Path(spec).exists():
            return ScenarioSampler.from_spec(spec)
        return load_scenario(spec)
    if isinstance(spec, Mapping):
        if "cluster" in spec:
            return scenario_from_dict(spec)
        return ScenarioSampler.from_spec(spec)
    if isinstance(spec, Sequence):
        return ScenarioSampler.from_spec(spec)
    raise ValueError(
        f"scenario: expected a path, a Scenario, a family name, a list of families or a sampler, got {spec!r}"
    )
