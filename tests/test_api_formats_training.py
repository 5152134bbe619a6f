"""Training on Responses and Messages calls, end to end: ``reef serve`` with the local engine
(a TinyGPT), agents through the official ``openai`` (``responses.create``, chained by
``previous_response_id``, and ``responses.stream``) and ``anthropic`` (``messages.create``,
``messages.stream``) SDKs, reports by the ids those SDKs hold, and three scenarios that train on
those calls: grouped RL, SFT and on-policy distillation. Every job finishes with every sample
rendered (no ``unrenderable_samples``), and the records are in each format's own shape.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("starlette")
pytest.importorskip("anthropic")
pytest.importorskip("openai")

import anthropic
import openai
from sqlalchemy import create_engine, text

from reef.components.local.component import LocalComponent
from reef.core.api_formats import MESSAGES, RESPONSES
from reef.testing.serve import TINY_GPT_OPTIONS, ServeProcess

#: Each scenario's recipe section, and the samples of its jobs.
SCENARIOS = {
    "rl": ("grouped", "{group_size: 4, max_staleness: 10}", 8),
    "sft": ("sft", "{}", 8),
    "distill": (
        '{{class: distill, config: {{teacher: {{model_path: "{teacher}"}}}}}}',
        "{max_staleness: 10}",
        8,
    ),
}
SCENARIO = """\
  {name}:
    recipe: {recipe}
    pipeline:
      record2sample: {{config: {record2sample}}}
      sample2job: {{config: {{job_samples: {samples}}}}}
    training:
      component: local
      options:
        state_dir: "{folder}/{name}"
        batch_size: 4
        learning_rate: 0.01
{model}
"""


def deployment(folder: Path, teacher: Path) -> Path:
    sections = "".join(
        SCENARIO.format(
            name=name,
            recipe=recipe.format(teacher=teacher),
            record2sample=record2sample,
            samples=samples,
            folder=folder,
            model=TINY_GPT_OPTIONS,
        )
        for name, (recipe, record2sample, samples) in SCENARIOS.items()
    )
    path = folder / "deployment.yaml"
    head = f'storage: {{url: "sqlite:///{folder}/reef.db"}}\nserving: {{engine: local}}\n'
    path.write_text(f"{head}scenarios:\n{sections}", encoding="utf-8")
    return path


def teacher_model(folder: Path) -> Path:
    """A TinyGPT the distilling scenario scores against: the local component's first weights."""
    options = {
        "state_dir": str(folder),
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "max_seq_len": 128,
    }
    local = LocalComponent.from_config(options)
    local.close()
    return local.publish().path


def responses_call(base: str, member: int) -> str:
    """A two-turn Responses conversation, the second turn chained by ``previous_response_id``
    (streamed for odd members); returns the last response's id."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    first = client.responses.create(
        model="local", instructions="Be brief.", input="Say ok.", max_output_tokens=3
    )
    asked: dict[str, Any] = {
        "model": "local",
        "instructions": "Be brief.",
        "input": "Again.",
        "previous_response_id": first.id,
        "max_output_tokens": 3,
    }
    if member % 2:
        with client.responses.stream(**asked) as events:
            # A TinyGPT answer cut at max_output_tokens ends ``response.incomplete``, as
            # OpenAI's does (the SDK's get_final_response wants ``response.completed``).
            last = list(events)[-1]
        assert last.type in ("response.completed", "response.incomplete"), last
        return str(last.response.id)  # type: ignore[union-attr]
    return client.responses.create(**asked).id


def messages_call(base: str, member: int) -> str:
    """A two-turn Messages conversation (streamed for odd members); the last message's id."""
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    turns: list[Any] = [{"role": "user", "content": "Say ok."}]
    first = client.messages.create(model="local", max_tokens=3, system="Be brief.", messages=turns)
    turns += [
        {
            "role": "assistant",
            "content": [b.model_dump(exclude_none=True) for b in first.content] or "ok",
        },
        {"role": "user", "content": "Again."},
    ]
    asked: dict[str, Any] = {
        "model": "local",
        "max_tokens": 3,
        "system": "Be brief.",
        "messages": turns,
    }
    if member % 2:
        with client.messages.stream(**asked) as events:
            return events.get_final_message().id
    return client.messages.create(**asked).id


def wait(condition: Any, what: str, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {log.read_text()[-3000:]}")


def served(base: str) -> bool:
    """Whether every scenario's engine has weights to answer with."""
    status = httpx.get(f"{base}/reef/status", timeout=10).json()
    return all(s["trainers"][0]["served_artifact"] for s in status["scenarios"])


def jobs(base: str, scenario: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/reef/scenarios/{scenario}/jobs", timeout=10)
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["jobs"]
    return found


def test_grouped_rl_sft_and_distillation_train_on_responses_and_messages_calls(
    tmp_path: Path,
) -> None:
    """Each scenario gets 8 reported conversations, half Responses and half Messages, and
    trains one job of all 8, every sample rendered."""
    teacher = teacher_model(tmp_path / "teacher")
    serve = ServeProcess(deployment(tmp_path, teacher), tmp_path / "serve.log")
    reported: dict[str, list[str]] = {}
    log = tmp_path / "serve.log"
    try:
        wait(lambda: served(serve.base_url), "the first weights of each scenario", log)
        for scenario in SCENARIOS:
            base = f"{serve.base_url}/scenarios/{scenario}"
            ids = []
            for member in range(8):
                call = responses_call if member < 4 else messages_call
                ids.append(call(base, member))
                report = {
                    "id": f"{scenario}-{member}",
                    "references": [ids[-1]],
                    "score": member / 8,
                    "metadata": {"group": f"g{member // 4}"},
                }
                answer = httpx.post(
                    f"{serve.base_url}/reef/scenarios/{scenario}/reports", json=report, timeout=30
                )
                assert answer.status_code == 201, answer.text
            reported[scenario] = ids
        # The local engine takes no image: refused before it is asked, naming the part in
        # the caller's own request, in each format.
        claude = anthropic.Anthropic(base_url=f"{serve.base_url}/scenarios/sft", api_key="unused")
        image = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
        content: list[Any] = [{"type": "text", "text": "What is this?"}]
        content.append({"type": "image", "source": image})
        with pytest.raises(anthropic.BadRequestError, match=r"text only") as refused:
            claude.messages.create(
                model="local", max_tokens=3, messages=[{"role": "user", "content": content}]
            )
        assert "$.messages[0].content[1]" in refused.value.message
        gpt = openai.OpenAI(
            base_url=f"{serve.base_url}/scenarios/sft/v1", api_key="unused", max_retries=0
        )
        parts: list[Any] = [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        ]
        with pytest.raises(openai.BadRequestError) as refused_too:
            gpt.responses.create(
                model="local", input=[{"role": "user", "content": parts}], max_output_tokens=3
            )
        assert refused_too.value.body["param"] == "$.input[0].content[1]"  # type: ignore[index]
        wait(
            lambda: all(any(j["event"] for j in jobs(serve.base_url, s)) for s in SCENARIOS),
            "a job of each scenario to end",
            log,
        )
        ended = {s: [j for j in jobs(serve.base_url, s) if j["event"]] for s in SCENARIOS}
        assert serve.terminate() == 0
    finally:
        serve.stop()
    for found in ended.values():
        (job,) = found
        assert job["event"] == "finished", job
        assert job["trained"] == 8, job
        assert job["metrics"].get("unrenderable_samples", 0) == 0, job
    engine = create_engine(f"sqlite:///{tmp_path}/reef.db")
    try:
        with engine.connect() as connection:
            formats = dict(
                connection.execute(
                    text("SELECT id, body FROM reef_records WHERE kind = 'inference'")
                ).all()
            )
    finally:
        engine.dispose()
    for ids in reported.values():
        assert all(i.startswith("resp_") for i in ids[:4])
        assert all(i.startswith("msg_") for i in ids[4:])
        assert all(RESPONSES in formats[i] for i in ids[:4])
        assert all(MESSAGES in formats[i] for i in ids[4:])
