"""The thumbs recipe's own tests: its settings, its decisions about reports, its job data, its
registration, and its samples on the real sample store (``reef.testing.storage``)."""

from __future__ import annotations

from typing import Any

import pytest
from reef_thumbs.processor import UNREADABLE_THUMB, ThumbsJobData, ThumbsSamples
from reef_thumbs.recipe import ThumbsRecipe

from reef import (
    InferenceRecord,
    PluginConfigError,
    PluginKind,
    RecipeConfigError,
    Report,
    TrajectorySample,
    validate_job_data,
)
from reef.embed import Plugins
from reef.testing import Database, pipeline_context, sample_store, training_pipeline

CONTEXT = pipeline_context("support", "local")


def reply(cid: str, *, conversation: str | None = None, artifact: str = "art-1") -> InferenceRecord:
    """An agent's reply to a prompt of its own (so no two replies share a trajectory)."""
    return InferenceRecord(
        cid,
        "support",
        {"messages": [{"role": "user", "content": f"prompt of {cid}"}]},
        {
            "choices": [
                {"message": {"role": "assistant", "content": "reply"}, "finish_reason": "stop"}
            ]
        },
        artifact_id=artifact,
        tags={} if conversation is None else {"conversation": conversation},
    )


def thumb(rid: str, cid: str, value: Any = None, **metadata: Any) -> Report:
    """A report on call ``cid``; ``value`` is its thumb (none when ``None``)."""
    if value is not None:
        metadata["thumbs"] = value
    return Report(rid, "support", (cid,), metadata=metadata)


def stage(**config: Any) -> ThumbsSamples:
    return ThumbsSamples.from_config(config or None, context=CONTEXT, environ={})


def test_settings_are_checked_with_their_path() -> None:
    """rule: P-STG-10 P-STG-12 the stage parses its own keys beside max_staleness and refuses
    unknown keys, wrong types and bad values, all at once."""
    built = stage(group_size=3, max_staleness=1, discard_unanimous=False)
    assert (built.max_staleness, built.grouping.group_size) == (1, 3)
    with pytest.raises(PluginConfigError) as info:
        stage(group_sise=3, discard_unanimous="yes", max_staleness=-1)
    assert {(e.key, e.plugin) for e in info.value.errors} == {
        ("$.group_sise", "ThumbsSamples"),
        ("$.discard_unanimous", "ThumbsSamples"),
        ("$.max_staleness", "ThumbsSamples"),
    }
    assert "did you mean 'group_size'?" in str(info.value)


def test_reports_become_grouped_samples_or_end_with_a_reason() -> None:
    """rule: P-REP-5 P-REP-8 P-REP-9 P-REP-10 P-REP-11 P-SET-14 thumbs become rewards; a
    conversation's replies wait for each other; a rater counts once per group; a unanimous group
    is discarded; a report without a thumb, or with an unreadable one, ends with its reason."""
    samples = stage()
    for cid, conversation in [
        ("c1", "conv-1"),
        ("c2", "conv-1"),
        ("c3", "conv-1"),
        ("c4", "conv-2"),
        ("c5", "conv-2"),
        ("c6", None),
        ("c7", None),
        ("c8", "conv-3"),
    ]:
        samples.push(reply(cid, conversation=conversation))
    samples.push(thumb("r1", "c1", "up", rater="ann"))
    samples.push(thumb("r2", "c2", "down", rater="ann"))  # ann's slot is taken
    assert samples.ready_units() == ()
    samples.push(thumb("r3", "c3", "down", rater="bob"))
    samples.push(thumb("r4", "c4", "up"))
    samples.push(thumb("r5", "c5", "up"))  # conv-2 is unanimous
    samples.push(thumb("r6", "c6", "down"))  # no conversation: trains alone
    samples.push(thumb("r7", "c7"))  # no thumb: not this recipe's data
    samples.push(thumb("r8", "c8", "sideways"))
    units = samples.ready_units()
    assert [unit.record_ids for unit in units] == [("c1", "r1", "c3", "r3"), ("c6", "r6")]
    rewards = [
        sample.reward
        for unit in units
        for _, made in samples.unit_samples(unit)
        for sample in made
        if isinstance(sample, TrajectorySample)
    ]
    assert rewards == [1.0, -1.0, -1.0]
    assert samples.ended_records() == {
        "r2": "slot_taken",
        "c4": "group_discarded",
        "r4": "group_discarded",
        "c5": "group_discarded",
        "r5": "group_discarded",
        "r7": "not_training_report",
        "c8": UNREADABLE_THUMB,
        "r8": UNREADABLE_THUMB,
    }
    # c2 and c7 stay free: a report that ends before it forms a set leaves its one call to a
    # later report (P-REP-7).
    assert samples.status()["held_records"] == 2


def test_job_data_keeps_every_sample_and_counts_thumbs() -> None:
    """rule: P-SIZE-2 P-STG-3 P-REP-6 P-PIPE-7 job_samples is required; the job data is the
    buffer in order, with its groups, and passes the trainer's check of its output_schema."""
    with pytest.raises(RecipeConfigError):
        ThumbsJobData.from_config({}, context=CONTEXT, record2sample=stage(), environ={})
    jobs = ThumbsJobData.from_config(
        {"job_samples": 2}, context=CONTEXT, record2sample=stage(), environ={}
    )
    samples = (
        TrajectorySample({"steps": []}, reward=1.0, sample_id="r1:0", group_id="g"),
        TrajectorySample({"steps": []}, reward=-1.0, sample_id="r3:0", group_id="g"),
        TrajectorySample({"steps": []}, reward=-1.0, sample_id="r6:0"),
    )
    data = jobs.make_job_data(samples, "support:data:1")
    validate_job_data(jobs, data)  # what the trainer checks before it submits (P-PIPE-7)
    assert data.samples == samples
    assert data.metadata == {
        "objective": "group_relative",
        "thumbs_up": 1,
        "thumbs_down": 2,
        "groups": 1,
    }


def test_the_entry_point_registers_the_recipe_and_its_stages() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    assert plugins.resolve(PluginKind.RECIPE, "thumbs") is ThumbsRecipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "ThumbsSamples") is ThumbsSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "ThumbsJobData") is ThumbsJobData
    registration = plugins.registration(PluginKind.RECIPE, "thumbs")
    assert registration is not None
    assert registration.distribution == "reef-example-thumbs"


def test_a_stale_reply_leaves_out_its_whole_group(storage_database: Database) -> None:
    """rule: P-BUF-4 P-BUF-7 P-STALE-3 with max_staleness 0, a group holding a reply of the
    artifact served before is left out of the buffer, whole, and stays in the store untrained;
    a group of the served artifact trains."""
    samples = stage(max_staleness=0)
    jobs = ThumbsJobData.from_config(
        {"job_samples": 2}, context=CONTEXT, record2sample=samples, environ={}
    )
    store = sample_store(storage_database, "support")
    pipeline = training_pipeline(samples, jobs, storage_database)
    pipeline.observe_serving_artifact_id("art-1")
    pipeline.push_many(
        [
            reply("c1", conversation="old", artifact="art-1"),
            reply("c2", conversation="old", artifact="art-1"),
            thumb("r1", "c1", "up"),
            thumb("r2", "c2", "down"),
        ]
    )
    pipeline.observe_serving_artifact_id("art-2")
    pipeline.push_many(
        [
            reply("c3", conversation="new", artifact="art-2"),
            reply("c4", conversation="new", artifact="art-2"),
            thumb("r3", "c3", "down"),
            thumb("r4", "c4", "up"),
        ]
    )
    data = pipeline.build_job_data(2)
    assert data is not None
    assert [s.sample_id for s in data.samples] == ["r3:0", "r4:0"]
    assert pipeline.acknowledge(data.id) == ("sample:r3:0", "sample:r4:0")
    assert [s.id for s in store.untrained("local")] == ["r1:0", "r2:0"]
    assert pipeline.status()["stale_samples"] == 2
