"""The ``slime`` training component: Reef's side of training with slime.

Slime (Megatron training with SGLang rollouts on Ray) runs as its own job, with Reef as its data
source (:mod:`reef.components.slime.data_source`). The two share one folder, the exchange
(:mod:`reef.components.slime.exchange`):

- ``submit`` renders and scores the job's samples as every component does
  (:func:`reef.components.job_samples.prepare_job`), on the component's own thread, and writes
  the job to the exchange: its groups (Reef's ``group_id``; an ungrouped sample is a group of
  its own), each sample's sequences as slime reads them (the tokens, the response length: from
  the first trained token to the end, the loss mask over the response) and its reward (the
  centred advantage under ``importance_sampling``, 0 under ``cross_entropy``);
- ``poll`` finds the job finished once every group of it is in the last rollout slime saved
  (the data source records which groups each save's weights trained); its metrics then say in
  which slime rollout each sample trained (``consumed``, ``steps``);
- ``publish`` names the weights of that save (``--save-hf``, one Hugging Face folder per saved
  rollout, what SGLang loads), or ``base_weights`` before the first save, with an
  ``artifact_id`` that is the SHA-256 of the folder's files (their relative paths and bytes),
  computed once per folder.

Slime cuts each rollout into optimizer steps of ``--global-batch-size`` rollouts (Reef samples):
the job parameters' ``scheduling`` is slime's to decide, not Reef's. Slime's loss is not seen by
Reef: ``loss`` is ``None`` in the metrics (slime logs it).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import traceback
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, ClassVar

import attrs

from reef.components.interface import Artifact, JobHandle
from reef.components.job_parameters import JobParameters
from reef.components.job_samples import PreparedJob, job_metrics, prepare_job
from reef.components.json_files import read_json, write_json
from reef.components.scheduling import StepPlan
from reef.components.slime.exchange import Exchange, TrainedGroups
from reef.components.tokenizers import load_tokenizer
from reef.core.chat_rendering import ChatRenderer, RenderedSequence, Tokenizer
from reef.core.config import config_option
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginSettings
from reef.core.records import JSON


def _positive(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class SlimeComponentSettings(PluginSettings):
    """The settings of the ``slime`` component (the deployment's ``training.options``)."""

    #: The option that names the folder this component keeps its own state in: two trainers
    #: of a scenario may not share it (``reef check`` refuses).
    state_options: ClassVar[tuple[str, ...]] = ("exchange_dir",)

    exchange_dir: str = config_option(
        help="the folder Reef and slime's data source share (reef_exchange_dir in slime's"
        " --custom-config-path YAML)"
    )
    base_weights: str = config_option(
        help="the Hugging Face folder slime starts from (its --hf-checkpoint), as Reef sees it"
    )
    tokenizer: str | None = config_option(
        None, help="the tokenizer folder (base_weights when unset); 'byte': Reef's demo tokenizer"
    )
    max_seq_len: int | None = config_option(
        None, help="longest sequence that trains (slime's --rollout-max-context-len)",
        validator=_positive,
    )  # fmt: skip
    chat_template_args: dict[str, Any] = config_option(
        factory=dict, help="the engine's chat template arguments (enable_thinking...)"
    )


def _slime_sequence(sequence: RenderedSequence) -> JSON:
    """A rendered sequence as a slime sample reads it: the response runs from the first trained
    token to the end, and its loss mask covers it."""
    first = sequence.loss_mask.index(1)
    return {
        "tokens": list(sequence.token_ids),
        "response_length": len(sequence.token_ids) - first,
        "loss_mask": list(sequence.loss_mask[first:]),
    }


def _groups(prepared: PreparedJob) -> list[JSON]:
    """The job's rendered samples in groups, in job order of each group's first sample."""
    groups: dict[str, JSON] = {}
    for position, (index, rendered) in enumerate(prepared.rendered):
        sample = prepared.samples[index]
        key = sample.group_id if sample.group_id is not None else f"\0{sample.sample_id}:{index}"
        group = groups.setdefault(key, {"group_id": sample.group_id, "samples": []})
        group["samples"].append(
            {
                "sample_id": sample.sample_id,
                "reward": prepared.advantage_of(position),
                "raw_reward": prepared.reward_of(position),
                "sequences": [_slime_sequence(s) for s in rendered.sequences],
            }
        )
    return list(groups.values())


def folder_digest(folder: Path) -> str:
    """``sha256:`` of a folder's files: each relative path and its bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


class SlimeComponent:
    """The ``slime`` component (see the module's documentation); a
    :class:`reef.components.interface.TrainingComponent`."""

    #: The deployment's ``training.options`` are checked against these settings.
    Settings: ClassVar[type[PluginSettings]] = SlimeComponentSettings

    def __init__(self, settings: SlimeComponentSettings, *, name: str = "slime") -> None:
        self._name = name
        self.settings = settings
        self.exchange = Exchange(Path(settings.exchange_dir))
        self._tokenizer: Tokenizer | None = None
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"reef-{name}")
        self._jobs: dict[str, Future[None]] = {}

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None, *, name: str = "slime"
    ) -> SlimeComponent:
        """Build the component from its deployment config (refused with PluginConfigError)."""
        return cls(SlimeComponentSettings.parse(config, plugin_class=cls), name=name)

    @property
    def name(self) -> str:
        """The component's name, as its job outcomes give it."""
        return self._name

    @property
    def renderer(self) -> ChatRenderer:
        """The renderer of slime's model, with the engine's chat template arguments."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.settings.tokenizer or self.settings.base_weights)
        return ChatRenderer(self._tokenizer, self.settings.chat_template_args)

    # ------------------------------------------------------------------ the interface

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        """Render the job and hand it to slime through the exchange (see the module's
        documentation); returns at once.

        :raises reef.core.plugins.PluginConfigError: for parameters it does not take.
        """
        job = JobParameters.parse(parameters, plugin_class=type(self), path="$.parameters")
        job.refuse_unsupported(
            type(self),
            ("cross_entropy", "importance_sampling", "ppo"),
            distillation="slime trains Reef's samples as its data source hands them over, with "
            "the rewards Reef computed; its own on-policy distillation (--use-opd) scores the "
            "student's tokens in the student's prompt (a Megatron teacher checkpoint) or in "
            "slime's rollouts (an SGLang teacher its reward function asks), never in the "
            "teacher sequence Reef renders with the teacher's context: train a distilling "
            "recipe with the local or the tinker component",
        )
        job.refuse_local_loss_options(type(self))
        handle = JobHandle(data.id, self._name)
        if data.id not in self._jobs and self.exchange.seq_of(data.id) is None:
            self._jobs[data.id] = self._executor.submit(self._write, data, job)
        return handle

    def _write(self, data: JobData, job: JobParameters) -> None:
        prepared = prepare_job(
            data,
            self.renderer,
            job.objective,
            max_seq_len=self.settings.max_seq_len,
            component=self._name,
            reward_baseline=job.reward_baseline,
            mask_truncated=job.mask_truncated,
        )
        metrics = job_metrics(
            prepared,
            StepPlan((), 0),
            losses=[],
            trained_tokens=0,
            step_tokens=[],
            optimizer_steps=None,  # slime plans and takes its own steps
        )
        body: JSON = {"groups": _groups(prepared), "metrics": metrics}
        if job.objective == "ppo":
            # Slime's PPO loss clips with its own arguments: its data source checks them.
            body["clip"] = [job.clip_low, job.clip_high]
        if temperatures := prepared.trained_temperatures():
            # Slime scores every rollout at its --rollout-temperature: its data source checks
            # that the samples were sampled at it.
            body["temperatures"] = sorted(temperatures)
        self.exchange.add_job(data.id, body)

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        """The job's outcome once slime saved the weights that trained all of it, else
        ``None``."""
        future = self._jobs.get(handle.job_id)
        if future is not None and not future.done():
            return None
        if future is not None and future.exception() is not None:
            error = future.exception()
            assert error is not None
            detail = traceback.format_exception_only(error)[-1].strip()
            return JobOutcome(handle.job_id, self._name, "failed", error=detail)
        seq = self.exchange.seq_of(handle.job_id)
        if seq is None:
            return JobOutcome(
                handle.job_id,
                self._name,
                "failed",
                error="the job is unknown to this component: it was not submitted, or the"
                " process that rendered it stopped before it reached the exchange",
            )
        return self._finished(seq)

    def _finished(self, seq: int) -> JobOutcome | None:
        job = self.exchange.job(seq)
        last = self.exchange.last_save()
        assert job is not None
        if job["groups"] and last is None:
            return None
        trained = TrainedGroups() if last is None else TrainedGroups.from_json(last["trained"])
        if not all((seq, index) in trained for index in range(len(job["groups"]))):
            return None
        rollout_of: dict[int, int] = {}
        for line in self.exchange.lines("handouts"):
            for key in line.get("groups", []):
                if key[0] == seq:
                    rollout_of[key[1]] = int(line["rollout_id"])
        consumed: list[JSON] = []
        for index, group in enumerate(job["groups"]):
            for sample in group["samples"]:
                rewarded = sample["raw_reward"] is not None
                consumed.append(
                    {
                        "sample_id": sample["sample_id"],
                        "step": rollout_of.get(index),
                        "loss_tokens": sum(sum(s["loss_mask"]) for s in sample["sequences"]),
                        "reward": sample["raw_reward"],
                        "advantage": sample["reward"] if rewarded else None,
                    }
                )
        metrics: JSON = {
            **job["metrics"],
            "steps": len(set(rollout_of.values())),
            "trained_tokens": sum(int(line["loss_tokens"]) for line in consumed),
            "consumed": consumed,
            "slime_rollouts": sorted(set(rollout_of.values())),
        }
        return JobOutcome(str(job["job_id"]), self._name, "finished", metrics=metrics)

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        """Block until the job ends (see :class:`TrainingComponent`): until slime saved the
        rollouts that trained it."""
        future = self._jobs.get(handle.job_id)
        if future is not None:
            try:
                future.result(timeout=timeout)
            except FutureTimeout as exc:
                raise TimeoutError(f"job {handle.job_id!r} did not end in {timeout} s") from exc
            except Exception:
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            outcome = self.poll(handle)
            if outcome is not None:
                return outcome
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {handle.job_id!r}: slime has not saved the rollouts that train it"
                    f" within {timeout} s"
                )
            time.sleep(0.2)

    def publish(self) -> Artifact:
        """The weights of the last rollout slime saved (``base_weights`` before the first)."""
        last = self.exchange.last_save()
        weights = last.get("weights") if last is not None else None
        folder = Path(weights or self.settings.base_weights)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"the weights slime saved are in {folder}, which this process cannot read:"
                " make slime's --save-hf (and base_weights) a folder Reef's process sees too"
            )
        with self._lock:
            return Artifact(self._digest(folder), folder)

    def _digest(self, folder: Path) -> str:
        """The folder's digest, computed once for the same files (listed with sizes and times)."""
        listing = sorted(
            [p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns]
            for p in folder.rglob("*")
            if p.is_file()
        )
        key = hashlib.sha256(os.fsencode(folder.resolve())).hexdigest()
        cached_path = self.exchange.root / "digests" / f"{key}.json"
        cached = read_json(cached_path)
        if cached is not None and cached["listing"] == listing:
            return str(cached["digest"])
        digest = folder_digest(folder)
        write_json(cached_path, {"listing": listing, "digest": digest})
        return digest

    def close(self) -> None:
        """Take no more jobs; wait for the one being written."""
        self._executor.shutdown(wait=True)
