"""The quickstart shows its run: progress lines while jobs train, then the reward curve per
artifact and the loss per job as text, and the same curves as a PNG drawn with matplotlib.

Whether the model learns the task in the quickstart's full run (minutes) is measured by
``scripts/quickstart`` itself, not here; ``docs/trainer.md`` gives the command and the result.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from reef.testing.serve import ServeProcess

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart" / "serve"
PROGRESS = re.compile(r"^jobs trained (\d+)/(\d+), elapsed \d+:\d\d, ETA (\d+:\d\d|unknown)")


def _plot() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quickstart_plot", QUICKSTART / "plot.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_progress_line_counts_jobs_and_estimates_the_rest_from_the_pace_so_far() -> None:
    plot = _plot()
    assert plot.progress_line(0, 30, 12.0) == "jobs trained 0/30, elapsed 0:12, ETA unknown"
    # 3 jobs in 42 s: 27 more take 378 s.
    assert plot.progress_line(3, 30, 42.0) == "jobs trained 3/30, elapsed 0:42, ETA 6:18"
    assert plot.progress_line(31, 30, 90.0) == "jobs trained 31/30, elapsed 1:30, ETA 0:00"


def test_text_curve_puts_each_artifact_at_its_reward_and_each_job_beside_its_loss() -> None:
    plot = _plot()
    points = [plot.ArtifactPoint(0, 8, 0.1), plot.ArtifactPoint(1, 16, 0.55)]
    lines = plot.text_curve(points, [0.25, -0.125])
    assert lines[0] == plot.TITLE
    rows = {line[:4]: line[6:] for line in lines if line[4:6] == " |"}
    assert set(rows) == {f"{level / 10:4.1f}" for level in range(11)}
    # Column 1 is artifact 0, column 2 artifact 1 (two characters each).
    assert [level for level, cells in rows.items() if cells[:2] == " *"] == [" 0.1"]
    assert [level for level, cells in rows.items() if cells[2:4] == " *"] == [" 0.6"]
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["n", "answers", "mean", "reward", "loss", "of", "job", "n"]
    assert table[1].split()[:4] == ["0", "8", "0.100", "-"]
    assert table[2].split()[:4] == ["1", "16", "0.550", "0.2500"]
    assert table[3].split() == ["2", "-", "-", "-0.1250"]  # a job whose weights never answered
    assert plot.text_curve([], []) == ["no answer was graded: there is no curve"]


def test_png_has_both_curves_with_axes_labels_and_title(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = _plot()
    points = [plot.ArtifactPoint(i, 8, min(1.0, 0.1 * i)) for i in range(12)]
    png = tmp_path / "out" / "curve.png"
    assert plot.write_png(png, points, [0.1 / n for n in range(1, 12)]) == (
        f"curves written to {png}"
    )
    assert _png_size(png) == (800, 650)

    figure = plot.figure_of(points, [0.1] * 11)
    rewards, losses = figure.axes
    assert figure.get_suptitle() == plot.TITLE
    assert rewards.get_xlabel() == "artifact (weights in serving order; 0: the initial weights)"
    assert rewards.get_ylabel() == "mean reward"
    assert losses.get_xlabel() == "job (in training order)"
    assert losses.get_ylabel() == "loss"
    assert list(rewards.lines[0].get_ydata()) == [p.mean_reward for p in points]
    assert list(losses.lines[0].get_xdata()) == list(range(1, 12))


#: The token of the quickstart's deployment with auth, in the tests that give it one.
TOKEN = "quickstart-agent-secret"


def with_tokens(folder: Path) -> Path:
    """The quickstart's deployment with a token of the scopes its agent needs."""
    deployment = folder / "deployment.yaml"
    deployment.write_text(
        (QUICKSTART / "deployment.yaml").read_text()
        + "auth:\n  tokens:\n"
        + f"    agent: {{token: {TOKEN}, scopes: [infer, feedback, admin, metrics]}}\n"
    )
    return deployment


def test_the_quickstart_run_prints_progress_the_text_curve_and_writes_the_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's agent against ``reef serve`` with the quickstart's deployment, for two
    jobs instead of thirty, the deployment behind a token (given in ``$REEF_TOKEN``)."""
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("REEF_QUICKSTART_DIR", str(tmp_path))
    serve = ServeProcess(with_tokens(tmp_path), tmp_path / "serve.log", token=TOKEN)
    png = tmp_path / "curve.png"
    try:
        result = subprocess.run(
            [
                *(sys.executable, QUICKSTART / "agent.py", "--base-url", serve.base_url),
                *("--jobs", "2", "--time-limit", "150", "--plot", str(png)),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "REEF_TOKEN": TOKEN},
        )
        assert serve.terminate() == 0
    finally:
        serve.stop()
    log = (tmp_path / "serve.log").read_text()
    assert result.returncode == 0, result.stdout + result.stderr + log
    lines = result.stdout.splitlines()
    progress = [m for line in lines if (m := PROGRESS.match(line))]
    assert progress, result.stdout
    assert all(m.group(2) == "2" for m in progress)
    trained = [int(m.group(1)) for m in progress]
    assert trained == sorted(trained)
    assert trained[-1] >= 2
    assert all(m.group(3) != "unknown" for m in progress)
    start = lines.index(_plot().TITLE)
    assert lines[start + 1] == "mean reward"
    table = lines[lines.index("", start) + 1 :]
    assert table[0].split()[:2] == ["n", "answers"]
    rows = [row.split() for row in table[1:] if row and row.split()[0].isdigit()]
    assert [int(row[0]) for row in rows] == list(range(len(rows)))
    assert len(rows) >= 3  # the initial weights and those of the two jobs
    assert all(0.0 <= float(row[2]) <= 1.0 for row in rows if row[2] != "-")
    assert rows[0][3] == "-"  # the initial weights come from no job
    float(rows[1][3])  # job 1's loss, from the job history
    assert f"curves written to {png}" in lines
    assert _png_size(png) == (800, 650)
    heading = f"== metrics: {serve.base_url}/metrics (Prometheus' text format; docs/observe.md) =="
    assert heading in lines
    jobs = [
        line
        for line in lines
        if line.startswith("reef_jobs_total{") and 'outcome="finished"' in line
    ]
    assert len(jobs) == 1, result.stdout
    assert float(jobs[0].split()[-1]) >= 2
    summary = r"^mean reward: \d\.\d{3} \(initial weights\) -> \d\.\d{3}"
    assert re.search(summary, result.stdout, re.MULTILINE)


def test_the_agent_without_the_deployments_token_says_so_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment with tokens refuses the agent without one, and with a wrong one: it stops
    at once, saying which token it needs and where to give it."""
    monkeypatch.setenv("REEF_QUICKSTART_DIR", str(tmp_path))
    monkeypatch.delenv("REEF_TOKEN", raising=False)
    serve = ServeProcess(with_tokens(tmp_path), tmp_path / "serve.log", token=TOKEN)
    agent = [sys.executable, QUICKSTART / "agent.py", "--base-url", serve.base_url]
    try:
        missing = subprocess.run(agent, capture_output=True, text=True, timeout=60)
        wrong = subprocess.run(
            [*agent, "--token", "not-it"], capture_output=True, text=True, timeout=60
        )
    finally:
        serve.stop()
    assert missing.returncode == 1
    refused = f"reef serve at {serve.base_url} refused the agent's token ("
    assert missing.stderr.startswith(refused), missing.stderr
    assert missing.stderr.rstrip().endswith(
        "it needs a token with the infer, feedback and admin scopes;"
        " give one with --token or in REEF_TOKEN"
    ), missing.stderr
    assert wrong.returncode == 1
    assert wrong.stderr.startswith(refused), wrong.stderr
    assert wrong.stderr.rstrip().endswith("check it"), wrong.stderr


def test_the_quickstart_on_a_taken_port_says_so_at_once_and_how_to_choose_another(
    tmp_path: Path,
) -> None:
    """It checks the port before setting anything up, instead of leaving reef serve to die in
    its log while the agent waits."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "quickstart")],
            capture_output=True,
            text=True,
            timeout=30,
            env={
                **os.environ,
                "REEF_QUICKSTART_PORT": str(port),
                "REEF_QUICKSTART_DIR": str(tmp_path / "run"),
            },
        )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"quickstart: port {port} is taken on 127.0.0.1 (another process listens there): stop"
        " it, or run the quickstart on another port: REEF_QUICKSTART_PORT=8766 bash"
        " scripts/quickstart"
    )
    assert not (tmp_path / "run").exists()


def test_the_agent_says_at_once_when_reef_serve_exits_before_it_comes_up(tmp_path: Path) -> None:
    """reef serve refused to start (here: a deployment file that is not there); the agent,
    told its process and log, says so with the log's last lines instead of waiting."""
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(
            [sys.executable, "-m", "reef.cli", "serve", str(tmp_path / "none.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        # Until it exits, without reaping it: a zombie, as an exited reef serve is until the
        # quickstart's shell reaps it.
        os.waitid(os.P_PID, serve.pid, os.WEXITED | os.WNOWAIT)
        started = time.monotonic()
        done = subprocess.run(
            [
                *(sys.executable, QUICKSTART / "agent.py", "--base-url", "http://127.0.0.1:9"),
                *("--serve-pid", str(serve.pid), "--serve-log", str(log)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        serve.wait()
    assert time.monotonic() - started < 60  # the startup timeout is 120 s
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"reef serve exited before it came up at http://127.0.0.1:9; the end of its log ({log}):"
    )
    assert "argument deployment: " in done.stderr
    assert "no such file" in done.stderr
