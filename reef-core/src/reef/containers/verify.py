"""A task's verifier, run on an attempt or on the task's oracle solution, as Harbor runs it.

An *attempt* is the files an agent left in ``/app`` (a single-turn agent's answer file). The
verifier is the task's ``tests/`` folder, put at ``/tests``; ``bash /tests/test.sh`` runs from
``/app`` under the task's ``[verifier].timeout_sec`` and writes its reward to
``/logs/verifier/reward.txt`` (a number) or ``/logs/verifier/reward.json`` (``{"reward": x}``).
The oracle run first runs ``bash /solution/solve.sh`` (under ``[agent].timeout_sec``) in the
same container, then the verifier.

Each is one run of a :class:`~reef.containers.interface.ContainerBackend`, limited by the
caller's :class:`~reef.core.container_settings.ContainerSettings` as well as by the task's own
settings (the smaller wins): time, memory (``/tmp`` counts against it) and disk. A run that
reaches its memory or disk limit gives no reward, like one past its time: writes failed under
it, so what its verifier wrote does not say how the attempt did. Its verdict names the limit
(:attr:`Verdict.limit`, and the output's last line).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from typing import Final

import attrs

from reef.containers.interface import ContainerBackend, RunSpec
from reef.containers.staging import StagedTask
from reef.core.container_settings import ContainerSettings

__all__ = ["REWARD_JSON", "REWARD_TXT", "Verdict", "run_oracle", "run_verifier"]

REWARD_TXT: Final = "/logs/verifier/reward.txt"
REWARD_JSON: Final = "/logs/verifier/reward.json"
_PREPARE: Final = "mkdir -p /logs/verifier /logs/agent"


@attrs.frozen
class Verdict:
    """What a verifier run gave.

    :ivar reward: the reward the verifier wrote; ``None`` when it wrote none (or not a finite
        number), or timed out.
    :ivar timed_out: the run passed its time limit and was killed.
    :ivar exit_code: ``test.sh``'s exit code (``None`` when killed).
    :ivar output: the end of the run's output, for people and designers to read.
    :ivar limit: the limit the run reached, said for people (``None``: none), when it reached
        its memory or disk limit (its reward is then ``None``).
    """

    reward: float | None
    timed_out: bool
    exit_code: int | None
    output: str
    limit: str | None = None


def _reward(files: Mapping[str, str]) -> float | None:
    value: object = None
    if REWARD_TXT in files:
        try:
            value = float(files[REWARD_TXT].strip())
        except ValueError:
            value = None
    elif REWARD_JSON in files:
        try:
            document = json.loads(files[REWARD_JSON])
        except json.JSONDecodeError:
            document = None
        value = document.get("reward") if isinstance(document, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _timed(seconds: float, script: str) -> str:
    return f"timeout -s KILL {seconds:g} bash {shlex.quote(script)}"


def _run(
    backend: ContainerBackend,
    staged: StagedTask,
    files: Mapping[str, str],
    steps: list[tuple[float, str]],
    limits: ContainerSettings,
) -> Verdict:
    config = staged.config()
    memory_mb = min(limits.memory_mb, config.memory_mb or limits.memory_mb)
    disk_mb = min(limits.disk_mb, config.storage_mb or limits.disk_mb)
    # Each step under its own `timeout`; the run's wall clock is their sum and a margin.
    script = " ; ".join([_PREPARE, *(_timed(seconds, path) for seconds, path in steps)])
    result = backend.run(
        RunSpec(
            files={**files, **staged.files("tests")},
            command=("bash", "-c", script),
            timeout_seconds=sum(seconds for seconds, _ in steps) + 5,
            memory_bytes=memory_mb << 20,
            disk_bytes=disk_mb << 20,
            collect=(REWARD_TXT, REWARD_JSON),
            image=config.docker_image,
            environment={
                path.removeprefix("/environment/"): text
                for path, text in staged.files("environment").items()
            },
        )
    )
    # `timeout -s KILL` exits 137 when it kills its step.
    timed_out = result.timed_out or result.exit_code == 137
    limit = _limit(result.limits, memory_mb, disk_mb)
    reward = None if timed_out or limit is not None else _reward(result.files)
    output = result.output if limit is None else f"{result.output}\nreef: {limit}\n"
    return Verdict(reward, timed_out, result.exit_code, output, limit)


def _limit(reached: tuple[str, ...], memory_mb: int, disk_mb: int) -> str | None:
    said = {
        "disk": f"disk quota of {disk_mb} MiB",
        "memory": f"memory limit of {memory_mb} MiB (/tmp counts against it)",
    }
    if not reached:
        return None
    names = " and its ".join(said[name] for name in reached)
    return f"the run reached its {names}: writing more failed, so it gives no reward"


def run_verifier(
    backend: ContainerBackend,
    staged: StagedTask,
    attempt: Mapping[str, str],
    limits: ContainerSettings,
) -> Verdict:
    """Run the staged task's verifier on ``attempt`` (file paths relative to ``/app``, and
    their text).

    :raises reef.containers.interface.ContainerError: when the run could not happen.
    :raises ValueError: for an attempt path that is not a plain relative path.
    """
    timeout = min(limits.timeout_seconds, staged.config().verifier_timeout_seconds)
    files = {f"/app/{path}": text for path, text in attempt.items()}
    return _run(backend, staged, files, [(timeout, "/tests/test.sh")], limits)


def run_oracle(backend: ContainerBackend, staged: StagedTask, limits: ContainerSettings) -> Verdict:
    """Run the staged task's oracle solution (``solution/solve.sh``), then its verifier.

    :raises reef.containers.interface.ContainerError: when the run could not happen.
    """
    config = staged.config()
    steps = [
        (min(limits.timeout_seconds, config.agent_timeout_seconds), "/solution/solve.sh"),
        (min(limits.timeout_seconds, config.verifier_timeout_seconds), "/tests/test.sh"),
    ]
    return _run(backend, staged, staged.files("solution"), steps, limits)
