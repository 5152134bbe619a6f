"""A job of the local component killed after its weights were saved and before its outcome was
written (the ``local.weights_saved`` fault point: the process SIGKILLs itself there, so the crash
falls exactly between the two, not by timing luck). The weights folder names the job it holds,
so the job is finished: recovery reports it finished and publication serves those weights; the
two agree (docs/decisions.md#a-job-killed-after-its-weights-were-saved)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from reef.components.faults import FAULT_POINT_ENV
from reef.components.interface import JobHandle
from reef.core.job_data import JobData
from reef.testing.components import tiny_local_component
from reef.testing.samples import colour_samples

# Trains two jobs in a process of its own, on one thread as the test does (the weights are
# compared bit for bit); the fault point may kill it in the second.
SCRIPT = """
import sys, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
from pathlib import Path
from reef.core.job_data import JobData
from reef.testing.components import tiny_local_component
from reef.testing.samples import colour_samples
local = tiny_local_component(Path(sys.argv[1]))
local.wait(local.submit(JobData("job-0", colour_samples())), timeout=120)
print(local.publish().artifact_id, flush=True)
local.wait(local.submit(JobData("job-1", colour_samples())), timeout=120)
print(local.publish().artifact_id, flush=True)
"""


def train_in_a_process(state_dir: Path, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_POINT_ENV}
    if fault is not None:
        env[FAULT_POINT_ENV] = fault
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.usefixtures("one_torch_thread")
def test_a_job_killed_after_saving_its_weights_is_finished_and_published(
    tmp_path: Path,
) -> None:
    clean = train_in_a_process(tmp_path / "clean", None)
    assert clean.returncode == 0, clean.stderr
    first, second = clean.stdout.split()

    killed = train_in_a_process(tmp_path / "killed", "local.weights_saved")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # Killed at the first save: job-0's weights are on the disk, its outcome is not.
    assert killed.stdout.split() == []

    survivor = tiny_local_component(tmp_path / "killed")
    outcome = survivor.poll(JobHandle("job-0", "local"))
    assert outcome is not None
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics  # what the job reported, kept with its weights
    assert survivor.publish().artifact_id == first
    # The same job submitted again is not trained twice, and the next one goes on from it.
    assert survivor.wait(survivor.submit(JobData("job-0", colour_samples())), 60) == outcome
    survivor.wait(survivor.submit(JobData("job-1", colour_samples())), 120)
    assert survivor.publish().artifact_id == second


def test_a_job_never_saved_is_failed_and_the_last_weights_stay(tmp_path: Path) -> None:
    """The other side of the rule: a job whose weights are not those saved failed, and
    publication serves the weights of the last finished job."""
    local = tiny_local_component(tmp_path)
    before = local.publish().artifact_id
    local.close()
    survivor = tiny_local_component(tmp_path)
    outcome = survivor.poll(JobHandle("never-ran", "local"))
    assert outcome is not None
    assert outcome.event == "failed"
    assert survivor.publish().artifact_id == before
