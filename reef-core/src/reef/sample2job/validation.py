"""Checking job data against a sample-to-job stage's ``output_schema`` (P-PIPE-7).

The trainer runs this check on every job's data before any event hook sees it or the
component receives it; a recipe's tests run the same check on the data its stage makes, so
what passes a test is what the trainer submits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev tools yet

from reef.core.job_data import JobData, job_data_to_json
from reef.errors import ReefError
from reef.sample2job.stage import Sample2Job

__all__ = ["JobDataError", "validate_job_data"]


class JobDataError(ReefError, ValueError):
    """Job data that does not match its stage's ``output_schema``.

    :ivar data_id: the job data's id.
    :ivar path: where in the job data's JSON form (:func:`~reef.core.job_data.job_data_to_json`)
        the first problem is, as ``$.samples[0].body.reward``.
    :ivar reason: what is wrong there, in jsonschema's words.
    :ivar stage: the class name of the stage whose schema it failed; ``None`` when a bare
        schema was given.
    """

    def __init__(self, data_id: str, path: str, reason: str, stage: str | None) -> None:
        self.data_id = data_id
        self.path = path
        self.reason = reason
        self.stage = stage
        schema = "the output_schema" if stage is None else f"the output_schema of {stage}"
        super().__init__(f"job data {data_id!r} does not match {schema}: {reason} @ {path}")


def _json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _nearest_problem(error: Any) -> Any:
    """The problem to report. Where no branch of a ``oneOf``/``anyOf`` matched (a sample's
    kinds), jsonschema's message repeats the whole value; the branch with the fewest problems
    is the one the data meant (its own kind), so its best problem says what to fix."""
    while error.context:
        branches: dict[Any, list[Any]] = {}
        for problem in error.context:
            branches.setdefault(problem.schema_path[0], []).append(problem)
        error = jsonschema.exceptions.best_match(min(branches.values(), key=len))
    return error


def validate_job_data(stage_or_schema: Sample2Job | Mapping[str, Any], data: JobData) -> None:
    """Check ``data`` against a stage's ``output_schema``, or against ``stage_or_schema``
    itself when it is a JSON Schema (P-PIPE-7).

    :raises JobDataError: naming the data, the stage, the path of the problem and the reason.
    :raises jsonschema.SchemaError: when the schema itself is not a valid JSON Schema.
    """
    if isinstance(stage_or_schema, Sample2Job):
        schema, stage = stage_or_schema.output_schema, type(stage_or_schema).__name__
    else:
        schema, stage = dict(stage_or_schema), None
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    error = jsonschema.exceptions.best_match(validator(schema).iter_errors(job_data_to_json(data)))
    if error is not None:
        problem = _nearest_problem(error)
        raise JobDataError(data.id, _json_path(problem.absolute_path), problem.message, stage)
