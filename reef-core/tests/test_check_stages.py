"""``reef check`` builds every trainer's stages and closes each one it built, whatever another
stage's close does (``check_stages``)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from reef.core.plugins import NoSettings, PluginSettings
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.recipe import PipelineSpec, Recipe
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples
from reef.testing import inline_plugin
from reef.train.stages import check_stages

CLOSED: list[str] = []


class ClosingSamples(ReportSamples):
    def close(self, timeout: float | None = None) -> None:
        CLOSED.append(f"{self.context.component}:record2sample")
        raise RuntimeError("record2sample would not close")


class ClosingJobs(GroupedJobData):
    def close(self, timeout: float | None = None) -> None:
        CLOSED.append(f"{self.context.component}:sample2job")
        raise OSError("sample2job would not close")


class ClosingRecipe(Recipe):
    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        return PipelineSpec(record2sample="ClosingSamples", sample2job="ClosingJobs")


class Component:
    Settings: ClassVar[type[PluginSettings]] = NoSettings


DEPLOYMENT = """
scenarios:
  s:
    recipe: closing
    pipeline: {sample2job: {config: {job_samples: 1}}}
    training: {component: c}
"""


def test_every_stage_is_closed_and_the_first_error_is_raised() -> None:
    plugins = Plugins(blocked=())
    plugins.register(
        inline_plugin(
            recipes={"closing": ClosingRecipe},
            record2sample={"ClosingSamples": ClosingSamples},
            sample2job={"ClosingJobs": ClosingJobs},
            components={"c": Component},
        ),
        "test",
    )
    CLOSED.clear()
    with pytest.raises(OSError, match="sample2job would not close") as caught:
        check_stages(load_deployment(DEPLOYMENT, plugins=plugins, environ={}), plugins=plugins)
    assert CLOSED == ["c:sample2job", "c:record2sample"]
    assert caught.value.__notes__ == [
        "closing another stage also failed: RuntimeError: record2sample would not close"
    ]
