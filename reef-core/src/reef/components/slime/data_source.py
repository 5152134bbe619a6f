"""Reef as slime's data source: the class slime loads with ``--data-source-path``, and the
rollout function (``--rollout-function-path``) that hands slime Reef's samples as they are.

Slime drives a data source this way (``slime/ray/rollout.py``, ``RolloutManager``; ``train.py``
and ``train_async.py``):

1. ``RolloutManager.__init__`` builds it: ``data_source_cls(args)``;
2. ``create_training_models`` (``slime/ray/placement_group.py``) calls ``load(start - 1)``, where
   ``start`` is the rollout after the actor checkpoint slime resumed from (``load(-1)`` on a
   fresh start);
3. for each rollout ``r``: ``generate(r)`` calls the rollout function, which calls
   ``get_samples(n)``; a rollout function may give groups back with ``add_samples``;
   ``train_async.py`` generates rollout ``r + 1`` while ``r`` trains;
4. every ``--save-interval`` rollouts, after ``save_model(r)``: ``save(r)``.

So the weights of checkpoint ``r`` trained exactly the groups handed out for rollouts up to
``r`` since the checkpoint the run resumed from. :class:`ReefDataSource` records, durably:

- each hand-out, with its rollout id (``handouts.jsonl``), before slime gets the samples;
- at ``save(r)``, the groups the saved weights trained (``saves.jsonl``): Reef reports a job
  finished once every group of it is in the last save, and publishes the save's weights;
- at ``load(r)``, the groups checkpoint ``r`` trained (its save, or, when slime stopped between
  saving the model and calling ``save``, the last save before it plus the hand-outs up to
  ``r``). Every other group is handed out again, first, in job order.

Hence no group is lost (a group handed out after the checkpoint slime resumes from is handed out
again) and none trains twice into the weights (a group the checkpoint trained is never handed
out again).

Settings come from slime's arguments (put them in the YAML of ``--custom-config-path``):
``reef_exchange_dir`` (required: the exchange folder Reef's ``slime`` component writes),
``reef_poll_seconds`` (0.5: how often to look for Reef's next job while slime waits for data)
and ``reef_wait_seconds`` (unset: wait for data as long as it takes).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reef.components.slime.exchange import Exchange, GroupKey, TrainedGroups
from reef.errors import ReefError

logger = logging.getLogger(__name__)


class ReefDataSourceError(ReefError, RuntimeError):
    """Slime is started in a way Reef's data source cannot serve; the message says the fix."""


def _slime_sample_class() -> Callable[..., Any]:
    # slime is installed where slime runs, never with Reef: no stubs to check against here.
    from slime.utils.types import Sample  # type: ignore[import-not-found]

    return Sample  # type: ignore[no-any-return]


class ReefDataSource:
    """Reef's jobs as slime's data source (see the module's documentation).

    :param args: slime's arguments.
    :param sample_class: slime's ``Sample`` (``slime.utils.types.Sample``) by default.
    """

    def __init__(self, args: Any, *, sample_class: Callable[..., Any] | None = None) -> None:
        self.args = args
        root = getattr(args, "reef_exchange_dir", None)
        if not root:
            raise ReefDataSourceError(
                "slime's arguments name no reef_exchange_dir: put `reef_exchange_dir: <the"
                " exchange_dir of Reef's slime component>` in the YAML given to"
                " --custom-config-path"
            )
        if not getattr(args, "rollout_global_dataset", True):
            raise ReefDataSourceError(
                "--disable-rollout-global-dataset is set: slime then never calls the data"
                " source's save and load, and Reef could not tell what trained; drop the flag"
            )
        self.exchange = Exchange(Path(root))
        self._sample_class = sample_class
        self._poll = float(getattr(args, "reef_poll_seconds", None) or 0.5)
        wait = getattr(args, "reef_wait_seconds", None)
        self._wait = None if wait is None else float(wait)
        self._incarnation = sum(1 for _ in self.exchange.lines("saves"))
        self._trained = TrainedGroups()  # what the weights being trained already trained
        self._handed: dict[GroupKey, int] = {}  # handed out since the load: group -> rollout
        self._loaded = False
        self._rollout: int | None = None
        self._next_index = 0

    # -- slime's interface ------------------------------------------------------------------

    def load(self, rollout_id: int | None = None) -> None:
        """Resume at checkpoint ``rollout_id`` (-1: a fresh start; ``None``: the last save)."""
        saves = list(self.exchange.lines("saves"))
        if rollout_id is None:
            rollout_id = int(saves[-1]["rollout_id"]) if saves else -1
        if rollout_id < 0:
            if any(line["event"] == "save" for line in saves):
                raise ReefDataSourceError(
                    f"{self.exchange.root} holds training slime saved before (up to rollout"
                    f" {saves[-1]['rollout_id']}), but slime starts from fresh weights: start it"
                    " with --load <its --save folder> to continue, or give Reef's slime"
                    " component and slime a new exchange folder"
                )
            trained = TrainedGroups()
        else:
            trained = self._trained_at(rollout_id, saves)
        self._trained = trained
        self._handed = {}
        self._loaded = True
        self._rollout = rollout_id + 1
        self._record("load", rollout_id)

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        """The next ``num_samples`` groups of Reef's jobs not trained yet, in job order, each a
        list of slime samples (one per rendered sequence of each Reef sample); waits for Reef
        to write more jobs when fewer are ready."""
        if not self._loaded:
            self.load(None)
        rollout = self._rollout if self._rollout is not None else 0
        deadline = None if self._wait is None else time.monotonic() + self._wait
        groups: list[tuple[GroupKey, dict[str, Any]]] = []
        while True:
            groups = self._ready_groups(num_samples)
            if len(groups) >= num_samples:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Reef wrote {len(groups)} of the {num_samples} groups slime asked for within"
                    f" reef_wait_seconds ({self._wait} s)"
                )
            time.sleep(self._poll)
        # Recorded before slime sees them: a hand-out slime may have trained is never unknown.
        self.exchange.append(
            "handouts",
            {
                "incarnation": self._incarnation,
                "rollout_id": rollout,
                "groups": [list(key) for key, _ in groups],
            },
        )
        for key, _ in groups:
            self._handed[key] = rollout
        return [self._slime_group(key, group) for key, group in groups]

    def add_samples(self, samples: list[list[Any]]) -> None:
        """Take groups back untrained (a rollout function that aborted them): they are handed
        out again first."""
        keys = {tuple(s.metadata["reef"]["group"]) for group in samples for s in group}
        returned = [key for key in keys if key in self._handed]
        for key in returned:
            del self._handed[key]
        if returned:
            self.exchange.append(
                "handouts",
                {"incarnation": self._incarnation, "returned": [list(k) for k in returned]},
            )

    def save(self, rollout_id: int) -> None:
        """Checkpoint ``rollout_id`` is saved: record the groups its weights trained."""
        trained = self._trained.copy()
        trained.add(key for key, rollout in self._handed.items() if rollout <= rollout_id)
        trained.compact(self.exchange.group_counts(self._next_seq_bound(trained)))
        self._record("save", rollout_id, trained)
        # The saved set is now the base, so each later save and hand-out reads a short list.
        self._trained = trained
        self._handed = {k: r for k, r in self._handed.items() if r > rollout_id}

    def __len__(self) -> int:
        """The groups Reef wrote that wait to be handed out now (this changes as Reef writes)."""
        return len(self._ready_groups(None))

    # -- the rollout being generated ---------------------------------------------------------

    def begin_rollout(self, rollout_id: int) -> None:
        """The next hand-outs are for rollout ``rollout_id`` (Reef's rollout function says so;
        without it, they are for the rollout after the one loaded)."""
        self._rollout = rollout_id

    # -- internals -------------------------------------------------------------------------

    def _record(self, event: str, rollout_id: int, trained: TrainedGroups | None = None) -> None:
        save_hf = getattr(self.args, "save_hf", None)
        weights = None
        if rollout_id >= 0:
            weights = save_hf.format(rollout_id=rollout_id) if save_hf else None
        else:
            weights = getattr(self.args, "hf_checkpoint", None)
        self.exchange.append(
            "saves",
            {
                "event": event,
                "incarnation": self._incarnation,
                "rollout_id": rollout_id,
                "trained": (trained or self._trained).to_json(),
                "weights": weights,
            },
        )

    def _trained_at(self, rollout_id: int, saves: list[dict[str, Any]]) -> TrainedGroups:
        for line in reversed(saves):
            if line["event"] == "save" and int(line["rollout_id"]) == rollout_id:
                return TrainedGroups.from_json(line["trained"])
        # Slime stopped after saving the model and before calling save: rebuild what the
        # checkpoint trained from the run that made it (the last that handed rollout
        # ``rollout_id`` out): its state before that rollout plus its hand-outs up to it.
        runs = [
            line["incarnation"]
            for line in self.exchange.lines("handouts")
            if line.get("rollout_id") == rollout_id
        ]
        if not runs:
            raise ReefDataSourceError(
                f"slime resumes at rollout {rollout_id}, which {self.exchange.root} never handed"
                " data out for: is this slime run's exchange folder another run's?"
            )
        run = runs[-1]
        before = [
            line
            for line in saves
            if line["incarnation"] == run and int(line["rollout_id"]) < rollout_id
        ]
        trained = TrainedGroups.from_json(before[-1]["trained"])
        since = int(before[-1]["rollout_id"])
        handed: set[GroupKey] = set()
        for line in self.exchange.lines("handouts"):
            if line["incarnation"] != run:
                continue
            handed.difference_update((k[0], k[1]) for k in line.get("returned", []))
            if since < line.get("rollout_id", since) <= rollout_id:
                handed.update((k[0], k[1]) for k in line["groups"])
        logger.warning(
            "rollout %d was saved by slime without the data source's record; its groups are"
            " rebuilt from the hand-outs of the run that trained it",
            rollout_id,
        )
        trained.add(handed)
        return trained

    def _next_seq_bound(self, trained: TrainedGroups) -> int:
        keys = [k[0] for k in trained.groups] or [trained.below - 1]
        return max(keys) + 1

    def _ready_groups(self, limit: int | None) -> list[tuple[GroupKey, dict[str, Any]]]:
        ready: list[tuple[GroupKey, dict[str, Any]]] = []
        seq = self._trained.below
        while limit is None or len(ready) < limit:
            job = self.exchange.job(seq)
            if job is None:
                break
            self._check_clip(job)
            self._check_temperatures(job)
            for index, group in enumerate(job["groups"]):
                key = (seq, index)
                if key not in self._trained and key not in self._handed:
                    ready.append((key, group))
                    if limit is not None and len(ready) >= limit:
                        break
            seq += 1
        return ready

    def _check_clip(self, job: dict[str, Any]) -> None:
        """Refuse a ``ppo`` job whose clip range is not slime's: slime's PPO loss clips the
        ratio to ``[1 - --eps-clip, 1 + --eps-clip-high]`` for every rollout."""
        if "clip" not in job:
            return
        low, high = (float(v) for v in job["clip"])
        slime_low = float(getattr(self.args, "eps_clip", 0.2))
        slime_high = getattr(self.args, "eps_clip_high", None)
        slime_high = slime_low if slime_high is None else float(slime_high)
        if not (math.isclose(low, slime_low) and math.isclose(high, slime_high)):
            raise ReefDataSourceError(
                f"Reef's job {job['job_id']} trains ppo with clip_low {low} and clip_high"
                f" {high}, but slime clips the ratio with --eps-clip {slime_low} --eps-clip-high"
                f" {slime_high}: start slime with --eps-clip {low} --eps-clip-high {high}"
            )

    def _check_temperatures(self, job: dict[str, Any]) -> None:
        """Refuse a policy job whose samples were sampled at a temperature that is not slime's:
        slime divides every rollout's logits by ``--rollout-temperature``
        (``slime/backends/megatron_utils/loss.py``), so a sample sampled at another trains off
        the policy that sampled it."""
        sampled = [float(t) for t in job.get("temperatures", [])]
        slime = float(getattr(self.args, "rollout_temperature", 1.0))
        others = [t for t in sampled if not math.isclose(t, slime)]
        if not others:
            return
        if len(sampled) == 1:
            fix = f"start slime with --rollout-temperature {sampled[0]}"
        else:
            fix = (
                "slime scores every rollout at one temperature: have the agents sample at one, or"
                " train this scenario with the local component, which scores each token at its own"
            )
        raise ReefDataSourceError(
            f"Reef's job {job['job_id']} trains tokens sampled at temperature"
            f" {', '.join(str(t) for t in sampled)}, but slime scores them at --rollout-temperature"
            f" {slime}: {fix}"
        )

    def _slime_group(self, key: GroupKey, group: dict[str, Any]) -> list[Any]:
        make = self._sample_class or _slime_sample_class()
        status = make.Status.COMPLETED  # type: ignore[attr-defined]
        samples = []
        for sample in group["samples"]:
            index = self._next_index
            self._next_index += 1
            for sequence in sample["sequences"]:
                samples.append(
                    make(
                        group_index=key[0] * 1_000_000 + key[1],
                        index=index,
                        # The sequences of one Reef sample are one rollout to slime's loss, so
                        # its token mean counts the sample once.
                        rollout_id=index,
                        tokens=list(sequence["tokens"]),
                        response_length=int(sequence["response_length"]),
                        loss_mask=list(sequence["loss_mask"]),
                        reward=float(sample["reward"]),
                        rollout_log_probs=None,
                        status=status,
                        metadata={
                            "reef": {
                                "group": list(key),
                                "sample_id": sample["sample_id"],
                                "group_id": group["group_id"],
                                "reward": sample["raw_reward"],
                            }
                        },
                    )
                )
        return samples


def generate_rollout(
    args: Any, rollout_id: int, data_source: Any, evaluation: bool = False
) -> list[list[Any]]:
    """Slime's rollout function for Reef (``--rollout-function-path``): the next
    ``--rollout-batch-size`` groups of Reef's samples, as they are (Reef's samples are answers
    the served model already gave; nothing is generated again)."""
    if evaluation:
        raise ReefDataSourceError(
            "Reef's rollout function trains Reef's samples and evaluates nothing: set"
            " --eval-function-path to an evaluation of your own, or leave --eval-interval unset"
        )
    data_source.begin_rollout(rollout_id)
    return data_source.get_samples(int(args.rollout_batch_size))  # type: ignore[no-any-return]
