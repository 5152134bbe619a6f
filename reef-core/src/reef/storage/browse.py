"""Reading a scenario's samples the way a person browses them: in store order, a page at a
time, filtered, each with what every trainer did with it.

Pages are keyset pages (a page starts after, or ends before, the key of a row the person saw),
in store order or by reward; how many samples a filter lets through is a separate, bounded
count (:meth:`SampleBrowser.count`), asked for only when wanted: counting every match of a
large store on each page is what made a page slow. The text, client-group and reward filters
read the sample's JSON body in SQL (``json_extract`` on SQLite, ``jsonb`` on PostgreSQL): they
scan the scenario's samples, and are the slow filters of a large store. The time and tag filters
ask of the calls a sample was made from (the ``source_record_ids`` of its body, each looked up
by id in the record store): when Reef received one, and the tags it carried.

Read-only: it reads the sample store's tables (samples, train counts, manual buffers), the
trainers' stale marks (:mod:`reef.storage.stale_samples`) and the job history's failed jobs,
and never changes a row. The console's routes use it (``docs/console.md``).

A sample a failed job sent to its component is *consumed by a failed job*, not trained: the
job's weights were thrown away. Its train count still holds that commit (it never trains again
for that trainer, P-PIPE-10), so what the browser calls trained is the commits less the failed
jobs that sent it (:attr:`BrowsedSample.failed_counts`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
from sqlalchemy import (
    ColumnElement,
    CompoundSelect,
    Connection,
    Float,
    String,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement, Select

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.job_history import FAILED, RELEASED, job_samples, jobs
from reef.storage.positions import Position, after_cursor, cursor_parameters
from reef.storage.samples import StoredSample, TrainerSamples
from reef.storage.stale_samples import StaleSamples, stale_samples
from reef.storage.tables import instructions, manual_buffer, records, sample_trains, samples

__all__ = [
    "COUNT_LIMIT",
    "ArtifactReward",
    "BrowseKey",
    "BrowsedSample",
    "SampleBrowser",
    "SampleFilter",
]

#: The most matches :meth:`SampleBrowser.count` counts; beyond, it says "more than this".
COUNT_LIMIT: Final = 10_000

#: Where a sample's body keeps the group its client named (a report's ``metadata.group``).
CLIENT_GROUP_PATH: Final = ("metadata", "report_metadata", "group")
#: Where a sample's body keeps its reward: a trajectory's ``reward``, else an upload's
#: ``trajectory.extra.reef.reward`` (as :func:`reef.core.job_data.sample_reward` reads it).
REWARD_PATHS: Final = (("reward",), ("trajectory", "extra", "reef", "reward"))


class _JsonAt(FunctionElement[Any]):
    """The value at a fixed key path of a JSON text column: its text (``kind="text"``, a
    string value only) or its number (``kind="number"``, a number only); NULL otherwise."""

    inherit_cache = True

    def __init__(self, column: ColumnElement[Any], path: tuple[str, ...], kind: str) -> None:
        self.path = path
        self.kind = kind
        self.type = Float() if kind == "number" else String()
        super().__init__(column)


def _sqlite_path(path: tuple[str, ...]) -> str:
    return "$" + "".join(f'."{key}"' for key in path)


@compiles(_JsonAt, "sqlite")
def _json_at_sqlite(element: _JsonAt, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    path = _sqlite_path(element.path)
    types = "('integer', 'real')" if element.kind == "number" else "('text')"
    return (
        f"(CASE WHEN json_valid({column}) AND json_type({column}, '{path}') IN {types}"
        f" THEN json_extract({column}, '{path}') END)"
    )


@compiles(_JsonAt, "postgresql")
def _json_at_postgresql(element: _JsonAt, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.clauses, **kw)
    path = "{" + ",".join(element.path) + "}"
    value = f"(CAST({column} AS JSONB) #> '{path}')"
    kind, cast = ("number", "DOUBLE PRECISION") if element.kind == "number" else ("string", "TEXT")
    return (
        f"(CASE WHEN jsonb_typeof({value}) = '{kind}'"
        f" THEN CAST(CAST({column} AS JSONB) #>> '{path}' AS {cast}) END)"
    )


def _reward() -> ColumnElement[Any]:
    return func.coalesce(*(_JsonAt(samples.c.body, path, "number") for path in REWARD_PATHS))


def _containing(fragment: str) -> str:
    """A LIKE pattern matching ``fragment`` of JSON text anywhere; ``!`` escapes LIKE's
    wildcards."""
    return "%" + fragment.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"


def _text_like(text: str) -> str:
    """A LIKE pattern of ``text`` as the canonical JSON of a body writes it (escaped as JSON:
    quotes, backslashes, non-ASCII)."""
    return _containing(json.dumps(text)[1:-1])


@attrs.frozen(order=True)
class BrowseKey:
    """A sample's place in a browsing order: its store position, and in reward order its
    reward (``None``: it has none; such samples come after every rewarded one)."""

    position: Position
    reward: float | None = None

    @classmethod
    def of(cls, cursor: BrowseKey | Position) -> BrowseKey:
        """``cursor`` as a key (a position alone is a key without a reward)."""
        return cls(cursor) if isinstance(cursor, Position) else cursor


@attrs.frozen
class SampleFilter:
    """Which samples a page shows; every condition given must hold.

    :ivar kind: ``"trajectory"`` or ``"task"``.
    :ivar group_id: the group the samples train with.
    :ivar trained: trained by a job that did not fail (True) or by none (False).
    :ivar stale: left out of a buffer as stale (True) or not (False).
    :ivar chosen: in a manual buffer (True) or in none (False).
    :ivar trainer: the trainer ``trained``, ``stale`` and ``chosen`` ask about; any trainer
        when ``None``.
    :ivar group: the group the client named (a report's ``metadata.group``), or the store's
        own group id: a sample of either matches.
    :ivar text: text found anywhere in the sample's body (its messages, tool calls, feedback,
        metadata), ASCII letters in any case.
    :ivar reward_min: the least reward (samples without a reward do not match).
    :ivar reward_max: the greatest reward (likewise).
    :ivar artifact: an artifact that answered one of the sample's recorded calls.
    :ivar since: made from a call Reef received at or after this time (Unix seconds).
    :ivar until: made from a call received before this time.
    :ivar tags: made from calls carrying each of these tags (``x-reef-tag-<name>``) with these
        values. Both read the call's stored body: a call whose body was evicted matches none;
        an upload has no calls, so a time or tag condition leaves it out.
    """

    kind: str | None = None
    group_id: str | None = None
    trained: bool | None = None
    stale: bool | None = None
    trainer: str | None = None
    chosen: bool | None = None
    group: str | None = None
    text: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    artifact: str | None = None
    since: float | None = None
    until: float | None = None
    tags: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class ArtifactReward:
    """The rewarded samples one artifact answered a call of.

    :ivar artifact_id: the artifact (a set of weights).
    :ivar number: its place among the scenario's artifacts, in the order they first answered a
        call of a stored sample (1: the first).
    :ivar samples: how many samples with a reward it answered a call of.
    :ivar mean_reward: their mean reward.
    """

    artifact_id: str
    number: int
    samples: int
    mean_reward: float


@attrs.frozen
class BrowsedSample:
    """A stored sample and what the trainers did with it.

    :ivar train_counts: how many committed jobs of each trainer trained it, the failed ones
        left out (trainers that never did are left out).
    :ivar manual_buffers: the trainers whose manual buffer holds it.
    :ivar stale_for: the trainers that leave it out as stale.
    :ivar failed_counts: how many failed jobs of each trainer it was sent to: consumed, its
        training thrown away (trainers of none are left out).
    :ivar no_signal_counts: of the jobs that trained it (failed ones left out), how many of
        each trainer gave it no learning signal: every member of its group in that job
        trained with one reward, so its group-relative advantage was 0.
    """

    stored: StoredSample
    train_counts: Mapping[str, int]
    manual_buffers: tuple[str, ...]
    stale_for: tuple[str, ...]
    failed_counts: Mapping[str, int] = attrs.field(factory=dict)
    no_signal_counts: Mapping[str, int] = attrs.field(factory=dict)


class SampleBrowser:
    """The samples of one scenario, for reading (see the module's documentation)."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario
        self._samples = TrainerSamples(database, scenario)
        self._stale = StaleSamples(database, scenario)

    def page(
        self,
        where: SampleFilter,
        *,
        after: BrowseKey | Position | None = None,
        before: BrowseKey | Position | None = None,
        from_end: bool = False,
        limit: int = 50,
        newest_first: bool = False,
        by_reward: bool = False,
    ) -> list[BrowsedSample]:
        """Up to ``limit`` samples that meet ``where``, in the order asked (store order or by
        reward, ascending or ``newest_first``: highest reward first), in that order.

        The page starts after ``after``, or ends just before ``before``, or is the last page
        (``from_end``), or else the first. Removed uploads (items detached from the scenario)
        are not shown.
        """
        conditions = self._conditions(where)
        descending = newest_first
        keys = self._order(by_reward, descending)
        backwards = from_end or before is not None
        # The rows are read in this direction: the page's order, reversed for a page that
        # ends at its cursor.
        downwards = descending != backwards
        cursor = after if after is not None else before
        query: Select[Any] | CompoundSelect[Any]
        parameters: dict[str, int] = {}
        if cursor is not None and not by_reward:
            # Store order: one index range from the cursor on both databases.
            rows = select(samples.c.id, samples.c.commit_tx, samples.c.seq).where(*conditions)
            query = after_cursor(
                self._database.dialect, rows, samples.c.commit_tx, samples.c.seq, before=downwards
            )
            parameters = cursor_parameters(BrowseKey.of(cursor).position)
        else:
            query = select(samples.c.id).where(*conditions)
            if cursor is not None:
                values = self._key_values(BrowseKey.of(cursor), by_reward, descending)
                row, edge = tuple_(*keys), tuple_(*(literal(v) for v in values))
                query = query.where((row < edge) if downwards else (row > edge))
            query = query.order_by(*(k.desc() if downwards else k.asc() for k in keys))
        with self._database.read() as connection:
            ids = list(connection.execute(query.limit(limit), parameters).scalars())
        if backwards:
            ids.reverse()
        found = {s.stored.id: s for s in self._browsed(self._samples.get(ids))}
        return [found[i] for i in ids if i in found]

    def count(self, where: SampleFilter, *, at_most: int = COUNT_LIMIT) -> tuple[int, bool]:
        """How many samples meet ``where``, counting no further than ``at_most``: the count
        and whether it is exact (``False``: more than ``at_most`` match)."""
        matches = (
            select(samples.c.seq).where(*self._conditions(where)).limit(at_most + 1).subquery()
        )
        with self._database.read() as connection:
            found = int(connection.execute(select(func.count()).select_from(matches)).scalar_one())
        return min(found, at_most), found <= at_most

    @staticmethod
    def key_of(sample: BrowsedSample, reward: float | None, *, by_reward: bool) -> BrowseKey:
        """The key of ``sample`` (whose reward is ``reward``) in the order asked."""
        return BrowseKey(sample.stored.position, reward if by_reward else None)

    @staticmethod
    def _order(by_reward: bool, descending: bool) -> list[ColumnElement[Any]]:
        position: list[ColumnElement[Any]] = [samples.c.commit_tx, samples.c.seq]
        if not by_reward:
            return position
        reward = _reward()
        # Samples without a reward come last both ways: the mark sorts them there.
        missing = case((reward.is_(None), 0 if descending else 1), else_=1 if descending else 0)
        return [missing, func.coalesce(reward, 0.0), *position]

    @staticmethod
    def _key_values(key: BrowseKey, by_reward: bool, descending: bool) -> tuple[Any, ...]:
        position = (key.position.commit_tx, key.position.seq)
        if not by_reward:
            return position
        if key.reward is None:
            return (0 if descending else 1, 0.0, *position)
        return (1 if descending else 0, key.reward, *position)

    def one(self, sample_id: str) -> BrowsedSample | None:
        """The sample ``sample_id`` (``None`` when not stored, or a removed upload)."""
        found = self._browsed(self._samples.get([sample_id]))
        return found[0] if found else None

    def many(self, sample_ids: Sequence[str]) -> list[BrowsedSample]:
        """The samples of ``sample_ids`` still stored (removed uploads left out)."""
        return self._browsed(self._samples.get(list(sample_ids)))

    @staticmethod
    def client_group(sample: BrowsedSample) -> str | None:
        """The group the sample's client named (a report's ``metadata.group``), if any."""
        found: Any = sample.stored.body
        for key in CLIENT_GROUP_PATH:
            found = found.get(key) if isinstance(found, Mapping) else None
        return found if isinstance(found, str) else None

    def instruction_notes(self, request_ids: Sequence[str]) -> dict[str, str | None]:
        """The note (``text``) of each TRAIN instruction of ``request_ids`` that is stored."""
        query = select(instructions.c.request_id, instructions.c.body).where(
            instructions.c.scenario == self.scenario,
            instructions.c.request_id.in_(list(request_ids)),
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        notes: dict[str, str | None] = {}
        for request_id, body in rows:
            text = json_values.load(body).get("text")
            notes[str(request_id)] = text if isinstance(text, str) else None
        return notes

    def group_signals(self, sample_id: str) -> dict[tuple[str, str], bool | None]:
        """For each job (trainer, job id) that sent ``sample_id``: whether its group in that
        job trained with unlike rewards (``None``: not every member had a reward)."""
        query = (
            select(
                job_samples.c.trainer,
                job_samples.c.job_id,
                func.coalesce(samples.c.group_id, samples.c.id),
            )
            .select_from(job_samples)
            .join(samples, self._sent_sample())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id == sample_id,
                job_samples.c.trained.is_(True),
            )
        )
        with self._database.read() as connection:
            parts = [(str(t), str(j), str(g)) for t, j, g in connection.execute(query)]
            keys = sorted({(t, j) for t, j, _ in parts})
            spreads = self._group_spreads(connection, keys) if keys else {}
        found: dict[tuple[str, str], bool | None] = {}
        for trainer, job_id, group in parts:
            spread = spreads.get((trainer, job_id), {}).get(group)
            found[(trainer, job_id)] = None if spread is None else _signal([spread])
        return found

    def _conditions(self, where: SampleFilter) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = [
            samples.c.scenario == self.scenario,
            samples.c.removed.is_(False),
        ]
        if where.kind is not None:
            conditions.append(samples.c.kind == where.kind)
        if where.group_id is not None:
            conditions.append(samples.c.group_id == where.group_id)
        if where.group is not None:
            client = _JsonAt(samples.c.body, CLIENT_GROUP_PATH, "text")
            conditions.append(or_(client == where.group, samples.c.group_id == where.group))
        if where.text:
            conditions.append(samples.c.body.ilike(_text_like(where.text), escape="!"))
        if where.artifact is not None:
            # A recorded call of the trajectory (extra.reef.records) names its artifact so.
            named = '"artifact_id":' + json.dumps(where.artifact)
            conditions.append(samples.c.body.like(_containing(named), escape="!"))
        if where.since is not None or where.until is not None:
            # When Reef received the call: its body's started_at (gone with an evicted body).
            at = _JsonAt(records.c.body, ("started_at",), "number")
            received = []
            if where.since is not None:
                received.append(at >= where.since)
            if where.until is not None:
                received.append(at < where.until)
            conditions.append(self._made_from_a_call(*received))
        for name, value in where.tags.items():
            conditions.append(self._made_from_a_call(self._tag(name) == value))
        if where.reward_min is not None:
            conditions.append(_reward() >= where.reward_min)
        if where.reward_max is not None:
            conditions.append(_reward() <= where.reward_max)
        # Each mark (trained, stale, chosen): a row of its table for the sample, of the
        # trainer asked about or of any; the filter wants one (True) or none (False). Trained
        # is a train count beyond the failed jobs of that trainer that sent the sample.
        marks = (
            (where.trained, sample_trains.c.trainer,
             (sample_trains.c.sample_seq == samples.c.seq,
              sample_trains.c["count"] > self._failed_sends(sample_trains.c.trainer))),
            (where.stale, stale_samples.c.trainer,
             (stale_samples.c.scenario == self.scenario,
              stale_samples.c.sample_id == samples.c.id)),
            (where.chosen, manual_buffer.c.trainer,
             (manual_buffer.c.scenario == self.scenario,
              manual_buffer.c.sample_seq == samples.c.seq)),
        )  # fmt: skip
        for wanted, trainer, of_sample in marks:
            if wanted is None:
                continue
            found = select(literal(1)).where(*of_sample)
            if where.trainer is not None:
                found = found.where(trainer == where.trainer)
            conditions.append(found.exists() if wanted else ~found.exists())
        return conditions

    def artifact_rewards(self, *, limit: int) -> tuple[list[ArtifactReward], int]:
        """The mean reward of the samples each artifact answered a call of (their trajectory's
        ``extra.reef.records``), the artifacts in the order they first answered: the last
        ``limit`` of them, and how many there are. One aggregate query over the scenario's
        rewarded trajectory samples: a scan, so the console asks it only when a job ended."""
        calls = self._body_array(("trajectory", "extra", "reef", "records"), "calls")
        artifact: ColumnElement[Any] = (
            func.jsonb_extract_path_text(calls.c.value, "artifact_id")
            if self._database.dialect == "postgresql"
            else func.json_extract(calls.c.value, "$.artifact_id")
        )
        reward = _reward()
        pairs = (
            select(samples.c.seq, artifact.label("artifact"), reward.label("reward"))
            .select_from(samples.join(calls, true()))  # each sample with each of its calls
            .where(
                samples.c.scenario == self.scenario,
                samples.c.kind == "trajectory",
                samples.c.removed.is_(False),
                reward.is_not(None),
                artifact.is_not(None),
            )
            .distinct()
            .subquery()
        )
        first = func.min(pairs.c.seq)
        query = (
            select(pairs.c.artifact, func.count(), func.avg(pairs.c.reward), first)
            .group_by(pairs.c.artifact)
            .order_by(first)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        found = [
            ArtifactReward(str(a), n, int(count), float(mean))
            for n, (a, count, mean, _) in enumerate(rows, 1)
        ]
        return found[-limit:], len(found)

    def _made_from_a_call(self, *conditions: ColumnElement[bool]) -> ColumnElement[bool]:
        """Whether a call the sample was made from (an id of its ``source_record_ids``) meets
        ``conditions``: a correlated ``EXISTS`` over the ids in its body."""
        source = self._body_array(("source_record_ids",), "source_ids", text=True)
        found = (
            select(literal(1))
            .select_from(source)
            .join(
                records, and_(records.c.id == source.c.value, records.c.scenario == self.scenario)
            )
            .where(*conditions)
        )
        return found.exists()

    def _body_array(self, path: tuple[str, ...], name: str, *, text: bool = False) -> Any:
        """The elements of the JSON array at ``path`` of the sample's body, as a table ``name``
        with one column ``value`` (the element's text with ``text``, else its JSON), to join to
        each sample: ``json_each`` on SQLite, ``jsonb_array_elements`` on PostgreSQL (no rows
        where the body holds no array there)."""
        if self._database.dialect == "postgresql":
            listed: Any = cast(samples.c.body, JSONB)
            for key in path:
                listed = listed[key]
            array = case((func.jsonb_typeof(listed) == "array", listed), else_=None)
            elements = func.jsonb_array_elements_text if text else func.jsonb_array_elements
            return elements(array).table_valued("value").alias(name)
        return func.json_each(samples.c.body, _sqlite_path(path)).table_valued("value").alias(name)

    def _tag(self, name: str) -> ColumnElement[Any]:
        """The value of the call's tag ``name`` (its body's ``tags``), as bound parameters."""
        if self._database.dialect == "postgresql":
            return func.jsonb_extract_path_text(cast(records.c.body, JSONB), "tags", name)
        return func.json_extract(records.c.body, "$.tags." + json.dumps(name))

    def _failed_sends(self, trainer: Any) -> Any:  # a correlated SQL count
        """How many failed jobs of ``trainer`` (a column) sent the sample of the outer query."""
        return (
            select(func.count())
            .select_from(job_samples)
            .join(jobs, self._same_job())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id == samples.c.id,
                job_samples.c.trainer == trainer,
                job_samples.c.trained.is_(True),
                jobs.c.event == FAILED,
            )
            .correlate(samples, trainer.table)
            .scalar_subquery()
        )

    @staticmethod
    def _same_job() -> ColumnElement[bool]:
        return and_(
            jobs.c.scenario == job_samples.c.scenario,
            jobs.c.trainer == job_samples.c.trainer,
            jobs.c.job_id == job_samples.c.job_id,
        )

    @staticmethod
    def _sent_sample() -> ColumnElement[bool]:
        """The stored sample a job's row names."""
        return and_(
            samples.c.scenario == job_samples.c.scenario,
            samples.c.id == job_samples.c.sample_id,
        )

    def _failed_counts(
        self, connection: Connection, ids: Sequence[str]
    ) -> dict[str, dict[str, int]]:
        """Sample id -> trainer -> how many failed jobs of that trainer sent it."""
        query = (
            select(job_samples.c.sample_id, job_samples.c.trainer, func.count())
            .select_from(job_samples)
            .join(jobs, self._same_job())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id.in_(list(ids)),
                job_samples.c.trained.is_(True),
                jobs.c.event == FAILED,
            )
            .group_by(job_samples.c.sample_id, job_samples.c.trainer)
        )
        found: dict[str, dict[str, int]] = {}
        for sample_id, trainer, count in connection.execute(query):
            found.setdefault(str(sample_id), {})[str(trainer)] = int(count)
        return found

    def _browsed(self, stored: Sequence[StoredSample]) -> list[BrowsedSample]:
        if not stored:
            return []
        seqs = [s.position.seq for s in stored]
        with self._database.read() as connection:
            counts = self._by_seq(
                connection,
                select(
                    sample_trains.c.sample_seq, sample_trains.c.trainer, sample_trains.c["count"]
                )
                .where(sample_trains.c.sample_seq.in_(seqs), sample_trains.c["count"] > 0)
                .order_by(sample_trains.c.trainer),
            )
            buffers = self._by_seq(
                connection,
                select(manual_buffer.c.sample_seq, manual_buffer.c.trainer, literal(1))
                .where(
                    manual_buffer.c.scenario == self.scenario, manual_buffer.c.sample_seq.in_(seqs)
                )
                .order_by(manual_buffer.c.trainer),
            )
            failed = self._failed_counts(connection, [s.id for s in stored])
            alike = self._alike_counts(connection, [s.id for s in stored])
        stale = self._stale.marked([s.id for s in stored])
        return [
            BrowsedSample(
                s,
                _trained(counts.get(s.position.seq, {}), failed.get(s.id, {})),
                tuple(buffers.get(s.position.seq, {})),
                stale.get(s.id, ()),
                failed.get(s.id, {}),
                alike.get(s.id, {}),
            )
            for s in stored
        ]

    # -- learning signal: did a job's groups score unlike? ---------------------------------

    def job_signals(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], bool | None]:
        """Whether each job (trainer, job id) had a learning signal: ``True`` when a group of
        the samples it sent trained with unlike rewards, ``False`` when every group's members
        trained with one reward (a group of one included: advantage 0 under a group-relative
        objective, the loss 0, the weights unmoved), ``None`` when it sent no sample with a
        reward (SFT, tasks) or the history holds none of its samples."""
        found: dict[tuple[str, str], bool | None] = {}
        with self._database.read() as connection:
            for start in range(0, len(keys), _CHUNK):
                chunk = list(keys[start : start + _CHUNK])
                for key, groups in self._group_spreads(connection, chunk).items():
                    found[key] = _signal(groups.values())
        return {key: found.get(key) for key in keys}

    def _group_spreads(
        self, connection: Connection, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[str, tuple[int, int, float | None, float | None]]]:
        """(trainer, job id) -> group -> (members sent, rewarded, lowest, highest reward)."""
        group = func.coalesce(samples.c.group_id, samples.c.id)
        query = (
            select(
                job_samples.c.trainer,
                job_samples.c.job_id,
                group,
                func.count(),
                func.count(job_samples.c.reward),
                func.min(job_samples.c.reward),
                func.max(job_samples.c.reward),
            )
            .select_from(job_samples)
            .join(samples, self._sent_sample())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.trained.is_(True),
                tuple_(job_samples.c.trainer, job_samples.c.job_id).in_(list(keys)),
            )
            .group_by(job_samples.c.trainer, job_samples.c.job_id, group)
        )
        spreads: dict[tuple[str, str], dict[str, tuple[int, int, float | None, float | None]]]
        spreads = {}
        for trainer, job_id, name, members, rewarded, low, high in connection.execute(query):
            spreads.setdefault((str(trainer), str(job_id)), {})[str(name)] = (
                int(members),
                int(rewarded),
                low,
                high,
            )
        return spreads

    def _alike_counts(
        self, connection: Connection, ids: Sequence[str]
    ) -> dict[str, dict[str, int]]:
        """Sample id -> trainer -> how many jobs (not failed) trained it in a group that
        scored all alike."""
        query = (
            select(
                job_samples.c.sample_id,
                job_samples.c.trainer,
                job_samples.c.job_id,
                func.coalesce(samples.c.group_id, samples.c.id),
            )
            .select_from(job_samples)
            .join(jobs, self._same_job())
            .join(samples, self._sent_sample())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id.in_(list(ids)),
                job_samples.c.trained.is_(True),
                # A running job trains it; a failed or released one did not.
                or_(jobs.c.event.is_(None), jobs.c.event.not_in([FAILED, RELEASED])),
            )
        )
        parts = [(str(s), str(t), str(j), str(g)) for s, t, j, g in connection.execute(query)]
        keys = sorted({(t, j) for _, t, j, _ in parts})
        spreads: dict[tuple[str, str], dict[str, tuple[int, int, float | None, float | None]]]
        spreads = {}
        for start in range(0, len(keys), _CHUNK):
            spreads |= self._group_spreads(connection, keys[start : start + _CHUNK])
        found: dict[str, dict[str, int]] = {}
        for sample_id, trainer, job_id, group in parts:
            spread = spreads.get((trainer, job_id), {}).get(group)
            if spread is not None and _signal([spread]) is False:
                counts = found.setdefault(sample_id, {})
                counts[trainer] = counts.get(trainer, 0) + 1
        return found

    @staticmethod
    def _by_seq(connection: Connection, query: Any) -> dict[int, dict[str, int]]:
        found: dict[int, dict[str, int]] = {}
        for seq, trainer, value in connection.execute(query):
            found.setdefault(int(seq), {})[str(trainer)] = int(value)
        return found


#: How many jobs one query of :meth:`SampleBrowser.job_signals` asks about.
_CHUNK: Final = 400


def _signal(groups: Any) -> bool | None:
    """Whether groups of (members, rewarded, lowest, highest) hold a learning signal: one
    fully rewarded group of unlike rewards is one; none when no group is fully rewarded."""
    rewarded = [(low, high) for members, n, low, high in groups if n and n == members]
    if not rewarded:
        return None
    return any(low != high for low, high in rewarded)


def _trained(commits: Mapping[str, int], failed: Mapping[str, int]) -> dict[str, int]:
    """Each trainer's commits of a sample less the failed jobs that sent it, where any is left."""
    left = {trainer: n - failed.get(trainer, 0) for trainer, n in commits.items()}
    return {trainer: n for trainer, n in left.items() if n > 0}
