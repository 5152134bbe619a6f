"""``SampleAssembly``: how a record set's calls become one ATIF trajectory sample (P-REND-2).

Shared by the built-in stages and by recipes. The sample is an ATIF trajectory (its JSON
object) with the report's score as reward and its feedback; it holds no tokens. Each agent step
made from a recorded call keeps that call's record payload in ``extra.reef.records``, which is
how a sample knows the artifact that produced it (P-STALE-4).

- Without ``accept_multi_turn_policy_samples`` the sample is the trajectory's last call: its
  request's earlier turns are context (``is_copied_context: true``) and only its reply trains.
- With it, the sample holds every call of the report's trajectories, and every reply trains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reef.core.job_data import TrajectorySample
from reef.core.records import JSON, InferenceRecord

if TYPE_CHECKING:
    from reef.record2sample.reports import ReportContext

#: The ATIF schema version the assembled trajectories declare.
ATIF_VERSION = "ATIF-v1.4"


def record_payload(record: InferenceRecord) -> JSON:
    """What a sample keeps of a recorded call: who answered it, and when; never the body."""
    return {
        "kind": record.kind,
        "id": record.id,
        "artifact_id": record.artifact_id,
        "api_format": record.api_format,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
    }


def _agent_step(message: Mapping[str, Any], step_id: int) -> JSON:
    step: JSON = {"step_id": step_id, "source": "agent", "message": message.get("content") or ""}
    if message.get("reasoning_content") is not None:
        step["reasoning_content"] = message["reasoning_content"]
    calls = message.get("tool_calls") or []
    if calls:
        step["tool_calls"] = [
            {
                "tool_call_id": call.get("id"),
                "function_name": (call.get("function") or {}).get("name"),
                "arguments": (call.get("function") or {}).get("arguments"),
            }
            for call in calls
        ]
    return step


def trajectory_of_calls(calls: Sequence[InferenceRecord], *, trajectory_id: str) -> JSON:
    """The ATIF trajectory of ``calls`` (one trajectory, oldest first): the last call's
    request and its reply, each agent step carrying the payload of the call that made it.

    The i-th agent step of the conversation is the reply of the i-th call; agent turns the
    client wrote itself (no call of ``calls`` made them) carry no record.
    """
    last = calls[-1]
    messages = [*last.messages, *(last.reply_messages[:1])]
    agent_turns = sum(1 for m in messages if m.get("role") == "assistant")
    # The calls that made the last agent turns; earlier turns came from the client.
    makers: list[InferenceRecord | None] = [None] * max(0, agent_turns - len(calls))
    makers += list(calls[-agent_turns:]) if agent_turns else []
    steps: list[JSON] = []
    turn = 0
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if steps and steps[-1]["source"] == "agent":
                observation = steps[-1].setdefault("observation", {"results": []})
                observation["results"].append(
                    {
                        "source_call_id": message.get("tool_call_id"),
                        "content": message.get("content"),
                    }
                )
                continue
            role = "user"
        if role == "assistant":
            step = _agent_step(message, len(steps) + 1)
            maker = makers[turn]
            turn += 1
            if maker is not None:
                step["extra"] = {"reef": {"records": [record_payload(maker)]}}
            steps.append(step)
        else:
            source = "system" if role in ("system", "developer") else "user"
            steps.append(
                {
                    "step_id": len(steps) + 1,
                    "source": source,
                    "message": message.get("content") or "",
                }
            )
    agent: JSON = {"name": "reef", "version": "1"}
    if last.tools:
        agent["tool_definitions"] = last.tools
    return {
        "schema_version": ATIF_VERSION,
        "session_id": trajectory_id,
        "agent": agent,
        "steps": steps,
    }


class SampleAssembly:
    """Builds a report's sample from its calls (see the module docstring).

    :param accept_multi_turn_policy_samples: train every call's reply, not only the last one.
    """

    def __init__(self, *, accept_multi_turn_policy_samples: bool = False) -> None:
        self.accept_multi_turn_policy_samples = accept_multi_turn_policy_samples

    def build(self, context: ReportContext) -> TrajectorySample:
        """The sample of a report: its trajectory with the report's score and feedback."""
        report = context.report
        if self.accept_multi_turn_policy_samples:
            calls = context.inferences
        else:
            calls = (context.ends[-1],)
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
            if chains and len(call.messages) > len(chains[-1][-1].messages):
                chains[-1].append(call)
            else:
                chains.append([call])
        steps: list[JSON] = []
        trajectory: JSON = {}
        for chain in chains:
            trajectory = trajectory_of_calls(chain, trajectory_id=trajectory_id)
            for step in trajectory["steps"]:
                steps.append({**step, "step_id": len(steps) + 1})
        if not self.accept_multi_turn_policy_samples:
            agent_steps = [s for s in steps if s["source"] == "agent"]
            for step in agent_steps[:-1]:
                step["is_copied_context"] = True
        return TrajectorySample(
            {**trajectory, "steps": steps}, source_record_ids=tuple(c.id for c in calls)
        )
