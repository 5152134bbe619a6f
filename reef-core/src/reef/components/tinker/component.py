"""The ``tinker`` training component: Reef's jobs trained by Tinker, the hosted training service.

A job runs on the component's own thread (the trainer never waits on Tinker):

1. parse the job parameters (:class:`reef.components.job_parameters.JobParameters`);
2. render and score the samples as every component does
   (:func:`reef.components.job_samples.prepare_job`), with the configured tokenizer and the
   engine's chat template arguments;
3. plan the optimizer steps of ``batch_size`` units (:mod:`reef.components.scheduling`);
4. for ``importance_sampling`` and ``ppo``, one ``forward`` reads every trained token's log
   probability under the job's start weights; under a distilling objective (``distillation``)
   the teacher then scores the same tokens in each sample's teacher sequence: the student
   itself at the job's start weights (a second ``forward``, of the teacher sequences, before
   any step) or an engine that returns prompt log probabilities (``base_url``), and each
   token's advantage is ``-kl_coef * (log p_student - log p_teacher)`` plus the reward's
   (:mod:`reef.components.teacher_scores`, the ``teacher_kl`` metric);
5. per step, one ``forward_backward`` of the step's ``Datum`` values
   (:mod:`reef.components.tinker.datums`) with Tinker's built-in loss of the objective's name
   (``ppo`` with the job's clip range as its ``loss_fn_config``) and one ``optim_step`` with the
   configured Adam parameters; every future is awaited with ``request_timeout``. A step of a
   policy objective whose every advantage is 0 sends neither: it has no gradient, and Adam
   would still move every weight by its momentum
   (:func:`~reef.components.job_samples.moves_no_weight`). It counts as a step all the same
   (its loss 0, its samples consumed), as on the local component;
6. save the trained weights as a Tinker training checkpoint (with the optimizer state) named
   for this attempt of the job, then record the job's outcome under ``state_dir``. A job none
   of whose steps moved the weights saves none: its weights are those of the last checkpoint,
   under the same artifact id.

**Task jobs** (``task_group``): :func:`~reef.components.task_rollouts.roll_out_tasks` rolls
the tasks out on a Tinker sampling client at the job's start weights (saved for the sampler as
``publish`` saves them, and named in each rollout's ``training.artifact_id``), each reply keeping
the tokens and log probabilities Tinker's sampler gave (P-REND-6), and each task's group of at
least two rollouts trains with ``importance_sampling`` on its ``task_group`` advantages, in the
steps and checkpoint of any job.

**Idempotence across restarts.** The checkpoint is the job's commit point on the service. Just
before it is saved, the outcome the job will have and the checkpoint's name are written to
``state_dir`` (*pending*). A component that starts finds a pending job and asks Tinker for the
checkpoints of the run that trained it (``RestClient.list_checkpoints``): the named checkpoint
there means the job finished (its outcome is recorded, its weights become current); none
means it did not. Every process trains from the checkpoint of the last job that finished
(``create_training_client_from_state_with_optimizer``), so steps a job took before a crash or
a failure are never part of the weights: a job is trained into the weights once or not at all.
What cannot be known: steps the service applied for a job that did not reach its checkpoint
(they are discarded, not undone), and a checkpoint save the service finishes only after the
component looked (each attempt saves under its own name, so such a late checkpoint is never
taken for another attempt's, and is ignored).

**Artifacts.** ``publish`` saves the current weights for Tinker's sampler
(``save_weights_for_sampler``) once per checkpoint and writes ``artifacts/<hex>/artifact.json``
(the sampler path, the checkpoint, the base model) and ``artifacts/LATEST``. The ``artifact_id``
is ``sha256:`` of the Tinker path of the training checkpoint that holds the weights: Tinker never
rewrites a checkpoint path (Reef saves with ``overwrite`` off and names each save once), so the
path names one set of weights, the same in every process and after a restart.

**Errors.** A transport error, an error answer, or a future that does not end within
``request_timeout`` ends the job as failed with the error; the training client is dropped and
the next job starts again from the last checkpoint. The API key is read from the environment
variable ``api_key_env`` and never logged: it is removed from every error text.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
from tinker import types

from reef.components.interface import Artifact, JobHandle
from reef.components.job_parameters import POLICY_OBJECTIVES, JobParameters, TeacherSettings
from reef.components.job_runner import JobRunner
from reef.components.job_samples import PreparedJob, job_metrics, moves_no_weight, prepare_job
from reef.components.json_files import read_json, write_json
from reef.components.scheduling import SequenceRef, StepPlan, plan_steps
from reef.components.task_rollouts import roll_out_tasks, task_group_advantages, task_metrics
from reef.components.teacher_scores import (
    EngineTeacher,
    TeacherError,
    TeacherScorer,
    marked_values,
    token_advantages,
)
from reef.components.tinker.connection import (
    Connect,
    SamplingClientLike,
    TinkerConnection,
    TrainingClientLike,
)
from reef.components.tinker.datums import (
    cross_entropy_datum,
    policy_datum,
    target_logprobs,
)
from reef.components.tinker.sampler import start_sampler
from reef.components.tinker.settings import TinkerComponentSettings
from reef.components.tokenizers import HFTokenizer, load_tokenizer
from reef.core.chat_rendering import ChatRenderer, RenderedSample, RenderedSequence, Tokenizer
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.core.records import JSON

logger = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------
# the journal under state_dir
# -------------------------------------------------------------------------------------------


class _SelfTeacher:
    """The student as its own teacher: a ``forward`` of the teacher sequences on the training
    client, at the weights it holds (the job's start weights, before the first step).

    :param tinker: the connection that waits for the answer.
    :param client: the job's training client.
    """

    def __init__(self, tinker: TinkerConnection, client: TrainingClientLike) -> None:
        self.tinker = tinker
        self.client = client

    def logprobs(self, samples: Sequence[RenderedSample]) -> list[list[float]]:
        """See :class:`~reef.components.teacher_scores.TeacherScorer`; one ``forward``."""
        sequences = [sequence for sample in samples for sequence in sample.sequences]
        if not sequences:
            return [[] for _ in samples]
        datums = [cross_entropy_datum(sequence, 1.0) for sequence in sequences]
        output = self.tinker.wait(self.client.forward(datums, "cross_entropy"), "the teacher")
        rows = iter(zip(sequences, target_logprobs(output), strict=True))
        return [
            [v for _ in sample.sequences for v in marked_values(*next(rows))] for sample in samples
        ]


class _HostedTeacher:
    """A teacher Tinker hosts: a sampling client's ``compute_logprobs`` of each teacher
    sequence, as tinker-cookbook's on-policy distillation scores its teacher
    (``tinker_cookbook/distillation/train_on_policy.py``).

    :param tinker: the connection that waits for the answers.
    :param sampler: the teacher's sampling client.
    :param name: how errors name the teacher.
    """

    def __init__(self, tinker: TinkerConnection, sampler: SamplingClientLike, name: str) -> None:
        self.tinker = tinker
        self.sampler = sampler
        self.name = name

    def logprobs(self, samples: Sequence[RenderedSample]) -> list[list[float]]:
        """See :class:`~reef.components.teacher_scores.TeacherScorer`; the sequences are asked
        all at once, then waited for in order."""
        sequences = [sequence for sample in samples for sequence in sample.sequences]
        futures = [
            self.sampler.compute_logprobs(types.ModelInput.from_ints(list(s.token_ids)))
            for s in sequences
        ]
        rows = []
        for sequence, future in zip(sequences, futures, strict=True):
            values = self.tinker.wait(future, f"the teacher {self.name}")
            if len(values) != len(sequence.token_ids) or any(v is None for v in values[1:]):
                raise TeacherError(
                    f"Tinker's teacher {self.name} scored {len(values)} positions of a sequence "
                    f"of {len(sequence.token_ids)} tokens: compute_logprobs must score each "
                    "token after the first"
                )
            rows.append(marked_values(sequence, [float(v) for v in values[1:] if v is not None]))
        answered = iter(rows)
        return [[v for _ in sample.sequences for v in next(answered)] for sample in samples]


def checkpoint_artifact_id(checkpoint: str) -> str:
    """The artifact id of the weights held by the Tinker training checkpoint ``checkpoint``
    (its ``tinker://`` path; see the module's documentation)."""
    return f"sha256:{hashlib.sha256(f'tinker-checkpoint:{checkpoint}'.encode()).hexdigest()}"


#: The teachers only a component holding the weights runs, each with why Tinker does not.
_LOCAL_TEACHERS: Final = {
    "model_path": "Tinker runs the model on its service, so this component cannot run a local "
    "model folder as the teacher: give the teacher a base_url (an engine that answers "
    "prompt_logprobs with the student's tokenizer, such as vLLM), or no teacher (the student "
    "itself at the job's start weights), or train with the local component",
    "update_rate": "Tinker keeps the student's weights on its service, so this component cannot "
    "keep a moving average of them as the teacher: leave update_rate out (the student at the "
    "job's start weights) or train with the local component",
}


class TinkerComponent:
    """The ``tinker`` component (see the module's documentation); a
    :class:`reef.components.interface.TrainingComponent`.

    :param connect: opens the connection to Tinker; the real SDK by default. Called once, on
        first use, with the base URL and the API key.
    :param environ: where the API key is read; the process environment by default.
    """

    #: The deployment's ``training.options`` are checked against these settings.
    Settings: ClassVar[type[PluginSettings]] = TinkerComponentSettings

    def __init__(
        self,
        settings: TinkerComponentSettings,
        *,
        name: str = "tinker",
        connect: Connect | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._name = name
        self.settings = settings
        self.state_dir = Path(settings.state_dir)
        self.jobs = JobRunner(name, self.state_dir / "jobs")
        self.tinker = TinkerConnection(
            type(self).__name__,
            api_key_env=settings.api_key_env,
            base_url=settings.base_url,
            request_timeout=settings.request_timeout,
            connect=connect,
            environ=os.environ if environ is None else environ,
        )
        self._client: TrainingClientLike | None = None
        self._tokenizer: Tokenizer | None = None
        #: the sampling clients of Tinker-hosted teachers, by (base model, model path)
        self._teacher_samplers: dict[tuple[str | None, str | None], SamplingClientLike] = {}
        self._recovered = False
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None, *, name: str = "tinker"
    ) -> TinkerComponent:
        """Build the component from its deployment config (refused with PluginConfigError)."""
        return cls(TinkerComponentSettings.parse(config, plugin_class=cls), name=name)

    @property
    def name(self) -> str:
        """The component's name, as its job outcomes give it."""
        return self._name

    # ------------------------------------------------------------------ the journal

    @property
    def _state_path(self) -> Path:
        return self.state_dir / "state.json"

    def _state(self) -> JSON:
        return read_json(self._state_path) or {}

    def _pending_path(self, job_id: str) -> Path:
        return self.jobs.path(job_id, ".pending.json")

    def _recover(self) -> None:
        """Settle the jobs a stopped process left pending (see the module's documentation)."""
        if self._recovered:
            return
        for pending_path in sorted((self.state_dir / "jobs").glob("*.pending.json")):
            pending = read_json(pending_path)
            assert pending is not None
            listing = self.tinker.wait(
                self.tinker.service.list_checkpoints(str(pending["training_run_id"])),
                "the list of checkpoints",
            )
            saved = {c.checkpoint_id: c.tinker_path for c in listing.checkpoints}
            path = saved.get(f"weights/{pending['checkpoint_name']}")
            if path is not None:
                # The checkpoint is there: the job finished before the process stopped.
                outcome = JobOutcome(**pending["outcome"])
                write_json(self._state_path, {**self._state(), "checkpoint": path})
                self.jobs.record(outcome)
            pending_path.unlink()
        self._recovered = True

    # ------------------------------------------------------------------ the training client

    def _training_client(self) -> TrainingClientLike:
        """The training client at the weights of the last finished job (a new one after a
        restart or a failure)."""
        self._recover()
        if self._client is not None:
            return self._client
        service = self.tinker.service
        checkpoint = self._state().get("checkpoint")
        if checkpoint is None:
            client = self.tinker.wait(
                service.create_lora_training_client(
                    self.settings.base_model, rank=self.settings.lora_rank, seed=self.settings.seed
                ),
                "the creation of the training client",
            )
            # The initial weights are a checkpoint too, so that every process (and every
            # artifact) starts from the same weights, named the same.
            saved = self.tinker.wait(
                client.save_state(
                    f"reef-initial-{uuid.uuid4().hex[:12]}",
                    ttl_seconds=self.settings.checkpoint_ttl_seconds,
                ),
                "the save of the initial checkpoint",
            )
            write_json(self._state_path, {**self._state(), "checkpoint": saved.path})
        else:
            client = self.tinker.wait(
                service.create_training_client_from_state_with_optimizer(str(checkpoint)),
                f"the load of checkpoint {checkpoint}",
            )
        self._client = client
        return client

    @property
    def renderer(self) -> ChatRenderer:
        """The renderer of the trained model, with the engine's chat template arguments."""
        if self._tokenizer is None:
            if self.settings.tokenizer is None:
                self._tokenizer = HFTokenizer(self._training_client().get_tokenizer())
            else:
                self._tokenizer = load_tokenizer(self.settings.tokenizer)
        return ChatRenderer(self._tokenizer, self.settings.chat_template_args)

    # ------------------------------------------------------------------ the interface

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        """Start training ``data`` (see :class:`TrainingComponent`).

        :raises reef.core.plugins.PluginConfigError: for parameters it does not take.
        """
        job = JobParameters.parse(parameters, plugin_class=type(self), path="$.parameters")
        job.refuse_unsupported(
            type(self), ("cross_entropy", "importance_sampling", "ppo", "task_group")
        )
        job.refuse_local_loss_options(type(self))
        teacher = None if job.distillation is None else job.distillation.teacher
        for key, reason in _LOCAL_TEACHERS.items():
            if teacher is not None and getattr(teacher, key) is not None:
                raise PluginConfigError(
                    type(self).__name__, f"$.parameters.distillation.teacher.{key}", reason
                )
        return self.jobs.submit(data.id, lambda: self._run(data, job))

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        """The job's outcome once it ended, else ``None``. A job this process never started
        and that did not finish in an earlier one (it did not reach its checkpoint) failed."""
        return self.jobs.poll(handle, self._settle)

    def _settle(self, job_id: str) -> JobOutcome | None:
        """The outcome of a job an earlier process left pending, once Tinker says."""
        if not self._pending_path(job_id).exists():
            return None
        with self._lock:
            self._recover()
        return self.jobs.stored(job_id)

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        """Block until the job ends (see :class:`TrainingComponent`)."""
        return self.jobs.wait(handle, timeout, self._settle)

    def publish(self) -> Artifact:
        """Publish the weights of the last finished job for Tinker's sampler, once per
        checkpoint, as an artifact."""
        with self._lock:
            artifact_id, folder, _ = self._sampler_artifact(self._training_client())
            latest = self.state_dir / "artifacts" / f".LATEST.{os.getpid()}"
            latest.write_text(artifact_id, encoding="utf-8")
            os.replace(latest, self.state_dir / "artifacts" / "LATEST")
            return Artifact(artifact_id, folder)

    def _sampler_artifact(self, client: TrainingClientLike) -> tuple[str, Path, str]:
        """The artifact of the last finished job's weights (``client``'s), saved for Tinker's
        sampler once per checkpoint: its id, its folder and its sampler path."""
        checkpoint = str(self._state()["checkpoint"])
        artifact_id = checkpoint_artifact_id(checkpoint)
        folder = self.state_dir / "artifacts" / artifact_id.partition(":")[2]
        body = read_json(folder / "artifact.json")
        if body is None:
            saved = self.tinker.wait(
                client.save_weights_for_sampler(
                    f"reef-{artifact_id.partition(':')[2][:40]}",
                    ttl_seconds=self.settings.checkpoint_ttl_seconds,
                ),
                "the save of the sampler weights",
            )
            body = {
                "artifact_id": artifact_id,
                "base_model": self.settings.base_model,
                "checkpoint": checkpoint,
                "sampler_path": saved.path,
            }
            write_json(folder / "artifact.json", body)
        return artifact_id, folder, str(body["sampler_path"])

    def close(self) -> None:
        """Take no more jobs; wait for the running one (each of its requests is bounded by
        ``request_timeout``)."""
        self.jobs.close()

    # ------------------------------------------------------------------ a job

    def _run(self, data: JobData, job: JobParameters) -> JobOutcome:
        with self._lock:
            try:
                outcome = self._train(data, job)
            except Exception as exc:  # a job's failure is its outcome, not a crash
                # Steps this job took may be on the service: the next job starts again from
                # the last checkpoint, on a new training client.
                self._client = None
                # Failed is final: a checkpoint this attempt may still have saved is never
                # taken for the job's (its pending record goes).
                self._pending_path(data.id).unlink(missing_ok=True)
                detail = self.tinker.redact(traceback.format_exception_only(exc)[-1].strip())
                logger.warning("tinker job %s failed: %s", data.id, detail)
                outcome = JobOutcome(data.id, self._name, "failed", error=detail)
            return outcome

    def _train(self, data: JobData, job: JobParameters) -> JobOutcome:
        client = self._training_client()
        if job.objective == "task_group":
            return self._train_tasks(client, data, job)
        prepared = prepare_job(
            data,
            self.renderer,
            job.objective,
            max_seq_len=self.settings.max_seq_len,
            component=self._name,
            distillation=job.distillation,
            reward_baseline=job.reward_baseline,
            mask_truncated=job.mask_truncated,
        )
        plan = plan_steps(
            prepared.sequence_lengths,
            batch_size=self.settings.batch_size,
            scheduling=job.scheduling,
        )
        start = (
            self._start_logprobs(client, prepared, plan, whole=job.distillation is not None)
            if job.objective in POLICY_OBJECTIVES
            else {}
        )
        token_rows: dict[SequenceRef, list[float]] = {}
        teacher_kl = None
        if job.distillation is not None:
            # Before the first step: the self teacher is the job's start weights.
            token_rows, teacher_kl = token_advantages(
                prepared,
                start,
                self._teacher(client, job.distillation.teacher),
                kl_coef=job.distillation.kl_coef,
                kl_discount=job.distillation.kl_discount_factor,
                kl_centred=job.distillation.kl_centred,
            )
        loss_fn_config = (
            {"clip_low_threshold": 1 - job.clip_low, "clip_high_threshold": 1 + job.clip_high}
            if job.objective == "ppo"
            else None
        )

        def advantage(ref: SequenceRef) -> float | Sequence[float]:
            return token_rows[ref] if token_rows else prepared.advantage_of(ref[0])

        def datum(ref: SequenceRef, divisor: float) -> types.Datum:
            sequence = prepared.rendered[ref[0]][1].sequences[ref[1]]
            if job.objective == "cross_entropy":
                return cross_entropy_datum(sequence, divisor)
            return policy_datum(sequence, start[ref], advantage(ref), divisor)

        losses, trained_tokens, step_tokens, moved = self._optimize(
            client,
            job,
            plan,
            lambda ref: prepared.rendered[ref[0]][1].sequences[ref[1]],
            datum,
            advantage if job.objective in POLICY_OBJECTIVES else None,
            job.objective,
            loss_fn_config,
        )
        metrics = job_metrics(
            prepared,
            plan,
            losses=losses,
            trained_tokens=trained_tokens,
            step_tokens=step_tokens,
            optimizer_steps=moved,
            teacher_kl=teacher_kl,
            tempered=False,  # Tinker's losses take the policy's log probabilities at 1
        )
        outcome = JobOutcome(data.id, self._name, "finished", metrics=metrics)
        if moved:
            self._commit(client, outcome)
        return outcome

    def _optimize(
        self,
        client: TrainingClientLike,
        job: JobParameters,
        plan: StepPlan,
        sequence: Callable[[SequenceRef], RenderedSequence],
        datum: Callable[[SequenceRef, float], types.Datum],
        advantage: Callable[[SequenceRef], float | Sequence[float]] | None,
        loss_fn: str,
        loss_fn_config: dict[str, float] | None,
    ) -> tuple[list[float], int, list[dict[int, int]], int]:
        """Per planned step, one ``forward_backward`` of its ``Datum`` values (``datum`` of
        each sequence and the step's divisor) with Tinker's loss ``loss_fn``, and one
        ``optim_step``, except for a step whose every ``advantage`` is 0 (a policy loss's;
        ``None`` for another loss), counted with a loss of 0 and sent to no one
        (:func:`~reef.components.job_samples.moves_no_weight`): each step's loss, the tokens
        trained, each step's trained tokens by unit, and the steps that moved the weights."""
        adam = types.AdamParams(
            learning_rate=job.learning_rate or self.settings.learning_rate,
            beta1=self.settings.beta1,
            beta2=self.settings.beta2,
            eps=self.settings.eps,
            weight_decay=self.settings.weight_decay,
            grad_clip_norm=self.settings.grad_clip_norm,
        )
        losses: list[float] = []
        trained_tokens = 0
        step_tokens: list[dict[int, int]] = []
        moved = 0
        for step in plan.steps:
            loss_tokens: dict[int, int] = {}
            for ref in step.sequences:
                trained = sum(sequence(ref).loss_mask[1:])
                loss_tokens[ref[0]] = loss_tokens.get(ref[0], 0) + trained
            tokens = sum(loss_tokens.values())
            if tokens == 0:
                continue
            if advantage is not None and moves_no_weight(map(advantage, step.sequences)):
                step_tokens.append(loss_tokens)
                losses.append(0.0)
                trained_tokens += tokens
                continue
            divisor = step.loss_divisor(tokens, self.settings.batch_size)
            datums = [datum(ref, divisor) for ref in step.sequences]
            # Both submitted before either is awaited, as the SDK asks: the service runs them
            # back to back.
            backward = client.forward_backward(
                datums,
                loss_fn,  # type: ignore[arg-type]
                loss_fn_config,
            )
            optimizer = client.optim_step(adam)
            output = self.tinker.wait(backward, f"forward_backward of step {len(losses)}")
            self.tinker.wait(optimizer, f"optim_step of step {len(losses)}")
            step_tokens.append(loss_tokens)
            losses.append(float(output.metrics.get("loss:sum", float("nan"))))
            trained_tokens += tokens
            moved += 1
        return losses, trained_tokens, step_tokens, moved

    def _train_tasks(
        self, client: TrainingClientLike, data: JobData, job: JobParameters
    ) -> JobOutcome:
        """A task job (:mod:`reef.components.task_rollouts`): its tasks rolled out on a
        sampling client at the job's start weights, scored by their verifiers, and each
        rollout's own tokens trained against the log probabilities Tinker's sampler gave them
        (P-REND-6), with ``task_group`` advantages and the ``importance_sampling`` loss."""
        if job.rollout is None:
            raise ValueError("the task_group objective needs the rollout job parameter")
        # The job's start weights, saved for the sampler (once per checkpoint, as publish
        # does): the artifact every rollout names.
        artifact_id, _, sampler_path = self._sampler_artifact(client)
        sampling = self.tinker.wait(
            self.tinker.service.create_sampling_client(sampler_path),
            f"the sampling client of {artifact_id}",
        )
        renderer = self.renderer
        done = roll_out_tasks(
            data,
            job.rollout,
            sampler=start_sampler(
                self.tinker, sampling, renderer, max_seq_len=self.settings.max_seq_len
            ),
            tasks_root=self.state_dir / "tasks",
        )
        advantages = task_group_advantages(done.rollouts)
        trained = [done.rollouts[i] for i in sorted(advantages)]
        values = [advantages[i] for i in sorted(advantages)]
        plan = plan_steps(
            [[len(r.prompt) + len(r.reply)] for r in trained],
            batch_size=self.settings.batch_size,
            scheduling=job.scheduling,
        )
        losses, trained_tokens, _, moved = self._optimize(
            client,
            job,
            plan,
            lambda ref: trained[ref[0]].sequence(),
            lambda ref, divisor: policy_datum(
                trained[ref[0]].sequence(),
                trained[ref[0]].start_logprobs(),
                values[ref[0]],
                divisor,
            ),
            lambda ref: values[ref[0]],
            "importance_sampling",
            None,
        )
        metrics = task_metrics(
            done,
            trained_samples=len(trained),
            losses=losses,
            trained_tokens=trained_tokens,
            dropped_samples=plan.dropped_samples,
            artifact_id=artifact_id,
            optimizer_steps=moved,
        )
        outcome = JobOutcome(data.id, self._name, "finished", metrics=metrics)
        if moved:
            self._commit(client, outcome)
        return outcome

    def _start_logprobs(
        self, client: TrainingClientLike, prepared: PreparedJob, plan: StepPlan, *, whole: bool
    ) -> dict[SequenceRef, list[float]]:
        """Every planned sequence's target-token log probabilities under the job's start
        weights, in one ``forward`` (P-REND-3); with ``whole``, every sequence of each planned
        sample (a teacher scores whole samples)."""
        refs = [ref for step in plan.steps for ref in step.sequences]
        if whole:
            planned = sorted({ref[0] for ref in refs})
            counts = [len(prepared.rendered[p][1].sequences) for p in planned]
            refs = [(p, k) for p, count in zip(planned, counts, strict=True) for k in range(count)]
        if not refs:
            return {}
        datums = [cross_entropy_datum(prepared.rendered[s][1].sequences[i], 1.0) for s, i in refs]
        output = self.tinker.wait(client.forward(datums, "cross_entropy"), "the start forward")
        return dict(zip(refs, target_logprobs(output), strict=True))

    def _teacher(self, client: TrainingClientLike, settings: TeacherSettings) -> TeacherScorer:
        """The job's teacher: an engine (``base_url``), a model Tinker hosts (its sampling
        client made once), or the student at the job's start weights (asked before the job's
        first step)."""
        if settings.base_url is not None:
            return EngineTeacher(settings)
        if settings.on_tinker:
            key = (settings.tinker_model, settings.tinker_model_path)
            name = " ".join(k for k in key if k)
            sampler = self._teacher_samplers.get(key)
            if sampler is None:
                sampler = self.tinker.wait(
                    self.tinker.service.create_sampling_client(
                        model_path=settings.tinker_model_path, base_model=settings.tinker_model
                    ),
                    f"the teacher {name}'s sampling client",
                )
                self._teacher_samplers[key] = sampler
            return _HostedTeacher(self.tinker, sampler, name)
        return _SelfTeacher(self.tinker, client)

    def _commit(self, client: TrainingClientLike, outcome: JobOutcome) -> None:
        """Save the job's checkpoint: what makes it finished (see the module's documentation)."""
        name = f"reef-{self.jobs.path(outcome.job_id).stem[:32]}-{uuid.uuid4().hex[:8]}"
        write_json(
            self._pending_path(outcome.job_id),
            {
                "checkpoint_name": name,
                "training_run_id": client.model_id,
                "outcome": attrs.asdict(outcome),
            },
        )
        saved = self.tinker.wait(
            client.save_state(name, ttl_seconds=self.settings.checkpoint_ttl_seconds),
            "the save of the job's checkpoint",
        )
        write_json(self._state_path, {**self._state(), "checkpoint": saved.path})
        self.jobs.record(outcome)
        self._pending_path(outcome.job_id).unlink()
