"""Named slices: committed ids, recomputable from the data, disjoint from the demo pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DEMO_ROOT

from sqlweave import data


def test_committed_slices_load_without_benchmark_data() -> None:
    assert len(data.slice_ids("spider-dev-200")) == 200
    assert len(data.slice_ids("bird-52")) == 52
    assert len(data.slice_ids("spider-train-val")) == 200
    assert len(set(data.slice_ids("spider-train-select"))) == sum(data.TRAIN_SELECT_SIZE) == 1600
    assert data.demo_pool_exclusions()  # the held-out validation databases


def test_unknown_slice_is_a_clear_error() -> None:
    with pytest.raises(data.DataError, match="unknown slice"):
        data.slice_ids("spider-dev-17")


@pytest.mark.parametrize("name", list(data.SLICES))
def test_committed_ids_equal_the_recomputed_ones(name: str, data_root: Path) -> None:
    assert data.slice_ids(name) == data.build_slice_ids(name, root=data_root)


def test_spider_dev_200_is_a_plain_random_sample(data_root: Path) -> None:
    examples = data.load_slice("spider-dev-200", root=data_root)
    assert len({ex.question_id for ex in examples}) == 200
    assert all(ex.split == "dev" for ex in examples)
    # Not stratified: the hardness mix is whatever seed 0 drew, every level present.
    assert {ex.difficulty for ex in examples} == {"easy", "medium", "hard", "extra"}


def test_validation_databases_are_unseen_by_the_default_pool(data_root: Path) -> None:
    from sqlweave.programs.stages.pools import default_pool

    val = data.load_slice("spider-train-val", root=data_root)
    held = data.demo_pool_exclusions()
    assert {ex.db_id for ex in val} <= held
    pool = default_pool("spider", root=data_root)
    assert pool and not {ex.db_id for ex in pool} & held
    assert not {ex.question_id for ex in pool} & {ex.question_id for ex in val}


def test_the_selector_fitting_slice_keeps_off_the_validation_databases(data_root: Path) -> None:
    """``spider-train-select`` fits the ``ranked`` selector; a selector is chosen on
    ``spider-train-val``, so the two share no database (and no question)."""
    fitting = data.load_slice("spider-train-select", root=data_root)
    assert all(ex.split == "train" for ex in fitting)
    assert not {ex.db_id for ex in fitting} & data.demo_pool_exclusions()
    assert len({ex.db_id for ex in fitting}) > 100  # many databases, not a few large ones


def test_a_grown_fitting_slice_keeps_every_earlier_draw(
    data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spider-train-select`` grew by draws (400, 600, 600): the questions of each earlier size
    are all still in it, so a run made on the smaller slice resumes on the grown one."""
    grown = set(data.build_slice_ids("spider-train-select", root=data_root))
    assert grown == set(data.slice_ids("spider-train-select"))
    for sizes in ((400,), (400, 600)):
        monkeypatch.setattr(data, "TRAIN_SELECT_SIZE", sizes)
        earlier = data.build_slice_ids("spider-train-select", root=data_root)
        assert len(earlier) == sum(sizes) and set(earlier) <= grown


def test_the_package_bundle_resolves_the_spider_slices(data_root: Path) -> None:
    """A fresh install has only the bundle: its questions keep their full-set ids, so the
    committed slices resolve in it to the same questions, and a compile there validates on
    ``spider-train-val``'s unseen databases as it does on the full data."""
    from sqlweave.programs.stages.pools import default_pool

    for name in ("spider-dev-200", "spider-train-val"):
        bundled = data.load_slice(name, root=DEMO_ROOT)
        full = data.load_slice(name, root=data_root)
        assert [(e.question_id, e.question, e.db_id) for e in bundled] == [
            (e.question_id, e.question, e.db_id) for e in full
        ]
    pool = default_pool("spider", root=DEMO_ROOT)
    assert pool and not {ex.db_id for ex in pool} & data.demo_pool_exclusions()
