"""``reef new recipe NAME``: a recipe package that works as written.

:func:`write_recipe_package` writes ``reef-recipe-<name>/``: a ``pyproject.toml`` whose
``reef.plugins`` entry point registers the plugin, the recipe (``recipe.py``), one
record-to-sample stage of its own in ``processor.py`` (reports grouped by ``metadata.group``,
scored reports only), a deployment that names the recipe, and tests with ``reef.testing`` that
pass once the package is installed with its test extra (``pip install -e '.[test]'`` then
``pytest``). The layout is the one every recipe package keeps (P-LAYOUT-4). The author edits
from there; ``docs/recipe-authoring.md`` explains every part.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from reef.errors import ReefError
from reef.version import __version__

__all__ = ["ScaffoldError", "check_recipe_name", "write_recipe_package"]

#: What a recipe name may be: the entry point's and the deployment's short name.
_NAME: Final = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(ReefError, ValueError):
    """The package cannot be written: a bad name, or its folder exists."""


def _minor_range() -> str:
    major, minor = (int(part) for part in __version__.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}"


_PYPROJECT: Final = """\
[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "reef-recipe-{name}"
version = "0.1.0"
description = "The {name} recipe for Reef"
readme = "README.md"
requires-python = ">=3.11"
# Reef's public API (import reef) only, by a bounded range: a minor release may change it.
dependencies = ["reef-core{range}"]

[project.optional-dependencies]
# pytest for Reef's test helpers (reef.testing and its storage fixtures), psycopg for those
# fixtures' PostgreSQL run (where REEF_TEST_DATABASE_URL names a database), and torch for the
# local training component that deployment.yaml names (its test loads the file).
test = ["reef-core[testing,postgres,torch]{range}"]

# The line that makes Reef find the plugin: the entry point's name is the plugin's short name
# (what `reef plugins` and REEF_BLOCK_PLUGINS show), its value the module of hook functions.
[project.entry-points."reef.plugins"]
{name} = "{module}.plugin"

[tool.hatch.build.targets.wheel]
packages = ["src/{module}"]

[tool.pytest.ini_options]
# -p reef.testing: Reef's storage fixtures (storage_database, on SQLite and PostgreSQL).
addopts = ["--import-mode=importlib", "-p", "reef.testing"]
"""

_README: Final = """\
# reef-recipe-{name}

The `{name}` recipe for Reef, as `reef new recipe {name}` wrote it: scored reports, grouped by
their `metadata.group`, trained GRPO-style by the core's `GroupedJobData`.

```bash
pip install -e '.[test]'   # with reef-core installed, or --find-links naming its wheels
pytest
reef plugins               # lists {name} and {cls}Samples
reef check deployment.yaml
```

reef-core is on no package index yet: install it first from a checkout of Reef, or add
`--find-links DIR` to the first command with DIR holding the wheels that Reef's `scripts/build`
makes (Reef's `docs/installing.md` says how). To serve the deployment, install
`reef-core[server,torch]` too, then run `reef serve deployment.yaml --allow-unauthenticated`.

Edit `src/{module}/processor.py` (the stages: which reports train and how) and `recipe.py`
(which stages, the job parameters); a recipe keeps its stages in `processor.py` and names them
in `recipe.py`. {guide} explains every part.
"""

_INIT: Final = '''\
"""The ``{name}`` recipe for Reef."""
'''

_PLUGIN: Final = '''\
"""The ``{name}`` plugin (entry point ``reef.plugins``): the recipe and its stage, under the
short names a deployment writes."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from {module}.processor import {cls}Samples
from {module}.recipe import {cls}Recipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("{name}", {cls}Recipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("{cls}Samples", {cls}Samples)
'''

_RECIPE: Final = '''\
"""The ``{name}`` recipe: its stages, and what the trainer tells the training component."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from reef import PipelineSpec, Recipe


class {cls}Recipe(Recipe):
    """Scored reports in comparison groups, trained with the importance-sampling policy
    gradient (each reward centred on its group's mean). A weight recipe: the deployment sets
    ``pipeline.sample2job.config.job_samples``."""

    requires_job_samples: ClassVar[bool] = True
    job_parameters: ClassVar[Mapping[str, Any]] = {{"objective": "importance_sampling"}}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """This package's ``{cls}Samples``, then the core's ``GroupedJobData``."""
        return PipelineSpec(record2sample="{cls}Samples", sample2job="GroupedJobData")
'''

_PROCESSOR: Final = '''\
"""The stages of the ``{name}`` recipe: ``{cls}Samples``, its record-to-sample stage (its
sample-to-job stage is the core's ``GroupedJobData``; one of its own would go here too).

Each report that carries a score becomes one trajectory sample (the scored calls, the score as
reward); a report without one ends without training, counted under ``{name}_unscored``.
Reports of one comparison group (``metadata.group``) train together once ``group_size`` of them
arrived.
"""

from __future__ import annotations

from typing import ClassVar, Final, Self

import attrs

from reef import (
    PluginSettings,
    Record2SampleSettings,
    ReportContext,
    ReportGroups,
    ReportSamples,
    Sample,
    SkippedReport,
    StageBuild,
    config_option,
)

#: Why a report without a score ends without training.
UNSCORED: Final = "{name}_unscored"


@attrs.frozen
class {cls}SamplesSettings(Record2SampleSettings):
    """``{cls}Samples``' keys, beside ``max_staleness``."""

    group_size: int = config_option(
        default=4,
        help="how many reports of one comparison group (metadata.group) train together",
        validator=attrs.validators.gt(0),
    )


class {cls}Samples(ReportSamples[{cls}SamplesSettings]):
    """One sample per scored report, grouped by ``metadata.group``."""

    Settings: ClassVar[type[PluginSettings]] = {cls}SamplesSettings

    @classmethod
    def from_settings(cls, settings: {cls}SamplesSettings, build: StageBuild) -> Self:
        """The stage with its grouping, from its parsed settings."""
        grouping = ReportGroups(settings.group_size)
        return cls(build.context, grouping, max_staleness=settings.max_staleness)

    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        """The scored calls with the score as reward; a report without a score is skipped."""
        if context.report.score is None:
            return SkippedReport(UNSCORED)
        return super().make_sample(context)
'''

_DEPLOYMENT: Final = """\
# A deployment that serves and trains the {name} recipe: `reef check deployment.yaml`, then
# `reef serve deployment.yaml --allow-unauthenticated` (a local engine and the local component,
# a small demo model: reef-core[server,torch]).
storage:
  url: "sqlite:///{name}.db"
serving:
  engine: local
scenarios:
  {name}:
    recipe: {name}
    pipeline:
      record2sample: {{config: {{group_size: 4}}}}
      sample2job: {{config: {{job_samples: 8}}}}
    training:
      component: local
      options: {{state_dir: "{name}-state", batch_size: 8}}
"""

_TEST: Final = '''\
"""The ``{name}`` recipe's own tests, with Reef's test helpers (``reef.testing``): the entry
point registers it, the deployment checks, and records and reports become a job."""

from __future__ import annotations

from pathlib import Path

from reef import GroupedJobData, InferenceRecord, PluginKind, Report, validate_job_data
from reef.embed import Plugins, load_deployment
from reef.testing import Database, pipeline_context, sample_store, training_pipeline
from {module}.processor import UNSCORED, {cls}Samples
from {module}.recipe import {cls}Recipe

DEPLOYMENT = Path(__file__).resolve().parents[1] / "deployment.yaml"
CONTEXT = pipeline_context("{name}", "local")


def call(call_id: str) -> InferenceRecord:
    """An agent's answer to a prompt of its own."""
    return InferenceRecord(
        call_id,
        "{name}",
        {{"messages": [{{"role": "user", "content": f"question {{call_id}}"}}]}},
        {{"choices": [{{"message": {{"role": "assistant", "content": "answer"}}}}]}},
        artifact_id="art-1",
    )


def test_the_entry_point_registers_the_recipe_and_its_stage() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    assert plugins.resolve(PluginKind.RECIPE, "{name}") is {cls}Recipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "{cls}Samples") is {cls}Samples


def test_the_deployment_names_the_recipe_and_checks() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    deployment = load_deployment(DEPLOYMENT, plugins=plugins)
    assert deployment.scenarios["{name}"].recipe.class_ == "{name}"


def test_scored_reports_become_a_job(storage_database: Database) -> None:
    samples = {cls}Samples.from_config({{"group_size": 2}}, context=CONTEXT, environ={{}})
    jobs = GroupedJobData.from_config(
        {{"job_samples": 2}}, context=CONTEXT, record2sample=samples, environ={{}}
    )
    pipeline = training_pipeline(samples, jobs, storage_database)
    pipeline.observe_serving_artifact_id("art-1")
    pipeline.push_many(
        [
            call("c1"),
            call("c2"),
            call("c3"),
            Report("r1", "{name}", ("c1",), score=1.0, metadata={{"group": "g"}}),
            Report("r2", "{name}", ("c2",), score=0.0, metadata={{"group": "g"}}),
            Report("r3", "{name}", ("c3",), metadata={{"group": "h"}}),
        ]
    )
    data = pipeline.build_job_data(2)
    assert data is not None
    validate_job_data(jobs, data)  # what the trainer checks before it submits
    assert [s.reward for s in data.samples] == [1.0, 0.0]
    pipeline.acknowledge(data.id)
    assert [s.id for s in sample_store(storage_database, "{name}").untrained("local")] == []
    # The unscored report ended without training, with the call it scored: counted, not lost.
    assert pipeline.status()["ended_records"] == {{UNSCORED: 2}}
'''


_CONFTEST: Final = '''\
"""The suite's fixtures: Reef's storage fixtures (``storage_database``, on SQLite, and on
PostgreSQL where ``REEF_TEST_DATABASE_URL`` names one)."""

pytest_plugins = ["reef.testing"]
'''


def _guide() -> str:
    """The recipe-authoring guide, as a link where this reef-core runs from a checkout."""
    guide = Path(__file__).resolve().parents[4] / "docs" / "recipe-authoring.md"
    if guide.is_file():
        return f"[Reef's recipe-authoring guide]({guide.as_posix()})"
    return "Reef's recipe-authoring guide (`docs/recipe-authoring.md` in Reef's repository)"


def check_recipe_name(name: str) -> str:
    """``name`` if it can name a recipe package.

    :raises ScaffoldError: for a name that is not lower-case letters, digits and ``_``,
        starting with a letter.
    """
    if not _NAME.match(name):
        raise ScaffoldError(
            f"recipe name {name!r}: use lower-case letters, digits and '_', starting with a"
            " letter (it is the entry point's, the deployment's and the module's name)"
        )
    return name


def write_recipe_package(name: str, parent: Path) -> Path:
    """Write the package of recipe ``name`` as ``parent/reef-recipe-<name>``; its folder.

    :raises ScaffoldError: for a name that is not lower-case letters, digits and ``_``
        (starting with a letter), or a folder that exists.
    """
    check_recipe_name(name)
    root = parent / f"reef-recipe-{name}"
    if root.exists():
        raise ScaffoldError(f"{root} exists: choose another name or folder, or remove it")
    module = f"reef_{name}"
    values = {
        "name": name,
        "module": module,
        "cls": "".join(part.capitalize() for part in name.split("_")),
        "range": _minor_range(),
        "guide": _guide(),
    }
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "deployment.yaml": _DEPLOYMENT,
        f"src/{module}/__init__.py": _INIT,
        f"src/{module}/py.typed": "",
        f"src/{module}/plugin.py": _PLUGIN,
        f"src/{module}/recipe.py": _RECIPE,
        f"src/{module}/processor.py": _PROCESSOR,
        "tests/conftest.py": _CONFTEST,
        f"tests/test_{name}.py": _TEST,
    }
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    return root
