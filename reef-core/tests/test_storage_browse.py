"""Browsing a scenario's samples a page at a time (:class:`SampleBrowser`): store order both
ways, cursors that neither skip nor repeat, the filters (kind, group, trained, stale, in a
manual buffer, per trainer), what each trainer did with a sample, removed uploads left out;
and the metrics a job history keeps. SQLite, and PostgreSQL with REEF_TEST_DATABASE_URL."""

from __future__ import annotations

from reef.core.job_data import TaskSample, TrajectorySample, sample_body
from reef.storage import (
    Database,
    NewSample,
    SampleBrowser,
    SampleFilter,
    StaleSamples,
    TrainerSamples,
)
from reef.storage.job_history import scalar_metrics


def _trajectory(reward: float) -> NewSample:
    return NewSample("", "trajectory", sample_body(TrajectorySample({"steps": []}, reward=reward)))


def _fill(database: Database) -> TrainerSamples:
    """Two trainers; groups g0..g2 of two trajectories each (made by ``a``), two tasks (made by
    ``b``) and two uploads, one of them removed."""
    samples = TrainerSamples(database, "s")
    samples.register_trainer("a", reads_uploads=True)
    samples.register_trainer("b", reads_uploads=False)
    for group in range(3):
        unit = [
            NewSample(f"g{group}-{i}", "trajectory", _trajectory(float(i)).body) for i in range(2)
        ]
        samples.add_record_samples("a", unit, [f"r{group}"])
    samples.add_samples(
        "b",
        [
            NewSample(f"task-{i}", "task", sample_body(TaskSample(f"task-{i}", {"n": i})))
            for i in range(2)
        ],
    )
    for name in ("up-1", "up-2"):
        samples.add_upload(NewSample(name, "trajectory", _trajectory(1.0).body))
    samples.remove_upload("up-2")
    return samples


ALL = ["g0-0", "g0-1", "g1-0", "g1-1", "g2-0", "g2-1", "task-0", "task-1", "up-1"]


def _ids(browser: SampleBrowser, where: SampleFilter, **kwargs: object) -> list[str]:
    page, _ = browser.page(where, limit=100, **kwargs)  # type: ignore[arg-type]
    return [s.stored.id for s in page]


def test_pages_filters_and_what_each_trainer_did(storage_database: Database) -> None:
    samples = _fill(storage_database)
    browser = SampleBrowser(storage_database, "s")
    samples.commit_submission("a", "job-1", ["g0-0", "g0-1"])
    samples.commit_submission("b", "job-2", ["g0-0", "task-0"])
    samples.insert_into_manual_buffer("a", ["g1-0", "up-1"])
    samples.insert_into_manual_buffer("b", ["g1-0"])
    StaleSamples(storage_database, "s").replace("a", ["g2-0"])

    everything, total = browser.page(SampleFilter(), limit=100)
    assert [s.stored.id for s in everything] == ALL  # store order; the removed upload is gone
    assert total == len(ALL)
    by_id = {s.stored.id: s for s in everything}
    assert by_id["g0-0"].train_counts == {"a": 1, "b": 1}
    assert by_id["g0-1"].train_counts == {"a": 1}
    assert by_id["g1-0"].manual_buffers == ("a", "b")
    assert by_id["up-1"].manual_buffers == ("a",)
    assert by_id["g2-0"].stale_for == ("a",)
    assert by_id["g2-1"].stale_for == ()
    assert (by_id["up-1"].stored.origin, by_id["task-0"].stored.trainer) == ("upload", "b")

    assert _ids(browser, SampleFilter(kind="task")) == ["task-0", "task-1"]
    assert _ids(browser, SampleFilter(group_id="g1-0")) == ["g1-0", "g1-1"]
    assert _ids(browser, SampleFilter(trained=True)) == ["g0-0", "g0-1", "task-0"]
    assert _ids(browser, SampleFilter(trained=True, trainer="b")) == ["g0-0", "task-0"]
    assert "g0-1" in _ids(browser, SampleFilter(trained=False, trainer="b"))
    assert _ids(browser, SampleFilter(trained=False, kind="trajectory")) == [
        "g1-0", "g1-1", "g2-0", "g2-1", "up-1",
    ]  # fmt: skip
    assert _ids(browser, SampleFilter(stale=True)) == ["g2-0"]
    assert _ids(browser, SampleFilter(stale=True, trainer="b")) == []
    assert "g2-0" not in _ids(browser, SampleFilter(stale=False))
    assert _ids(browser, SampleFilter(chosen=True)) == ["g1-0", "up-1"]
    assert _ids(browser, SampleFilter(chosen=True, trainer="b")) == ["g1-0"]
    assert _ids(browser, SampleFilter(chosen=False, trainer="b")) == [i for i in ALL if i != "g1-0"]
    assert _ids(browser, SampleFilter(chosen=False, kind="trajectory", trained=False)) == [
        "g1-1", "g2-0", "g2-1",
    ]  # fmt: skip
    assert SampleBrowser(storage_database, "other").page(SampleFilter(chosen=True)) == ([], 0)
    assert _ids(browser, SampleFilter(), newest_first=True) == ALL[::-1]

    one = browser.one("g0-0")
    assert one is not None
    assert one.train_counts == {"a": 1, "b": 1}
    assert browser.one("up-2") is None  # removed
    assert browser.one("nope") is None
    assert SampleBrowser(storage_database, "other").page(SampleFilter()) == ([], 0)


def test_walking_the_pages_shows_every_sample_once(storage_database: Database) -> None:
    """Following each page's last position shows every sample exactly once, in order, for
    every page size and both orders."""
    _fill(storage_database)
    browser = SampleBrowser(storage_database, "s")
    for limit in range(1, len(ALL) + 2):
        for newest_first in (False, True):
            seen: list[str] = []
            after = None
            while True:
                page, total = browser.page(
                    SampleFilter(), after=after, limit=limit, newest_first=newest_first
                )
                assert total == len(ALL)
                assert len(page) <= limit
                if not page:
                    break
                seen += [s.stored.id for s in page]
                after = page[-1].stored.position
            assert seen == (ALL[::-1] if newest_first else ALL), (limit, newest_first)


def test_a_history_keeps_scalar_metrics_and_names_numbers_json_lacks() -> None:
    metrics = {"loss": float("nan"), "up": float("inf"), "n": 3, "ok": True, "x": None,
               "name": "sft", "per_sample": [1], "nested": {"a": 1}}  # fmt: skip
    assert scalar_metrics(metrics) == {
        "loss": "nan", "up": "inf", "n": 3, "ok": True, "x": None, "name": "sft",
    }  # fmt: skip
