"""The seal of one scenario's job data: what the ``ecc`` Reef plugin's hooks call.

:class:`ScenarioSeal` is opened by :meth:`agent_ecc.reef_plugin.EccPlugin.configure` for a
scenario the deployment configures ``ecc`` for (``agent_ecc.reef_plugin`` says what each hook
does with it). It lives apart from the plugin so that loading the plugin (``reef plugins``,
``reef check``) imports its settings alone, not the seal, the scorer and the re-verification
client.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from agent_ecc.adapters.swebench import SWEBenchAdapter
from agent_ecc.backends import Backend, NoBackend
from agent_ecc.candidates import Candidate, Member
from agent_ecc.journal import SealJournal
from agent_ecc.recompute.service import HTTPBackend
from agent_ecc.records import ExecutionRecord, RecordedScore, load_jsonl
from agent_ecc.registry import DirectoryRegistry, Epoch, RegistryError
from agent_ecc.scorer import Scorer
from agent_ecc.seal import Decision, SealSession, apply_rewards
from agent_ecc.store import ContentStore
from reef import JobData, JobOutcome, Sample, TrajectorySample

if TYPE_CHECKING:
    from agent_ecc.reef_plugin import EccSettings


class _Records:
    """The producers' records and scores, read again at each seal (producers append)."""

    def __init__(self, records: Path, scores: Path) -> None:
        self.paths = (records, scores)
        self.records: dict[str, ExecutionRecord] = {}
        self.scores: dict[str, RecordedScore] = {}

    def refresh(self) -> None:
        if self.paths[0].exists():
            self.records = {r.record_id: r for r in load_jsonl(self.paths[0], ExecutionRecord)}
        if self.paths[1].exists():
            self.scores = {s.record_id: s for s in load_jsonl(self.paths[1], RecordedScore)}


def member_id(sample: Sample) -> str:
    """The member (attempt) a sample holds the output of."""
    meta = sample.metadata.get("agent_ecc") if isinstance(sample.metadata, Mapping) else None
    if isinstance(meta, Mapping) and isinstance(meta.get("member_id"), str):
        return str(meta["member_id"])
    return str(sample.sample_id)


class ScenarioSeal:
    """The seal of one scenario's job data (what the hooks call)."""

    def __init__(self, scenario: str, settings: EccSettings) -> None:
        self.scenario = scenario
        self.settings = settings
        self.registry = DirectoryRegistry(settings.registry)
        store = ContentStore(settings.store)
        backend: Backend = NoBackend()
        if settings.service is not None:
            backend = HTTPBackend(settings.service, deadline_s=settings.deadline_s)
        self.scorer = Scorer([SWEBenchAdapter(verdict=settings.verdict)], store, backend=backend)
        folder = Path(settings.journal_dir)
        self.journal = SealJournal(folder / f"{scenario}.jsonl")
        self.learner = folder / f"{scenario}.learner.jsonl"
        self.completions = folder / f"{scenario}.completions.jsonl"
        self.handoff = folder / f"{scenario}.handoff.jsonl"
        self.inputs = _Records(Path(settings.records), Path(settings.scores))
        # The last committed seal, read once from the journal so that status shows it after a
        # restart too; each seal replaces it.
        committed = self.journal.read()
        self.last: Decision | None = committed[-1] if committed else None
        # Members trained as fails only because their execution failed for infrastructure
        # reasons (official rule), over every committed seal: loud in status.
        self.infra_fails = sum(int(d.stats.get("infra_fails", 0)) for d in committed)
        # The last sealed batch's samples: batch id, and each sample's member and group.
        self._offered: tuple[str, dict[str, tuple[str, str]]] = ("", {})
        self._lock = threading.Lock()  # seals are serialized (E-SEAL-5)

    def _candidates(self, samples: tuple[Sample, ...]) -> list[Candidate]:
        groups: dict[str, list[Sample]] = {}
        for sample in samples:
            key = sample.group_id if sample.group_id is not None else f"sample:{sample.sample_id}"
            groups.setdefault(key, []).append(sample)
        self.inputs.refresh()
        out = []
        for group_id, members in groups.items():
            out.append(
                Candidate(
                    group_id,
                    handle=members,
                    members=tuple(self._member(s) for s in members),
                )
            )
        return out

    def _member(self, sample: Sample) -> Member:
        mid = member_id(sample)
        reward = sample.reward if isinstance(sample, TrajectorySample) else None
        return Member(
            mid,
            self.inputs.records.get(mid),
            self.inputs.scores.get(mid),
            0.0 if reward is None else float(reward),
        )

    def seal(self, data: JobData) -> JobData:
        """The job data to submit: the handed-over groups with their sealed rewards, and the
        unused groups' samples given back."""
        with self._lock:
            candidates = self._candidates(data.samples)
            decision = next((d for d in self.journal.read() if d.batch_id == data.id), None)
            if decision is None:
                session = SealSession(
                    self.registry,
                    self.scorer,
                    data.id,
                    mode=self.settings.mode,
                    fillers="neutral" if self.settings.fillers else None,
                    strict=self.settings.strict,
                )
                try:
                    assembly = session.assemble(candidates, deadline_s=self.settings.deadline_s)
                except Exception as error:  # strict: an undecided batch trains nothing
                    decision = session.fail(error, candidates, journal=self.journal)
                else:
                    decision = session.finish(assembly, journal=self.journal)
                self.infra_fails += int(decision.stats.get("infra_fails", 0))
            self.last = decision
            self._offered = (
                data.id,
                {
                    str(s.sample_id): (member_id(s), c.group_id)
                    for c in candidates
                    for s in c.handle
                },
            )
        handed = set(decision.group_ids("batch")) | set(decision.group_ids("filler"))
        samples = [s for c in candidates if c.group_id in handed for s in c.handle]
        rewards: dict[int, float] = {}
        apply_rewards(
            decision,
            samples,
            member_id=member_id,
            set_reward=lambda s, r: rewards.__setitem__(id(s), r),
        )
        rewritten = tuple(
            attrs.evolve(s, reward=rewards[id(s)]) if isinstance(s, TrajectorySample) else s
            for s in samples
        )
        self._hand_off(data.id, rewritten)
        unused = set(decision.group_ids("unused"))
        given_back = tuple(
            str(s.sample_id) for c in candidates if c.group_id in unused for s in c.handle
        )
        return attrs.evolve(data, samples=rewritten, given_back=given_back)

    def _hand_off(self, batch_id: str, samples: tuple[Sample, ...]) -> None:
        """Note which member each submitted sample holds, durably, before the job is submitted:
        a component reports what it consumed by sample id."""
        members = {str(s.sample_id): member_id(s) for s in samples}
        line = json.dumps({"batch_id": batch_id, "members": members}, sort_keys=True)
        self.handoff.parent.mkdir(parents=True, exist_ok=True)
        with open(self.handoff, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _handed_off(self, batch_id: str) -> dict[str, str]:
        """The members of ``batch_id``'s submitted samples, by sample id (the last hand-off)."""
        members: dict[str, str] = {}
        if self.handoff.exists():
            for text in self.handoff.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(text)
                except ValueError:
                    continue  # a line torn by a crash: its job was never submitted
                if entry.get("batch_id") == batch_id:
                    members = dict(entry["members"])
        return members

    def status(self) -> dict[str, Any]:
        """The epoch in force (the registry's pointer, read now) and the last seal."""
        try:
            epoch: Epoch | None = self.registry.read_pointer().epoch
        except RegistryError:  # nothing published yet: no epoch is in force
            epoch = None
        last = self.last
        return {
            "epoch": _epoch_json(epoch),
            "infra_fails": self.infra_fails,
            "last_seal": None
            if last is None
            else {
                "batch_id": last.batch_id,
                "epoch": _epoch_json(last.epoch),
                "stats": last.stats,
                "shortfall": last.shortfall,
                "groups": dict(Counter(g.outcome for g in last.groups)),
                "failed": last.failed,
            },
        }

    def provenance(self, batch_id: str) -> dict[str, Any] | None:
        """The seal of ``batch_id`` as the job history keeps it: the epoch, and each offered
        sample's group outcome, decision, verdict and rewards; ``None`` unless it is the batch
        this seal decided last."""
        offered_batch, offered = self._offered
        decision = self.last
        if decision is None or decision.batch_id != batch_id or offered_batch != batch_id:
            return None
        members = {m.member_id: m for m in decision.members}
        groups = {g.group_id: g for g in decision.groups}
        samples: dict[str, Any] = {}
        for sample_id, (member, group_id) in offered.items():
            entry: dict[str, Any] = {"member_id": member, "group_id": group_id}
            group = groups.get(group_id)
            if group is not None:
                entry |= {"outcome": group.outcome, "reason": group.reason}
            decided = members.get(member)
            if decided is not None:
                entry |= {
                    "decision": decided.type,
                    "verdict": decided.label,
                    "recorded_reward": decided.recorded_reward,
                    "reward": decided.reward,
                    "neutralized": decided.neutralized,
                }
            samples[sample_id] = entry
        job = {
            "batch_id": decision.batch_id,
            "epoch": _epoch_json(decision.epoch),
            "mode": decision.given.mode,
            "failed": decision.failed,
        }
        return {"job": job, "samples": samples}

    def ended(self, outcome: JobOutcome) -> None:
        """Write the consumption lines of the job's batch once (the hook may come twice)."""
        decision = next((d for d in self.journal.read() if d.batch_id == outcome.job_id), None)
        if decision is None:
            return
        text = self.completions.read_text() if self.completions.exists() else ""
        completed = [json.loads(line) for line in text.splitlines() if line.strip()]
        if any(c.get("batch_id") == outcome.job_id for c in completed):
            return
        step = len(completed)
        consumed = outcome.metrics.get("consumed")
        if isinstance(consumed, list):
            lines = self._consumed_lines(outcome, decision, step, consumed)
        else:
            rewards = decision.rewards()
            lines = [
                {
                    "batch_id": outcome.job_id,
                    "member_id": member.member_id,
                    "group_id": member.group_id,
                    "step": step,
                    "reward": rewards[member.member_id],
                    "reporter": "reef_job_ended",
                }
                for member in decision.members
                if member.member_id in rewards
            ]
        with open(self.learner, "a", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(line, sort_keys=True) + "\n")
        with open(self.completions, "a", encoding="utf-8") as handle:
            done = {"batch_id": outcome.job_id, "step": step, "ok": outcome.event == "finished"}
            handle.write(json.dumps(done, sort_keys=True) + "\n")

    def _consumed_lines(
        self, outcome: JobOutcome, decision: Decision, step: int, consumed: list[Any]
    ) -> list[dict[str, Any]]:
        """A line per sample and component step, from what the component says its loss
        consumed. A sample id the hand-off does not know is written under its own id, so the
        consumption report shows it (not handed over) instead of losing it."""
        members = self._handed_off(outcome.job_id)
        groups = {m.member_id: m.group_id for m in decision.members}
        rewards = decision.rewards()
        lines = []
        for entry in consumed:
            sample = str(entry.get("sample_id"))
            member = members.get(sample, sample)
            trained = entry.get("reward")
            lines.append(
                {
                    "batch_id": outcome.job_id,
                    "member_id": member,
                    "group_id": groups.get(member),
                    "step": step,
                    # The reward the loss used; an objective without one trained the decision's.
                    "reward": trained if trained is not None else rewards.get(member),
                    "advantage": entry.get("advantage"),
                    "loss_tokens": entry.get("loss_tokens"),
                    "microbatch": entry.get("step"),
                    "reporter": outcome.component,
                }
            )
        return lines


def _epoch_json(epoch: Epoch | None) -> dict[str, Any] | None:
    return None if epoch is None else {"index": epoch.index, "version_id": epoch.version_id}


__all__ = ["ScenarioSeal", "member_id"]
