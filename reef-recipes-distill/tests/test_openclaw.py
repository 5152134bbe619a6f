"""OpenClaw-RL's stages: each turn judged from its next state on the background worker, by m
votes through a judge endpoint (a stand-in, ``reef.testing.engines.judge_engine``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import given, strategies as st

pytest.importorskip("starlette")

from reef import (
    InferenceRecord,
    JobData,
    PipelineSection,
    PluginConfigError,
    PluginKind,
    RecipeConfigError,
    ResponseChains,
    TrajectorySample,
)
from reef.embed import Plugins
from reef.testing import pipeline_context
from reef.testing.engines import judge_engine
from reef.testing.service import serve_on_loopback
from reef_distill.openclaw.judge import majority, parse_vote
from reef_distill.openclaw.processor import OpenClawRLJobData, OpenClawRLSamples
from reef_distill.openclaw.recipe import OpenClawRLRecipe
from reef_distill.recipe import DistillRecipe

CTX = pipeline_context()
RESPONSES = "openai.responses"  # InferenceRecord.api_format of a Responses API call
HINT = "The user wanted the answer in kilometres, not miles."


def turn(
    cid: str, messages: list[dict[str, Any]], reply: str, *, at: float = 0.0
) -> InferenceRecord:
    response = {
        "choices": [{"message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]
    }
    return InferenceRecord(
        cid, "s", {"messages": messages}, response, artifact_id="art1", started_at=at, ended_at=at
    )


def conversation(*replies_and_next: tuple[str, str]) -> list[InferenceRecord]:
    """Calls of one conversation: each ``(reply, next user message)`` is one turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "How far is it?"}]
    calls = []
    for number, (reply, following) in enumerate(replies_and_next):
        calls.append(turn(f"c{number}", list(messages), reply))
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": following},
        ]
    return calls


def next_state_of(messages: list[dict[str, Any]]) -> str:
    found = re.search(r"## The next state\n(.*?)\n\n", messages[-1]["content"], re.DOTALL)
    return found.group(1) if found else ""


@pytest.fixture
def judge_url() -> Iterator[Callable[[Callable[[list[dict[str, Any]]], Any]], str]]:
    """Serve a judge whose answers a test gives; yields a function that starts one."""
    stack: list[Any] = []

    def start(answer: Callable[[list[dict[str, Any]]], Any]) -> str:
        server = serve_on_loopback(judge_engine(answer, silence_seconds=1.0))
        stack.append(server)
        return server.__enter__() + "/v1"

    yield start
    for server in reversed(stack):
        server.__exit__(None, None, None)


def stage(url: str, **config: Any) -> OpenClawRLSamples:
    judge = {
        "base_url": url,
        "model": "judge",
        "votes": 3,
        "timeout_seconds": 5,
        "attempts": 2,
        **config.pop("judge", {}),
    }
    return OpenClawRLSamples.from_config(
        {"judge": judge, "next_state_timeout_seconds": 60, **config}, context=CTX, environ={}
    )


def settle(samples: OpenClawRLSamples, now: float = 1.0, limit: float = 20.0) -> None:
    """Advance until the judgments that run have been taken in."""
    deadline = time.monotonic() + limit
    samples.advance(now)
    while samples.background_jobs_running():
        assert time.monotonic() < deadline, "the judgments did not end"
        samples.worker.wait(0.5)
        samples.advance(now)


def made(samples: OpenClawRLSamples) -> list[TrajectorySample]:
    found = []
    for unit in samples.ready_units():
        for _, unit_samples in samples.unit_samples(unit):
            found += [s for s in unit_samples if isinstance(s, TrajectorySample)]
    return found


def test_each_turn_is_judged_from_its_next_state_by_majority(judge_url: Any) -> None:
    # rule: P-JUDGE-1 P-JUDGE-2 P-JUDGE-3 P-SLOW-2
    def answer(messages: list[dict[str, Any]]) -> str:
        return "good \\boxed{1}" if "thanks" in next_state_of(messages) else "\\boxed{-1}"

    samples = stage(judge_url(answer))
    first, second, last = conversation(
        ("12 miles", "in km please"), ("19 km", "thanks"), ("bye", "")
    )
    for record in (first, second, last):
        samples.push(record)
    assert samples.background_jobs_running()  # the judge runs on the worker, not in push
    settle(samples)
    by_call = {s.source_record_ids[0]: s for s in made(samples)}
    assert by_call["c0"].reward == -1.0
    assert by_call["c1"].reward == 1.0
    assert by_call["c0"].metadata["judgment"]["votes"] == [-1, -1, -1]
    # the sample is the call: its reply trains, its earlier turns are copied context
    agent = [s for s in by_call["c1"].trajectory["steps"] if s["source"] == "agent"]
    assert [s.get("is_copied_context") for s in agent] == [True, None]
    # the last turn waits for a next state, then ends untrained (the method's rule)
    assert "c2" not in by_call
    samples.advance(1000.0)
    assert samples.ended_records().get("c2") == "expired"


def test_one_http_client_serves_every_turn_and_closes_with_the_stage(
    judge_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[httpx.AsyncClient] = []

    class Counted(httpx.AsyncClient):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            opened.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", Counted)
    samples = stage(judge_url(lambda _: "\\boxed{1}"))
    try:
        for record in conversation(("a", "b"), ("c", "d"), ("e", "f")):
            samples.push(record)
        settle(samples)
        samples.push(turn("c9", [{"role": "user", "content": "again"}], "g"))
        samples.push(
            turn(
                "c10",
                [
                    {"role": "user", "content": "again"},
                    {"role": "assistant", "content": "g"},
                    {"role": "user", "content": "thanks"},
                ],
                "h",
            )
        )
        settle(samples)
        assert sorted(s.source_record_ids[0] for s in made(samples)) == ["c0", "c1", "c9"]
        assert len(opened) == 1  # three turns, nine votes, one client
        assert not opened[0].is_closed
    finally:
        samples.close(5.0)
    assert opened[0].is_closed


def test_a_neutral_turn_does_not_train(judge_url: Any) -> None:
    votes = iter(["\\boxed{1}", "\\boxed{-1}", "\\boxed{0}"])  # a three-way tie
    samples = stage(judge_url(lambda _: next(votes)))
    for record in conversation(("a", "b"), ("c", "d")):
        samples.push(record)
    settle(samples)
    assert made(samples) == []
    assert samples.ended_records()["c0"] == "no_sample"


def test_a_failed_vote_is_tried_again(judge_url: Any) -> None:
    calls: list[int] = []

    def answer(_: list[dict[str, Any]]) -> Any:
        calls.append(1)
        return 503 if len(calls) <= 3 else "\\boxed{1}"  # each vote's first call fails

    samples = stage(judge_url(answer))
    for record in conversation(("a", "b"), ("c", "d")):
        samples.push(record)
    settle(samples)
    assert [s.reward for s in made(samples)] == [1.0]
    assert len(calls) == 6


def test_a_judge_that_never_answers_leaves_the_turn_untrained_and_counted(judge_url: Any) -> None:
    # rule: P-SLOW-1 P-SLOW-2
    samples = stage(
        judge_url(lambda _: None),
        judge={"timeout_seconds": 0.2, "attempts": 2, "deadline_seconds": 0.5},
    )
    for record in conversation(("a", "b"), ("c", "d")):
        started = time.monotonic()
        samples.push(record)
        assert time.monotonic() - started < 0.5  # push never waits on the judge
    settle(samples)
    assert made(samples) == []
    assert samples.ended_records()["c0"] == "judge_failed"
    assert samples.status()["ended_records"]["judge_failed"] == 1  # counted, visible in status
    assert not samples.background_jobs_running()
    samples.close(5.0)


def hinted_sample_extra(judge_url: Any, answers: list[str]) -> dict[str, Any]:
    """The ``extra.reef`` of the one sample a two-turn conversation makes when the judge, hints
    on, answers its three votes on the first turn with ``answers``."""
    replies = iter(answers)
    samples = stage(judge_url(lambda _: next(replies)), hints=True)
    for record in conversation(("12 miles", "in km please"), ("19 km", "thanks")):
        samples.push(record)
    settle(samples)
    (sample,) = made(samples)
    extra: dict[str, Any] = sample.trajectory["extra"]["reef"]
    return extra


def test_hints_become_teacher_requests_best_first(judge_url: Any) -> None:
    # rule: P-REND-4
    reef = hinted_sample_extra(
        judge_url,
        [
            f"\\boxed{{1}} [HINT_START]{HINT}[HINT_END]",
            "\\boxed{1} [HINT_START]km[HINT_END]",
            "\\boxed{-1}",
        ],
    )
    assert len(reef["teacher_candidates"]) == 1  # "km" is shorter than min_hint_chars
    teacher = reef["teacher"]
    assert teacher == reef["teacher_candidates"][0]
    # As OpenClaw-RL's _append_hint_to_messages: a blank line, its marker line, the hint.
    assert (
        teacher["messages"][-1]["content"]
        == f"How far is it?\n\n[user's hint / instruction]\n{HINT}"
    )
    assert teacher["messages"][:-1] == []  # the first turn: only the user's question before it


def test_only_a_good_votes_hint_teaches(judge_url: Any) -> None:
    """rule: P-REND-4 -- one teacher request per good vote's hint: a hint the judge wrote
    beside a -1 vote (which should carry none) teaches nothing."""
    reef = hinted_sample_extra(
        judge_url,
        [
            f"\\boxed{{-1}} [HINT_START]{HINT} Also, be brief.[HINT_END]",
            f"\\boxed{{1}} [HINT_START]{HINT}[HINT_END]",
            "\\boxed{-1}",
        ],
    )
    assert len(reef["teacher_candidates"]) == 1
    assert reef["teacher"]["messages"][-1]["content"].endswith(HINT)


@given(st.lists(st.sampled_from([1, -1, 0, None]), max_size=7))
def test_majority_is_the_most_frequent_valid_vote_else_zero(votes: list[int | None]) -> None:
    result = majority(votes)
    valid = [v for v in votes if v is not None]
    if not valid:
        assert result == 0
        return
    counts = {v: valid.count(v) for v in set(valid)}
    top = max(counts.values())
    leaders = [v for v, c in counts.items() if c == top]
    assert result == (leaders[0] if len(leaders) == 1 else 0)


def test_a_vote_is_its_last_decision() -> None:
    assert parse_vote("maybe \\boxed{0} no: \\boxed{-1}", hints=False).score == -1
    assert parse_vote("\\boxed{0}", hints=True).score is None  # hints decide 1 or -1
    assert parse_vote("\\boxed{2}", hints=False).score is None
    assert parse_vote("no decision", hints=False).score is None
    vote = parse_vote("\\boxed{1} [HINT_START] use km [HINT_END]", hints=True)
    assert (vote.score, vote.hint) == (1, "use km")


def test_the_job_data_stage_reads_the_judging_of_the_samples_stage(judge_url: Any) -> None:
    # rule: P-STG-9 P-STG-8
    samples = stage(judge_url(lambda _: "\\boxed{1}"), hints=True, judge={"votes": 5})
    jobs = OpenClawRLJobData.from_config(
        {"job_samples": 1}, context=CTX, record2sample=samples, environ={}
    )
    assert jobs.judging is samples.judging.settings
    data = jobs.make_job_data([TrajectorySample({"steps": []}, reward=1.0)], "s:data:1")
    assert isinstance(data, JobData)
    assert data.metadata["judge"] == {"model": "judge", "votes": 5}
    assert data.metadata["objective"] == "openclaw_hindsight"
    with pytest.raises(PluginConfigError, match="reads the judging of OpenClawRLSamples"):
        OpenClawRLJobData.from_config(
            {"job_samples": 1},
            context=CTX,
            record2sample=object(),
            environ={},  # type: ignore[arg-type]
        )


def test_the_recipes_give_the_methods_objectives() -> None:
    binary = OpenClawRLRecipe.job_parameters_of(
        OpenClawRLRecipe.Settings.parse({}, plugin_class=OpenClawRLRecipe)
    )
    assert binary == {
        "objective": "ppo",
        "reward_baseline": "none",
        "clip_low": 0.2,
        "clip_high": 0.28,
    }
    hindsight = OpenClawRLRecipe.job_parameters_of(
        OpenClawRLRecipe.Settings.parse({"objective": "hindsight"}, plugin_class=OpenClawRLRecipe)
    )
    assert hindsight["distillation"]["kl_coef"] == 1.0
    assert hindsight["distillation"]["teacher"]["model_path"] is None  # the student itself
    distill = DistillRecipe.job_parameters_of(
        DistillRecipe.Settings.parse(
            {"teacher": {"model_path": "/t"}, "kl_coef": 2.0}, plugin_class=DistillRecipe
        )
    )
    assert distill["objective"] == "importance_sampling"
    assert distill["distillation"]["teacher"]["model_path"] == "/t"
    assert distill["distillation"]["kl_coef"] == 2.0
    with pytest.raises(PluginConfigError, match="objective"):
        OpenClawRLRecipe.Settings.parse({"objective": "combine"}, plugin_class=OpenClawRLRecipe)


@pytest.mark.parametrize(
    "class_name",
    [None, "OpenClawRLSamples", "reef_distill.openclaw.processor:OpenClawRLSamples"],
)
def test_the_hints_check_knows_the_samples_stage_however_it_is_named(
    class_name: str | None,
) -> None:
    """The objective must match the judging's hints whether the deployment leaves the stage to
    the recipe, names it by its registered name or as module:Class."""
    hindsight = OpenClawRLRecipe.Settings.parse(
        {"objective": "hindsight"}, plugin_class=OpenClawRLRecipe
    )
    binary = OpenClawRLRecipe.Settings.parse({"objective": "binary"}, plugin_class=OpenClawRLRecipe)
    for settings, hints in ((hindsight, False), (binary, True)):
        record2sample: dict[str, Any] = {"config": {"hints": hints}}
        if class_name is not None:
            record2sample["class"] = class_name
        pipeline = PipelineSection.parse(
            {"record2sample": record2sample, "sample2job": {"config": {"job_samples": 8}}},
            plugin_class=OpenClawRLRecipe,
        )
        with pytest.raises(RecipeConfigError) as caught:
            OpenClawRLRecipe.check_pipeline(pipeline, settings, path="$.pipeline")
        (error,) = caught.value.errors
        assert error.key == "$.pipeline.record2sample.config.hints"
        OpenClawRLRecipe.check_pipeline(
            PipelineSection.parse(
                {
                    "record2sample": {**record2sample, "config": {"hints": not hints}},
                    "sample2job": {"config": {"job_samples": 8}},
                },
                plugin_class=OpenClawRLRecipe,
            ),
            settings,
            path="$.pipeline",
        )


def test_both_recipes_and_their_stages_are_registered() -> None:
    # rule: P-STG-7
    plugins = Plugins(blocked=())
    plugins.load()
    assert plugins.resolve(PluginKind.RECIPE, "openclaw-rl") is OpenClawRLRecipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "OpenClawRLSamples") is OpenClawRLSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "OpenClawRLJobData") is OpenClawRLJobData
    spec = OpenClawRLRecipe.pipeline_spec()
    assert (spec.record2sample, spec.sample2job) == ("OpenClawRLSamples", "OpenClawRLJobData")


def responses_conversation(
    *replies_and_next: tuple[str, str], chained: bool
) -> list[InferenceRecord]:
    """The calls of one Responses conversation: each resends the whole conversation, or, when
    ``chained``, holds only its new turn and names the response it continues."""
    conversation_items: list[dict[str, Any]] = [{"role": "user", "content": "How far is it?"}]
    new_items = list(conversation_items)
    calls = []
    for number, (reply, following) in enumerate(replies_and_next):
        request: dict[str, Any] = {"model": "m", "instructions": "Answer briefly."}
        if chained and number:
            request |= {"input": new_items, "previous_response_id": f"resp_{number - 1}"}
        else:
            request["input"] = list(conversation_items)
        output = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": reply}],
        }
        response = {"id": f"resp_{number}", "object": "response", "output": [output]}
        calls.append(
            InferenceRecord(
                f"resp_{number}", "s", request, response, api_format=RESPONSES, artifact_id="a"
            )
        )
        new_items = [{"role": "user", "content": following}]
        conversation_items += [output, *new_items]
    return calls


def test_a_chained_responses_turn_is_judged_and_trains_as_its_whole_conversation(
    judge_url: Any,
) -> None:
    """A Responses call chained by ``previous_response_id`` holds only its new turn: its next
    state, its sample and its teacher request are the ones of the same conversation resent."""
    seen: list[str] = []

    def answer(messages: list[dict[str, Any]]) -> str:
        seen.append(next_state_of(messages))
        return f"\\boxed{{1}} [HINT_START]{HINT}[HINT_END]"

    made_by: dict[bool, dict[str, TrajectorySample]] = {}
    states: dict[bool, list[str]] = {}
    for chained in (False, True):
        seen.clear()
        samples = stage(judge_url(answer), hints=True)
        turns = (("12 miles", "in km please"), ("19 km", "thanks"), ("bye", ""))
        for record in responses_conversation(*turns, chained=chained):
            samples.push(record)
        settle(samples)
        made_by[chained] = {s.source_record_ids[-1]: s for s in made(samples)}
        states[chained] = sorted(seen)
    assert states[True] == states[False]
    assert any("in km please" in s for s in states[True])
    assert any("thanks" in s for s in states[True])
    assert sorted(made_by[True]) == sorted(made_by[False]) == ["resp_0", "resp_1"]
    for call in ("resp_0", "resp_1"):
        resent, chained_sample = made_by[False][call], made_by[True][call]
        said = [
            (s["source"], s.get("message"), s.get("is_copied_context"))
            for s in resent.trajectory["steps"]
        ]
        assert [
            (s["source"], s.get("message"), s.get("is_copied_context"))
            for s in chained_sample.trajectory["steps"]
        ] == said
        extra = chained_sample.trajectory["extra"]["reef"]
        assert extra["teacher"] == resent.trajectory["extra"]["reef"]["teacher"]
    teacher = made_by[True]["resp_1"].trajectory["extra"]["reef"]["teacher"]
    assert [m["role"] for m in teacher["messages"]] == ["system", "user", "assistant", "user"]
    assert teacher["messages"][-1]["content"].startswith("in km please\n\n[user's hint")


def test_a_chained_call_whose_start_is_not_kept_is_counted_not_judged(judge_url: Any) -> None:
    samples = stage(judge_url(lambda _: "\\boxed{1}"))
    _, second = responses_conversation(("12 miles", "in km please"), ("19 km", ""), chained=True)
    samples.push(second)  # the response it continues never reached this stage
    assert samples.ended_records()["resp_1"] == "not_judged"


def test_response_chains_keep_the_latest_ended_calls() -> None:
    chains = ResponseChains(keep_ended=1)
    earlier, later = responses_conversation(("a", "b"), ("c", ""), chained=True)
    assert chains.add(earlier) == (earlier,)
    chains.end(earlier.id)
    assert chains.add(later) == (earlier, later)  # an ended call is still kept
    chains.end(later.id)  # ... until a later one ends: only the latest is kept
    assert chains.chain(later) == (earlier, later)
    retry = attrs.evolve(later, id="resp_retry")
    assert chains.add(retry) is None
