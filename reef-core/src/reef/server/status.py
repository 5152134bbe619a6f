"""``GET /reef/status``: each scenario and trainer, read from the stores; and ``reef status``'s
table of it.

What the stores hold is read directly: the stored training mode, drop counts by reason, unread
instructions, manual buffers, evicted bodies. What only a trainer knows (its buffer, the job it
runs, the artifact it serves, its last errors) comes from the trainer's durable status
snapshot: a JSON object the trainer writes to the scenario's settings under
``trainer_status:<trainer>`` (:func:`reef.storage.scenario_settings.snapshot_key`;
``docs/service.md`` gives its shape).
Before a trainer's first snapshot those values are ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.core.evals import ServeIfSection
from reef.core.records import JSON
from reef.engines.publisher import Publisher, publisher_statuses
from reef.evals.gate import EVAL_ERROR_PREFIX
from reef.server.admission import TrainerAdmission
from reef.server.bodies import ScenarioStatus, StatusDocument, TrainerStatus, answer
from reef.server.openapi import ApiRoute
from reef.server.service import service_of
from reef.storage import (
    ArtifactEvaluations,
    DropCounters,
    RecordStore,
    ScenarioSettings,
    TrainerSamples,
)
from reef.storage.scenario_settings import TRAINING_MODE_SETTING, snapshot_key, stored_training_mode

__all__ = ["ROUTES", "scenario_status", "status_table"]

#: The most errors of a snapshot that status shows.
LAST_ERRORS: Final = 10


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trainer_status(
    trainer: str,
    *,
    samples: TrainerSamples,
    snapshot: Mapping[str, Any],
    drops: Mapping[str, int],
    stages: TrainerAdmission,
    serves: bool = False,
) -> TrainerStatus:
    """One trainer's status from the store and its snapshot (``{}`` before its first); what
    the snapshot does not give yet comes from its ``stages``. ``serves``: the scenario's engine
    answers with this trainer's artifacts."""
    unread = {i.request_id for i in samples.unread_instructions(trainer)}
    queued = snapshot.get("queued_instructions") or []
    pending = unread | {str(i) for i in queued if isinstance(i, str)}
    errors = snapshot.get("last_errors") or []
    running = snapshot.get("running_job")
    served = snapshot.get("served_artifact")
    updated = snapshot.get("updated_at")
    background = snapshot.get("background_jobs_running")
    holder = snapshot.get("holder")
    pipeline = snapshot.get("pipeline")
    extensions = snapshot.get("extensions")
    counts = snapshot.get("job_counts")
    paused = snapshot.get("paused")
    return TrainerStatus(
        trainer=trainer,
        accepts_trajectories=stages.accepts_trajectories,
        supported_training_modes=stages.supported_training_modes,
        job_samples=_int_or_none(snapshot.get("job_samples")) or stages.job_samples,
        buffer_size=_int_or_none(snapshot.get("buffer_size")) or stages.buffer_size,
        ready_samples=_int_or_none(snapshot.get("ready_samples")),
        pending_instructions=len(pending),
        manual_buffer=len(samples.manual_buffer(trainer)),
        background_jobs_running=background if isinstance(background, bool) else None,
        running_job=running if isinstance(running, dict) else None,
        served_artifact=served if isinstance(served, str) else None,
        drops=dict(drops),
        last_errors=tuple(e for e in errors if isinstance(e, dict))[-LAST_ERRORS:],
        snapshot_at=float(updated) if isinstance(updated, int | float) else None,
        holder=holder if isinstance(holder, str) else None,
        jobs_ended=_int_or_none(snapshot.get("jobs_ended")),
        job_counts=counts if isinstance(counts, dict) else {},
        paused=paused if isinstance(paused, str) else None,
        pipeline=pipeline if isinstance(pipeline, dict) else {},
        extensions=extensions if isinstance(extensions, dict) else {},
        component=stages.component,
        serves=serves,
    )


#: How many results and gate decisions the status shows, newest last.
SHOWN_EVALUATIONS: Final = 20


def evaluation_status(
    evaluations: ArtifactEvaluations,
    gate: ServeIfSection | None,
    trainer: str | None,
    stored: Mapping[str, Any],
) -> JSON:
    """A scenario's evaluations as the status shows them: the newest results (without their
    items), the gate and its newest decisions, and an evaluation that could not finish."""
    status: JSON = {
        "results": [r.summary() for r in evaluations.results(trainer, limit=SHOWN_EVALUATIONS)],
        "gate": None,
        "last_error": None if trainer is None else stored.get(f"{EVAL_ERROR_PREFIX}{trainer}"),
    }
    if gate is not None and trainer is not None:
        decisions = evaluations.decisions(trainer, limit=SHOWN_EVALUATIONS)
        status["gate"] = {
            "eval": gate.eval,
            "not_worse_than": gate.not_worse_than,
            "resume_from": gate.resume_from,
            "served_artifact": evaluations.served_artifact(trainer),
            "held_back": sum(1 for d in decisions if not d.served),
            "decisions": [d.to_json() for d in decisions],
        }
    return status


def scenario_status(
    scenario: str,
    *,
    records: RecordStore,
    samples: TrainerSamples,
    settings: ScenarioSettings,
    trainers: Mapping[str, TrainerAdmission],
    engine: Mapping[str, Any] | None = None,
    served: str | None = None,
    evaluations: ArtifactEvaluations | None = None,
    gate: ServeIfSection | None = None,
) -> ScenarioStatus:
    """One scenario's status.

    :param trainers: each trainer's stages as admission knows them
        (:attr:`reef.server.admission.ScenarioAdmission.trainers`), for the values before its
        first snapshot.
    :param engine: the publication status of its vLLM or SGLang server in this process, if it
        has one; every process's (as each wrote it to the settings) is added as ``processes``.
    :param served: the trainer whose artifacts the scenario's engine answers with, if any.
    :param evaluations: its evaluation results and gate decisions, when it has ``evals``;
        ``gate`` its ``serve_if``.
    """
    stored = settings.items()
    if engine is not None:
        engine = {**engine, "processes": publisher_statuses(stored)}
    counts = DropCounters(samples.database, scenario).counts()
    held, _ = records.usage()
    evicted = sum(records.evictions().values())
    return ScenarioStatus(
        scenario=scenario,
        training_mode=stored_training_mode(stored.get(TRAINING_MODE_SETTING)),
        trainers=tuple(
            trainer_status(
                trainer,
                samples=samples,
                snapshot=stored.get(snapshot_key(trainer)) or {},
                drops=counts.get(trainer, {}),
                stages=stages,
                serves=trainer == served,
            )
            for trainer, stages in trainers.items()
        ),
        drops=counts.get(None, {}),
        bodies_held=held,
        evicted_bodies=evicted,
        engine=engine,
        evaluations=None
        if evaluations is None
        else evaluation_status(evaluations, gate, served, stored),
    )


def _left_out(trainer: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """What the trainer's pipeline holds out of its buffer now (stale samples and the
    group-mates held with them), as the drops column shows it beside the durable drops."""
    pipeline = trainer.get("pipeline") or {}
    names = (("stale_samples", "stale"), ("held_with_stale_group", "held_with_stale"))
    return [(shown, pipeline[key]) for key, shown in names if pipeline.get(key)]


def _shown(value: Any) -> str:
    return "-" if value is None else str(value)


def _publication_note(status: Mapping[str, Any]) -> str:
    """A publisher's status in a few words: what it serves, how many publications, what is
    pending, its last error."""
    error = (status.get("last_error") or {}).get("error")
    return (
        f"serves {_shown(status.get('served_artifact'))} ({status.get('publications')}"
        f" published, {status.get('failures')} failed; pending"
        f" {_shown(status.get('pending_artifact'))})" + (f"; last error: {error}" if error else "")
    )


def _evaluation_notes(name: str, evaluations: Mapping[str, Any] | None) -> list[str]:
    """A scenario's evaluations in a few lines: each artifact's newest scores, the gate and
    its last decision, an evaluation that could not finish."""
    if not evaluations:
        return []
    notes = []
    scores: dict[str, list[str]] = {}
    for result in evaluations.get("results") or []:
        scores.setdefault(str(result.get("artifact_id")), []).append(
            f"{result.get('eval')}={result.get('score'):.4f}"
            + (f" ({result.get('errors')} verifier errors)" if result.get("errors") else "")
        )
    for artifact, shown in scores.items():
        notes.append(f"{name}: eval {artifact}: {', '.join(shown)}")
    gate = evaluations.get("gate")
    if gate:
        decisions = gate.get("decisions") or []
        last = decisions[-1] if decisions else None
        said = (
            f"; last: {last.get('artifact_id')} {'served' if last.get('served') else 'held back'}:"
            f" {last.get('reason')}"
            if last
            else ""
        )
        notes.append(
            f"{name}: gate {gate.get('eval')} (not worse than {gate.get('not_worse_than')}):"
            f" serves {_shown(gate.get('served_artifact'))}, held back"
            f" {gate.get('held_back')}{said}"
        )
    error = evaluations.get("last_error")
    if error:
        notes.append(
            f"{name}: evaluation of {error.get('artifact_id')} unfinished: {error.get('error')}"
        )
    return notes


def status_table(document: Mapping[str, Any]) -> str:
    """``GET /reef/status``'s JSON as a table for a person: one row per scenario and trainer,
    then each scenario's drops, each trainer's last errors and what its extensions report (one
    line per extension, its JSON)."""
    header = ("SCENARIO", "TRAINER", "MODE", "READY", "JOB", "BUFFER", "PENDING", "MANUAL",
              "BG", "RUNNING JOB", "SERVED ARTIFACT", "DROPS")  # fmt: skip
    rows: list[tuple[str, ...]] = [header]
    notes: list[str] = []

    for scenario in document.get("scenarios", []):
        name = scenario["scenario"]
        trainers = scenario.get("trainers") or [{}]
        for trainer in trainers:
            running = trainer.get("running_job") or {}
            drops = ", ".join(
                f"{k}={v}"
                for k, v in sorted((trainer.get("drops") or {}).items()) + _left_out(trainer)
            )
            rows.append(
                (
                    name,
                    _shown(trainer.get("trainer")),
                    scenario["training_mode"],
                    _shown(trainer.get("ready_samples")),
                    _shown(trainer.get("job_samples")),
                    _shown(trainer.get("buffer_size")),
                    _shown(trainer.get("pending_instructions")),
                    _shown(trainer.get("manual_buffer")),
                    _shown(trainer.get("background_jobs_running")),
                    _shown(running.get("job_id")),
                    _shown(trainer.get("served_artifact")),
                    drops or "-",
                )
            )
            ended = (trainer.get("pipeline") or {}).get("ended_records") or {}
            if isinstance(ended, dict) and ended:
                notes.append(
                    f"{name}/{trainer.get('trainer')}: ended without training, counted in DROPS"
                    " when the next job commits: "
                    + ", ".join(f"{k}={v}" for k, v in sorted(ended.items()))
                )
            if trainer.get("paused"):
                notes.append(f"{name}/{trainer.get('trainer')}: PAUSED: {trainer['paused']}")
            counts = trainer.get("job_counts") or {}
            if counts:
                notes.append(
                    f"{name}/{trainer.get('trainer')}: in {trainer.get('jobs_ended')} jobs: "
                    + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                )
            for error in trainer.get("last_errors") or []:
                notes.append(f"{name}/{trainer.get('trainer')}: error: {error.get('error')}")
            for extension, report in sorted((trainer.get("extensions") or {}).items()):
                shown_report = json.dumps(report, sort_keys=True, separators=(", ", ": "))
                notes.append(f"{name}/{trainer.get('trainer')}: {extension}: {shown_report}")
        if len(trainers) > 1:
            serving = [t.get("trainer") for t in trainers if t.get("serves")]
            notes.append(
                f"{name}: the engine answers with trainer {serving[0]}'s artifacts; the other"
                " trainers' artifacts answer no call"
                if serving
                else f"{name}: the engine answers with none of its trainers' artifacts"
            )
        if not scenario.get("trainers"):
            notes.append(
                f"{name}: no training section: its calls and reports are kept, nothing trains"
            )
        scenario_drops = ", ".join(
            f"{k}={v}" for k, v in sorted((scenario.get("drops") or {}).items())
        )
        notes.append(
            f"{name}: bodies held {scenario.get('bodies_held')}, evicted"
            f" {scenario.get('evicted_bodies')}; scenario drops: {scenario_drops or 'none'}"
        )
        notes.extend(_evaluation_notes(name, scenario.get("evaluations")))
        engine = scenario.get("engine")
        if engine:
            notes.append(f"{name}: {engine.get('engine')} {_publication_note(engine)}")
            processes = engine.get("processes") or []
            for process in processes if len(processes) > 1 else ():
                this = " (this one)" if process.get("process") == engine.get("process") else ""
                silent = process.get("silent_seconds")
                gone = f"gone (silent {silent} s): " if process.get("gone") else ""
                notes.append(
                    f"{name}: process {process.get('process')}{this}: {gone}"
                    + _publication_note(process)
                )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]  # fmt: skip
    return "\n".join(lines + notes)


def _publication(publisher: Publisher | None) -> JSON | None:
    return None if publisher is None else publisher.status()


async def get_status(request: Request) -> Response:
    """``GET /reef/status``: every scenario the caller's token may see."""
    service = service_of(request)
    caller = service.caller(request)
    caller.require("admin")

    def read() -> StatusDocument:
        return StatusDocument(
            tuple(
                scenario_status(
                    scenario.name,
                    records=scenario.records,
                    samples=scenario.samples,
                    settings=scenario.settings,
                    trainers=scenario.admission.trainers,
                    engine=_publication(service.runtime.publisher(scenario.name)),
                    served=scenario.served_trainer,
                    evaluations=scenario.evaluations,
                    gate=scenario.gate,
                )
                for scenario in service.scenarios.values()
                if caller.sees(scenario.name)
            )
        )

    return answer(await anyio.to_thread.run_sync(read))


#: The status route.
ROUTES: Final = (
    ApiRoute(
        "GET",
        "/reef/status",
        "each scenario and trainer: mode, buffer, jobs, drops, errors",
        get_status,
        None,
        {200: StatusDocument},
        "admin",
    ),
)
