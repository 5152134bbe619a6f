"""What a distilling objective computes without a model of its own (no PyTorch here): the
teacher behind an engine, and the per-token advantage from two sets of log probabilities.

A :class:`TeacherScorer` gives the teacher's log probability of each of the student's trained
tokens in its teacher sequence; :func:`kl_advantages` turns them, with the student's own log
probabilities at the job's start weights, into the per-token advantage the policy objective
trains (as tinker-cookbook's on-policy distillation does):

    A_t = -kl_coef * (log p_student(y_t) - log p_teacher(y_t))

:func:`token_advantages` gives each sequence of a job its row of advantages. Every component
that distils uses these: ``local`` (whose teachers run on its device,
:mod:`reef.components.local.teacher`) and ``tinker`` (whose self teacher is a ``forward`` of the
teacher sequences at the job's start weights). :class:`EngineTeacher` is the teacher behind an
OpenAI-compatible engine that returns prompt log probabilities (vLLM's ``/v1/completions``
with the prompt as token ids and ``prompt_logprobs``); the engine must serve a model with the
student's tokenizer.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from reef.components.job_parameters import TeacherSettings
from reef.components.job_samples import PreparedJob
from reef.components.scheduling import SequenceRef
from reef.core.chat_rendering import RenderedSample, RenderedSequence
from reef.errors import ReefError


class TeacherError(ReefError, RuntimeError):
    """The teacher could not score a sequence: the job fails with this reason."""


class TeacherScorer(Protocol):
    """What a distilling objective needs of its teacher."""

    def logprobs(self, samples: Sequence[RenderedSample]) -> list[list[float]]:
        """For each teacher sequence, the teacher's log probability of each marked token (loss
        mask 1) given every token before it, in order: one value per student trained token.

        :raises TeacherError: when the teacher cannot answer.
        """
        ...


def marked_positions(sequence: RenderedSequence) -> list[int]:
    """Where ``sequence``'s marked tokens are predicted: for each token after the first whose
    loss mask is 1, the position before it (an index into one value per token after the first).

    :raises TeacherError: when the first token is marked (nothing precedes it).
    """
    if sequence.loss_mask and sequence.loss_mask[0]:
        raise TeacherError("a teacher sequence cannot score its first token: nothing precedes it")
    return [j - 1 for j in range(1, len(sequence.token_ids)) if sequence.loss_mask[j]]


def marked_values(sequence: RenderedSequence, values: Sequence[float]) -> list[float]:
    """The values of ``sequence``'s marked tokens, from one value per token after the first."""
    return [values[i] for i in marked_positions(sequence)]


class EngineTeacher:
    """A teacher behind an engine that returns the log probabilities of a prompt's tokens.

    vLLM (``api: vllm``): each teacher sequence is one ``POST {base_url}/completions`` with
    ``prompt`` the token ids, ``max_tokens: 1`` and ``prompt_logprobs: 0``; the answer's
    ``choices[0].prompt_logprobs`` holds, for each prompt position after the first, the log
    probability of the token there (keyed by its id). SGLang (``api: sglang``): one ``POST
    {server}/generate`` (the native API; a ``/v1`` ending of ``base_url`` is dropped) with
    ``input_ids``, ``return_logprob`` and ``logprob_start_len: 0``; the answer's
    ``meta_info.input_token_logprobs`` holds ``[logprob, token id, text]`` for every prompt
    position, the first ``[null, ...]`` (``scheduler_output_processor_mixin.py`` pads it so).
    A call that fails or times out is tried again, up to ``attempts``.

    :param settings: the teacher's settings (``base_url`` set).
    """

    def __init__(self, settings: TeacherSettings) -> None:
        if settings.base_url is None:
            raise ValueError("an engine teacher needs a base_url")
        self.settings = settings
        base = settings.base_url.rstrip("/")
        if settings.api == "sglang":
            self.url = base.removesuffix("/v1") + "/generate"
        else:
            self.url = base + "/completions"

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if self.settings.api_key:
            headers["authorization"] = f"Bearer {self.settings.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        errors: list[str] = []
        for attempt in range(self.settings.attempts):
            if attempt:
                time.sleep(min(2.0**attempt * 0.1, 2.0))
            try:
                with urllib.request.urlopen(
                    request, timeout=self.settings.timeout_seconds
                ) as answer:
                    payload = json.loads(answer.read())
                if isinstance(payload, dict):
                    return payload
                errors.append("the answer is not a JSON object")
            except urllib.error.HTTPError as exc:
                errors.append(f"HTTP {exc.code}")
                if exc.code < 500 and exc.code != 429:
                    break  # a refused request is refused again
            except (OSError, ValueError) as exc:  # URLError, timeouts, a body that is not JSON
                errors.append(f"{type(exc).__name__}: {exc}")
        raise TeacherError(
            f"the teacher engine at {self.url} did not score a sequence after "
            f"{len(errors)} attempt(s): {'; '.join(errors)}"
        )

    def _score(self, sequence: RenderedSequence) -> list[float]:
        ids = list(sequence.token_ids)
        if self.settings.api == "sglang":
            return marked_values(sequence, self._sglang_values(ids))
        body: dict[str, Any] = {
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
        if self.settings.model is not None:
            body["model"] = self.settings.model
        answer = self._post(body)
        choices = answer.get("choices")
        entries = (
            choices[0].get("prompt_logprobs") if isinstance(choices, list) and choices else None
        )

        def read(entry: Any, token: int) -> Any:  # {token id: {logprob, ...}} or a number
            found = entry.get(str(token)) if isinstance(entry, dict) else None
            return found.get("logprob") if isinstance(found, dict) else found

        values = self._per_token(entries, ids, read, "prompt_logprobs", "(vLLM does)")
        return marked_values(sequence, values)

    def _sglang_values(self, ids: list[int]) -> list[float]:
        """The log probability of each token of ``ids`` after the first, from SGLang."""
        body: dict[str, Any] = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        answer = self._post(body)
        meta = answer.get("meta_info")
        entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None

        def read(entry: Any, token: int) -> Any:  # [logprob, token id, text]
            named = isinstance(entry, list) and len(entry) >= 2 and entry[1] == token
            return entry[0] if named else None

        return self._per_token(entries, ids, read, "input_token_logprobs", "(SGLang does)")

    def _per_token(
        self,
        entries: Any,
        ids: Sequence[int],
        read: Callable[[Any, int], Any],
        field: str,
        who: str,
    ) -> list[float]:
        """The log probability ``read`` finds in the engine's ``field`` for each token of
        ``ids`` after the first (the engine's ``entries``, one per token).

        :raises TeacherError: naming ``field`` when it is missing, short, or lacks a token.
        """
        if not isinstance(entries, list) or len(entries) != len(ids):
            raise TeacherError(
                f"the teacher engine at {self.url} returned no {field} for the {len(ids)} "
                f"prompt tokens: it must answer them {who}"
            )
        values: list[float] = []
        for position in range(1, len(ids)):
            value = read(entries[position], ids[position])
            if not isinstance(value, int | float):
                raise TeacherError(
                    f"the teacher engine's {field}[{position}] lacks token {ids[position]}'s "
                    "log probability"
                )
            values.append(float(value))
        return values

    def logprobs(self, samples: Sequence[RenderedSample]) -> list[list[float]]:
        """See :class:`TeacherScorer`; one engine call per sequence."""
        return [[v for s in sample.sequences for v in self._score(s)] for sample in samples]


def kl_advantages(
    student: Sequence[float], teacher: Sequence[float], *, kl_coef: float
) -> list[float]:
    """The per-token advantage of a distilling objective: ``-kl_coef * (student - teacher)``
    for each trained token (both log probabilities of the same sampled token).

    :raises TeacherError: when the two do not score the same number of tokens.
    """
    if len(student) != len(teacher):
        raise TeacherError(
            f"the teacher scored {len(teacher)} tokens of a reply of {len(student)} trained "
            "tokens: its sequence does not hold the student's reply"
        )
    return [-kl_coef * (s - t) for s, t in zip(student, teacher, strict=True)]


def token_advantages(
    job: PreparedJob,
    start: Mapping[SequenceRef, Sequence[float]],
    scorer: TeacherScorer,
    *,
    kl_coef: float,
    kl_discount: float = 0.0,
    kl_centred: bool = False,
) -> tuple[dict[SequenceRef, list[float]], float | None]:
    """Each sequence's per-token advantage under a distilling objective, and the mean reverse
    KL (``log p_student - log p_teacher`` over the trained tokens, the ``teacher_kl`` metric).

    A trained token's advantage is :func:`kl_advantages` plus the sample's reward advantage
    (``job.advantage_of``, 0 without ``reward_coef``); other positions hold the reward advantage
    and train nothing (their loss mask is 0).

    :param start: the student's log probabilities at the job's start weights, for every
        sequence of every sample to score (one value per token after the first).
    :param kl_discount: ``gamma`` of the cookbook's ``kl_discount_factor``
        (``tinker_cookbook/distillation/train_on_policy.py``): above 0, each position's KL
        advantage is ``sum_k gamma^k * kl[t + k]`` over the row's later positions
        (``discounted_future_sum_vectorized``; a position that does not train holds 0 and
        still counts as a step of the discount, as in the cookbook's datum).
    :param kl_centred: add ``kl_coef`` times the job's mean KL to every trained token's term,
        so the terms average 0 over the job: TTT-Discover's KL penalty against the base model
        (``tinker_cookbook/rl/metrics.py``, ``incorporate_kl_penalty``:
        ``kl_penalty_coef * (avg_logp_diff - logp_diff)``).
    :returns: the rows by sequence, each of ``len(sequence) - 1`` values.
    """
    positions = sorted({ref[0] for ref in start})
    scored = scorer.logprobs([job.teachers[job.rendered[p][0]] for p in positions])
    rows: dict[SequenceRef, list[float]] = {}
    differences: list[float] = []
    values: list[list[float]] = []
    for position, teacher in zip(positions, scored, strict=True):
        sequences = job.rendered[position][1].sequences
        marks = [[j for j in range(1, len(s.token_ids)) if s.loss_mask[j]] for s in sequences]
        student = [float(start[(position, k)][j - 1]) for k, js in enumerate(marks) for j in js]
        values.append(kl_advantages(student, teacher, kl_coef=kl_coef))
        differences += [s - t for s, t in zip(student, teacher, strict=True)]
    kl = sum(differences) / len(differences) if differences else None
    shift = kl_coef * kl if kl_centred and kl is not None else 0.0
    for position, computed in zip(positions, values, strict=True):
        sequences = job.rendered[position][1].sequences
        marks = [[j for j in range(1, len(s.token_ids)) if s.loss_mask[j]] for s in sequences]
        token_values = iter(value + shift for value in computed)
        base = job.advantage_of(position)
        for k, js in enumerate(marks):
            terms = [0.0] * len(start[(position, k)])
            for j in js:
                terms[j - 1] = next(token_values)
            if kl_discount > 0:
                running = 0.0
                for t in range(len(terms) - 1, -1, -1):
                    running = terms[t] + kl_discount * running
                    terms[t] = running
            rows[(position, k)] = [base + term for term in terms]
    return rows, kl
