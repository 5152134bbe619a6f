"""The local training component: deterministic, and its artifacts are model folders named by
their content. What every component does (training for real, batches, rewards, unrenderable
samples, consumed lines, idempotence) runs in ``test_components_contract.py``."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest

torch = pytest.importorskip("torch")

from reef.components.advantages import group_advantages  # noqa: E402
from reef.components.local.artifacts import load_model_folder  # noqa: E402
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.core.job_data import JobData, TaskSample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402
from reef.testing.samples import colour_samples  # noqa: E402


def run(local: LocalComponent, job_id: str, samples: list[Any], **parameters: Any) -> Any:
    outcome = local.wait(local.submit(JobData(job_id, samples), parameters or None), timeout=60)
    assert outcome.component == "local"
    return outcome


def test_rewards_are_centred_in_their_group() -> None:
    assert group_advantages([1.0, 0.0, 3.0, 1.0, 5.0], ["a", "a", "b", "b", None]) == [
        0.5,
        -0.5,
        1.0,
        -1.0,
        0.0,
    ]


def test_same_seed_same_jobs_same_artifact(tmp_path: Path) -> None:
    """Deterministic with a seed; the artifact id is the weights' content hash
    (docs/decisions.md#artifacts)."""
    ids = []
    for name in ("a", "b"):
        local = tiny_local_component(tmp_path / name)
        run(local, "toy:data:0", colour_samples())
        ids.append(local.publish().artifact_id)
    assert ids[0] == ids[1]
    other_seed = tiny_local_component(tmp_path / "c", seed=1)
    assert other_seed.publish().artifact_id != ids[0]


def test_the_threads_setting_sets_torchs_cpu_threads(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    try:
        tiny_local_component(tmp_path / "three", threads=3)
        assert torch.get_num_threads() == 3
        tiny_local_component(tmp_path / "unset")
        assert torch.get_num_threads() == 3  # unset: left as it is
    finally:
        torch.set_num_threads(before)
    with pytest.raises(PluginConfigError, match="threads must be positive"):
        tiny_local_component(tmp_path / "zero", threads=0)


def test_components_built_at_once_start_from_the_same_seeded_weights(tmp_path: Path) -> None:
    """The trainers of a scenario of several components build theirs on their own threads at
    once; torch's global generator is shared, so their seeded draws must not interleave: one
    seed and one config give the same starting weights, the same id, in every trainer."""
    builders = 4
    together = threading.Barrier(builders)
    ids: list[str | None] = [None] * builders

    def build(index: int) -> None:
        together.wait()
        ids[index] = tiny_local_component(tmp_path / str(index), d_model=64).publish().artifact_id

    threads = [threading.Thread(target=build, args=(i,)) for i in range(builders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    alone = tiny_local_component(tmp_path / "alone", d_model=64).publish().artifact_id
    assert ids == [alone] * builders


def test_artifact_id_is_the_same_in_another_process_and_after_a_restart(tmp_path: Path) -> None:
    """docs/decisions.md#artifacts: the same weights have the same artifact_id everywhere."""
    local = tiny_local_component(tmp_path)
    handle = local.submit(JobData("toy:data:0", colour_samples()))
    local.wait(handle)
    artifact = local.publish()
    assert artifact.artifact_id.startswith("sha256:")
    local.close()
    restarted = tiny_local_component(tmp_path)
    assert restarted.publish() == artifact
    assert restarted.poll(handle) == local.poll(handle)  # the outcome survives the restart
    script = (
        "import sys, warnings; warnings.simplefilter('ignore');"
        "from pathlib import Path;"
        "from reef.components.local.artifacts import load_model_folder;"
        "print(load_model_folder(Path(sys.argv[1])).digest())"
    )
    other = subprocess.run(
        [sys.executable, "-c", script, str(artifact.path)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert other.stdout.strip() == artifact.artifact_id


def test_a_failed_jobs_artifact_folder_holds_the_last_finished_weights(tmp_path: Path) -> None:
    local = tiny_local_component(tmp_path)
    run(local, "toy:data:0", colour_samples())
    before = local.publish().artifact_id
    outcome = run(local, "task:data:0", [TaskSample("t1", {"instruction": "x"})])
    assert outcome.event == "failed"
    assert "tasks" in (outcome.error or "")
    assert local.publish().artifact_id == before
    assert load_model_folder(local.publish().path).digest() == before


def test_a_crash_between_the_renames_of_a_save_keeps_the_last_weights(tmp_path: Path) -> None:
    """Replacing ``current/`` moves the old folder aside before renaming the new one in; a
    start that finds only the old one (the process died in between) puts it back, instead of
    starting over from fresh weights."""
    local = tiny_local_component(tmp_path)
    run(local, "toy:data:0", colour_samples())
    trained = local.model.digest()
    local.close()
    (tmp_path / "current").rename(tmp_path / ".current.retired")
    restarted = tiny_local_component(tmp_path)
    assert restarted.model.digest() == trained
    assert not (tmp_path / ".current.retired").exists()


def test_a_save_that_fails_fails_the_job_and_keeps_the_last_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose weights cannot be saved did not finish: its outcome says so, and the
    weights and artifact stay those of the last finished job."""
    local = tiny_local_component(tmp_path)
    run(local, "toy:data:0", colour_samples())
    before = local.publish().artifact_id

    def full_disk(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("reef.components.local.component.replace_folder", full_disk)
    outcome = run(local, "toy:data:1", colour_samples())
    assert outcome.event == "failed"
    assert "No space left" in (outcome.error or "")
    monkeypatch.undo()
    assert local.model.digest() == before
    assert local.publish().artifact_id == before


def _scored(rewards: list[float], group: str) -> list[Any]:
    """The colour samples with ``rewards``, all in ``group``."""
    return [
        attrs.evolve(sample, reward=reward, group_id=group)
        for sample, reward in zip(colour_samples(len(rewards)), rewards, strict=True)
    ]


def _optimizer_steps(local: LocalComponent) -> list[int]:
    """Each parameter's AdamW step count, as the last finished job saved it."""
    state = torch.load(local.state_dir / "current" / "optimizer.pt", weights_only=True)
    return [int(entry["step"]) for entry in state["state"].values()]


def test_a_step_whose_advantages_are_all_zero_moves_no_weight(tmp_path: Path) -> None:
    """A group whose answers all scored the same has advantages of 0 and a loss with no
    gradient; AdamW would still move every weight by its momentum, which after a job with a
    signal is anything but 0. Such a step counts (loss 0, its samples consumed) and leaves the
    weights and the optimizer state as the last step with a signal left them."""
    local = tiny_local_component(tmp_path)
    signal = _scored([1.0, 0.0] * 4, "g0")
    assert run(local, "toy:data:0", signal, objective="importance_sampling").event == "finished"
    before, steps = local.publish().artifact_id, _optimizer_steps(local)
    assert steps
    assert min(steps) == 2  # 8 samples in steps of 4

    flat = run(local, "toy:data:1", _scored([0.5] * 8, "g1"), objective="importance_sampling")
    assert flat.event == "finished", flat.error
    assert flat.metrics["steps"] == 2
    assert flat.metrics["step_losses"] == [0.0, 0.0]
    assert flat.metrics["trained_tokens"] > 0
    assert [line["advantage"] for line in flat.metrics["consumed"]] == [0.0] * 8
    assert local.publish().artifact_id == before
    assert _optimizer_steps(local) == steps

    # A job of one flat group and one with a signal: only the signal's step moves the weights.
    mixed = _scored([0.5] * 4, "g2") + _scored([1.0, 0.0] * 2, "g3")
    run(local, "toy:data:2", mixed, objective="importance_sampling")
    assert local.publish().artifact_id != before
    assert _optimizer_steps(local) == [step + 1 for step in steps]
