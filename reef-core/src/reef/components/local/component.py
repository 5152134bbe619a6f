"""The ``local`` training component: trains a causal language model with PyTorch, here.

It trains a Hugging Face causal LM (``model_path``, a folder transformers loads; ``reef-core[hf]``)
whole or with a LoRA adapter (``lora``), or a :class:`TinyGPT` built from its settings for demos,
on the CPU or on CUDA where present (with bfloat16 autocast where the GPU has it). Each job:

1. parses the job parameters (:class:`reef.components.job_parameters.JobParameters`): the
   objective and the scheduling parameter; bad parameters refuse the submission;
2. renders and scores the job's samples as every component does
   (:func:`reef.components.job_samples.prepare_job`: the model's chat template with the
   engine's chat template arguments; what cannot render or fit the model's context is counted
   in ``unrenderable_samples``, what needs a reward and has none in ``samples_without_reward``);
3. for ``importance_sampling`` and ``ppo``, computes every trained token's log probability
   with the job's start weights, and trains with dropout off as those were computed (so the
   ratio is exactly 1 at the first step; ``cross_entropy`` trains with the model's dropout);
   under a distilling objective (``distillation``), asks the teacher
   (:mod:`reef.components.local.teacher`: a local model folder, an engine that returns
   prompt log probabilities, or the student at its start weights) for its log probabilities
   of the same tokens in each sample's teacher sequence, and trains the per-token advantage
   ``-kl_coef * (log p_student - log p_teacher)`` (the ``teacher_kl`` metric is its mean
   reverse KL at the job's start); under ``distillation.full_logit`` the teacher's log
   probabilities of the student's top-k tokens at each trained token instead, whose divergence
   trains as a loss beside the reward's policy loss (``teacher_divergence``);
4. cuts the rendered samples into steps of the component's batch size
   (:mod:`reef.components.scheduling`) and takes one AdamW step for each, its sequences in
   right-padded forward passes of at most ``micro_batch_size`` sequences whose gradients add up
   (gradient accumulation), noting in the outcome's ``consumed`` metric what each step's loss
   consumed: per sample, the step, the tokens its loss counted and the reward and advantage it
   trained with (what Agent ECC's consumption lines are written from). A step of a policy
   objective whose every advantage is 0 has a loss of 0 and no gradient: it is counted, and
   leaves the weights and the optimizer state untouched (no momentum step);
5. saves the new weights (the adapter, with LoRA) and the optimizer state in one folder, and
   links the artifact they will be published as, all or nothing and on the disk before the
   job's outcome is written (:mod:`reef.components.durable`).

A job of tasks (objective ``task_group``) first rolls its tasks out on the model at the job's
start weights and scores them with their verifiers (:mod:`reef.components.task_rollouts`),
then trains each rollout's own tokens with ``importance_sampling`` against the log
probabilities its sampler gave them, each advantage centred and scaled within its task's group
(:mod:`reef.components.local.task_training`).

Jobs run one at a time on the component's own thread (:class:`JobRunner`). A job id that ended
before (in this process or an earlier one with the same ``state_dir``) is not trained again. A
job that fails leaves the weights of the last finished job.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
import torch

from reef.components.durable import replace_folder, restore_retired
from reef.components.faults import fault_point
from reef.components.interface import Artifact, JobHandle
from reef.components.job_parameters import POLICY_OBJECTIVES, JobParameters
from reef.components.job_runner import JobRunner
from reef.components.job_samples import job_metrics, moves_no_weight, prepare_job
from reef.components.json_files import read_json, write_json
from reef.components.local.artifacts import ArtifactStore, load_model_folder, save_model_folder
from reef.components.local.byte_tokenizer import ByteTokenizer
from reef.components.local.causal_lm import CausalLM, torch_generator
from reef.components.local.objectives import (
    batch_logprobs,
    batch_loss,
    distillation_loss,
    next_token_log_softmax,
    next_token_logprobs,
    sequence_weights,
    token_batch,
    topk_divergence,
)
from reef.components.local.settings import LocalComponentSettings
from reef.components.local.task_training import RolloutBatch, model_sampler
from reef.components.local.teacher import (
    FullLogitRows,
    ModelTeacher,
    Teachers,
    distillation_rows,
    full_logit_rows,
)
from reef.components.local.tiny_gpt import TinyGPT, TinyGPTConfig, TinyGPTModel
from reef.components.scheduling import SequenceRef, StepPlan, plan_steps
from reef.components.task_rollouts import roll_out_tasks, task_metrics
from reef.components.teacher_scores import TeacherError
from reef.core.chat_rendering import ChatRenderer, RenderedSequence, Tokenizer
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.core.records import JSON

_CURRENT: Final = "current"
#: The optimizer state, in the folder of the weights it goes with (not part of artifacts).
_OPTIMIZER: Final = "optimizer.pt"
#: The outcome of the job that trained the weights, in their folder (not part of artifacts): the
#: weights and the job that made them are saved together, so a job whose weights are saved is
#: finished even when the process died before the runner wrote its outcome.
_TRAINED_BY: Final = "trained-by.json"


class LocalComponent:
    """The ``local`` component (see the module's documentation); a
    :class:`reef.components.interface.TrainingComponent`."""

    #: The deployment's ``training.options`` are checked against these settings.
    Settings: ClassVar[type[PluginSettings]] = LocalComponentSettings

    def __init__(self, settings: LocalComponentSettings, *, name: str = "local") -> None:
        self._name = name
        self.settings = settings
        self.state_dir = Path(settings.state_dir)
        self.artifacts = ArtifactStore(self.state_dir / "artifacts")
        self.jobs = JobRunner(name, self.state_dir / "jobs")
        if settings.threads is not None:
            # Process-wide: torch has one intra-op thread pool.
            torch.set_num_threads(settings.threads)
        if settings.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(settings.device)
        # bfloat16 autocast where the GPU has it; the weights and the optimizer stay float32.
        self._bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        current = self.state_dir / _CURRENT
        restore_retired(current)
        if not current.exists():
            # The starting weights are saved before any job, so a failed job can always return
            # to the weights of the last finished one by reading them back.
            save_model_folder(current, self._initial_model())
        self._lock = threading.Lock()
        self._teachers = Teachers(self.device)
        self._load_current()

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None, *, name: str = "local"
    ) -> LocalComponent:
        """Build the component from its deployment config (refused with PluginConfigError)."""
        return cls(LocalComponentSettings.parse(config, plugin_class=cls), name=name)

    @property
    def name(self) -> str:
        """The component's name, as its job outcomes give it."""
        return self._name

    @property
    def renderer(self) -> ChatRenderer:
        """The renderer of this component's model, with the engine's chat template arguments."""
        return self._renderer

    @property
    def base_model(self) -> Path | None:
        """The base model folder of a LoRA adapter (``model_path``), else ``None``."""
        if self.settings.lora is None or self.settings.model_path is None:
            return None
        return Path(self.settings.model_path)

    def _initial_model(self) -> CausalLM:
        if self.settings.model_path is not None:
            return load_model_folder(
                Path(self.settings.model_path), lora=self.settings.lora, seed=self.settings.seed
            )
        tokenizer = ByteTokenizer()
        config = TinyGPTConfig(
            vocab_size=tokenizer.vocab_size,
            max_seq_len=self.settings.max_seq_len,
            d_model=self.settings.d_model,
            n_layers=self.settings.n_layers,
            n_heads=self.settings.n_heads,
        )
        with torch_generator(self.settings.seed):
            return TinyGPTModel(TinyGPT(config), tokenizer)

    def _load_current(self) -> None:
        """Load the weights and optimizer state of the last finished job."""
        model = load_model_folder(self.state_dir / _CURRENT, base_model=self.base_model)
        model.module.to(self.device)
        model.module.eval()
        # PyTorch's fused AdamW (one kernel for every parameter, on the CPU as on CUDA): the
        # per-parameter loop of the default implementation took most of a small model's step.
        optimizer = torch.optim.AdamW(
            model.trainable_parameters(), lr=self.settings.learning_rate, fused=True
        )
        optimizer_path = self.state_dir / _CURRENT / _OPTIMIZER
        if optimizer_path.exists():
            optimizer.load_state_dict(
                torch.load(optimizer_path, map_location=self.device, weights_only=True)
            )
        self.model = model
        self._optimizer = optimizer
        self._renderer = ChatRenderer(model.tokenizer, self.settings.chat_template_args)
        self._digest = model.digest()

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer."""
        return self.model.tokenizer

    # ------------------------------------------------------------------ the interface

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        """Start training ``data`` (see :class:`TrainingComponent`).

        :raises reef.core.plugins.PluginConfigError: for parameters it does not take.
        """
        job = JobParameters.parse(parameters, plugin_class=type(self), path="$.parameters")
        if job.distillation is not None and job.distillation.teacher.on_tinker:
            raise PluginConfigError(
                type(self).__name__,
                "$.parameters.distillation.teacher",
                "a teacher Tinker hosts (tinker_model, tinker_model_path) is scored by the tinker "
                "component: train with it, or give this component the teacher as a model_path "
                "or a base_url",
            )
        return self.jobs.submit(data.id, lambda: self._run(data, job))

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        """The job's outcome once it ended, else ``None``. A job this component never started
        and has no outcome of (it was running when an earlier process stopped) failed."""
        return self.jobs.poll(handle, self._saved_outcome)

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        """Block until the job ends (see :class:`TrainingComponent`)."""
        return self.jobs.wait(handle, timeout, self._saved_outcome)

    def _saved_outcome(self, job_id: str) -> JobOutcome | None:
        """The outcome of ``job_id`` when the saved weights are its (the process died between
        saving them and writing its outcome): it finished, and its outcome is written now."""
        body = read_json(self.state_dir / _CURRENT / _TRAINED_BY)
        if body is None or body.get("job_id") != job_id:
            return None
        outcome = JobOutcome(**body)
        self.jobs.record(outcome)
        return outcome

    def publish(self) -> Artifact:
        """Publish the weights of the last finished job as an artifact (their saved folder,
        linked: nothing is serialised again)."""
        with self._lock:
            return self.artifacts.publish(
                self.state_dir / _CURRENT, self._digest, skip={_OPTIMIZER, _TRAINED_BY}
            )

    def restore(self, artifact: Artifact) -> None:
        """Go on from the weights of ``artifact`` (the eval gate held a newer one back): they
        become the current weights, with a fresh optimizer state."""
        with self._lock:
            model = load_model_folder(artifact.path, base_model=self.base_model)
            save_model_folder(self.state_dir / _CURRENT, model)
            self._load_current()

    def close(self) -> None:
        """Take no more jobs; wait for the running one."""
        self.jobs.close()

    # ------------------------------------------------------------------ a job

    def _run(self, data: JobData, job: JobParameters) -> JobOutcome:
        """Train the job and save its weights; the runner then writes the outcome, so a job
        is reported ended only once its weights are on the disk."""
        with self._lock:
            try:
                metrics = self._train(data, job)
                digest = self.model.digest()
                outcome = JobOutcome(data.id, self._name, "finished", metrics=metrics)
                # The weights, the optimizer state and the job's outcome go in one folder: a
                # crash leaves all three of the last finished job, never a mix. The artifact
                # these weights will be published as is linked in the same flushes, so
                # publish() has only to name it.
                replace_folder(
                    self.state_dir / _CURRENT,
                    lambda folder: self._save(folder, outcome),
                    links={self.artifacts.folder(digest): {_OPTIMIZER, _TRAINED_BY}},
                )
                self._digest = digest
                if job.distillation is not None:
                    # Only once the job's weights are kept: a failed job moves no teacher.
                    stepped = bool(metrics.get("optimizer_steps"))
                    self._teachers.after_job(job.distillation.teacher, self.model, stepped=stepped)
                fault_point("local.weights_saved")  # before the runner writes the outcome
                return outcome
            except Exception as exc:  # a job's failure is its outcome, not a crash
                # Back to the weights and optimizer state of the last finished job.
                self._load_current()
                detail = traceback.format_exception_only(exc)[-1].strip()
                return JobOutcome(data.id, self._name, "failed", error=detail)

    def _save(self, folder: Path, outcome: JobOutcome) -> None:
        self.model.save(folder)
        torch.save(self._optimizer.state_dict(), folder / _OPTIMIZER)
        write_json(folder / _TRAINED_BY, attrs.asdict(outcome))

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self._bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def _micro_batches(self, refs: Sequence[SequenceRef]) -> Iterator[Sequence[SequenceRef]]:
        size = self.settings.micro_batch_size or max(len(refs), 1)  # none: a job of no sample
        for start in range(0, len(refs), size):
            yield refs[start : start + size]

    def _train(self, data: JobData, job: JobParameters) -> JSON:
        if job.objective == "task_group":
            return self._train_tasks(data, job)
        prepared = prepare_job(
            data,
            self._renderer,
            job.objective,
            max_seq_len=self.model.max_seq_len,
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

        def sequence(ref: SequenceRef) -> RenderedSequence:
            return prepared.rendered[ref[0]][1].sequences[ref[1]]

        full = job.distillation.full_logit if job.distillation is not None else None
        start: dict[SequenceRef, torch.Tensor] = {}
        start_topk: dict[SequenceRef, tuple[torch.Tensor, torch.Tensor]] = {}
        if job.objective in POLICY_OBJECTIVES:
            # The job's start weights: computed once, before the first step moves them (P-REND-3).
            # Every sequence of each sample that trains: a teacher scores whole samples.
            planned = sorted({ref[0] for step in plan.steps for ref in step.sequences})
            every = [(p, k) for p in planned for k in range(len(prepared.rendered[p][1].sequences))]
            with torch.no_grad(), self._autocast():
                for refs in self._micro_batches(every):
                    ids = [sequence(r).token_ids for r in refs]
                    scales = [sequence(r).temperatures for r in refs]
                    batch = token_batch(ids, None, self.device, scales)
                    if full is None:
                        values = batch_logprobs(self.model, batch)
                    else:
                        log_softmax = next_token_log_softmax(self.model, batch)
                        values = next_token_logprobs(log_softmax, batch)
                        tops = log_softmax.topk(min(full.topk, log_softmax.shape[-1]), dim=-1)
                    for row, ref in enumerate(refs):
                        length = len(sequence(ref).token_ids) - 1
                        start[ref] = values[row, :length]
                        if full is not None:
                            top = tops.values[row, :length], tops.indices[row, :length]
                            start_topk[ref] = top
        token_rows: dict[SequenceRef, torch.Tensor] = {}
        teacher_kl = divergence = None
        targets: FullLogitRows | None = None
        if job.distillation is not None:
            scorer = self._teachers.scorer(job.distillation.teacher, self.model)
            if full is None:
                token_rows, teacher_kl = distillation_rows(
                    prepared,
                    start,
                    scorer,
                    kl_coef=job.distillation.kl_coef,
                    kl_discount=job.distillation.kl_discount_factor,
                    kl_centred=job.distillation.kl_centred,
                )
            else:
                if not isinstance(scorer, ModelTeacher):  # an engine: refused by the parameters
                    raise TeacherError("full_logit distils from a teacher the component runs")
                targets = full_logit_rows(
                    prepared, start, start_topk, scorer, full, kl_coef=job.distillation.kl_coef
                )
                teacher_kl, divergence = targets.teacher_kl, targets.divergence

        def advantage_rows(refs: Sequence[SequenceRef]) -> torch.Tensor | None:
            if job.objective not in POLICY_OBJECTIVES:
                return None
            if token_rows:
                return _padded_rows([token_rows[r] for r in refs])
            values = [prepared.advantage_of(r[0]) for r in refs]
            return torch.tensor(values, dtype=torch.float32, device=self.device)

        step_losses, trained_tokens, step_tokens, moved = self._optimize(
            job, plan, sequence, job.objective, start, advantage_rows, targets
        )
        metrics = job_metrics(
            prepared,
            plan,
            losses=step_losses,
            trained_tokens=trained_tokens,
            step_tokens=step_tokens,
            optimizer_steps=moved,
            teacher_kl=teacher_kl,
        )
        if targets is not None:
            metrics["teacher_divergence"] = divergence
        return metrics

    def _train_tasks(self, data: JobData, job: JobParameters) -> JSON:
        """A task job (:mod:`reef.components.task_rollouts`): roll its tasks out at the start
        weights, score them, and train each rollout's own tokens against the log probabilities
        its sampler gave them (P-REND-6), with ``task_group`` advantages."""
        if job.rollout is None:
            raise ValueError("the task_group objective needs the rollout job parameter")
        artifact_id = self._digest  # the weights the job starts from sample every rollout
        done = roll_out_tasks(
            data,
            job.rollout,
            sampler=model_sampler(self.model, self._renderer),
            tasks_root=self.state_dir / "tasks",
        )
        batch = RolloutBatch.of(done, self.device)
        plan = plan_steps(
            [[len(s.token_ids)] for s in batch.sequences],
            batch_size=self.settings.batch_size,
            scheduling=job.scheduling,
        )

        def advantage_rows(refs: Sequence[SequenceRef]) -> torch.Tensor:
            values = [batch.advantages[r[0]] for r in refs]
            return torch.tensor(values, dtype=torch.float32, device=self.device)

        losses, trained_tokens, _, moved = self._optimize(
            job,
            plan,
            lambda ref: batch.sequences[ref[0]],
            "importance_sampling",
            {(i, 0): row for i, row in enumerate(batch.start)},
            advantage_rows,
        )
        return task_metrics(
            done,
            trained_samples=len(batch.sequences),
            losses=losses,
            trained_tokens=trained_tokens,
            dropped_samples=plan.dropped_samples,
            artifact_id=artifact_id,
            optimizer_steps=moved,
        )

    def _optimize(
        self,
        job: JobParameters,
        plan: StepPlan,
        sequence: Callable[[SequenceRef], RenderedSequence],
        loss_family: str,
        start: Mapping[SequenceRef, torch.Tensor],
        advantage_rows: Callable[[Sequence[SequenceRef]], torch.Tensor | None],
        full_logit: FullLogitRows | None = None,
    ) -> tuple[list[float], int, list[dict[int, int]], int]:
        """One AdamW step per planned step, under ``loss_family`` (plus the full-logit
        distillation loss toward ``full_logit``'s teacher rows): each step's loss, the tokens
        trained, each step's trained tokens by unit, and the steps that moved the weights."""
        learning_rate = job.learning_rate or self.settings.learning_rate
        for group in self._optimizer.param_groups:
            group["lr"] = learning_rate
        losses: list[torch.Tensor] = []
        trained_tokens = 0
        step_tokens: list[dict[int, int]] = []
        moved = 0
        # Dropout only under cross_entropy: a policy objective's ratio compares these passes
        # with the start weights' log probabilities, computed without dropout, so it trains
        # in the same mode (its ratio is exactly 1 at the first step).
        self.model.module.train(loss_family == "cross_entropy")
        for step in plan.steps:
            refs = step.sequences
            loss_tokens: dict[int, int] = {}
            for ref in refs:
                loss_tokens[ref[0]] = loss_tokens.get(ref[0], 0) + _trained_tokens(sequence(ref))
            tokens = sum(loss_tokens.values())
            if tokens == 0:
                continue
            rows = advantage_rows(refs)
            taught = full_logit is not None and any(r[0] in full_logit.taught for r in refs)
            if rows is not None and not taught and moves_no_weight(rows.tolist()):
                # No signal: counted, no AdamW step (see moves_no_weight).
                step_tokens.append(loss_tokens)
                losses.append(torch.zeros((), device=self.device))
                trained_tokens += tokens
                continue
            weights = sequence_weights(
                job.loss_aggregation if loss_family in POLICY_OBJECTIVES else "token_mean",
                refs,
                lambda ref: _trained_tokens(sequence(ref)),
                divisor=step.loss_divisor(tokens, self.settings.batch_size),
                norm_tokens=job.loss_norm_tokens,
            )
            self._optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=self.device)
            for chunk in self._micro_batches(refs):
                sequences = [sequence(r) for r in chunk]
                batch = token_batch(
                    [s.token_ids for s in sequences],
                    [s.loss_mask for s in sequences],
                    self.device,
                    [s.temperatures for s in sequences],
                )
                row_weights = torch.tensor([weights.get(r, 0.0) for r in chunk], device=self.device)
                start_logprobs = _padded_rows([start[r] for r in chunk]) if start else None
                with self._autocast():
                    if full_logit is None:
                        logprobs = batch_logprobs(self.model, batch)
                    else:
                        log_softmax = next_token_log_softmax(self.model, batch)
                        logprobs = next_token_logprobs(log_softmax, batch)
                loss = batch_loss(
                    loss_family,
                    logprobs,
                    batch.loss_mask,
                    start_logprobs=start_logprobs,
                    advantages=advantage_rows(chunk),
                    clip=(job.clip_low, job.clip_high),
                    is_clip=job.is_clip,
                    row_weights=row_weights,
                )
                if full_logit is not None and start_logprobs is not None:
                    indices = _padded_rows([full_logit.indices[r] for r in chunk])
                    divergence = topk_divergence(
                        log_softmax.gather(-1, indices),
                        _padded_rows([full_logit.teacher[r] for r in chunk]),
                        add_tail=full_logit.settings.add_tail,
                        alpha=full_logit.settings.alpha,
                    )
                    loss = loss + full_logit.kl_coef * distillation_loss(
                        divergence,
                        batch.loss_mask,
                        row_weights=row_weights,
                        logprobs=logprobs,
                        start_logprobs=start_logprobs,
                        is_clip=job.is_clip,
                    )
                loss.backward()  # type: ignore[no-untyped-call]
                total = total + loss.detach()
            torch.nn.utils.clip_grad_norm_(self.model.trainable_parameters(), 1.0)
            self._optimizer.step()
            step_tokens.append(loss_tokens)
            losses.append(total)
            trained_tokens += tokens
            moved += 1
        self.model.module.eval()
        step_losses = [float(v) for v in torch.stack(losses).tolist()] if losses else []
        return step_losses, trained_tokens, step_tokens, moved


def _trained_tokens(sequence: RenderedSequence) -> int:
    """The tokens of ``sequence`` whose prediction trains (its first token has none)."""
    return sum(sequence.loss_mask[1:])


def _padded_rows(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-sequence value rows (of ``len(sequence) - 1``, each value a number or a row of
    ``k``), padded with 0 to the longest: the shape of the batch's log probabilities."""
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True, padding_value=0.0)
