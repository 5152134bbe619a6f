"""Scripted task generators for tests of the generated-task recipe.

:class:`ArithmeticTasks` makes small verifiable tasks with no model: each asks for the sum of
two numbers, its verifier (``tests/test.sh``) compares ``/app/answer.txt`` with the sum, and its
oracle (``solution/solve.sh``) writes the sum. Its validation runs no container: it checks that
the oracle's answer is the one the verifier expects. Its keys script what a test needs: how
many tasks a generation makes, generate calls that fail, a file whose presence holds
``generate`` (so a test can kill the process during a generation), and a JSON-lines log of every
``record_results`` call. :class:`WordTasks` is a second generator of the same shape (it asks
for a word reversed), so a test can swap one for the other by configuration alone.

Both register with :func:`reef.testing.inline_plugin` (``task_generators=...``) or are named
``doubles.generators:ArithmeticTasks`` in a deployment.

:func:`train_one_generation` runs a generated-task pipeline through one round and one task job
as the trainer does, whatever its generator, for a test that swaps generators;
:func:`swap_deployment` writes the deployment such a test swaps generators in, and
:func:`train_deployed_generation` builds its pipeline as the runtime does and runs it so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from reef.core.config import config_option
from reef.core.harbor import HarborTask
from reef.core.job_data import JobOutcome, TaskSample
from reef.core.plugins import PluginSettings
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.recipe.generated_tasks import (
    GeneratedTaskResult,
    TaskGenerator,
    TaskValidationResult,
    result_to_json,
)
from reef.recipe.generated_tasks.processor import GeneratedTaskSamples
from reef.record2sample.generator import TaskGenerationRequest
from reef.storage import Database
from reef.train.pipeline import TrainingPipeline
from reef.train.stages import build_pipeline

__all__ = [
    "ArithmeticTasks",
    "ScriptedTasks",
    "ScriptedTasksSettings",
    "WordTasks",
    "swap_deployment",
    "train_deployed_generation",
    "train_one_generation",
]

_TASK_TOML = """version = "1.0"

[metadata]
generator = "{generator}"

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 60.0
"""

_TEST_SH = """#!/bin/sh
# Reward 1 when the agent's answer is the expected one, else 0.
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "{answer}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

_SOLVE_SH = """#!/bin/sh
mkdir -p /app
echo "{answer}" > /app/answer.txt
"""

_EXPECTED = re.compile(r'= "([^"]*)" \]; then')
_SOLVED = re.compile(r'echo "([^"]*)" > /app/answer.txt')


@attrs.frozen
class ScriptedTasksSettings(PluginSettings):
    """The keys of a scripted generator."""

    tasks_per_generation: int = config_option(
        2, help="how many tasks each generation makes", validator=attrs.validators.ge(0)
    )
    failing_generate_calls: int = config_option(
        0, help="the first this many generate calls raise", validator=attrs.validators.ge(0)
    )
    broken_oracle_every: int = config_option(
        0,
        help="every n-th task's oracle writes a wrong answer, so validation rejects it (0: none)",
        validator=attrs.validators.ge(0),
    )
    hold_path: str | None = config_option(
        None, help="while this file exists, generate waits (a test kills the process then)"
    )
    results_log: str | None = config_option(
        None, help="a JSON-lines file that receives each record_results call"
    )


class ScriptedTasks(TaskGenerator):
    """The shared machinery of the scripted generators; a subclass says what a task asks."""

    Settings: ClassVar[type[PluginSettings]] = ScriptedTasksSettings
    #: The prefix of each task's name.
    kind: ClassVar[str] = ""

    def __init__(
        self,
        *,
        tasks_per_generation: int = 2,
        failing_generate_calls: int = 0,
        broken_oracle_every: int = 0,
        hold_path: str | None = None,
        results_log: str | None = None,
    ) -> None:
        self.tasks_per_generation = tasks_per_generation
        self.failing_generate_calls = failing_generate_calls
        self.broken_oracle_every = broken_oracle_every
        self.hold_path = None if hold_path is None else Path(hold_path)
        self.results_log = None if results_log is None else Path(results_log)
        self.generate_calls: list[TaskGenerationRequest] = []
        self.validated: list[str] = []
        self.recorded: list[tuple[int, tuple[GeneratedTaskResult, ...]]] = []

    def question(self, seed: int) -> tuple[str, str]:
        """The instruction and the expected answer of the task made from ``seed``."""
        raise NotImplementedError

    async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
        """``tasks_per_generation`` tasks, the same for the same generation number."""
        self.generate_calls.append(request)
        while self.hold_path is not None and self.hold_path.exists():
            await asyncio.sleep(0.05)
        if len(self.generate_calls) <= self.failing_generate_calls:
            raise RuntimeError(f"scripted failure of generate call {len(self.generate_calls)}")
        tasks = []
        for index in range(self.tasks_per_generation):
            digest = hashlib.sha256(f"{request.generation}:{index}".encode()).hexdigest()
            instruction, answer = self.question(int(digest[:8], 16))
            broken = self.broken_oracle_every and (index + 1) % self.broken_oracle_every == 0
            files = {
                "task.toml": _TASK_TOML.format(generator=type(self).__name__),
                "instruction.md": instruction,
                "tests/test.sh": _TEST_SH.format(answer=answer),
                "solution/solve.sh": _SOLVE_SH.format(answer=f"{answer}x" if broken else answer),
            }
            name = f"{self.kind}-g{request.generation}-{index}"
            tasks.append(HarborTask(name, files, request.source_record_ids))
        return tuple(tasks)

    async def validate(self, task: HarborTask) -> TaskValidationResult:
        """The oracle's answer must be the verifier's: a static check, no container."""
        self.validated.append(task.name)
        expected = _EXPECTED.search(task.files["tests/test.sh"])
        solved = _SOLVED.search(task.files.get("solution/solve.sh", ""))
        if expected is None or solved is None:
            return TaskValidationResult(("the verifier or the oracle is not the scripted one",))
        if expected.group(1) != solved.group(1):
            return TaskValidationResult(("the oracle's answer does not pass the verifier",))
        return TaskValidationResult()

    async def record_results(
        self, results: tuple[GeneratedTaskResult, ...], *, generation: int
    ) -> None:
        """Keep the call (and append it to ``results_log``)."""
        self.recorded.append((generation, results))
        if self.results_log is not None:
            line: dict[str, Any] = {
                "generation": generation,
                "results": [result_to_json(r) for r in results],
            }
            with self.results_log.open("a", encoding="utf-8") as log:
                log.write(json.dumps(line) + "\n")


class ArithmeticTasks(ScriptedTasks):
    """Tasks that ask for the sum of two numbers (see the module's documentation)."""

    kind: ClassVar[str] = "add"

    def question(self, seed: int) -> tuple[str, str]:
        a, b = seed % 50, (seed // 50) % 50
        return f"What is {a} + {b}? Write only the number to /app/answer.txt.\n", str(a + b)


class WordTasks(ScriptedTasks):
    """Tasks that ask for a word spelled backwards (see the module's documentation)."""

    kind: ClassVar[str] = "reverse"
    _WORDS: ClassVar[tuple[str, ...]] = ("coral", "reef", "tide", "kelp", "shell", "wave")

    def question(self, seed: int) -> tuple[str, str]:
        word = f"{self._WORDS[seed % len(self._WORDS)]}{seed % 97}"
        return f"Write the word {word!r} backwards to /app/answer.txt.\n", word[::-1]


def _settle(pipeline: TrainingPipeline, stage: GeneratedTaskSamples, timeout: float) -> None:
    """Produce until the stage's background jobs (generation, delivery) have all ended."""
    pipeline.produce()
    while stage.background_jobs_running():
        stage.worker.wait(timeout)
        pipeline.produce()


def train_one_generation(
    pipeline: TrainingPipeline, rewards: tuple[float, ...] = (1.0, 0.0), *, timeout: float = 30
) -> list[str]:
    """Run ``pipeline`` (the generated-task recipe's) as its trainer would through one round
    and one task job: produce until the round's generation is complete, build and acknowledge
    a job, end it with ``rewards`` as every task's rollout rewards, and produce until the
    results have reached the generator. Returns the names of the job's tasks.

    :param timeout: how long each wait for a background job may take, in seconds.
    """
    stage = pipeline.record2sample
    if not isinstance(stage, GeneratedTaskSamples):
        raise TypeError(f"the pipeline's record2sample is {type(stage).__name__}, not generated")
    _settle(pipeline, stage, timeout)
    data = pipeline.build_job_data(pipeline.sample2job.job_samples)
    if data is None:
        raise AssertionError("the round made no task job")
    pipeline.acknowledge(data.id)
    names = [s.name for s in data.samples if isinstance(s, TaskSample)]
    outcome = JobOutcome(
        data.id, pipeline.context.component, "finished",
        {"rollout_rewards": {name: list(rewards) for name in names}},
    )  # fmt: skip
    pipeline.job_ended(outcome)
    _settle(pipeline, stage, timeout)
    return names


_SWAP_DEPLOYMENT = """
scenarios:
  tasks:
    recipe:
      class: generated_tasks
      config: {{job_parameters: {{rollout: {{rollouts_per_task: 2}}}}}}
    pipeline:
      record2sample:
        config:
          generator: {generator}
          generator_config: {generator_config}
          rounds: 1
      sample2job: {{config: {{buffer_size: 2}}}}
    training: {{component: {component}}}
"""


def swap_deployment(
    generator: str, *, component: str, generator_config: str = "{tasks_per_generation: 2}"
) -> str:
    """A deployment's text with one scenario, ``tasks``, of the generated-task recipe: one
    round of ``generator`` (a registered name or ``module:Class``, with ``generator_config``
    as YAML flow text), tasks rolled out twice each, jobs of two tasks, trained by
    ``component``. A test swaps generators by changing ``generator`` alone."""
    return _SWAP_DEPLOYMENT.format(
        generator=generator, generator_config=generator_config, component=component
    )


def train_deployed_generation(
    text: str,
    *,
    plugins: Plugins,
    database: Database,
    environ: Mapping[str, str] | None = None,
    rewards: tuple[float, ...] = (1.0, 0.0),
) -> tuple[list[str], TaskGenerator]:
    """Build the pipeline of scenario ``tasks`` of the deployment ``text`` as the runtime
    does (``environ`` as the trainer's environment), run it through one generation
    (:func:`train_one_generation`) and close it. Returns the job's task names and the
    stage's generator."""
    deployment = load_deployment(text, plugins=plugins)
    pipeline = build_pipeline(
        "tasks", deployment.scenarios["tasks"], plugins=plugins, database=database,
        environ=environ,
    )  # fmt: skip
    try:
        names = train_one_generation(pipeline, rewards)
        stage = pipeline.record2sample
        assert isinstance(stage, GeneratedTaskSamples)  # train_one_generation checked it
        return names, stage.generator
    finally:
        pipeline.close(10)
