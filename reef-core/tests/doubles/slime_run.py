"""A stand-in of slime's training loop, for tests of Reef as slime's data source.

Slime itself (Megatron, Ray, GPUs) is not installed here. :class:`SlimeRun` makes the
data-source calls slime makes, in slime's order, taken from slime's code (THUDM/slime):

- ``slime/ray/rollout.py``, ``RolloutManager.__init__``: ``data_source_cls(args)``;
- ``slime/ray/placement_group.py``, ``create_training_models``: with ``rollout_global_dataset``,
  ``rollout_manager.load(start_rollout_id - 1)``, where ``start_rollout_id`` is the actor
  checkpoint's rollout + 1 (``slime/backends/megatron_utils/actor.py``, ``create``), 0 on a
  fresh start;
- ``train.py``, ``train``: for each rollout, ``generate(rollout_id)``
  (``RolloutManager._get_rollout_data``: ``call_rollout_fn(generate_rollout, args, rollout_id,
  data_source)``), the actor trains, and when ``should_run_periodic_action(rollout_id,
  save_interval, ..., num_rollout)`` (``slime/utils/misc.py``: ``(rollout_id + 1) % interval ==
  0`` or the last rollout): ``actor_model.save_model(rollout_id)`` (which writes
  ``--save-hf``), then ``rollout_manager.save(rollout_id)``, i.e. ``data_source.save``;
- ``train_async.py``, ``train``: the same, but ``generate(rollout_id + 1)`` is called before
  rollout ``rollout_id`` trains and saves.

Its "weights" are the list of Reef sample ids trained into them, so a test sees exactly what
trained once, twice or never; its checkpoints and ``--save-hf`` folders hold that list.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reef.components.slime.data_source import ReefDataSource, generate_rollout


@dataclass
class Sample:
    """The fields of ``slime.utils.types.Sample`` the data source fills."""

    class Status(enum.Enum):
        COMPLETED = "completed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    tokens: list[int] = field(default_factory=list)
    response_length: int = 0
    loss_mask: list[int] | None = None
    reward: float | None = None
    rollout_log_probs: list[float] | None = None
    status: Status = Status.COMPLETED
    metadata: dict[str, Any] = field(default_factory=dict)


class Crash(Exception):
    """Slime's job died here."""


class SlimeRun:
    """One run of slime's training loop (see the module's documentation).

    :param crash: ``(rollout_id, point)``: die at that rollout, at ``trained`` (after training,
        before saving), ``model_saved`` (after ``save_model``, before the data source's save),
        or ``generated`` (after the rollout's samples were handed out, before training).
    """

    def __init__(
        self,
        root: Path,
        *,
        rollout_batch_size: int = 2,
        save_interval: int = 1,
        asynchronous: bool = False,
    ) -> None:
        self.root = root
        self.args = SimpleNamespace(
            reef_exchange_dir=str(root / "exchange"),
            reef_wait_seconds=0.0,
            rollout_global_dataset=True,
            rollout_batch_size=rollout_batch_size,
            save_hf=str(root / "hf" / "rollout-{rollout_id}"),
            hf_checkpoint=str(root / "base"),
        )
        self.save_interval = save_interval
        self.asynchronous = asynchronous
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)

    @property
    def next_rollout(self) -> int:
        """The rollout a run would start at: the one after the latest checkpoint."""
        return self._latest_checkpoint()[0] + 1

    def _latest_checkpoint(self) -> tuple[int, list[str]]:
        saved = sorted(int(p.stem) for p in (self.root / "checkpoints").glob("*.json"))
        if not saved:
            return -1, []
        return saved[-1], json.loads((self.root / "checkpoints" / f"{saved[-1]}.json").read_text())

    def _save_model(self, rollout_id: int, weights: list[str]) -> None:
        body = json.dumps(weights)
        (self.root / "checkpoints" / f"{rollout_id}.json").write_text(body)
        hf = Path(self.args.save_hf.format(rollout_id=rollout_id))
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "model.json").write_text(body)

    def run(self, num_rollout: int, crash: tuple[int, str] | None = None) -> list[str]:
        data_source = ReefDataSource(self.args, sample_class=Sample)
        loaded, weights = self._latest_checkpoint()
        data_source.load(loaded)  # create_training_models: load(start_rollout_id - 1)
        start = loaded + 1

        def generate(rollout_id: int) -> list[list[Sample]]:
            groups = generate_rollout(self.args, rollout_id, data_source)
            if crash == (rollout_id, "generated"):
                raise Crash(rollout_id)
            return groups

        pending = generate(start) if self.asynchronous and start < num_rollout else None
        for rollout_id in range(start, num_rollout):
            if self.asynchronous:
                groups, pending = (
                    pending,
                    (generate(rollout_id + 1) if rollout_id + 1 < num_rollout else None),
                )
            else:
                groups = generate(rollout_id)
            assert groups is not None
            # The actor trains every sequence; a Reef sample's sequences share a rollout_id.
            trained = {}
            for group in groups:
                for sample in group:
                    trained[sample.rollout_id] = sample.metadata["reef"]["sample_id"]
            weights = weights + list(trained.values())
            if crash == (rollout_id, "trained"):
                raise Crash(rollout_id)
            last = rollout_id == num_rollout - 1
            if last or (rollout_id + 1) % self.save_interval == 0:
                self._save_model(rollout_id, weights)
                if crash == (rollout_id, "model_saved"):
                    raise Crash(rollout_id)
                data_source.save(rollout_id)
        return weights
