"""The cache of CP-SAT optima: tiny builds load back, validate, are worth what they say, and repeat byte for byte.

Every build here runs under a deterministic-time limit with a wall limit that never binds, so no
test depends on the machine's speed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpu_env.metrics import compute_metrics
from gpu_env.validation import validate
from lab.training import optima

FAMILIES = ("training-heavy", "scale-64x30")
DTIME = 0.5


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny cache: 2 families x 1 instance."""
    path = tmp_path_factory.mktemp("optima") / "optima.json.gz"
    optima.write(optima.build(FAMILIES, per_family=1, deterministic_time=DTIME), path)
    return path


def test_tiny_cache_loads_validates_and_keeps_its_objective(built: Path) -> None:
    records = optima.load_optima(built)
    assert [(r.family, r.seed) for r in records] == [("training-heavy", 51000), ("scale-64x30", 56000)]
    for record in records:
        sc = record.scenario()
        assert len(sc.jobs) == record.num_jobs and sc.gpus == record.gpus
        plan = record.plan(sc)
        assert validate(sc, plan) == []
        assert compute_metrics(sc, plan).objective == pytest.approx(record.objective, abs=1e-6)
        assert record.bound >= record.objective - 1e-6
        inherited = {i for i, job in enumerate(sc.jobs) if job.running_on is not None}
        assert record.placements.shape[1] == 3 and not inherited & set(record.placements[:, 0].tolist())
    document = optima.read_document(built)
    assert document["counts"]["instances"] == 2
    assert document["cpsat"]["deterministic_time"] == DTIME and document["cpsat"]["workers"] == 1
    assert all(seed >= optima.SEED_BASE for seed in (r.seed for r in records))
    assert [r.to_dict() for r in optima.check(built, sample=0)] == [r.to_dict() for r in records]


def test_same_arguments_give_identical_bytes(built: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.json.gz"
    optima.write(optima.build(FAMILIES, per_family=1, deterministic_time=DTIME), again)
    assert again.read_bytes() == built.read_bytes()
    assert optima.main(["--check", "--out", str(again), "--sample", "0"]) == 0


def _rewrite(source: Path, target: Path, **changes: object) -> Path:
    document = json.loads(gzip.decompress(source.read_bytes()))
    document.update(changes)
    target.write_bytes(gzip.compress(json.dumps(document).encode()))
    return target


def test_wrong_format_field_names_the_file_and_field(built: Path, tmp_path: Path) -> None:
    bad = _rewrite(built, tmp_path / "bad.json.gz", format="something-else/9")
    with pytest.raises(optima.OptimaError, match=r"bad\.json\.gz: field 'format'"):
        optima.load_optima(bad)
    assert optima.main(["--check", "--out", str(bad)]) == 2


def test_truncated_gzip_names_the_file(built: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.json.gz"
    data = built.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(optima.OptimaError, match=r"cut\.json\.gz: not a complete gzip file"):
        optima.load_optima(cut)


def test_bad_record_field_is_named(built: Path, tmp_path: Path) -> None:
    document = json.loads(gzip.decompress(built.read_bytes()))
    document["records"][1]["placements"] = [[1, 2]]
    bad = _rewrite(built, tmp_path / "rows.json.gz", records=document["records"])
    with pytest.raises(optima.OptimaError, match=r"rows\.json\.gz: records\[1\]\.placements"):
        optima.load_optima(bad)


def test_a_wrong_stored_objective_fails_the_check(built: Path, tmp_path: Path) -> None:
    document = json.loads(gzip.decompress(built.read_bytes()))
    document["records"][0]["objective"] += 1.0
    bad = _rewrite(built, tmp_path / "worth.json.gz", records=document["records"])
    with pytest.raises(RuntimeError, match="worth"):
        optima.check(bad, sample=0)


def test_draws_are_deterministic_and_in_their_own_seed_range() -> None:
    first = optima.draws(tuple(optima.FAMILIES), 4)
    assert first == optima.draws(tuple(optima.FAMILIES), 4)
    seeds = [d.seed for d in first]
    assert len(set(seeds)) == len(seeds) and min(seeds) >= 50000 and max(seeds) < 57000
    for d in first:
        assert 8 <= d.gpus <= 64 and d.gpus % 8 == 0 and d.gpus in optima.family_sizes(d.family)
    with pytest.raises(ValueError, match="per_family"):
        optima.draws(("training-heavy",), 0)
