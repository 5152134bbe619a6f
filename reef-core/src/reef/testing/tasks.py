"""Harbor tasks for tests, as their JSON form (:meth:`reef.HarborTask.to_json`): nothing here
needs the service, so a test of reef-core alone uses them too."""

from __future__ import annotations

from reef.core.records import JSON

__all__ = ["arithmetic_task"]


def arithmetic_task(name: str, a: int, b: int, *, answer_file: str = "answer.txt") -> JSON:
    """The JSON form of a Harbor task that asks for ``a + b`` in ``answer_file``, with its
    verifier and oracle solution."""
    test = (
        f'if [ "$(tr -d "[:space:]" < /app/{answer_file} 2>/dev/null)" = "{a + b}" ]; then\n'
        "  echo 1 > /logs/verifier/reward.txt\n"
        "else\n"
        "  echo 0 > /logs/verifier/reward.txt\n"
        "fi\n"
    )
    return {
        "name": name,
        "files": {
            "task.toml": 'version = "1.0"\n\n[verifier]\ntimeout_sec = 10.0\n',
            "instruction.md": f"What is {a} + {b}? Answer with the number only.",
            "tests/test.sh": test,
            "solution/solve.sh": f"echo {a + b} > /app/{answer_file}\n",
        },
        "source_agent_record_ids": [],
    }
