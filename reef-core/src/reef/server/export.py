"""A scenario's samples as a dataset, and a dataset into another deployment as uploads.

:func:`export_rows` reads a scenario's trajectory samples a page at a time, in store order
(:class:`reef.storage.SampleBrowser`), each as one row: its ATIF trajectory, reward, feedback,
each trainer's train count, the artifacts that answered its calls, and the tags and time of
the calls it was made from. :func:`write_export` writes rows as JSON Lines, Parquet
(``pyarrow``) or a Hugging Face ``datasets`` folder (``load_from_disk``), never holding more
than one batch, so an export of any size runs in bounded memory. ``reef export``, the admin
route ``GET /reef/scenarios/{scenario}/export`` (JSON Lines, streamed) and
``POST /reef/scenarios/{scenario}/export`` (a selection of sample ids, the console's, as JSON
Lines, Parquet or a zipped ``datasets`` folder) call these. :func:`evaluation_rows` reads a
scenario's evaluation results the same way, each with every item's outcome and the gate's
decision (``reef export --evaluations``, ``GET /reef/scenarios/{scenario}/evaluations/export``).

:func:`import_file` reads such a file back and stores each row's trajectory, with its reward
and feedback, as an uploaded trajectory of another deployment's scenario (P-UP-1), under the
row's sample id: every row is checked first, and a file with a bad row stores nothing.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import anyio.to_thread
import attrs
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse

from reef.core.atif import AtifFormatError, trajectory_from_json
from reef.core.job_data import TrajectorySample, sample_body, sample_from_body, sample_reward
from reef.core.records import JSON, InferenceRecord
from reef.errors import ReefError
from reef.server.bodies import (
    QUERY_ROOT,
    ExportQuery,
    ExportSelection,
    read_query,
    structure,
    tag_condition,
)
from reef.server.errors import ApiError, ErrorDetail
from reef.server.names import name_problem
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import check_trainer, service_of
from reef.storage import (
    ArtifactEvaluations,
    BrowsedSample,
    Database,
    GateDecision,
    NewSample,
    Position,
    RecordStore,
    SampleBrowser,
    SampleFilter,
    TrainerSamples,
)

__all__ = [
    "EVALUATIONS",
    "EXPORT_FORMATS",
    "ROUTES",
    "SAMPLES",
    "ExportFilter",
    "ExportTable",
    "ImportError_",
    "ImportResult",
    "evaluation_rows",
    "export_rows",
    "import_file",
    "read_export",
    "write_export",
]

ExportFormat = Literal["jsonl", "parquet", "hf"]
#: The formats an export is written in.
EXPORT_FORMATS: Final[tuple[ExportFormat, ...]] = ("jsonl", "parquet", "hf")
#: Samples read from the store at a time, and rows written at a time.
BATCH: Final = 500


class ImportError_(ReefError, ValueError):
    """A file that cannot be imported: every problem, each naming its row."""


@attrs.frozen
class ExportFilter:
    """Which samples an export holds; every condition given must hold.

    :ivar since: made from a call Reef received at or after this time (Unix seconds).
    :ivar until: made from a call received before this time.
    :ivar tags: made from calls carrying each of these tags (``x-reef-tag-<name>``) with these
        values. An upload has no calls: a time or tag condition leaves it out.
    :ivar trained: trained by a job that did not fail (True), or by none (False).
    :ivar trainer: the trainer ``trained`` asks about; any when ``None``.
    :ivar reward_min: a reward at least this (a sample without a reward is left out).
    :ivar reward_max: a reward at most this.
    """

    since: float | None = None
    until: float | None = None
    tags: Mapping[str, str] = attrs.field(factory=dict)
    trained: bool | None = None
    trainer: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None

    def keeps(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` (an export row) meets the conditions of its calls (time, tags), which
        the store's sample filter does not ask."""
        at = row["recorded_at"]
        if (self.since is not None or self.until is not None) and at is None:
            return False
        if self.since is not None and at < self.since:
            return False
        if self.until is not None and at >= self.until:
            return False
        return all(row["tags"].get(name) == value for name, value in self.tags.items())


def export_rows(
    database: Database,
    scenario: str,
    where: ExportFilter | None = None,
    *,
    sample_ids: Sequence[str] | None = None,
) -> Iterator[JSON]:
    """Each trajectory sample of ``scenario`` that meets ``where``, as an export row, in store
    order; or, given ``sample_ids`` (a selection, the console's), those samples in that order
    (ids not stored are skipped).

    :raises ValueError: given both ``where`` and ``sample_ids``: a selection is taken whole.
    """
    if where is not None and sample_ids is not None:
        raise ValueError(
            "export a selection of sample ids, or the samples a filter keeps: not both"
        )
    where = where or ExportFilter()
    records = RecordStore(database, scenario)
    browser = SampleBrowser(database, scenario)
    for page in _pages(browser, where, sample_ids):
        for browsed in page:
            if browsed.stored.kind != "trajectory":
                continue
            row = _row(browsed, records)
            if where.keeps(row):
                yield row


def evaluation_rows(
    database: Database, scenario: str, trainer: str | None = None
) -> Iterator[JSON]:
    """Every evaluation result of ``scenario`` (of ``trainer``, else of every trainer), oldest
    first, as an export row: the artifact, the set, the score, how many items got no reply,
    every item's outcome, the sampling settings, and the gate's decision on the artifact
    (``served`` null: the scenario has no gate, or it took none)."""
    evaluations = ArtifactEvaluations(database, scenario)
    # An artifact's sets are measured one after another: its decision is read once for them.
    artifact: tuple[str, str] | None = None
    decision: GateDecision | None = None
    for result in evaluations.every_result(trainer):
        if (result.trainer, result.artifact_id) != artifact:
            artifact = (result.trainer, result.artifact_id)
            decision = evaluations.decision(*artifact)
        yield {
            "trainer": result.trainer,
            "artifact_id": result.artifact_id,
            "eval": result.eval,
            "score": result.score,
            "errors": result.errors,
            "items": [item.to_json() for item in result.items],
            "sampling": dict(result.sampling),
            "measured_at": result.at,
            "served": None if decision is None else decision.served,
            "gate_reason": None if decision is None else decision.reason,
        }


def _pages(
    browser: SampleBrowser, where: ExportFilter, sample_ids: Sequence[str] | None
) -> Iterator[list[BrowsedSample]]:
    if sample_ids is not None:
        for start in range(0, len(sample_ids), BATCH):
            found = (browser.one(i) for i in sample_ids[start : start + BATCH])
            yield [b for b in found if b is not None]
        return
    asked = SampleFilter(
        kind="trajectory",
        trained=where.trained,
        trainer=where.trainer,
        reward_min=where.reward_min,
        reward_max=where.reward_max,
    )
    after: Position | None = None
    while True:
        page = browser.page(asked, after=after, limit=BATCH)
        if not page:
            return
        yield page
        after = page[-1].stored.position


def _row(browsed: BrowsedSample, records: RecordStore) -> JSON:
    stored = browsed.stored
    sample = sample_from_body(stored.kind, stored.body, sample_id=stored.id)
    assert isinstance(sample, TrajectorySample)  # only trajectory samples are read
    calls: list[InferenceRecord] = []
    for record_id in sample.source_record_ids:
        found = records.get(record_id)
        if found is not None and isinstance(found.record, InferenceRecord):
            calls.append(found.record)
    tags: dict[str, str] = {}
    for call in calls:
        tags.update(call.tags)
    reef = sample.trajectory.get("extra", {}).get("reef", {})
    listed = reef.get("records", []) if isinstance(reef, Mapping) else []
    artifacts = [r.get("artifact_id") for r in listed if isinstance(r, Mapping)]
    return {
        "sample_id": stored.id,
        "origin": stored.origin,
        "trainer": stored.trainer,
        "group_id": stored.group_id,
        "reward": sample_reward(sample),
        "feedback": sample.feedback,
        "train_counts": dict(browsed.train_counts),
        "artifacts": list(dict.fromkeys(a for a in artifacts if isinstance(a, str))),
        "tags": tags,
        "recorded_at": min((c.started_at for c in calls), default=None),
        "trajectory": sample.trajectory,
    }


async def export_scenario(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/export``: the scenario's samples as JSON Lines, one
    row a line, streamed as they are read."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, ExportQuery)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")
    where = ExportFilter(
        since=query.since,
        until=query.until,
        tags=tag_condition(query.tag),
        trained=query.trained,
        trainer=query.trainer,
        reward_min=query.reward_min,
        reward_max=query.reward_max,
    )
    rows = export_rows(scenario.samples.database, scenario.name, where)
    # A sync iterator: Starlette reads it in its thread pool, a row at a time.
    lines = (json.dumps(row, sort_keys=True, allow_nan=False) + "\n" for row in rows)
    return StreamingResponse(lines, media_type="application/x-ndjson")


def _check_selection(browser: SampleBrowser, sample_ids: Sequence[str]) -> None:
    """Refuse a selection with an id that is not a stored trajectory sample, naming each (the
    first 20): an export holds what was asked, or nothing.

    :raises ApiError: 400, each problem at its ``$.sample_ids[i]``.
    """
    kinds = {b.stored.id: b.stored.kind for b in browser.many(sample_ids)}
    problems: list[ErrorDetail] = []
    for index, sample_id in enumerate(sample_ids):
        kind = kinds.get(sample_id)
        if kind == "trajectory":
            continue
        reason = (
            f"no sample {sample_id!r} is stored in scenario {browser.scenario!r}"
            if kind is None
            else f"sample {sample_id!r} is a {kind} sample: an export holds trajectory samples"
        )
        problems.append(ErrorDetail(f"$.sample_ids[{index}]", reason))
    if problems:
        raise ApiError(400, "invalid_request", problems[:20])


def _attachment(scenario: str, suffix: str) -> dict[str, str]:
    # A scenario name is a validated name (letters, digits, "._-:"): safe in the header.
    return {"content-disposition": f'attachment; filename="{scenario}-selection.{suffix}"'}


async def export_selection(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/export``: the samples of a selection, in its order, as
    a JSON Lines or Parquet file, or a Hugging Face ``datasets`` folder in a zip file; a
    selection naming a sample that is not a stored trajectory is refused whole."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    selection = structure(await read_json(request, service.options.max_body_bytes), ExportSelection)
    file = _SELECTION_FILES.get(selection.format)
    if file is not None and importlib.util.find_spec(file.library) is None:
        raise ApiError.one(
            400,
            "invalid_request",
            "$.format",
            f"{file.named} export needs {file.library}, which this service lacks: install"
            " reef-core[export] where it runs, or ask for jsonl",
        )
    database, name = scenario.samples.database, scenario.name
    ids = list(dict.fromkeys(selection.sample_ids))
    await anyio.to_thread.run_sync(_check_selection, SampleBrowser(database, name), ids)
    if selection.format == "jsonl":
        rows = export_rows(database, name, sample_ids=ids)
        lines = (json.dumps(row, sort_keys=True, allow_nan=False) + "\n" for row in rows)
        return StreamingResponse(
            lines, media_type="application/x-ndjson", headers=_attachment(name, "jsonl")
        )
    folder = Path(tempfile.mkdtemp(prefix="reef-selection-"))
    fmt: ExportFormat = selection.format

    def write() -> Path:
        rows = export_rows(database, name, sample_ids=ids)
        if fmt == "parquet":
            write_export(rows, "parquet", folder / "selection.parquet")
            return folder / "selection.parquet"
        # A datasets folder travels as one file: zipped, the folder at its root.
        write_export(rows, "hf", folder / f"{name}-selection")
        archive = shutil.make_archive(
            str(folder / "selection"), "zip", root_dir=folder, base_dir=f"{name}-selection"
        )
        return Path(archive)

    try:
        output = await anyio.to_thread.run_sync(write)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    assert file is not None  # jsonl streamed above
    return FileResponse(
        output,
        media_type=file.media_type,
        headers=_attachment(name, file.suffix),
        background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True),
    )


@attrs.frozen
class _SelectionFile:
    """A file format of a selection: the library that writes it, its name in an error, its
    media type and file name ending."""

    library: str
    named: str
    media_type: str
    suffix: str


#: The file formats of a selection other than JSON Lines (streamed as it is read).
_SELECTION_FILES: Final = {
    "parquet": _SelectionFile("pyarrow", "a Parquet", "application/vnd.apache.parquet", "parquet"),
    "hf": _SelectionFile("datasets", "a Hugging Face", "application/zip", "hf.zip"),
}


ROUTES: Final = (
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/export",
        "a selection of trajectory samples, by id, as a JSON Lines, Parquet or zipped datasets"
        " file",
        export_selection,
        ExportSelection,
        {200: None},
        "admin",
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/export",
        "the scenario's trajectory samples as JSON Lines (reef export's rows), filtered",
        export_scenario,
        None,
        {200: None},
        "admin",
        query=ExportQuery,
    ),
)


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------


@attrs.frozen
class ExportTable:
    """The columns of an export's rows in a Parquet or ``datasets`` file.

    :ivar columns: each column's name and type: ``string``, ``float64``, ``int64``, ``bool`` or
        ``strings`` (a list of text).
    :ivar json_columns: the columns holding nested values, written as JSON text.
    """

    columns: tuple[tuple[str, str], ...]
    json_columns: tuple[str, ...]

    def schema(self) -> Any:
        import pyarrow as pa

        types = {
            "string": pa.string(),
            "float64": pa.float64(),
            "int64": pa.int64(),
            "bool": pa.bool_(),
            "strings": pa.list_(pa.string()),
        }
        return pa.schema([(name, types[kind]) for name, kind in self.columns])

    def flat(self, row: Mapping[str, Any]) -> JSON:
        """``row`` with its nested values as JSON text, for a columnar file."""
        return {
            k: json.dumps(v, sort_keys=True) if k in self.json_columns else v
            for k, v in row.items()
        }

    def nested(self, row: Mapping[str, Any]) -> JSON:
        return {k: json.loads(v) if k in self.json_columns else v for k, v in row.items()}


#: The rows of a samples export (:func:`export_rows`).
SAMPLES: Final = ExportTable(
    (
        ("sample_id", "string"),
        ("origin", "string"),
        ("trainer", "string"),
        ("group_id", "string"),
        ("reward", "float64"),
        ("feedback", "string"),
        ("train_counts", "string"),
        ("artifacts", "strings"),
        ("tags", "string"),
        ("recorded_at", "float64"),
        ("trajectory", "string"),
    ),
    ("trajectory", "train_counts", "tags"),
)
#: The rows of an evaluations export (:func:`evaluation_rows`).
EVALUATIONS: Final = ExportTable(
    (
        ("trainer", "string"),
        ("artifact_id", "string"),
        ("eval", "string"),
        ("score", "float64"),
        ("errors", "int64"),
        ("items", "string"),
        ("sampling", "string"),
        ("measured_at", "float64"),
        ("served", "bool"),
        ("gate_reason", "string"),
    ),
    ("items", "sampling"),
)


def _batches(rows: Iterable[JSON]) -> Iterator[list[JSON]]:
    batch: list[JSON] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def write_export(
    rows: Iterable[JSON], export_format: ExportFormat, output: Path, table: ExportTable = SAMPLES
) -> int:
    """Write ``rows`` (of ``table``: samples unless told) to ``output`` (a file; a folder for
    ``hf``), one batch at a time; how many rows were written.

    :raises FileExistsError: when ``output`` exists (an export never overwrites).
    """
    if output.exists():
        raise FileExistsError(f"{output} exists: an export never overwrites; name a new path")
    if export_format == "jsonl":
        written = 0
        with output.open("x", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, sort_keys=True, allow_nan=False) + "\n")
                written += 1
        return written
    if export_format == "parquet":
        return _write_parquet(rows, output, table)
    return _write_datasets_folder(rows, output, table)


#: The one data file of a ``datasets`` folder that ``save_to_disk`` writes as one shard.
_DATA_FILE: Final = "data-00000-of-00001.arrow"


def _write_datasets_folder(rows: Iterable[JSON], output: Path, table: ExportTable) -> int:
    """A ``datasets`` folder (``load_from_disk``) of ``rows``, written a batch at a time.

    ``datasets``' own :class:`ArrowWriter` writes the rows into the folder's one data file as
    they come, so nothing is read back: ``Dataset.save_to_disk`` would copy a dataset already
    on disk through its memory map, every page of which stays resident
    (docs/observe.md#export-and-import). The folder's two descriptions (``state.json``,
    ``dataset_info.json``) are the ones ``save_to_disk`` writes for the same columns and one
    data file, taken from saving the first batch alone; the data file is then written whole.
    The folder is moved into place when it is complete, so a failed export leaves nothing at
    ``output``. An export of no rows is a folder of no rows.
    """
    import pyarrow as pa
    from datasets import Dataset, Features
    from datasets.arrow_writer import ArrowWriter

    schema = table.schema()
    features = Features.from_arrow_schema(schema)
    batches = (pa.Table.from_pylist([table.flat(r) for r in b], schema) for b in _batches(rows))
    first = next(batches, None)
    # save_to_disk writes no data file for no rows (which load_from_disk then cannot read): the
    # descriptions of an empty export come from one row of nulls, and its data file has none.
    template = first if first is not None else pa.Table.from_pylist([{}], schema)
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".reef-export-") as work:
        folder = Path(work) / "dataset"
        Dataset(template).save_to_disk(str(folder), num_shards=1)
        written = 0
        with ArrowWriter(features=features, path=str(folder / _DATA_FILE)) as writer:
            for batch in itertools.chain([] if first is None else [first], batches):
                writer.write_table(batch)
                written += batch.num_rows
            writer.finalize()
        folder.rename(output)
    return written


def _write_parquet(rows: Iterable[JSON], output: Path, table: ExportTable) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = table.schema()
    written = 0
    with pq.ParquetWriter(str(output), schema) as writer:
        for batch in _batches(rows):
            writer.write_table(pa.Table.from_pylist([table.flat(r) for r in batch], schema=schema))
            written += len(batch)
    return written


def read_export(path: Path) -> Iterator[JSON]:
    """The rows of an export file: a ``datasets`` folder, a ``.parquet`` file, else JSON Lines.

    :raises ImportError_: for a line that is not a JSON object.
    """
    if path.is_dir():
        from datasets import load_from_disk

        dataset: Any = load_from_disk(str(path))
        for start in range(0, len(dataset), BATCH):
            for row in _rows_of(dataset[start : start + BATCH]):
                yield SAMPLES.nested(row)
        return
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(str(path)).iter_batches(batch_size=BATCH):
            for row in batch.to_pylist():
                yield SAMPLES.nested(row)
        return
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportError_(f"{path}: line {number} is not JSON: {exc}") from exc
            if not isinstance(row, dict):
                raise ImportError_(f"{path}: line {number} is not a JSON object")
            yield row


def _rows_of(columns: Mapping[str, list[Any]]) -> Iterator[JSON]:
    names = list(columns)
    for values in zip(*(columns[n] for n in names), strict=True):
        yield dict(zip(names, values, strict=True))


# --------------------------------------------------------------------------------------------
# import
# --------------------------------------------------------------------------------------------


@attrs.frozen
class ImportResult:
    """What an import did: rows stored as new uploads, and rows already stored as they are."""

    stored: int
    already: int


def _upload(row: Mapping[str, Any], where: str) -> NewSample:
    """The upload a row stores.

    :raises ImportError_: naming ``where`` and what is wrong.
    """
    sample_id = row.get("sample_id")
    if not isinstance(sample_id, str):
        raise ImportError_(f"{where}: sample_id must be a string, got {sample_id!r}")
    problem = name_problem(sample_id)
    if problem is not None:
        raise ImportError_(f"{where}: sample_id {sample_id!r}: {problem}")
    trajectory = row.get("trajectory")
    if not isinstance(trajectory, dict):
        raise ImportError_(f"{where}: trajectory must be an ATIF object")
    try:
        trajectory_from_json(trajectory)
    except AtifFormatError as exc:
        raise ImportError_(f"{where}: the trajectory is not ATIF: {exc}") from exc
    reward = row.get("reward")
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
    ):
        raise ImportError_(f"{where}: reward must be a finite number or null, got {reward!r}")
    feedback = row.get("feedback")
    if feedback is not None and not isinstance(feedback, str):
        raise ImportError_(f"{where}: feedback must be text or null, got {feedback!r}")
    sample = TrajectorySample(
        trajectory, reward=None if reward is None else float(reward), feedback=feedback
    )
    return NewSample(sample_id, "trajectory", sample_body(sample))


def import_file(database: Database, scenario: str, path: Path) -> ImportResult:
    """Store each row of the export file ``path`` as an uploaded trajectory of ``scenario``.

    The file is read twice: every row is checked first, so a file with a bad row stores
    nothing; then each is stored, one at a time.

    :raises ImportError_: listing the first problems found (up to 20), each with its row.
    """
    problems: list[str] = []
    for number, row in enumerate(read_export(path), 1):
        try:
            _upload(row, f"{path}: row {number}")
        except ImportError_ as exc:
            problems.append(str(exc))
            if len(problems) >= 20:
                break
    if problems:
        raise ImportError_("nothing was imported:\n" + "\n".join(f"  {p}" for p in problems))
    samples = TrainerSamples(database, scenario)
    stored = already = 0
    for number, row in enumerate(read_export(path), 1):
        if samples.add_upload(_upload(row, f"{path}: row {number}")):
            stored += 1
        else:
            already += 1
    return ImportResult(stored, already)
