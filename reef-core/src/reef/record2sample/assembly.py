"""``SampleAssembly``: how a record set's calls become one ATIF trajectory sample (P-REND-2).

Shared by the built-in stages and by recipes. The sample is an ATIF trajectory (its JSON
object) with the report's score as reward and its feedback; it holds no tokens unless built with
``keep_tokens``. Each agent step
made from a recorded call keeps its record's id and artifact (``reef.core.atif``), and the
trajectory's ``extra.reef.records`` lists every call with its artifact, last call last: that is
how a sample knows the artifact that produced it (P-STALE-4).

- Without ``accept_multi_turn_policy_samples`` the sample is the trajectory's last call: its
  request's earlier turns are context (``is_copied_context: true``) and only its reply trains.
- With it, the sample holds every call of the report's trajectories, and every reply trains.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from reef.core.api_formats import RESPONSES, previous_response_id
from reef.core.atif import trajectory_to_json
from reef.core.atif_build import chain_of, chat_requests, trajectory_from_records
from reef.core.job_data import TrajectorySample
from reef.core.records import JSON, InferenceRecord
from reef.record2sample.record_sets import ReportContext


class SampleAssembly:
    """Builds a report's sample from its calls (see the module docstring).

    :param accept_multi_turn_policy_samples: train every call's reply, not only the last one.
    :param keep_tokens: keep the engine's token ids and log probabilities in the agent steps'
        metrics, so a component trains the sampled tokens as they are. Off by default: a sample
        holds no tokens (P-REND-1), and the component renders it. A recipe that opts in
        departs from that rule knowingly (docs/decisions.md, "Trained tokens are the sampled
        tokens").
    """

    def __init__(
        self, *, accept_multi_turn_policy_samples: bool = False, keep_tokens: bool = False
    ) -> None:
        self.accept_multi_turn_policy_samples = accept_multi_turn_policy_samples
        self.keep_tokens = keep_tokens

    def build(self, context: ReportContext) -> TrajectorySample:
        """The sample of a report: its trajectory with the report's score and feedback."""
        report = context.report
        if self.accept_multi_turn_policy_samples:
            calls = context.inferences
        else:
            # The last call, after the calls a chained Responses call continues: its earlier
            # turns are in their bodies, not its own.
            calls = chain_of(context.ends[-1], context.inferences)
        sample = self.trajectory_sample(calls, trajectory_id=report.id)
        return TrajectorySample(
            sample.trajectory,
            reward=report.score,
            feedback=report.feedback,
            metadata={"report_metadata": report.metadata} if report.metadata else {},
        )

    def trajectory_sample(
        self, calls: Sequence[InferenceRecord], *, trajectory_id: str
    ) -> TrajectorySample:
        """One sample of ``calls`` (one or more trajectories, oldest first).

        Calls are split into trajectories at each call whose request does not extend the
        previous one's conversation; each trajectory's steps follow the previous one's.
        Without ``accept_multi_turn_policy_samples`` every agent step but the last is copied
        context.
        """
        chains: list[list[InferenceRecord]] = []
        for call in calls:
            if chains and _continues(call, chains[-1][-1]):
                chains[-1].append(call)
            else:
                chains.append([call])
        steps: list[JSON] = []
        payloads: list[JSON] = []
        trajectory: JSON = {}
        for chain in chains:
            trajectory = trajectory_to_json(
                trajectory_from_records(
                    chain, trajectory_id=trajectory_id, keep_tokens=self.keep_tokens
                )
            )
            for step in trajectory["steps"]:
                steps.append({**step, "step_id": len(steps) + 1})
            payloads += trajectory["extra"]["reef"]["records"]
        trajectory["extra"]["reef"]["records"] = payloads
        if not self.accept_multi_turn_policy_samples:
            agent_steps = [s for s in steps if s["source"] == "agent"]
            for step in agent_steps[:-1]:
                step["is_copied_context"] = True
        return TrajectorySample(
            {**trajectory, "steps": steps}, source_record_ids=tuple(c.id for c in calls)
        )


class ResponseChains:
    """The calls each Responses call resolves through, for a stage that correlates calls one
    at a time (a judging): a call chained by ``previous_response_id`` holds only its new turn,
    and its conversation is read through the calls before it.

    A Responses call's chain (oldest first, itself last) is kept while the stage holds the call
    and, once :meth:`end` says it no longer does, among the ``keep_ended`` latest ended ones, so
    that a call chained to it later still resolves. Calls of the other formats hold their whole
    conversation: nothing of them is kept. Safe to use from the trainer's thread and a worker.
    """

    def __init__(self, keep_ended: int = 4096) -> None:
        self.keep_ended = keep_ended
        self._held: dict[str, tuple[InferenceRecord, ...]] = {}
        self._ended: OrderedDict[str, tuple[InferenceRecord, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, call: InferenceRecord) -> tuple[InferenceRecord, ...] | None:
        """Keep ``call``'s chain and return it; ``None`` for a chained call whose earlier call
        is no longer kept (its conversation cannot be read)."""
        previous = previous_response_id(call.api_format, call.request)
        before = () if previous is None else self._get(previous)
        if before is None:
            return None
        chain = (*before, call)
        if call.api_format == RESPONSES and call.reply_messages:
            with self._lock:
                self._held[call.id] = chain
        return chain

    def chain(self, call: InferenceRecord) -> tuple[InferenceRecord, ...]:
        """``call``'s chain: the kept one, or ``call`` alone."""
        return self._get(call.id) or (call,)

    def conversation(self, call: InferenceRecord) -> list[JSON]:
        """``call``'s whole input as chat messages (system prompt first), a chained call's
        resolved through its chain."""
        return chat_requests(self.chain(call))[-1]

    def end(self, call_id: str) -> None:
        """The stage no longer holds the call: keep its chain among the latest ended ones."""
        with self._lock:
            chain = self._held.pop(call_id, None)
            if chain is None:
                return
            self._ended[call_id] = chain
            while len(self._ended) > self.keep_ended:
                self._ended.popitem(last=False)

    def _get(self, call_id: str) -> tuple[InferenceRecord, ...] | None:
        with self._lock:
            return self._held.get(call_id) or self._ended.get(call_id)


def _continues(call: InferenceRecord, previous: InferenceRecord) -> bool:
    """Whether ``call`` continues ``previous``'s conversation: it names it as the response it
    continues (a chained Responses call), or its request is longer."""
    if previous_response_id(call.api_format, call.request) is not None:
        return previous_response_id(call.api_format, call.request) == previous.id
    return len(call.messages) > len(previous.messages)
