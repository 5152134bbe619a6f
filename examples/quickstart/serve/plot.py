"""What the quickstart shows of a run: progress lines while it trains, then its curves (the mean
reward of each artifact's answers, and the training loss of each job) as text in the terminal
and as a PNG drawn with matplotlib.

matplotlib is the example's own requirement (``requirements.txt`` beside this file, which
``scripts/quickstart`` installs), not reef-core's: without it the PNG is skipped, saying how to
install it, and the text curve is still printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

TITLE = "Quickstart: learning the magic letter"
#: The rows of the text chart's reward axis (0 to 1).
_HEIGHT = 10


@attrs.frozen
class ArtifactPoint:
    """The answers of one artifact (set of weights), numbered in the order they first answered:
    0 is the initial weights, ``n`` normally the weights job ``n`` trained."""

    artifact: int
    answers: int
    mean_reward: float


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def progress_line(trained: int, total: int, elapsed: float) -> str:
    """``jobs trained 3/30, elapsed 0:42, ETA 6:18``: the ETA assumes the remaining jobs take
    as long as the ones so far (unknown before the first)."""
    eta = _clock(elapsed / trained * max(0, total - trained)) if trained else "unknown"
    return f"jobs trained {trained}/{total}, elapsed {_clock(elapsed)}, ETA {eta}"


def text_curve(points: Sequence[ArtifactPoint], losses: Sequence[float | None]) -> list[str]:
    """The curves as lines of text: a chart of the mean reward per artifact (one column each,
    rewards from 0 to 1 upwards), then a table of each artifact's answers and reward beside the
    loss of the job of the same number (``losses[n - 1]`` is job ``n``'s; ``None``: none
    reported)."""
    if not points:
        return ["no answer was graded: there is no curve"]
    lines = [TITLE, "mean reward"]
    for row in range(_HEIGHT, -1, -1):
        cells = "".join(" *" if round(p.mean_reward * _HEIGHT) == row else "  " for p in points)
        lines.append(f"{row / _HEIGHT:4.1f} |{cells}")
    lines.append("     +" + "--" * len(points))
    lines.append("      " + "".join(f"{p.artifact % 10:>2}" for p in points))
    lines.append("      artifact (weights in serving order, last digit; 0: the initial weights)")
    lines.append("")
    lines.append(f"{'n':>3}  {'answers':>7}  {'mean reward':>11}  {'loss of job n':>13}")
    for index in range(max(len(points), len(losses) + 1)):
        point = points[index] if index < len(points) else None
        loss = losses[index - 1] if 0 < index <= len(losses) else None
        answers = "-" if point is None else str(point.answers)
        reward = "-" if point is None else f"{point.mean_reward:.3f}"
        bar = "" if point is None else "  " + "#" * round(point.mean_reward * 40)
        shown = "-" if loss is None else f"{loss:.4f}"
        lines.append(f"{index:>3}  {answers:>7}  {reward:>11}  {shown:>13}{bar}")
    return lines


def figure_of(points: Sequence[ArtifactPoint], losses: Sequence[float | None]) -> Any:
    """The curves as a matplotlib ``Figure``: the mean reward per artifact above, the training
    loss per job below (``losses`` as :func:`text_curve` takes them).

    :raises ImportError: without matplotlib.
    """
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    figure = Figure(figsize=(8, 6.5))
    rewards, job_losses = figure.subplots(2, 1)
    figure.suptitle(TITLE)
    rewards.plot([p.artifact for p in points], [p.mean_reward for p in points], marker="o")
    rewards.set_title("mean reward of each artifact's answers", fontsize="medium")
    rewards.set_xlabel("artifact (weights in serving order; 0: the initial weights)")
    rewards.set_ylabel("mean reward")
    rewards.set_ylim(0, 1.02)
    rewards.grid(alpha=0.3)
    trained = [(n, loss) for n, loss in enumerate(losses, start=1) if loss is not None]
    job_losses.plot(
        [n for n, _ in trained], [loss for _, loss in trained], marker=".", color="tab:red"
    )
    job_losses.set_title("training loss of each job", fontsize="medium")
    job_losses.set_xlabel("job (in training order)")
    job_losses.set_ylabel("loss")
    job_losses.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def write_png(path: Path, points: Sequence[ArtifactPoint], losses: Sequence[float | None]) -> str:
    """Draw :func:`figure_of` into ``path`` as a PNG; returns what happened, as a line to print
    (how to install matplotlib when it is missing)."""
    try:
        figure = figure_of(points, losses)
    except ImportError:
        return (
            "PNG skipped: matplotlib is not installed "
            "(.venv/bin/python -m pip install -r examples/quickstart/serve/requirements.txt)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return f"curves written to {path}"
