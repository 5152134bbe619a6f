"""The ``local`` training component: trains a causal language model with PyTorch, here.

It trains a model loaded from a model folder (one it saved itself), or a :class:`TinyGPT`
built from its settings for demos, on the CPU or on CUDA where present. Each job:

1. parses the job parameters (:class:`reef.components.job_samples.JobParameters`): the
   objective and the scheduling parameter; bad parameters refuse the submission;
2. renders and scores the job's samples as every component does
   (:func:`reef.components.job_samples.prepare_job`: the model's chat template with the
   engine's chat template arguments; what cannot render or fit the model's context is counted
   in ``unrenderable_samples``, what needs a reward and has none in ``samples_without_reward``);
3. for ``importance_sampling``, computes every trained token's log probability with the job's
   start weights;
4. cuts the rendered samples into steps of the component's batch size
   (:mod:`reef.components.scheduling`) and takes one AdamW step for each, noting in the
   outcome's ``consumed`` metric what each step's loss consumed: per sample, the step, the
   tokens its loss counted and the reward and advantage it trained with (what Agent ECC's
   consumption lines are written from);
5. saves the new weights and the job's outcome under ``state_dir``, each all or nothing.

Jobs run one at a time on the component's own thread. A job id that ended before (in this
process or an earlier one with the same ``state_dir``) is not trained again. A job that fails
leaves the weights of the last finished job.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
import torch

from reef.components.artifacts import (
    ArtifactStore,
    load_model_folder,
    save_model_folder,
)
from reef.components.byte_tokenizer import ByteTokenizer
from reef.components.interface import Artifact, JobHandle
from reef.components.job_runner import JobRunner
from reef.components.job_samples import JobParameters, consumed_lines, job_metrics, prepare_job
from reef.components.objectives import token_logprobs, token_loss
from reef.components.scheduling import plan_steps
from reef.components.tiny_gpt import TinyGPT, TinyGPTConfig
from reef.core.chat_rendering import ChatRenderer
from reef.core.config import config_option
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginSettings
from reef.core.records import JSON

_CURRENT: Final = "current"
_OPTIMIZER: Final = "optimizer.pt"


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class LocalComponentSettings(PluginSettings):
    """The settings of the ``local`` component (the deployment's component section)."""

    state_dir: str = config_option(
        help="folder of the component's weights, optimizer state, job outcomes and artifacts"
    )
    model_path: str | None = config_option(
        None, help="model folder to start from; without it a TinyGPT is built from d_model..."
    )
    d_model: int = config_option(64, help="TinyGPT width", validator=_positive)
    n_layers: int = config_option(2, help="TinyGPT blocks", validator=_positive)
    n_heads: int = config_option(4, help="TinyGPT attention heads", validator=_positive)
    max_seq_len: int = config_option(512, help="TinyGPT context length", validator=_positive)
    batch_size: int = config_option(
        8, help="units (samples or packs) per optimizer step", validator=_positive
    )
    learning_rate: float = config_option(1e-3, help="AdamW learning rate", validator=_positive)
    seed: int = config_option(0, help="seed of the built model's initial weights")
    device: str = config_option("auto", help="torch device; auto takes CUDA when present")
    chat_template_args: dict[str, Any] = config_option(
        factory=dict, help="the engine's chat template arguments (enable_thinking...)"
    )


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
        if settings.device == "auto":
            self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        else:
            self.device = torch.device(settings.device)
        current = self.state_dir / _CURRENT
        if not current.exists():
            # The starting weights are saved before any job, so a failed job can always return
            # to the weights of the last finished one by reading them back.
            model, tokenizer = self._initial_model()
            save_model_folder(current, model, tokenizer)
        self.model, self.tokenizer = self._load_current()
        self._lock = threading.Lock()

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
        return ChatRenderer(self.tokenizer, self.settings.chat_template_args)

    def _initial_model(self) -> tuple[TinyGPT, ByteTokenizer]:
        if self.settings.model_path is not None:
            return load_model_folder(Path(self.settings.model_path))
        tokenizer = ByteTokenizer()
        config = TinyGPTConfig(
            vocab_size=tokenizer.vocab_size,
            max_seq_len=self.settings.max_seq_len,
            d_model=self.settings.d_model,
            n_layers=self.settings.n_layers,
            n_heads=self.settings.n_heads,
        )
        generator_state = torch.random.get_rng_state()
        try:
            torch.manual_seed(self.settings.seed)
            return TinyGPT(config), tokenizer
        finally:
            torch.random.set_rng_state(generator_state)

    def _load_current(self) -> tuple[TinyGPT, ByteTokenizer]:
        model, tokenizer = load_model_folder(self.state_dir / _CURRENT)
        model.to(self.device)
        self._optimizer = torch.optim.AdamW(model.parameters(), lr=self.settings.learning_rate)
        optimizer_path = self.state_dir / _OPTIMIZER
        if optimizer_path.exists():
            self._optimizer.load_state_dict(
                torch.load(optimizer_path, map_location=self.device, weights_only=True)
            )
        return model, tokenizer

    # ------------------------------------------------------------------ the interface

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        """Start training ``data`` (see :class:`TrainingComponent`).

        :raises reef.core.plugins.PluginConfigError: for parameters it does not take.
        """
        job = JobParameters.parse(parameters, plugin_class=type(self), path="$.parameters")
        return self.jobs.submit(data.id, lambda: self._run(data, job))

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        """The job's outcome once it ended, else ``None``. A job this component never started
        and has no outcome of (it was running when an earlier process stopped) failed."""
        return self.jobs.poll(handle)

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        """Block until the job ends (see :class:`TrainingComponent`)."""
        return self.jobs.wait(handle, timeout)

    def publish(self) -> Artifact:
        """Publish the weights of the last finished job as an artifact."""
        with self._lock:
            return self.artifacts.publish(self.model, self.tokenizer)

    def close(self) -> None:
        """Take no more jobs; wait for the running one."""
        self.jobs.close()

    # ------------------------------------------------------------------ a job

    def _run(self, data: JobData, job: JobParameters) -> JobOutcome:
        with self._lock:
            try:
                metrics = self._train(data, job)
                save_model_folder(self.state_dir / _CURRENT, self.model, self.tokenizer)
                staging = self.state_dir / f".{_OPTIMIZER}.{os.getpid()}"
                torch.save(self._optimizer.state_dict(), staging)
                os.replace(staging, self.state_dir / _OPTIMIZER)
                outcome = JobOutcome(data.id, self._name, "finished", metrics=metrics)
            except Exception as exc:  # a job's failure is its outcome, not a crash
                # Back to the weights and optimizer state of the last finished job.
                self.model, self.tokenizer = self._load_current()
                detail = traceback.format_exception_only(exc)[-1].strip()
                outcome = JobOutcome(data.id, self._name, "failed", error=detail)
            return outcome

    def _train(self, data: JobData, job: JobParameters) -> JSON:
        prepared = prepare_job(
            data,
            self.renderer,
            job.objective,
            max_seq_len=self.model.config.max_seq_len,
            component=self._name,
        )
        rendered = prepared.rendered
        plan = plan_steps(
            prepared.sequence_lengths,
            batch_size=self.settings.batch_size,
            scheduling=job.scheduling,
        )
        learning_rate = job.learning_rate or self.settings.learning_rate
        for group in self._optimizer.param_groups:
            group["lr"] = learning_rate

        def sequence(ref: tuple[int, int]) -> tuple[tuple[int, ...], torch.Tensor]:
            rendered_sequence = rendered[ref[0]][1].sequences[ref[1]]
            mask = torch.tensor(rendered_sequence.loss_mask[1:], dtype=torch.float32)
            return rendered_sequence.token_ids, mask.to(self.device)

        start: dict[tuple[int, int], torch.Tensor] = {}
        if job.objective == "importance_sampling":
            # The job's start weights: computed once, before the first step moves them (P-REND-3).
            with torch.no_grad():
                for step in plan.steps:
                    refs = step.sequences
                    ids = [sequence(r)[0] for r in refs]
                    start.update(
                        zip(refs, token_logprobs(self.model, ids, self.device), strict=True)
                    )

        losses: list[float] = []
        trained_tokens = 0
        consumed: list[JSON] = []
        self.model.train()
        for step in plan.steps:
            refs = step.sequences
            items = [sequence(r) for r in refs]
            tokens = sum(int(mask.sum().item()) for _, mask in items)
            if tokens == 0:
                continue
            logprobs = token_logprobs(self.model, [ids for ids, _ in items], self.device)
            total = torch.zeros((), device=self.device)
            for ref, (_, mask), values in zip(refs, items, logprobs, strict=True):
                total = total + token_loss(
                    job.objective,
                    values,
                    mask,
                    start_logprobs=start.get(ref),
                    advantage=prepared.advantage_of(ref[0]),
                )
            loss = total / step.loss_divisor(tokens, self.settings.batch_size)
            self._optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self._optimizer.step()
            loss_tokens: dict[int, int] = {}
            for (position, _), (_, mask) in zip(refs, items, strict=True):
                loss_tokens[position] = loss_tokens.get(position, 0) + int(mask.sum().item())
            consumed += consumed_lines(len(losses), loss_tokens, prepared)
            losses.append(float(loss.item()))
            trained_tokens += tokens
        self.model.eval()
        return job_metrics(
            prepared, plan, losses=losses, trained_tokens=trained_tokens, consumed=consumed
        )
