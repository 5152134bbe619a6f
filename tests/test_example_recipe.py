"""The worked example of ``docs/recipe-authoring.md``, for real.

``tests/example_recipe`` (the distribution ``reef-example-thumbs``) is built into a wheel by its
own build backend and installed into a throwaway folder; Reef finds it through its entry point,
``reef plugins`` lists it, the guide's deployment names it, and records and reports go through
the pipeline Reef builds from that deployment (``build_pipeline``, as the runtime builds a
trainer's) on the real sample store, into job data that ``validate_job_data`` checks as the
trainer does. The example's own tests run against the installed wheel too.
The guide's code excerpts are checked against the package, so the two cannot drift apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from reef.core.deployment import DeploymentError
from reef.core.job_data import JobData, TrajectorySample
from reef.core.records import InferenceRecord, Record, Report
from reef.plugins import PluginKind, Plugins
from reef.plugins.scenarios import load_deployment, scenario_classes
from reef.sample2job import validate_job_data
from reef.storage import Database, ScenarioSettings, TrainerSamples
from reef.storage.scenario_settings import TRAINING_MODE_SETTING
from reef.train.pipeline import TrainingPipeline
from reef.train.stages import build_pipeline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "example_recipe"
GUIDE = ROOT / "docs" / "recipe-authoring.md"
DISTRIBUTION = "reef-example-thumbs"
SCENARIO = "support"

#: A fenced block of the guide: its language and its text.
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
#: The first line of a block that quotes a file of the example, of this test, or of a
#: distribution's tests: ``# tests/example_recipe/...``, ``# reef-core/tests/test_x.py``.
_QUOTED_FILE = re.compile(r"^# ((?:[\w-]+/)?tests/\S+)\n")


def run(*args: str | Path, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def guide_blocks() -> list[tuple[str, str]]:
    return _FENCE.findall(GUIDE.read_text(encoding="utf-8"))


def guide_deployment() -> str:
    """The guide's deployment file: its YAML block that starts with ``# deployment.yaml``."""
    found = [body for lang, body in guide_blocks() if body.startswith("# deployment.yaml\n")]
    assert len(found) == 1, "the guide shows one deployment.yaml"
    return found[0]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the example as pip installs its wheel (package and dist-info)."""
    out = tmp_path_factory.mktemp("thumbs")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out / "wheels", EXAMPLE)
    (wheel,) = (out / "wheels").glob("reef_example_thumbs-*.whl")
    target = out / "site"
    run(
        sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "-t", target, wheel
    )
    return target


def environ_with(site: Path) -> dict[str, str]:
    """This process's environment with the installed example on the import path."""
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.fixture(scope="module")
def plugins(site: Path) -> Iterator[Plugins]:
    """Every plugin, loaded through the entry points with the example installed."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        loaded = Plugins(blocked=())
        loaded.load()
        yield loaded
    # The example leaves the import path with its folder: forget the modules it imported.
    for name in [m for m in sys.modules if m.partition(".")[0] == "reef_thumbs"]:
        del sys.modules[name]


def test_reef_plugins_lists_the_example_with_its_distribution(site: Path) -> None:
    listing = json.loads(
        run(sys.executable, "-m", "reef.cli", "plugins", "--json", env=environ_with(site))
    )
    mine = {
        (row["kind"], row["name"]): (row["distribution"], row["version"], row["plugin"])
        for row in listing["registered"]
        if row["distribution"] == DISTRIBUTION
    }
    assert mine == {
        ("recipe", "thumbs"): (DISTRIBUTION, "0.1.0", "thumbs"),
        ("record2sample", "ThumbsSamples"): (DISTRIBUTION, "0.1.0", "thumbs"),
        ("sample2job", "ThumbsJobData"): (DISTRIBUTION, "0.1.0", "thumbs"),
    }


def test_the_guide_quotes_the_package_as_it_is() -> None:
    """Every block of the guide that names a file of the example (or this test) is a verbatim
    part of it."""
    quoted = 0
    for _, body in guide_blocks():
        match = _QUOTED_FILE.match(body)
        if match is None:
            continue
        source = (ROOT / match.group(1)).read_text(encoding="utf-8")
        excerpt = body[match.end() :]
        assert excerpt in source, f"the guide's excerpt of {match.group(1)} is not in the file"
        quoted += 1
    assert quoted >= 8  # the guide walks through every module of the package


def test_the_guide_deployment_loads_and_bad_config_is_refused(plugins: Plugins) -> None:
    """rule: P-STG-7 P-STG-13 P-SIZE-2 the guide's deployment names the recipe, whose default
    stages are the example's; a misspelt key of a stage, and a missing job_samples, are refused
    when the file is read, each with its path."""
    text = guide_deployment()
    deployment = load_deployment(text, plugins=plugins, environ={})
    classes = scenario_classes(SCENARIO, deployment.scenarios[SCENARIO], plugins)
    assert classes is not None
    assert classes.recipe is plugins.resolve(PluginKind.RECIPE, "thumbs")
    assert classes.record2sample is plugins.resolve(PluginKind.RECORD2SAMPLE, "ThumbsSamples")
    assert classes.sample2job is plugins.resolve(PluginKind.SAMPLE2JOB, "ThumbsJobData")

    document = yaml.safe_load(text)
    pipeline = document["scenarios"][SCENARIO]["pipeline"]
    pipeline["record2sample"]["config"]["group_sise"] = pipeline["record2sample"]["config"].pop(
        "group_size"
    )
    del pipeline["sample2job"]["config"]["job_samples"]
    with pytest.raises(DeploymentError) as info:
        load_deployment(yaml.safe_dump(document), plugins=plugins, environ={})
    path = f"$.scenarios.{SCENARIO}.pipeline"
    assert info.value.problems == (
        "ThumbsSamples: unknown key 'group_sise', did you mean 'group_size'?"
        f" @ {path}.record2sample.config.group_sise",
        "ThumbsRecipe: a weight recipe has no default job_samples: set it (usually to the"
        " training component's batch size, so one job is one optimizer step)"
        f" @ {path}.sample2job.config.job_samples",
    )


def reply(cid: str, conversation: str | None) -> InferenceRecord:
    """An agent's reply to a prompt of its own, tagged with its conversation."""
    return InferenceRecord(
        cid,
        SCENARIO,
        {"messages": [{"role": "user", "content": f"prompt of {cid}"}]},
        {
            "choices": [
                {
                    "message": {"role": "assistant", "content": f"reply {cid}"},
                    "finish_reason": "stop",
                }
            ]
        },
        artifact_id="art-1",
        tags={} if conversation is None else {"conversation": conversation},
    )


def thumb(rid: str, cid: str, **metadata: Any) -> Report:
    return Report(rid, SCENARIO, (cid,), metadata=metadata)


#: The traffic of the guide's walk-through, in store order.
TRAFFIC: tuple[Record, ...] = (
    *(
        reply(f"c{n}", conversation)
        for n, conversation in enumerate(
            [
                "conv-1",
                "conv-1",
                "conv-2",
                "conv-2",
                "conv-3",
                "conv-3",
                "conv-3",
                None,
                "conv-4",
                "conv-4",
            ],
            start=1,
        )
    ),
    thumb("r1", "c1", thumbs="up", rater="ann"),
    thumb("r2", "c2", thumbs="down", rater="bob"),  # conv-1 is complete and mixed: it trains
    thumb("r3", "c3", thumbs="up"),
    thumb("r4", "c4", thumbs="up"),  # conv-2 is complete and unanimous: discarded
    thumb("r5", "c5", thumbs="up", rater="ann"),
    thumb("r6", "c6", thumbs="down", rater="ann"),  # ann already rated in conv-3
    thumb("r7", "c7", thumbs="down", rater="bob"),  # conv-3 is complete and mixed
    thumb("r8", "c8", thumbs="down"),  # no conversation: trains alone
    thumb("r9", "c9", rater="ann"),  # no thumb: not this recipe's data
    thumb("r10", "c10", thumbs="meh"),  # an unreadable thumb
)


def guide_pipeline(plugins: Plugins, database: Database) -> TrainingPipeline:
    """The guide's scenario's pipeline, built as the runtime builds its trainer's."""
    deployment = load_deployment(guide_deployment(), plugins=plugins, environ={})
    return build_pipeline(
        SCENARIO, deployment.scenarios[SCENARIO], plugins=plugins, database=database, environ={}
    )


def submit(pipeline: TrainingPipeline, job_samples: int) -> JobData:
    """One step of a trainer: build, validate (P-PIPE-7), acknowledge with the released
    records (P-PIPE-9)."""
    data = pipeline.build_job_data(job_samples)
    assert data is not None
    validate_job_data(pipeline.sample2job, data)
    acknowledged = pipeline.acknowledge(
        data.id, released_record_ids=pipeline.releasable_record_ids()
    )
    assert acknowledged == tuple(f"sample:{s.sample_id}" for s in data.samples)
    return data


def rewards_of(data: JobData) -> list[float | None]:
    return [s.reward for s in data.samples if isinstance(s, TrajectorySample)]


def test_thumbs_train_through_the_pipeline(plugins: Plugins, storage_database: Database) -> None:
    """rule: P-SET-16 P-SET-18 P-SET-19 P-SET-20 P-BUF-5 P-SIZE-5 P-PIPE-7 P-PIPE-9 P-REP-6
    P-REP-8 P-REP-9 P-REP-10 P-REP-11 the guide's traffic becomes the guide's jobs: each mixed
    conversation trains as one group, in store order, each sample once; what cannot train is
    counted by reason once its end is committed; a restart makes no sample again."""
    pipeline = guide_pipeline(plugins, storage_database)
    job_samples = pipeline.sample2job.job_samples
    assert job_samples == 2
    store = TrainerSamples(storage_database, SCENARIO)
    trainer = pipeline.context.trainer
    pipeline.push_many(TRAFFIC)
    stored = ["r1:0", "r2:0", "r5:0", "r7:0", "r8:0"]
    assert [s.id for s in store.untrained(trainer)] == stored
    assert [s.sample_id for s in pipeline.buffer()] == stored[:2]  # buffer_size 2, whole groups

    first = submit(pipeline, job_samples)
    assert re.fullmatch(rf"{SCENARIO}:data:\d+", first.id)
    assert [s.sample_id for s in first.samples] == ["r1:0", "r2:0"]
    assert rewards_of(first) == [1.0, -1.0]
    assert first.metadata == {
        "objective": "group_relative",
        "thumbs_up": 1,
        "thumbs_down": 1,
        "groups": 1,
    }
    second = submit(pipeline, job_samples)
    assert [s.sample_id for s in second.samples] == ["r5:0", "r7:0"]
    assert rewards_of(second) == [1.0, -1.0]
    (group_one,) = {s.group_id for s in first.samples}
    (group_two,) = {s.group_id for s in second.samples}
    assert None not in (group_one, group_two)
    assert group_one != group_two
    assert pipeline.build_job_data(job_samples) is None  # r8:0 waits for a second sample

    trained = ["r1:0", "r2:0", "r5:0", "r7:0"]
    assert store.train_counts(trainer, [*trained, "r8:0"]) == {
        **dict.fromkeys(trained, 1),
        "r8:0": 0,
    }
    dropped = {
        "group_discarded": 4,
        "not_training_report": 1,
        "slot_taken": 1,
        "unreadable_thumb": 2,
    }
    status = pipeline.status()
    assert status["dropped"] == dropped
    assert (status["ready_samples"], status["held_records"]) == (1, 2)  # c6 and c9 are free

    # A restart: a new pipeline on the same store reads the same traffic again.
    restarted = guide_pipeline(plugins, storage_database)
    restarted.push_many(TRAFFIC)
    assert [s.sample_id for s in restarted.buffer()] == ["r8:0"]
    assert restarted.status()["dropped"] == dropped


def test_the_pipeline_is_the_runtime_trainers(plugins: Plugins, storage_database: Database) -> None:
    """rule: P-MODE-14 the guide's scenario has one trainer, named by its component; its
    pipeline starts in the training mode stored for the scenario; a trainer the scenario does
    not have is refused with the deployment path."""
    ScenarioSettings(storage_database, SCENARIO).set(TRAINING_MODE_SETTING, "manual")
    pipeline = guide_pipeline(plugins, storage_database)
    assert (pipeline.context.trainer, pipeline.context.trainers) == ("local", ("local",))
    assert pipeline.training_mode == "manual"
    section = load_deployment(guide_deployment(), plugins=plugins, environ={}).scenarios[SCENARIO]
    with pytest.raises(DeploymentError) as info:
        build_pipeline(SCENARIO, section, "tinker", plugins=plugins, database=storage_database)
    assert info.value.problems == (
        f"the scenario has no trainer 'tinker'; its trainers: ['local'] @ $.scenarios.{SCENARIO}"
        ".training",
    )


def test_reefs_layout_rule_holds_with_the_example_installed(site: Path) -> None:
    """rule: P-LAYOUT-4 Reef's own test of the layout passes with the example installed: both
    stages in ``reef_thumbs.processor``, named by ``reef_thumbs.recipe``."""
    layout_test = (
        f"{ROOT}/reef-core/tests/test_pipeline_rules.py"
        "::test_installed_recipes_keep_their_own_stages_in_their_processor_module"
    )
    run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", layout_test,
        env=environ_with(site),
    )  # fmt: skip


def test_the_example_passes_its_own_tests(site: Path) -> None:
    run(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        EXAMPLE / "tests",
        env=environ_with(site),
        cwd=EXAMPLE,
    )
