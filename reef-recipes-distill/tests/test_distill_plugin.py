"""The distill plugin registers its recipes through its entry point, and both are usable: the
stages they name are registered, and ``reef check`` builds a deployment of each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reef import PluginKind
from reef.embed import Plugins
from reef_distill.openclaw.recipe import OpenClawRLRecipe
from reef_distill.recipe import DistillRecipe

DEPLOYMENT = """
scenarios:
  tutor:
    recipe: {{class: distill, config: {{teacher: {{model_path: "{folder}/teacher"}}}}}}
    pipeline: {{sample2job: {{config: {{job_samples: 8}}}}}}
    training: {{component: local, options: {{state_dir: "{folder}/tutor"}}}}
  assistant:
    recipe: {{class: openclaw-rl, config: {{objective: hindsight}}}}
    pipeline:
      record2sample:
        config: {{judge: {{base_url: "http://127.0.0.1:9/v1", model: judge}}, hints: true}}
      sample2job: {{config: {{job_samples: 8}}}}
    training: {{component: local, options: {{state_dir: "{folder}/assistant"}}}}
"""


def _needs_the_local_component() -> None:
    """The deployment trains on the local component, which reef check knows only where
    reef-core's torch extra is installed (not where this distribution is installed alone)."""
    pytest.importorskip("torch")


def _reef(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reef.cli", *args], capture_output=True, text=True, check=False
    )


def test_entry_point_registers_both_recipes_naming_registered_stages() -> None:
    """rule: P-STG-7 -- each recipe names a default class per stage in pipeline_spec()."""
    plugins = Plugins(blocked=())
    plugins.load()
    for name, recipe in (("distill", DistillRecipe), ("openclaw-rl", OpenClawRLRecipe)):
        assert plugins.resolve(PluginKind.RECIPE, name) is recipe
        registration = plugins.registration(PluginKind.RECIPE, name)
        assert registration is not None
        assert registration.distribution == "reef-recipes-distill"
        assert recipe.requires_job_samples
        spec = recipe.pipeline_spec()
        assert plugins.resolve(PluginKind.RECORD2SAMPLE, spec.record2sample)
        assert plugins.resolve(PluginKind.SAMPLE2JOB, spec.sample2job)
    spec = DistillRecipe.pipeline_spec()
    assert (spec.record2sample, spec.sample2job) == ("DistillSamples", "DistillJobData")


def test_reef_plugins_lists_both_and_reef_check_builds_both(tmp_path: Path) -> None:
    # rule: P-STG-13
    done = _reef("plugins", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["registered"]}
    for name in ("distill", "openclaw-rl"):
        assert rows[name]["kind"] == "recipe"
        assert rows[name]["distribution"] == "reef-recipes-distill"
    _needs_the_local_component()
    path = tmp_path / "deployment.yaml"
    path.write_text(DEPLOYMENT.format(folder=tmp_path), encoding="utf-8")
    checked = _reef("check", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok" in checked.stdout


def test_reef_check_refuses_the_hindsight_objective_without_hints(tmp_path: Path) -> None:
    """OpenClaw-RL's hindsight objective distils the judge's hints: a deployment whose
    OpenClawRLSamples does not ask for them is refused, naming the key to set."""
    _needs_the_local_component()
    unhinted = DEPLOYMENT.replace(", hints: true", "")
    for text, why in ((unhinted, "no hints key"), (DEPLOYMENT.replace("true", "false"), "false")):
        path = tmp_path / "deployment.yaml"
        path.write_text(text.format(folder=tmp_path), encoding="utf-8")
        checked = _reef("check", str(path))
        assert checked.returncode == 1, (why, checked.stdout)
        assert (
            "OpenClawRLRecipe: the hindsight objective distils the judge's hints, and"
            " OpenClawRLSamples asks for none: set hints: true in pipeline.record2sample.config"
            " (or use objective: binary)"
            " @ $.scenarios.assistant.pipeline.record2sample.config.hints"
        ) in checked.stderr, (why, checked.stderr)
        assert "tutor" not in checked.stderr  # the other scenario is fine
    binary = unhinted.replace("objective: hindsight", "objective: binary")
    path.write_text(binary.format(folder=tmp_path), encoding="utf-8")
    checked = _reef("check", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The other way round: a hinting judge's votes are not the binary objective's reward.
    hinted_binary = DEPLOYMENT.replace("objective: hindsight", "objective: binary")
    path.write_text(hinted_binary.format(folder=tmp_path), encoding="utf-8")
    checked = _reef("check", str(path))
    assert checked.returncode == 1, checked.stdout
    assert (
        "OpenClawRLRecipe: the binary objective trains the judge's good/bad votes, and with"
        " hints: true OpenClawRLSamples asks the judge for hints instead: remove hints (or use"
        " objective: hindsight) @ $.scenarios.assistant.pipeline.record2sample.config.hints"
    ) in checked.stderr, checked.stderr
