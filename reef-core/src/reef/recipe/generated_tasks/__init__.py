"""The generated-task recipe, as one package laid out as a recipe distribution lays out its own:

- :mod:`~reef.recipe.generated_tasks.contract`: :class:`TaskGenerator`, the contract a task
  generator implements, and the results it gets back;
- :mod:`~reef.recipe.generated_tasks.recipe`: :class:`GeneratedTaskRecipe`, the recipe a
  deployment selects (``recipe: generated_tasks``, or
  ``reef.recipe.generated_tasks:GeneratedTaskRecipe``);
- :mod:`~reef.recipe.generated_tasks.processor`: its two stages, the generation rounds
  (``GeneratedTaskSamples``) and the task jobs (``GeneratedTaskJobData``);
- :mod:`~reef.recipe.generated_tasks.ledger`: what the rounds keep in the scenario's task store,
  and one generation's run.

The generator service that runs a task's container operations is
:mod:`reef.record2sample.generator`; the sandboxes it runs them in are :mod:`reef.containers`;
a training component rolls a task job's tasks out with :mod:`reef.components.task_rollouts`.
"""

from reef.recipe.generated_tasks.contract import (
    FailedTask,
    GeneratedTaskResult,
    GeneratedTaskResultError,
    HeldOutTask,
    RejectedTask,
    RolledOutTask,
    TaskGenerator,
    TaskValidationResult,
    result_from_json,
    result_to_json,
)
from reef.recipe.generated_tasks.recipe import GeneratedTaskRecipe, GeneratedTaskRecipeSettings

__all__ = [
    "FailedTask",
    "GeneratedTaskRecipe",
    "GeneratedTaskRecipeSettings",
    "GeneratedTaskResult",
    "GeneratedTaskResultError",
    "HeldOutTask",
    "RejectedTask",
    "RolledOutTask",
    "TaskGenerator",
    "TaskValidationResult",
    "result_from_json",
    "result_to_json",
]
