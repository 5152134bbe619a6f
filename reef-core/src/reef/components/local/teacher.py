"""The teachers a component runs on its own device, for a distilling objective.

A distilling job (job parameter ``distillation``) trains each sample's reply toward a teacher.
:func:`reef.components.job_samples.prepare_job` renders each sample's teacher sequence
(:mod:`reef.core.teacher_rendering`); a teacher then scores the student's trained tokens in it
and :mod:`reef.components.teacher_scores` makes the per-token advantage of them. Three teachers
(:class:`reef.components.job_parameters.TeacherSettings`):

- :class:`ModelTeacher` over a local model folder (``model_path``): a Hugging Face causal LM,
  or a folder the ``local`` component saved; run by the component, with no gradient.
- :class:`ModelTeacher` over the student itself at the job's start weights (no ``model_path``,
  no ``base_url``): the teacher request's extra context makes it a teacher (SDPO). It scores
  the reply at the temperature the reply was sampled at, as the student's own log
  probabilities are (so a sample without teacher context has a KL of exactly 0); another
  teacher scores at temperature 1, as the cookbook's ``compute_logprobs`` does.
- :class:`ModelTeacher` over a moving average of the student (``update_rate``, SDPO's EMA
  teacher): a copy of the student made at the first job that asks for it, moved
  ``update_rate`` of the way toward the student after each job whose optimizer stepped
  (:meth:`Teachers.after_job`), as lasgroup/SDPO's actor does after each training step. It
  lives in the component's memory: a restart starts it again from the weights resumed.
- :class:`~reef.components.teacher_scores.EngineTeacher` over an OpenAI-compatible engine
  (``base_url``) that returns prompt log probabilities.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import torch

from reef.components.job_parameters import FullLogitDistillation, TeacherSettings
from reef.components.job_samples import PreparedJob
from reef.components.local.artifacts import load_model_folder
from reef.components.local.causal_lm import CausalLM
from reef.components.local.objectives import (
    next_token_log_softmax,
    next_token_logprobs,
    token_batch,
    token_logprobs,
    topk_divergence,
)
from reef.components.scheduling import SequenceRef
from reef.components.teacher_scores import (
    EngineTeacher,
    TeacherError,
    TeacherScorer,
    marked_positions,
    marked_values,
    token_advantages,
)
from reef.core.chat_rendering import RenderedSample


class ModelTeacher:
    """A teacher the component runs: a local model, or the student itself at the job's start
    weights.

    :param model: the teacher model (with the student's tokenizer).
    :param device: where its forward passes run.
    :param sampling_temperature: score each token at its sampling temperature (the student as
        its own teacher), else at 1.
    """

    def __init__(
        self, model: CausalLM, device: torch.device, *, sampling_temperature: bool = False
    ) -> None:
        self.model = model
        self.device = device
        self.sampling_temperature = sampling_temperature

    def logprobs(self, samples: Sequence[RenderedSample]) -> list[list[float]]:
        """See :class:`TeacherScorer`; one forward pass per sequence, without gradient."""
        was_training = self.model.module.training
        self.model.module.eval()
        try:
            scored = []
            with torch.no_grad():
                for sample in samples:
                    values: list[float] = []
                    for sequence in sample.sequences:
                        scales = [sequence.temperatures] if self.sampling_temperature else None
                        row = token_logprobs(self.model, [sequence.token_ids], self.device, scales)[
                            0
                        ]
                        values += marked_values(sequence, row.float().tolist())
                    scored.append(values)
            return scored
        finally:
            if was_training:
                self.model.module.train()

    def topk_logprobs(
        self, sample: RenderedSample, indices: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's log probabilities, at each marked token of ``sample``'s sequences in
        order, of that token (``(n,)``) and of the tokens ``indices`` names there
        (``(n, k)``), from one forward pass per sequence without gradient (full-logit
        distillation: the indices are the student's top-k at the same reply token)."""
        was_training = self.model.module.training
        self.model.module.eval()
        try:
            sampled: list[torch.Tensor] = []
            rows: list[torch.Tensor] = []
            with torch.no_grad():
                for sequence in sample.sequences:
                    marked = torch.tensor(
                        marked_positions(sequence), dtype=torch.long, device=self.device
                    )
                    scales = [sequence.temperatures] if self.sampling_temperature else None
                    batch = token_batch([sequence.token_ids], None, self.device, scales)
                    log_softmax = next_token_log_softmax(self.model, batch)[0]
                    sampled.append(next_token_logprobs(log_softmax[None], batch)[0][marked])
                    rows.append(log_softmax[marked])
            every = torch.cat(rows)
            if every.shape[0] != indices.shape[0]:
                raise TeacherError(
                    f"the teacher scored {every.shape[0]} tokens of a reply of "
                    f"{indices.shape[0]} trained tokens: its sequence does not hold the "
                    "student's reply"
                )
            return torch.cat(sampled), every.gather(-1, indices.to(self.device))
        finally:
            if was_training:
                self.model.module.train()


class Teachers:
    """The teachers of a component's distilling jobs; a local teacher model is loaded once.

    :param device: where the component's (and its teachers') forward passes run.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._models: dict[str, ModelTeacher] = {}
        self._average: ModelTeacher | None = None

    def scorer(self, settings: TeacherSettings, student: CausalLM) -> TeacherScorer:
        """The teacher ``settings`` name, for a job of ``student`` (the component's model, at
        the job's start weights: the teacher when the settings name no other).

        :raises TeacherError: for a teacher folder whose tokenizer is not the student's.
        """
        if settings.base_url is not None:
            return EngineTeacher(settings)
        if settings.update_rate is not None:
            if self._average is None:
                self._average = ModelTeacher(
                    copy.deepcopy(student), self.device, sampling_temperature=True
                )
            return self._average
        if settings.model_path is None:
            return ModelTeacher(student, self.device, sampling_temperature=True)
        teacher = self._models.get(settings.model_path)
        if teacher is None:
            model = load_model_folder(Path(settings.model_path), trainable=False)
            if model.tokenizer.vocab_size != student.tokenizer.vocab_size:
                raise TeacherError(
                    f"the teacher {settings.model_path} has a vocabulary of "
                    f"{model.tokenizer.vocab_size} tokens, the student "
                    f"{student.tokenizer.vocab_size}: a teacher scores the student's tokens, "
                    "so it needs the student's tokenizer"
                )
            model.module.to(self.device)
            teacher = self._models[settings.model_path] = ModelTeacher(model, self.device)
        return teacher

    def after_job(self, settings: TeacherSettings, student: CausalLM, *, stepped: bool) -> None:
        """Move the moving-average teacher ``update_rate`` of the way toward ``student`` once a
        job whose optimizer ``stepped`` ended: ``teacher = (1 - rate) * teacher + rate *
        student``, parameter by parameter (a job that moved no weight leaves it)."""
        rate = settings.update_rate
        if rate is None or not stepped or self._average is None or rate == 0.0:
            return
        teacher = self._average.model.module
        with torch.no_grad():
            for mine, theirs in zip(teacher.parameters(), student.module.parameters(), strict=True):
                mine.mul_(1.0 - rate).add_(theirs.to(mine.device), alpha=rate)


def distillation_rows(
    job: PreparedJob,
    start: Mapping[SequenceRef, torch.Tensor],
    scorer: TeacherScorer,
    *,
    kl_coef: float,
    kl_discount: float = 0.0,
    kl_centred: bool = False,
) -> tuple[dict[SequenceRef, torch.Tensor], float | None]:
    """:func:`~reef.components.teacher_scores.token_advantages` of the start weights' log
    probabilities ``start``, as rows on their device (see there)."""
    rows, kl = token_advantages(
        job,
        {ref: row.float().tolist() for ref, row in start.items()},
        scorer,
        kl_coef=kl_coef,
        kl_discount=kl_discount,
        kl_centred=kl_centred,
    )
    tensors = {
        ref: torch.tensor(values, dtype=torch.float32, device=start[ref].device)
        for ref, values in rows.items()
    }
    return tensors, kl


@attrs.frozen
class FullLogitRows:
    """What a full-logit distilling job trains against, computed at its start weights.

    :ivar indices: by sequence, ``(len - 1, k)``: the student's top-k tokens at each position.
    :ivar teacher: by sequence, ``(len - 1, k)``: the teacher's log probabilities of them at
        each trained position (0 elsewhere: nothing trains there).
    :ivar settings: the divergence's settings.
    :ivar kl_coef: its weight in the loss.
    :ivar teacher_kl: the mean sampled reverse KL over the trained tokens (the ``teacher_kl``
        metric, as the sampled form reports it).
    :ivar divergence: the mean divergence the loss starts from (``teacher_divergence``).
    :ivar taught: the samples (by position) with a trained token whose divergence is not 0 at
        the start weights: a step of none of them has no signal from the teacher.
    """

    indices: Mapping[SequenceRef, torch.Tensor]
    teacher: Mapping[SequenceRef, torch.Tensor]
    settings: FullLogitDistillation
    kl_coef: float
    teacher_kl: float | None
    divergence: float | None
    taught: frozenset[int]


def full_logit_rows(
    job: PreparedJob,
    start: Mapping[SequenceRef, torch.Tensor],
    start_topk: Mapping[SequenceRef, tuple[torch.Tensor, torch.Tensor]],
    teacher: ModelTeacher,
    settings: FullLogitDistillation,
    *,
    kl_coef: float,
) -> FullLogitRows:
    """The teacher's log probabilities of the student's top-k tokens at every trained token of
    the job, one teacher pass per sample.

    :param start: the student's log probability of each token at the start weights, by
        sequence (``len - 1``).
    :param start_topk: the student's top-k at each position at the start weights, by
        sequence: their log probabilities and the tokens, each ``(len - 1, k)``.
    """
    rows: dict[SequenceRef, torch.Tensor] = {}
    differences: list[torch.Tensor] = []
    divergences: list[torch.Tensor] = []
    taught: set[int] = set()
    for position in sorted({ref[0] for ref in start}):
        sequences = job.rendered[position][1].sequences
        refs = [(position, k) for k in range(len(sequences))]
        marks = [
            torch.tensor(marked_positions(s), dtype=torch.long, device=start[ref].device)
            for ref, s in zip(refs, sequences, strict=True)
        ]
        sampled, values = teacher.topk_logprobs(
            job.teachers[job.rendered[position][0]],
            torch.cat([start_topk[r][1][m] for r, m in zip(refs, marks, strict=True)]),
        )
        offset = 0
        for ref, mark in zip(refs, marks, strict=True):
            student = start_topk[ref][0]
            mine = values[offset : offset + len(mark)].to(student.device)
            rows[ref] = torch.zeros_like(student).index_copy(0, mark, mine)
            differences.append(
                start[ref][mark].float() - sampled[offset : offset + len(mark)].to(student.device)
            )
            divergence = topk_divergence(
                student[mark], mine, add_tail=settings.add_tail, alpha=settings.alpha
            )
            if bool((divergence != 0).any()):
                taught.add(position)
            divergences.append(divergence)
            offset += len(mark)
    kl = torch.cat(differences) if differences else torch.zeros(0)
    every = torch.cat(divergences) if divergences else torch.zeros(0)
    return FullLogitRows(
        {ref: indices for ref, (_, indices) in start_topk.items()},
        rows,
        settings,
        kl_coef,
        float(kl.mean()) if kl.numel() else None,
        float(every.mean()) if every.numel() else None,
        frozenset(taught),
    )
