"""The local component's saves survive a SIGKILL at any point: after a restart its weights are
those of the last job it reported ended (or of the job whose weights were saved just before
the kill, before its outcome was: that job then polls as failed, and its samples stay
trained), its optimizer state goes with them, and the artifact ``LATEST`` names loads whole.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from reef.components.interface import JobHandle  # noqa: E402
from reef.components.local.artifacts import load_model_folder  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402

JOBS = 8

#: The child: runs the jobs in order, publishing after each, and says when it started.
CHILD = """
import sys, torch
from pathlib import Path
torch.set_num_threads(1)
from reef.core.job_data import JobData
from reef.testing.components import tiny_local_component
sys.path.insert(0, sys.argv[2])
from test_components_local_crash import JOBS, job_samples
local = tiny_local_component(Path(sys.argv[1]))
print("ready", flush=True)
for job in range(JOBS):
    local.wait(local.submit(JobData(f"crash:data:{job}", job_samples(job))))
    local.publish()
print("done", flush=True)
"""


def job_samples(job: int) -> list[TrajectorySample]:
    """The samples of job ``job``: the same in every process."""
    return [
        TrajectorySample(
            {
                "schema_version": "ATIF-v1.8",
                "agent": {"name": "t", "version": "1"},
                "steps": [
                    {"step_id": 1, "source": "user", "message": f"colour {job * 8 + n}"},
                    {"step_id": 2, "source": "agent", "message": "red" if n % 2 else "blue"},
                ],
            }
        )
        for n in range(8)
    ]


@pytest.mark.usefixtures("one_torch_thread")
def test_a_sigkill_at_any_point_leaves_the_weights_of_a_job_that_ended(tmp_path: Path) -> None:
    reference = tiny_local_component(tmp_path / "ref")
    digests = [reference.publish().artifact_id]
    for job in range(JOBS):
        reference.wait(reference.submit(JobData(f"crash:data:{job}", job_samples(job))))
        digests.append(reference.publish().artifact_id)
    reference.close()

    chance = random.Random(12)
    environment = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for round_ in range(4):
        state = tmp_path / f"crash{round_}"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(state), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            env=environment,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(chance.uniform(0.05, 1.0))  # somewhere in the jobs, their saves included
        child.send_signal(signal.SIGKILL)
        child.wait(30)

        restarted = tiny_local_component(state)
        ended = [
            restarted.poll(JobHandle(f"crash:data:{job}", "local")).event == "finished"
            for job in range(JOBS)
        ]
        finished = sum(ended)
        assert ended == [True] * finished + [False] * (JOBS - finished)
        # The weights of the last job reported ended, or of the next one, saved when the kill
        # came before its outcome was written.
        assert restarted.model.digest() in digests[finished : finished + 2]
        # The optimizer state of those same weights: two steps per job (8 samples, batch 4).
        jobs_in_weights = digests.index(restarted.model.digest())
        saved = state / "current" / "optimizer.pt"
        if jobs_in_weights:
            optimizer = torch.load(saved, weights_only=True)
            assert {int(s["step"]) for s in optimizer["state"].values()} == {2 * jobs_in_weights}
        else:
            assert not saved.exists()  # the starting weights, before any step
        latest = restarted.artifacts.latest()
        if latest is not None:
            assert latest.artifact_id in digests[: finished + 2]
            assert load_model_folder(latest.path).digest() == latest.artifact_id
        # Training goes on from there.
        outcome = restarted.wait(restarted.submit(JobData("after", job_samples(0))))
        assert outcome.event == "finished", outcome.error
        restarted.close()
