"""The showcase's task: a weather agent that must call its tool with the right arguments.

A user asks about the weather in a city on a day ("Do I need a coat in oslo on friday?"), and
the agent's one reply is a call of its ``weather`` tool, ``{"city": ..., "day": ...}``: the
model must pick both slots out of the question and put them in the call's JSON. The task is
compositional: 30 cities x 9 days x 4 phrasings, and the held-out questions are combinations
the model never saw in training (each city and each day it did see, elsewhere).

The expert whose traffic the model is first fine-tuned on is right about the city always, and
about the day always for ``today`` and ``tomorrow``, but on the seven weekdays only 60% of the
time: otherwise it calls with ``today``, a mistake of the kind a real agent's logs hold. An
agent that imitates it perfectly succeeds 0.22 + 0.78 x 0.6 = 0.69 of the time. SFT copies the
expert, mistakes included; RL on the model's own traffic, scored by the verifier, has to do
better than the data it started from.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

CITIES = (
    *("paris", "london", "tokyo", "berlin", "madrid", "rome", "lisbon", "oslo", "dublin"),
    *("vienna", "prague", "warsaw", "athens", "cairo", "lagos", "nairobi", "lima", "quito"),
    *("bogota", "denver", "boston", "austin", "seattle", "miami", "chicago", "toronto"),
    *("sydney", "perth", "delhi", "seoul"),
)
DAYS = ("today", "tomorrow", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
DAYS += ("sunday",)
PHRASINGS = (
    "Will it rain in {city} {day}?",
    "What is the weather in {city} {day}?",
    "How warm is {city} {day}?",
    "Do I need a coat in {city} {day}?",
)
#: How often the expert names a weekday right (otherwise it says ``today``).
EXPERT_WEEKDAY_RIGHT = 0.6
#: Questions held out of training: the eval set.
HELD_OUT = 100


class Question(NamedTuple):
    phrasing: int
    city: str
    day: str

    @property
    def text(self) -> str:
        day = self.day if self.day in ("today", "tomorrow") else f"on {self.day}"
        return PHRASINGS[self.phrasing].format(city=self.city, day=day)

    def call(self, day: str | None = None) -> dict[str, Any]:
        """The tool call that answers it (``day`` instead of its own: the expert's mistake)."""
        return {"name": "weather", "arguments": {"city": self.city, "day": day or self.day}}


def split(seed: int, held_out: int = HELD_OUT) -> tuple[list[Question], list[Question]]:
    """Every question, shuffled by ``seed``: (training questions, ``held_out`` questions)."""
    questions = [Question(p, c, d) for p in range(len(PHRASINGS)) for c in CITIES for d in DAYS]
    random.Random(seed).shuffle(questions)
    return questions[held_out:], questions[:held_out]


def expert_call(question: Question, rng: random.Random) -> dict[str, Any]:
    """The expert's call: right, but for a weekday right only 60% of the time."""
    if question.day in ("today", "tomorrow") or rng.random() < EXPERT_WEEKDAY_RIGHT:
        return question.call()
    return question.call("today")


def score_calls(calls: Iterable[Mapping[str, Any]], question: Question) -> float:
    """1.0 when the reply made exactly the one right call, else 0.0."""
    return float(list(calls) == [question.call()])


def verify(reply: str, item: Mapping[str, Any]) -> float:
    """The eval set's verifier (``task:verify``): the reply as Reef's evals hand it over (its
    content, then each tool call as a line of JSON) against the item's expected call."""
    calls = []
    for line in reply.splitlines():
        try:
            calls.append(json.loads(line))
        except json.JSONDecodeError:
            return 0.0  # text beside the call, or a call the engine could not parse
    return float(calls == [json.loads(item["expected"])])


def eval_items(questions: Iterable[Question]) -> Iterable[dict[str, Any]]:
    """The eval set's lines: each question with its expected call."""
    for number, question in enumerate(questions):
        yield {"id": f"q{number}", "prompt": question.text, "expected": json.dumps(question.call())}


def expert_rows(questions: list[Question], count: int, seed: int) -> Iterable[dict[str, Any]]:
    """``count`` trajectories of the expert agent, each one question and its call, as rows of
    a ``reef export`` file (what ``reef import`` stores as uploads)."""
    rng = random.Random(seed)
    for number in range(count):
        question = rng.choice(questions)
        call = expert_call(question, rng)
        trajectory = {
            "schema_version": "ATIF-v1.6",
            "session_id": f"expert-{number}",
            "agent": {"name": "weather-expert", "version": "1"},
            "steps": [
                {"step_id": 1, "source": "user", "message": question.text},
                {
                    "step_id": 2,
                    "source": "agent",
                    "message": "",
                    "tool_calls": [
                        {
                            "tool_call_id": f"call_{number}",
                            "function_name": call["name"],
                            "arguments": call["arguments"],
                        }
                    ],
                },
            ],
        }
        yield {"sample_id": f"expert-{seed}-{number}", "trajectory": trajectory}


def corpus(questions: Iterable[Question]) -> str:
    """The text the tokenizer is trained on: every question and its call, as chats render."""
    lines = []
    for question in questions:
        lines.append(question.text)
        lines.append(f"<tool_call>\n{json.dumps(question.call())}\n</tool_call>")
    return "\n".join(lines)
