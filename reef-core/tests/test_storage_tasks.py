"""Task stores opened by name, scenario settings and drop counters."""

from __future__ import annotations

import pytest

from reef.storage import Database, DropCounters, ScenarioSettings, TaskStorage, TaskStores


def test_task_stores_are_separate_by_name_and_scenario(storage_database: Database) -> None:
    """rule: P-LAYOUT-2 (a stage opens its stores by name)."""
    storage: TaskStores = TaskStorage(storage_database, "sc")
    tasks = storage.open("generated-tasks")
    tasks.put("t2", {"split": "train"})
    tasks.put("t1", {"split": "eval"})
    tasks.put("t2", {"split": "train", "result": [1.0]})
    assert tasks.put_new("t3", {"split": "train"})
    assert not tasks.put_new("t3", {"split": "eval"})
    assert list(tasks.items()) == [
        ("t2", {"split": "train", "result": [1.0]}),
        ("t1", {"split": "eval"}),
        ("t3", {"split": "train"}),
    ]
    assert tasks.get("t3") == {"split": "train"}
    assert tasks.delete("t1")
    assert not tasks.delete("t1")
    assert tasks.get("t1") is None
    assert list(storage.open("spade:generated-tasks").items()) == []
    assert list(TaskStorage(storage_database, "other").open("generated-tasks").items()) == []
    with pytest.raises(ValueError, match="name"):
        storage.open("")


def test_scenario_settings_survive_a_reopen(storage_url: str) -> None:
    """rule: P-MODE-14 (the selected mode is stored in the scenario's settings)."""
    from reef.storage import open_database

    database = open_database(storage_url)
    settings = ScenarioSettings(database, "sc")
    assert settings.get("training_mode", "auto") == "auto"
    settings.set("training_mode", "manual")
    settings.set("limits", {"a": [1, 2]})
    database.dispose()
    reopened = open_database(storage_url)
    assert ScenarioSettings(reopened, "sc").items() == {
        "training_mode": "manual",
        "limits": {"a": [1, 2]},
    }
    assert ScenarioSettings(reopened, "other").items() == {}
    reopened.dispose()


def test_drop_counts_add_up_per_trainer_and_reason(storage_database: Database) -> None:
    counters = DropCounters(storage_database, "sc")
    counters.add("stale", trainer="sft")
    counters.add("stale", 2, trainer="sft")
    counters.add("aborted", trainer="sft")
    counters.add("evicted", 4)
    counters.add("stale", 0, trainer="other")
    assert counters.counts() == {"sft": {"stale": 3, "aborted": 1}, None: {"evicted": 4}}
    with pytest.raises(ValueError, match="only grows"):
        counters.add("stale", -1)
