"""A scripted task generator whose tasks a tiny model learns in a few jobs, for end-to-end tests.

:class:`LowercaseTasks` makes string tasks: each asks for a word in lowercase letters, and its
verifier (``tests/test.sh``, a Python script run by bash) scores the share of the answer's
characters that are lowercase ASCII letters: a shaped reward, so the rollouts of an untrained
TinyGPT (random bytes) score a little, and training on them raises the score job by job. Its
oracle writes ``reef`` (reward 1). It validates each task for real, through the generator
service: the oracle must pass the verifier in the sandbox (:class:`reef.GeneratorClient`,
found from ``environ``, which ``reef serve`` fills).

Name it ``doubles.shaped_tasks:LowercaseTasks`` in a deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

import attrs

from reef.core.config import config_option
from reef.core.harbor import HarborTask
from reef.core.plugins import PluginSettings
from reef.recipe.generated_tasks import TaskGenerator, TaskValidationResult
from reef.record2sample.generator import TaskGenerationRequest
from reef.record2sample.generator.client import GeneratorClient

__all__ = ["LowercaseTasks", "LowercaseTasksSettings"]

_VERIFIER: Final = """\
python3 - <<'EOF'
import pathlib
answer = pathlib.Path("/app/answer.txt")
text = answer.read_text(errors="replace").strip() if answer.exists() else ""
score = sum(c in "abcdefghijklmnopqrstuvwxyz" for c in text) / len(text) if text else 0.0
pathlib.Path("/logs/verifier/reward.txt").write_text(str(score))
EOF
"""


@attrs.frozen
class LowercaseTasksSettings(PluginSettings):
    """The keys of :class:`LowercaseTasks`."""

    tasks_per_generation: int = config_option(
        2, help="how many tasks each generation makes", validator=attrs.validators.ge(1)
    )


class LowercaseTasks(TaskGenerator[LowercaseTasksSettings]):
    """Tasks that ask for a lowercase word (see the module's documentation)."""

    Settings: ClassVar[type[PluginSettings]] = LowercaseTasksSettings

    def __init__(self, *, tasks_per_generation: int, service: GeneratorClient) -> None:
        self.tasks_per_generation = tasks_per_generation
        self.service = service

    @classmethod
    def from_settings(
        cls, settings: LowercaseTasksSettings, *, scenario: str, environ: Mapping[str, str]
    ) -> LowercaseTasks:
        """The generator, with the client of the generator service ``environ`` names."""
        return cls(
            tasks_per_generation=settings.tasks_per_generation,
            service=GeneratorClient.from_environ(environ, scenario=scenario),
        )

    async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
        """``tasks_per_generation`` tasks, named by generation and index."""
        files: dict[str, Any] = {
            "task.toml": 'version = "1.0"\n\n[verifier]\ntimeout_sec = 10.0\n',
            "tests/test.sh": _VERIFIER,
            "solution/solve.sh": "echo reef > /app/answer.txt\n",
        }
        return tuple(
            HarborTask(
                f"lower-g{request.generation}-{index}",
                {
                    **files,
                    "instruction.md": f"Write word {request.generation}.{index} in lowercase.",
                },
                request.source_record_ids,
            )
            for index in range(self.tasks_per_generation)
        )

    async def validate(self, task: HarborTask) -> TaskValidationResult:
        """The oracle, run through the generator service, must score 1."""
        verdict = await self.service.oracle(task)
        if verdict.reward != 1.0:
            return TaskValidationResult((f"the oracle scored {verdict.reward}",))
        return TaskValidationResult()
