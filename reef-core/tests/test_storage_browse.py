"""Browsing a scenario's samples a page at a time (:class:`SampleBrowser`): store order both
ways, cursors that neither skip nor repeat, the filters (kind, group, trained, stale, in a
manual buffer, per trainer), what each trainer did with a sample, removed uploads left out;
and the metrics a job history keeps. SQLite, and PostgreSQL with REEF_TEST_DATABASE_URL."""

from __future__ import annotations

import attrs

from reef.core.job_data import TaskSample, TrajectorySample, sample_body
from reef.storage import (
    BrowsedSample,
    Database,
    NewSample,
    RecordStore,
    SampleBrowser,
    SampleFilter,
    StaleSamples,
    TrainerSamples,
)
from reef.storage.job_history import scalar_metrics
from reef.testing.records import call


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
    page = browser.page(where, limit=100, **kwargs)  # type: ignore[arg-type]
    return [s.stored.id for s in page]


def test_pages_filters_and_what_each_trainer_did(storage_database: Database) -> None:
    samples = _fill(storage_database)
    browser = SampleBrowser(storage_database, "s")
    samples.commit_submission("a", "job-1", ["g0-0", "g0-1"])
    samples.commit_submission("b", "job-2", ["g0-0", "task-0"])
    samples.insert_into_manual_buffer("a", ["g1-0", "up-1"])
    samples.insert_into_manual_buffer("b", ["g1-0"])
    StaleSamples(storage_database, "s").replace("a", ["g2-0"])

    everything = browser.page(SampleFilter(), limit=100)
    assert [s.stored.id for s in everything] == ALL  # store order; the removed upload is gone
    assert browser.count(SampleFilter()) == (len(ALL), True)
    assert browser.count(SampleFilter(), at_most=4) == (4, False)
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
    assert SampleBrowser(storage_database, "other").page(SampleFilter(chosen=True)) == []
    assert _ids(browser, SampleFilter(), newest_first=True) == ALL[::-1]

    one = browser.one("g0-0")
    assert one is not None
    assert one.train_counts == {"a": 1, "b": 1}
    assert browser.one("up-2") is None  # removed
    assert browser.one("nope") is None
    assert SampleBrowser(storage_database, "other").page(SampleFilter()) == []
    assert SampleBrowser(storage_database, "other").count(SampleFilter()) == (0, True)


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
                page = browser.page(
                    SampleFilter(), after=after, limit=limit, newest_first=newest_first
                )
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


def _said(
    text: str, reward: float | None, group: str | None = None, artifact: str = "art-0"
) -> dict[str, object]:
    """A trajectory body: one user message, a reply, the artifact that answered it, and the
    client's group as the default assembly keeps it."""
    trajectory = {
        "steps": [
            {"step_id": 1, "source": "user", "message": text},
            {"step_id": 2, "source": "agent", "message": f"reply to {text}"},
        ],
        "extra": {"reef": {"records": [{"id": "c1", "artifact_id": artifact}]}},
    }
    metadata = {"report_metadata": {"group": group}} if group is not None else {}
    return sample_body(TrajectorySample(trajectory, reward=reward, metadata=metadata))


def _curated(database: Database) -> SampleBrowser:
    samples = TrainerSamples(database, "s")
    samples.register_trainer("a", reads_uploads=True)
    said = [
        ("n1", "Is it 100% safe?", 0.5, "round-1", "art-0"),
        ("n2", "Où est la gare ?", 1.0, "round-1", "art-1"),
        ("n3", 'He said "hello_world"', None, "round-2", "art-1"),
        ("n4", "nothing here", 0.0, None, "art-2"),
        ("n5", "ANOTHER hello", 1.0, "round-2", "art-0"),
    ]
    made = [NewSample(i, "trajectory", _said(t, r, g, a)) for i, t, r, g, a in said]
    samples.add_record_samples("a", made[:2], ["r-1"])  # one unit: the store's group "n1"
    for sample in made[2:]:
        samples.add_record_samples("a", [sample], [f"r-{sample.id}"])
    return SampleBrowser(database, "s")


def test_text_group_reward_and_artifact_filters_read_the_body(storage_database: Database) -> None:
    """The filters a curator uses: text anywhere in the body (case folded, wildcards and
    quotes taken literally, non-ASCII as the body escapes it), the client's group or the
    store's group id, a reward range, the artifact that answered."""
    browser = _curated(storage_database)
    assert _ids(browser, SampleFilter(text="hello")) == ["n3", "n5"]
    assert _ids(browser, SampleFilter(text="100%")) == ["n1"]
    assert _ids(browser, SampleFilter(text="%")) == ["n1"]  # a literal percent sign
    assert _ids(browser, SampleFilter(text="o_w")) == ["n3"]  # a literal underscore
    assert _ids(browser, SampleFilter(text='"hello')) == ["n3"]
    assert _ids(browser, SampleFilter(text="Où")) == ["n2"]
    assert _ids(browser, SampleFilter(text="absent")) == []
    assert _ids(browser, SampleFilter(group="round-2")) == ["n3", "n5"]
    assert _ids(browser, SampleFilter(group="n1")) == ["n1", "n2"]  # the store's group id
    assert _ids(browser, SampleFilter(group="round")) == []  # whole names only
    assert _ids(browser, SampleFilter(reward_min=0.5)) == ["n1", "n2", "n5"]
    assert _ids(browser, SampleFilter(reward_min=0.1, reward_max=0.9)) == ["n1"]
    assert _ids(browser, SampleFilter(reward_max=0.0)) == ["n4"]  # no reward: no match
    assert _ids(browser, SampleFilter(artifact="art-1")) == ["n2", "n3"]
    assert _ids(browser, SampleFilter(artifact="art")) == []
    assert browser.count(SampleFilter(text="hello")) == (2, True)


def test_time_and_tag_filters_ask_of_the_calls_a_sample_was_made_from(
    storage_database: Database,
) -> None:
    """Since/until: a call of the sample received in the range; a tag: a call of the sample
    carrying it (every tag asked). An upload has no calls, so either leaves it out."""
    records = RecordStore(storage_database, "s")
    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=True)
    for n, (team, at) in enumerate([("a", 10.0), ("b", 20.0), ("a", 30.0)], 1):
        record = attrs.evolve(
            call(f"r{n}", session=f"x{n}", at=at), tags={"team": team, "n": f"{n}"}
        )
        records.append_calls([record], records.trajectory_index(), None)
        sample = TrajectorySample({"steps": []}, reward=0.0, source_record_ids=(f"r{n}",))
        samples.add_record_samples(
            "c", [NewSample(f"c:{n}", "trajectory", sample_body(sample))], [f"r{n}"]
        )
    samples.add_upload(NewSample("up", "trajectory", _trajectory(1.0).body))
    browser = SampleBrowser(storage_database, "s")
    assert _ids(browser, SampleFilter()) == ["c:1", "c:2", "c:3", "up"]
    assert _ids(browser, SampleFilter(since=20.0)) == ["c:2", "c:3"]
    assert _ids(browser, SampleFilter(until=20.0)) == ["c:1"]
    assert _ids(browser, SampleFilter(since=15.0, until=25.0)) == ["c:2"]
    assert _ids(browser, SampleFilter(tags={"team": "a"})) == ["c:1", "c:3"]
    assert _ids(browser, SampleFilter(tags={"team": "a", "n": "3"})) == ["c:3"]
    assert _ids(browser, SampleFilter(tags={"team": "a"}, since=20.0)) == ["c:3"]
    assert _ids(browser, SampleFilter(tags={"team": "z"})) == []
    assert _ids(browser, SampleFilter(tags={"it's \"odd": "a"})) == []  # bound, never SQL
    assert browser.count(SampleFilter(tags={"team": "a"})) == (2, True)


def test_each_artifacts_mean_reward_in_the_order_it_first_answered(
    storage_database: Database,
) -> None:
    """The quickstart's curve, from the store: each artifact's rewarded samples (a sample of
    two artifacts counts for both, once each) and their mean reward; a sample without a reward
    counts for none."""
    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=True)
    made = [
        ("s1", ["art-a"], 0.0),
        ("s2", ["art-b", "art-b"], 1.0),
        ("s3", ["art-a"], 1.0),
        ("s4", ["art-b", "art-c"], 0.5),
        ("s5", ["art-d"], None),
    ]
    for name, artifacts, reward in made:
        # As atif_build lists a trajectory's calls: extra.reef.records, each with its artifact.
        listed = [{"id": f"{name}-{i}", "artifact_id": a} for i, a in enumerate(artifacts)]
        sample = TrajectorySample(
            {"steps": [], "extra": {"reef": {"records": listed}}}, reward=reward
        )
        samples.add_record_samples(
            "c", [NewSample(name, "trajectory", sample_body(sample))], [r["id"] for r in listed]
        )
    browser = SampleBrowser(storage_database, "s")
    found, total = browser.artifact_rewards(limit=10)
    assert total == 3
    assert [(a.artifact_id, a.number, a.samples, a.mean_reward) for a in found] == [
        ("art-a", 1, 2, 0.5),
        ("art-b", 2, 2, 0.75),
        ("art-c", 3, 1, 0.5),
    ]
    last, _ = browser.artifact_rewards(limit=2)
    assert [a.artifact_id for a in last] == ["art-b", "art-c"]
    assert SampleBrowser(storage_database, "other").artifact_rewards(limit=10) == ([], 0)


def test_reward_order_pages_both_ways_without_a_skip_or_a_repeat(
    storage_database: Database,
) -> None:
    """By reward, highest first (ties newest first) or lowest first (ties oldest first), the
    samples without a reward last both ways; a walk forward, a walk back from the last page, the
    same samples."""
    browser = _curated(storage_database)
    highest = ["n5", "n2", "n1", "n4", "n3"]
    assert _ids(browser, SampleFilter(), by_reward=True, newest_first=True) == highest
    assert _ids(browser, SampleFilter(), by_reward=True) == ["n4", "n1", "n2", "n5", "n3"]
    for limit in (1, 2, 3, 5):
        for descending in (True, False):
            order = highest if descending else ["n4", "n1", "n2", "n5", "n3"]
            walk = {"limit": limit, "newest_first": descending, "by_reward": True}
            seen: list[str] = []
            page = browser.page(SampleFilter(), **walk)  # type: ignore[arg-type]
            while page:
                seen += [s.stored.id for s in page]
                last = page[-1]
                key = SampleBrowser.key_of(last, _reward_of(last), by_reward=True)
                page = browser.page(SampleFilter(), after=key, **walk)  # type: ignore[arg-type]
            assert seen == order, (limit, descending)
            back: list[str] = []
            page = browser.page(SampleFilter(), from_end=True, **walk)  # type: ignore[arg-type]
            while page:
                back = [s.stored.id for s in page] + back
                first = page[0]
                key = SampleBrowser.key_of(first, _reward_of(first), by_reward=True)
                page = browser.page(SampleFilter(), before=key, **walk)  # type: ignore[arg-type]
            assert back == order, (limit, descending)


def _reward_of(sample: BrowsedSample) -> float | None:
    reward = sample.stored.body.get("reward")
    return float(reward) if isinstance(reward, int | float) else None
