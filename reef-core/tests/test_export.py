"""Export and import (issue 29): a scenario's trajectory samples as JSON Lines, Parquet and a
Hugging Face ``datasets`` folder, filtered; and an export stored into another deployment as
uploaded trajectories, round trip equal. On SQLite (and PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("starlette", reason="export and import are the service's (its server extra)")

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.job_data import TaskSample, TrajectorySample, sample_body
from reef.server.export import (
    ExportFilter,
    ImportError_,
    export_rows,
    import_file,
    read_export,
    write_export,
)
from reef.storage import Database, NewSample, RecordStore, TrainerSamples
from reef.testing.records import call
from reef.testing.service import grouped_deployment

pytest.importorskip("pyarrow")


def _scenario(database: Database, name: str = "s") -> None:
    """Scenario ``name``: three samples made from calls (tags team=a, b, a; received at 10, 20,
    30; rewards 0.0, 0.5, 1.0), the first trained by trainer ``c``; and one upload."""
    records = RecordStore(database, name)
    samples = TrainerSamples(database, name)
    samples.register_trainer("c", reads_uploads=True)
    for n, (team, reward) in enumerate([("a", 0.0), ("b", 0.5), ("a", 1.0)], 1):
        record = attrs.evolve(
            call(f"r{n}", session=f"x{n}", artifact=f"art{n}", at=10.0 * n, scenario=name),
            tags={"team": team},
        )
        records.append_calls([record], records.trajectory_index(), None)
        trajectory = trajectory_to_json(trajectory_from_records([record], trajectory_id=f"t{n}"))
        sample = TrajectorySample(
            trajectory, reward=reward, feedback=f"f{n}", source_record_ids=(f"r{n}",)
        )
        samples.add_record_samples(
            "c", [NewSample(f"c:{n}:0", "trajectory", sample_body(sample))], [f"r{n}"]
        )
    samples.commit_submission("c", "job-1", ["c:1:0"])
    upload = trajectory_to_json(
        trajectory_from_records(
            [call("u1", session="up", artifact="art9", scenario=name)], trajectory_id="up"
        )
    )
    upload["extra"] = {"reef": {"reward": 0.25}}
    samples.add_upload(NewSample("up", "trajectory", sample_body(TrajectorySample(upload))))


def _ids(rows: Any) -> list[str]:
    return [r["sample_id"] for r in rows]


def test_an_export_row_holds_the_trajectory_reward_train_counts_artifacts_and_tags(
    storage_database: Database,
) -> None:
    _scenario(storage_database)
    rows = list(export_rows(storage_database, "s"))
    assert _ids(rows) == ["c:1:0", "c:2:0", "c:3:0", "up"]
    first, _, _, upload = rows
    assert first["reward"] == 0.0
    assert first["feedback"] == "f1"
    assert first["train_counts"] == {"c": 1}
    assert first["artifacts"] == ["art1"]
    assert first["tags"] == {"team": "a"}
    assert first["recorded_at"] == 10.0
    assert first["trajectory"]["schema_version"].startswith("ATIF")
    assert first["origin"] == "record"
    assert upload["reward"] == 0.25  # an upload's reward lives in its trajectory
    assert upload["origin"] == "upload"
    assert upload["recorded_at"] is None


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (ExportFilter(trained=True), ["c:1:0"]),
        (ExportFilter(trained=False, trainer="c"), ["c:2:0", "c:3:0", "up"]),
        (ExportFilter(tags={"team": "a"}), ["c:1:0", "c:3:0"]),
        (ExportFilter(since=15.0, until=30.0), ["c:2:0"]),
        (ExportFilter(reward_min=0.25, reward_max=0.5), ["c:2:0", "up"]),
    ],
)
def test_the_filters_choose_the_samples(
    storage_database: Database, where: ExportFilter, expected: list[str]
) -> None:
    _scenario(storage_database)
    assert _ids(export_rows(storage_database, "s", where)) == expected


def test_a_selection_of_ids_exports_those_samples(storage_database: Database) -> None:
    _scenario(storage_database)
    rows = export_rows(storage_database, "s", sample_ids=["up", "c:2:0", "missing"])
    assert _ids(rows) == ["up", "c:2:0"]


@pytest.mark.parametrize("export_format", ["jsonl", "parquet", "hf"])
def test_each_format_reads_back_the_rows_it_wrote(
    storage_database: Database, tmp_path: Path, export_format: Any
) -> None:
    _scenario(storage_database)
    rows = list(export_rows(storage_database, "s"))
    output = tmp_path / ("out.parquet" if export_format == "parquet" else "out")
    assert write_export(iter(rows), export_format, output) == 4
    assert list(read_export(output)) == rows
    if export_format == "hf":
        from datasets import load_from_disk

        dataset = load_from_disk(str(output))
        assert dataset.num_rows == 4
        assert json.loads(dataset[0]["trajectory"]) == rows[0]["trajectory"]
    if export_format == "parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(str(output)).column("reward").to_pylist() == [0.0, 0.5, 1.0, 0.25]


def test_an_export_never_overwrites(storage_database: Database, tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_text("kept\n")
    with pytest.raises(FileExistsError):
        write_export(iter([]), "jsonl", tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text() == "kept\n"


def test_export_import_export_is_the_same_dataset(
    storage_database: Database, storage_url: str, tmp_path: Path
) -> None:
    """rule: P-UP-1 imported rows are uploads of the other deployment: each trainer that reads
    uploads gets them untrained; exported again, they are the rows of the first export (their
    portable part: id, trajectory, reward, feedback, artifacts), and a second round trip is
    exact."""
    from reef.storage import open_database

    _scenario(storage_database)
    first = tmp_path / "a.parquet"
    write_export(export_rows(storage_database, "s"), "parquet", first)

    other = open_database(f"sqlite:///{tmp_path / 'other.db'}")
    TrainerSamples(other, "t").register_trainer("d", reads_uploads=True)
    assert import_file(other, "t", first).stored == 4
    again = import_file(other, "t", first)
    assert (again.stored, again.already) == (0, 4)  # importing twice changes nothing
    untrained = TrainerSamples(other, "t").untrained("d")
    assert sorted(s.id for s in untrained) == ["c:1:0", "c:2:0", "c:3:0", "up"]

    portable = ("sample_id", "trajectory", "reward", "feedback", "artifacts")
    before = [{k: r[k] for k in portable} for r in read_export(first)]
    second_rows = list(export_rows(other, "t"))
    assert [{k: r[k] for k in portable} for r in second_rows] == before
    assert {r["origin"] for r in second_rows} == {"upload"}

    second = tmp_path / "b.jsonl"
    write_export(iter(second_rows), "jsonl", second)
    third_db = open_database(f"sqlite:///{tmp_path / 'third.db'}")
    import_file(third_db, "t", second)
    assert list(export_rows(third_db, "t")) == second_rows
    other.dispose()
    third_db.dispose()


def test_a_file_with_a_bad_row_imports_nothing(tmp_path: Path) -> None:
    from reef.storage import open_database

    good = {"sample_id": "ok", "trajectory": {"schema_version": "ATIF-v1.8"}}
    path = tmp_path / "in.jsonl"
    rows = [
        {"sample_id": "fine", "trajectory": _valid_trajectory()},
        {"sample_id": "../escape", "trajectory": _valid_trajectory()},
        {**good, "reward": "high"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    database = open_database(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(ImportError_) as refused:
        import_file(database, "t", path)
    message = str(refused.value)
    assert "row 2: sample_id '../escape'" in message
    assert "row 3: the trajectory is not ATIF" in message
    assert list(export_rows(database, "t")) == []  # nothing half-written
    database.dispose()


def _valid_trajectory() -> dict[str, Any]:
    return trajectory_to_json(trajectory_from_records([call("v1")], trajectory_id="v"))


def test_the_admin_route_streams_the_rows_as_json_lines(
    storage_database: Database, storage_url: str
) -> None:
    from starlette.testclient import TestClient

    from reef.testing.service import ServiceToken, auth_section, served_scenario, service_app

    admin, infer = ServiceToken("admin", ("admin",)), ServiceToken("agent", ("infer",))
    text = served_scenario(storage_url, "http://127.0.0.1:9/v1", auth_section(admin, infer), "s")
    _scenario(storage_database)
    with TestClient(service_app(text, storage_url, storage_database)) as client:
        route = "/reef/scenarios/s/export"
        answer = client.get(route, params={"tag": "team=a"}, headers=admin.headers)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("application/x-ndjson")
        rows = [json.loads(line) for line in answer.text.splitlines()]
        assert rows == list(export_rows(storage_database, "s", ExportFilter(tags={"team": "a"})))
        ranged = client.get(route, params={"reward_min": "0.5"}, headers=admin.headers)
        assert [json.loads(x)["sample_id"] for x in ranged.text.splitlines()] == ["c:2:0", "c:3:0"]
        assert client.get(route, headers=infer.headers).status_code == 403
        bad = client.get(route, params={"reward_min": "lots"}, headers=admin.headers)
        assert bad.status_code == 400
        assert "query.reward_min" in bad.text
        assert client.get(route, params={"tag": "team"}, headers=admin.headers).status_code == 400


def test_the_admin_route_exports_a_selection_in_its_order_or_refuses_it_whole(
    storage_database: Database, storage_url: str, tmp_path: Path
) -> None:
    """The console's export: the selected samples, in the selection's order, as JSON Lines or
    Parquet, as an attachment; an id that is not a stored trajectory sample refuses it all,
    each such id named."""
    from starlette.testclient import TestClient

    from reef.testing.service import ServiceToken, auth_section, served_scenario, service_app

    admin, infer = ServiceToken("admin", ("admin",)), ServiceToken("agent", ("infer",))
    text = served_scenario(storage_url, "http://127.0.0.1:9/v1", auth_section(admin, infer), "s")
    _scenario(storage_database)
    TrainerSamples(storage_database, "s").add_upload(
        NewSample("a-task", "task", sample_body(TaskSample("a-task", {"n": 1})))
    )
    selection = ["c:3:0", "up", "c:1:0"]
    expected = list(export_rows(storage_database, "s", sample_ids=selection))
    with TestClient(service_app(text, storage_url, storage_database)) as client:
        route = "/reef/scenarios/s/export"
        answer = client.post(route, json={"sample_ids": selection}, headers=admin.headers)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("application/x-ndjson")
        disposition = answer.headers["content-disposition"]
        assert disposition == 'attachment; filename="s-selection.jsonl"'
        assert [json.loads(line) for line in answer.text.splitlines()] == expected
        assert _ids(expected) == selection

        parquet = client.post(
            route, json={"sample_ids": selection, "format": "parquet"}, headers=admin.headers
        )
        assert parquet.status_code == 200, parquet.text
        assert parquet.headers["content-disposition"].endswith('s-selection.parquet"')
        (tmp_path / "got.parquet").write_bytes(parquet.content)
        assert list(read_export(tmp_path / "got.parquet")) == expected

        zipped = client.post(
            route, json={"sample_ids": selection, "format": "hf"}, headers=admin.headers
        )
        assert zipped.status_code == 200, zipped.text
        assert zipped.headers["content-type"] == "application/zip"
        assert zipped.headers["content-disposition"].endswith('s-selection.hf.zip"')
        (tmp_path / "got.zip").write_bytes(zipped.content)
        shutil.unpack_archive(tmp_path / "got.zip", tmp_path / "unzipped")
        assert list(read_export(tmp_path / "unzipped" / "s-selection")) == expected

        refused = client.post(
            route, json={"sample_ids": ["up", "gone", "a-task"]}, headers=admin.headers
        )
        assert refused.status_code == 400
        problems = {p["field"]: p["reason"] for p in refused.json()["problems"]}
        assert set(problems) == {"$.sample_ids[1]", "$.sample_ids[2]"}
        assert "no sample 'gone'" in problems["$.sample_ids[1]"]
        assert "task sample" in problems["$.sample_ids[2]"]
        empty = client.post(route, json={"sample_ids": []}, headers=admin.headers)
        assert empty.status_code == 400
        unknown = client.post(
            route, json={"sample_ids": ["up"], "format": "csv"}, headers=admin.headers
        )
        assert unknown.status_code == 400
        assert "format" in unknown.text
        assert (
            client.post(route, json={"sample_ids": ["up"]}, headers=infer.headers).status_code
            == 403
        )


def test_reef_export_and_reef_import_move_a_selection_between_deployments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reef.cli import main
    from reef.storage import open_database

    source, target = grouped_deployment(tmp_path, "s"), grouped_deployment(tmp_path, "t")
    database = open_database(f"sqlite:///{tmp_path}/s.db")
    _scenario(database)
    database.dispose()
    out = tmp_path / "team-a.jsonl"
    argv = ["export", str(source), "s", "--output", str(out), "--tag", "team=a", "--untrained"]
    assert main(argv) == 0
    assert "exported 1 samples of scenario s" in capsys.readouterr().out
    assert main(["import", str(target), str(out), "--scenario", "t"]) == 0
    assert "imported 1 trajectories into scenario t as uploads" in capsys.readouterr().out
    imported = open_database(f"sqlite:///{tmp_path}/t.db")
    assert _ids(export_rows(imported, "t")) == ["c:3:0"]
    imported.dispose()
    assert main(["export", str(source), "nope", "--output", str(tmp_path / "x.jsonl")]) == 1
    assert "the deployment has no scenario 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--since", "yesterday"], "argument --since: 'yesterday' is not a time"),
        (["--tag", "team"], "argument --tag: 'team' is not a tag: write NAME=VALUE"),
        (["--reward-min", "nan"], "argument --reward-min: 'nan' is not a number"),
        (["--format", "csv"], "argument --format: invalid choice: 'csv'"),
        (["--trained", "--untrained"], "argument --untrained: not allowed with argument --trained"),
    ],
)
def test_reef_export_refuses_a_bad_flag_before_opening_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    from reef.cli import main

    source = grouped_deployment(tmp_path, "s")
    argv = ["export", str(source), "s", "--output", str(tmp_path / "o.jsonl"), *extra]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()


def test_an_iso_time_reads_as_utc() -> None:
    from reef.cli import flags

    assert flags.timestamp("1970-01-01T00:01:00") == 60.0
    assert flags.timestamp("1970-01-01T01:00:00+01:00") == 0.0


def test_a_datasets_folder_holds_every_batch_in_order_and_an_empty_one_loads(
    tmp_path: Path,
) -> None:
    """The ``hf`` folder is written a batch at a time into one data file: several batches read
    back in order as one dataset, and an export of no rows is a folder ``load_from_disk``
    reads as empty."""
    from datasets import load_from_disk

    from reef.server.export import BATCH

    rows = [
        {"sample_id": f"s{i}", "origin": "report", "trainer": "t", "group_id": None,
         "reward": i / 10, "feedback": None, "train_counts": {"t": 1}, "artifacts": ["a"],
         "tags": {}, "recorded_at": 1.0, "trajectory": {"steps": [{"step_id": i}]}}
        for i in range(2 * BATCH + 7)
    ]  # fmt: skip
    assert write_export(iter(rows), "hf", tmp_path / "many") == len(rows)
    assert list(read_export(tmp_path / "many")) == rows
    assert write_export(iter([]), "hf", tmp_path / "none") == 0
    assert load_from_disk(str(tmp_path / "none")).num_rows == 0
    assert list(read_export(tmp_path / "none")) == []


def test_a_datasets_export_that_fails_leaves_nothing_behind(tmp_path: Path) -> None:
    from reef.server.export import BATCH

    def rows() -> Any:
        for i in range(BATCH + 1):
            yield {"sample_id": f"s{i}", "reward": 0.0, "trajectory": {}, "train_counts": {},
                   "tags": {}, "artifacts": []}  # fmt: skip
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError, match="the store went away"):
        write_export(rows(), "hf", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
