"""The pipeline's invariants over random interleavings, against a reference model (hypothesis).

rule: P-PIPE-7 P-PIPE-8 P-PIPE-9 P-BUF-2 P-BUF-4 P-BUF-5 P-BUF-7 P-MODE-5 P-MODE-7 P-MODE-8
P-MODE-13 P-STALE-6 P-STALE-9 P-SET-16 P-SET-20 Recovery.

The machine drives one trainer's pipeline on a real SQLite store with pushes of sessions
(grouped in pairs, alone, or aborted), produce, build, acknowledge, release, mode switches,
queued instructions, manual buffer edits, new serving artifacts and restarts. The model keeps
what must hold: which samples exist, which trained, which are reserved, which artifacts the
current pipeline saw, the manual buffer and the instructions. After every step: no sample
trained twice, every report that could make a sample has it, reserved data is disjoint.
Every job is checked when built: its samples are untrained and not reserved, none is stale by
the model's count of artifacts, groups are whole, auto jobs hold at least ``job_samples``, and
manual jobs answer the oldest instruction with the manual buffer's samples.
"""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reef.core.job_data import JobData, TrainingInstruction, TrajectorySample
from reef.core.records import Record
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData, ReportGroups
from reef.record2sample import ReportSamples
from reef.storage import TrainerSamples, open_database
from reef.testing.records import call, report
from reef.train.pipeline import TrainingPipeline

JOB_SAMPLES = 2
BUFFER_SIZE = 3
MAX_STALENESS = 1


class OnceOnly(ReportSamples):
    """Fails when it makes again the sample of a report whose sample is stored (P-SET-20)."""

    stored: set[str] = set()

    def make_sample(self, context: Any) -> Any:
        sample_id = f"{context.report.id}:0"
        assert sample_id not in OnceOnly.stored, f"{sample_id} is stored and was made again"
        return super().make_sample(context)


class PipelineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._folder = tempfile.TemporaryDirectory()
        self.database = open_database(
            f"sqlite:///{self._folder.name}/reef.db", sqlite_synchronous="NORMAL"
        )
        self.store = TrainerSamples(self.database, "s")
        self.records: list[Record] = []
        self.sessions = 0
        self.open_group: str | None = None
        self.artifact = 0  # the artifact new calls come from (the newest published)
        # The model.
        self.samples: dict[str, tuple[int, str | None]] = {}  # id -> (artifact, group)
        self.order: list[str] = []  # store order
        self.expected: set[str] = set()  # samples that must exist
        OnceOnly.stored = self.expected
        self.pending_group: list[tuple[str, int]] = []  # (sample id, artifact)
        self.trained: set[str] = set()
        self.reserved: dict[str, JobData] = {}
        self.seen: list[int] = []  # artifacts the current pipeline saw, in serving order
        self.manual: set[str] = set()
        self.instructions: list[str] = []
        self.mode = "auto"
        self.pipeline = self._build()

    def _build(self) -> TrainingPipeline:
        context = PipelineContext("s", "c", has_runtime_loader=True, training_mode=self.mode)  # type: ignore[arg-type]
        return TrainingPipeline(
            OnceOnly(context, ReportGroups(2), max_staleness=MAX_STALENESS),
            GroupedJobData(context, job_samples=JOB_SAMPLES, buffer_size=BUFFER_SIZE),
            samples=self.store,
            context=context,
        )

    def teardown(self) -> None:
        self.database.dispose()
        self._folder.cleanup()

    # -- the model's staleness -------------------------------------------------------------

    def _stale(self, sample_id: str) -> bool:
        if not self.seen:
            return False
        artifact = self.samples[sample_id][0]
        if artifact not in self.seen:
            return True
        newest = {a: i for i, a in enumerate(self.seen)}
        return len(self.seen) - 1 - newest[artifact] > MAX_STALENESS

    # -- rules -----------------------------------------------------------------------------

    @rule(
        sessions=st.lists(
            st.tuples(st.sampled_from(["alone", "group", "abort"]), st.integers(1, 2)),
            min_size=1,
            max_size=3,
        )
    )
    def push_sessions(self, sessions: list[tuple[str, int]]) -> None:
        for kind, turns in sessions:
            self._push_session(kind, turns)

    def _push_session(self, kind: str, turns: int) -> None:
        name = f"r{self.sessions}"
        self.sessions += 1
        if kind == "abort" and self.open_group is not None:
            kind = "group"
        records: list[Record] = [
            call(
                f"{name}.c{t}",
                t,
                session=name,
                artifact=f"a{self.artifact}",
                finish="abort" if kind == "abort" and t == turns else "stop",
            )
            for t in range(1, turns + 1)
        ]
        metadata: dict[str, Any] = {}
        if kind == "group":
            if self.open_group is None:
                self.open_group = name
            metadata["group"] = self.open_group
        records.append(report(name, f"{name}.c{turns}", **metadata))
        for record in records:
            self.pipeline.push(record)
        self.records += records
        if kind == "abort":
            return
        member = (f"{name}:0", self.artifact)
        if kind == "alone":
            self._stored([member], None)
        elif self.open_group != name:
            self._stored([*self.pending_group, member], self.pending_group[0][0])
            self.pending_group, self.open_group = [], None
        else:
            self.pending_group = [member]

    def _stored(self, members: list[tuple[str, int]], group: str | None) -> None:
        for sample_id, artifact in members:
            self.samples[sample_id] = (artifact, group)
            self.order.append(sample_id)
            self.expected.add(sample_id)

    @rule()
    def produce(self) -> None:
        self.pipeline.produce()

    @rule()
    def publish(self) -> None:
        self.artifact += 1

    @rule(back=st.integers(0, 2))
    def serve(self, back: int) -> None:
        artifact = max(0, self.artifact - back)
        self.pipeline.observe_serving_artifact_id(f"a{artifact}")
        if self.seen and self.seen[-1] == artifact:
            return
        if artifact in self.seen:
            self.seen.remove(artifact)  # a rollback counts from its latest serving
        self.seen.append(artifact)

    @rule()
    def build(self) -> None:
        data = self.pipeline.build_job_data(JOB_SAMPLES)
        if data is None:
            if self.mode == "auto":
                fresh = [
                    s
                    for s in self.order
                    if s not in self.trained
                    and not self._reserved(s)
                    and not self._stale(s)
                    and not any(self._stale(o) for o in self._group_of(s))
                ]
                assert len(fresh) < JOB_SAMPLES, fresh
            return
        ids = [str(s.sample_id) for s in data.samples]
        assert len(ids) == len(set(ids))
        assert ids == sorted(ids, key=self.order.index), "store order"
        for sample_id in ids:
            assert sample_id in self.samples
            assert sample_id not in self.trained
            assert not self._reserved(sample_id)
            assert not self._stale(sample_id), sample_id
            group = self.samples[sample_id][1]
            if group is not None:
                assert set(self._group_of(sample_id)) <= set(ids), "a group is split"
        if self.mode == "auto":
            assert JOB_SAMPLES <= len(ids) <= BUFFER_SIZE + 1
            assert data.request is None
        else:
            assert data.request is not None
            unreserved = [i for i in self.instructions if not self._instruction_reserved(i)]
            assert data.request.request_id == unreserved[0]
            chosen = {m for s in self.manual for m in self._group_of(s)}
            assert set(ids) <= chosen
        self.reserved[data.id] = data

    def _group_of(self, sample_id: str) -> list[str]:
        group = self.samples[sample_id][1]
        if group is None:
            return [sample_id]
        return [s for s in self.order if self.samples[s][1] == group]

    def _reserved(self, sample_id: str) -> bool:
        return any(sample_id == s.sample_id for d in self.reserved.values() for s in d.samples)

    def _instruction_reserved(self, request_id: str) -> bool:
        return any(d.request and d.request.request_id == request_id for d in self.reserved.values())

    @precondition(lambda self: self.reserved)
    @rule(data=st.data(), acknowledge=st.booleans())
    def settle(self, data: st.DataObject, acknowledge: bool) -> None:
        data_id = data.draw(st.sampled_from(sorted(self.reserved)))
        job = self.reserved.pop(data_id)
        ids = [str(s.sample_id) for s in job.samples]
        if not acknowledge:
            self.pipeline.release_job_data(data_id)
            return
        listed = self.pipeline.acknowledge(
            data_id, released_record_ids=self.pipeline.releasable_record_ids()
        )
        expected = [f"sample:{i}" for i in ids]
        if job.request is not None:
            expected.append(f"instruction:{job.request.request_id}")
            self.instructions.remove(job.request.request_id)
        assert list(listed) == expected
        self.trained.update(ids)
        self.manual -= set(ids)

    @rule(mode=st.sampled_from(["auto", "manual"]))
    def switch(self, mode: str) -> None:
        if self.mode == "auto" and mode == "manual":
            moved = [str(s.sample_id) for s in self.pipeline.buffer()]
            self.manual |= set(moved)
        self.pipeline.training_mode = mode
        self.mode = mode

    @rule()
    def instruct(self) -> None:
        request_id = f"q{len(self.instructions)}-{self.sessions}"
        self.pipeline.queue_instructions([TrainingInstruction(request_id)])
        self.instructions.append(request_id)

    @precondition(lambda self: self.order)
    @rule(data=st.data(), insert=st.booleans())
    def edit_manual_buffer(self, data: st.DataObject, insert: bool) -> None:
        sample_id = data.draw(st.sampled_from(self.order))
        if insert:
            self.pipeline.insert_into_buffer([sample_id])
            if sample_id not in self.trained:
                self.manual.add(sample_id)
        else:
            self.pipeline.remove_from_buffer([sample_id])
            self.manual.discard(sample_id)

    @rule()
    def restart(self) -> None:
        """Recovery: reservations and seen artifacts go, instructions come back from the
        scenario, the records are replayed from the start."""
        self.pipeline.close()
        self.reserved.clear()
        self.seen.clear()
        self.pipeline = self._build()
        self.pipeline.queue_instructions([TrainingInstruction(i) for i in self.instructions])
        for record in self.records:
            self.pipeline.push(record)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def nothing_lost_nothing_trained_twice(self) -> None:
        stored = {s.id for s in self.store.get(sorted(self.expected))}
        assert stored == self.expected
        counts = self.store.train_counts("c", self.order)
        assert all(counts[s] == (1 if s in self.trained else 0) for s in self.order), counts
        reserved = [s.sample_id for d in self.reserved.values() for s in d.samples]
        assert len(reserved) == len(set(reserved))
        for data in self.reserved.values():
            assert all(isinstance(s, TrajectorySample) for s in data.samples)


TestPipelineMachine = PipelineMachine.TestCase
TestPipelineMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
)
