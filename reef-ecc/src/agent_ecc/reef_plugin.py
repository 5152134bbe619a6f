"""The ``ecc`` Reef plugin: each job's data sealed under one grader epoch before it trains.

Loaded through the entry point ``ecc`` of the group ``reef.plugins``, which names the class
:class:`EccPlugin`: Reef makes one instance per ``Plugins``, which keeps the seals of its
scenarios (no state is shared through this module). This is the only module of agent_ecc that
imports Reef. For a scenario it is configured for (:meth:`EccPlugin.configure`), the
``reef_before_submit`` hook:

1. groups the job's trajectory samples by ``group_id`` (a sample without one is a group of its
   own); each sample names its member (the attempt id) in ``metadata["agent_ecc"]["member_id"]``
   (else its ``sample_id``), whose record and recorded score are read from the producer's
   JSON-lines files;
2. seals them with a :class:`~agent_ecc.seal.SealSession` under the scenario's journal
   (``<journal_dir>/<scenario>.jsonl``), the job data's id as the batch id; a batch that already
   has a committed decision (a submission refused or crashed after its seal) is given that
   decision again, never a second one (I5);
3. returns the job data with only the groups handed over, every reward rewritten by
   :func:`~agent_ecc.seal.apply_rewards` (all or nothing), and the samples of the unused groups
   (offered, never decided) in ``given_back``: Reef returns them to the buffer for a later job.
   Excluded groups are neither submitted nor given back: the commit consumes them (retired, no
   gradient under this epoch). A seal that raises is failed strictly (every reward 0.0,
   recorded in the journal); a journal that refuses the decision (I3) raises, which refuses
   the submission and releases the data to the buffer.

``reef_job_ended`` writes the consumption lines of a finished or failed job
(``<journal_dir>/<scenario>.learner.jsonl`` and ``.completions.jsonl``), for
:func:`~agent_ecc.consumption.consumption_records`. When the training component reports what
its loss consumed (the outcome's ``consumed`` metric, as the ``local`` component does: per
sample and step, the loss tokens and the reward it trained with), there is one line per
sample and step, from that report: the member is found through the hand-off the seal wrote
(``<scenario>.handoff.jsonl``: each batch's sample ids and members), the reward is the one the
loss used, so a reward changed between the seal and the loss shows as a mismatch, and a sample
the component left out (unrenderable, say) has no line. Otherwise the lines come from the
decision: one per member handed over. ``reef_scenario_status`` shows
the epoch in force, the last seal (its batch, epoch, stats and shortfall) and ``infra_fails``
(members labelled fail only because their execution failed for infrastructure reasons, over all
committed seals) under ``ecc`` in ``GET /reef/status``. ``reef_job_provenance`` tells Reef's
job history, for the job just sealed, the epoch and each offered sample's fate: its group's
outcome and reason, its member's decision and verdict, and the reward it recorded and the one
it trains with (the console shows them on the sample).

Configuration: :class:`EccSettings`, registered as the extension ``ecc``: a deployment turns
the seal on for a scenario with ``scenarios.<name>.extensions.ecc: {...}``, checked when the
deployment is read, and ``reef_scenario_started`` opens the scenario's seal with it. An embedding
without a deployment calls :meth:`EccPlugin.configure` on its plugin itself.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from agent_ecc.adapters.swebench import DEFAULT_RULE, RULES, SWEBenchAdapter
from agent_ecc.backends import Backend, NoBackend
from agent_ecc.candidates import Candidate, Member
from agent_ecc.journal import SealJournal
from agent_ecc.recompute.service import HTTPBackend
from agent_ecc.records import ExecutionRecord, RecordedScore, load_jsonl
from agent_ecc.registry import DirectoryRegistry, Epoch, RegistryError
from agent_ecc.scorer import Scorer
from agent_ecc.seal import Decision, SealSession, apply_rewards
from agent_ecc.store import ContentStore
from reef import (
    JobData,
    JobOutcome,
    PluginRegistrar,
    PluginSettings,
    Sample,
    TrajectorySample,
    config_option,
    hookimpl,
)


def _one_of(values: tuple[str, ...]) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in values:
            raise ValueError(f"{attribute.name} must be one of {', '.join(values)}: {value!r}")

    return check


@attrs.frozen
class EccSettings(PluginSettings):
    """The ``ecc`` plugin's settings for one scenario."""

    registry: str = config_option(help="the run's registry folder (DirectoryRegistry)")
    store: str = config_option(help="the content store folder (logs, patches, scripts)")
    journal_dir: str = config_option(help="folder of the journal <scenario>.jsonl")
    records: str = config_option(help="JSON-lines file of the producers' execution records")
    scores: str = config_option(help="JSON-lines file of the producers' recorded scores")
    service: str | None = config_option(
        default=None,
        help="URL of the re-verification service; without it a re-execution is undeterminable",
    )
    mode: Literal["repair", "discard", "audit"] = config_option(
        default="repair", help="repair, discard or audit"
    )
    verdict: str = config_option(
        default=DEFAULT_RULE,
        help="the SWE-bench rule of a check that names none (logical: infrastructure failures "
        "neutralize their group instead of training as fails)",
        validator=_one_of(RULES),
    )
    deadline_s: float = config_option(default=60.0, help="the seal's deadline in seconds")
    fillers: bool = config_option(default=False, help="keep the batch size with neutral groups")
    strict: bool = config_option(default=True, help="a failed seal trains nothing")


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


class EccPlugin:
    """The ``ecc`` plugin: its entry point names this class, so Reef makes one per
    :class:`reef.embed.Plugins` and each holds the seals of its own scenarios (two ``Plugins``
    of one process, a test's and a service's, never share one).

    An embedding without a deployment registers one itself and calls :meth:`configure`.
    """

    def __init__(self) -> None:
        self._seals: dict[str, ScenarioSeal] = {}

    def configure(self, scenario: str, settings: EccSettings | Mapping[str, Any] | None) -> None:
        """Turn the seal on for ``scenario`` with ``settings`` (a mapping is parsed; None: off).

        :raises reef.PluginConfigError: naming the key (``$.ecc.<scenario>.<key>``) of a bad
            setting.
        """
        if settings is None:
            self._seals.pop(scenario, None)
            return
        if not isinstance(settings, EccSettings):
            settings = EccSettings.parse(
                settings, plugin_class=ScenarioSeal, path=f"$.ecc.{scenario}"
            )
        self._seals[scenario] = ScenarioSeal(scenario, settings)

    def configured(self, scenario: str) -> ScenarioSeal | None:
        """The seal of ``scenario``, if configured."""
        return self._seals.get(scenario)

    @hookimpl
    def reef_register_extensions(self, registry: PluginRegistrar) -> None:
        """The seal is configured per scenario: ``scenarios.<name>.extensions.ecc``."""
        registry.register("ecc", EccSettings)

    @hookimpl
    def reef_scenario_started(
        self, scenario: str, extensions: Mapping[str, PluginSettings]
    ) -> None:
        """Open the scenario's seal when its deployment configures ``ecc``; otherwise none."""
        settings = extensions.get("ecc")
        self.configure(scenario, settings if isinstance(settings, EccSettings) else None)

    @hookimpl
    def reef_before_submit(self, scenario: str, job_data: JobData) -> JobData | None:
        """Seal the job's data under the epoch in force and rewrite its rewards."""
        seal = self._seals.get(scenario)
        if seal is None or job_data.kind != "trajectory":
            return None
        return seal.seal(job_data)

    @hookimpl
    def reef_scenario_status(self, scenario: str) -> dict[str, Any] | None:
        """``{"ecc": ...}``: the epoch in force and the last seal, for a sealed scenario."""
        seal = self._seals.get(scenario)
        return None if seal is None else {"ecc": seal.status()}

    @hookimpl
    def reef_job_provenance(self, scenario: str, job_data: JobData) -> dict[str, Any] | None:
        """``{"ecc": ...}``: the seal of the job's data, for the job history (the console)."""
        seal = self._seals.get(scenario)
        found = None if seal is None else seal.provenance(job_data.id)
        return None if found is None else {"ecc": found}

    @hookimpl
    def reef_job_ended(self, scenario: str, outcome: JobOutcome) -> None:
        """Record the job's consumption against its seal decision."""
        seal = self._seals.get(scenario)
        if seal is not None:
            seal.ended(outcome)


__all__ = ["EccPlugin", "EccSettings", "ScenarioSeal", "member_id"]
