"""The training component contract the trainer relies on, run against every built-in component:
``local`` (PyTorch here), ``tinker`` (against :mod:`doubles.tinker_service`) and ``slime``
(its jobs trained by :mod:`doubles.slime_run`, slime's loop as slime calls the data source).

Each harness builds a component with small settings, runs a job to its end, and reads the
probability the current weights give a reply (where the weights are Reef's to read: slime's are
slime's). A test that does not apply to a component skips with the reason.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import pytest

torch = pytest.importorskip("torch")

from reef.components.interface import JobHandle, TrainingComponent  # noqa: E402
from reef.components.local.objectives import token_logprobs  # noqa: E402
from reef.core.job_data import JobData, JobOutcome, TaskSample, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.testing.samples import colour_samples, exchange  # noqa: E402


class Harness(Protocol):
    kind: str

    def make(self, **settings: Any) -> Any: ...

    def run(
        self, component: Any, job_id: str, samples: list[Any], **parameters: Any
    ) -> JobOutcome: ...

    def reply_logprob(self, component: Any, prompt: str, reply: str) -> float: ...

    def steps_are_reefs(self) -> bool: ...


def _logprob(model: Any, component: Any, prompt: str, reply: str) -> float:
    (sequence,) = component.renderer.render_sample(exchange(prompt, reply)).sequences
    with torch.no_grad():
        (values,) = token_logprobs(model, [sequence.token_ids], torch.device("cpu"))
    mask = torch.tensor(sequence.loss_mask[1:], dtype=torch.float32)
    return float((values * mask).sum())


class LocalHarness:
    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = itertools.count()

    def make(self, **settings: Any) -> Any:
        from reef.components.local.component import LocalComponent

        config = {
            "state_dir": str(self.root / "local"),
            "d_model": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 96,
            "batch_size": 4, "learning_rate": 3e-3, "device": "cpu", **settings,
        }  # fmt: skip
        return LocalComponent.from_config(config)

    def run(self, component: Any, job_id: str, samples: list[Any], **parameters: Any) -> JobOutcome:
        data = JobData(job_id, tuple(samples))
        outcome: JobOutcome = component.wait(component.submit(data, parameters or None), timeout=60)
        return outcome

    def reply_logprob(self, component: Any, prompt: str, reply: str) -> float:
        return _logprob(component.model, component, prompt, reply)

    def steps_are_reefs(self) -> bool:
        return True


class TinkerHarness(LocalHarness):
    kind = "tinker"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        pytest.importorskip("tinker")
        from doubles.tinker_service import TinkerStandIn

        self.service = TinkerStandIn()

    def make(self, **settings: Any) -> Any:
        from reef.components.tinker.component import TinkerComponent
        from reef.components.tinker.settings import TinkerComponentSettings

        config = {
            "state_dir": str(self.root / "tinker"), "base_model": "stand-in/tiny",
            "tokenizer": "byte", "max_seq_len": 96, "batch_size": 4, "learning_rate": 3e-3,
            "grad_clip_norm": 1.0, **settings,
        }  # fmt: skip
        return TinkerComponent(
            TinkerComponentSettings.parse(config, plugin_class=TinkerComponent),
            connect=lambda _url, _key: self.service,  # type: ignore[arg-type,return-value]
            environ={"TINKER_API_KEY": "test-key"},
        )

    def reply_logprob(self, component: Any, prompt: str, reply: str) -> float:
        artifact = component.publish()
        body = json.loads((artifact.path / "artifact.json").read_text())
        from reef.components.local.byte_tokenizer import ByteTokenizer
        from reef.components.local.tiny_gpt import TinyGPTModel

        model = TinyGPTModel(self.service.model_of(body["sampler_path"]), ByteTokenizer())
        return _logprob(model, component, prompt, reply)


class SlimeHarness(LocalHarness):
    kind = "slime"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        from doubles.slime_run import SlimeRun

        self.slime = SlimeRun(root / "slime", rollout_batch_size=1)
        (root / "slime" / "base").mkdir(parents=True, exist_ok=True)
        (root / "slime" / "base" / "weights").write_text("[]")

    def make(self, **settings: Any) -> Any:
        from reef.components.slime import SlimeComponent

        return SlimeComponent.from_config(
            {
                "exchange_dir": self.slime.args.reef_exchange_dir,
                "base_weights": str(self.root / "slime" / "base"),
                "tokenizer": "byte",
                "max_seq_len": settings.get("max_seq_len", 96),
            }
        )

    def run(self, component: Any, job_id: str, samples: list[Any], **parameters: Any) -> JobOutcome:
        handle = component.submit(JobData(job_id, tuple(samples)), parameters or None)
        written = component._jobs.get(job_id)
        if written is not None:
            futures.wait([written])  # rendered and in the exchange (or failed)
        while True:
            outcome: JobOutcome | None = component.poll(handle)
            if outcome is not None:
                return outcome
            self.slime.run(num_rollout=self.slime.next_rollout + 1)  # one more rollout

    def reply_logprob(self, component: Any, prompt: str, reply: str) -> float:
        pytest.skip("slime's weights live in slime (Megatron); Reef never reads them")

    def steps_are_reefs(self) -> bool:
        return False


HARNESSES = {"local": LocalHarness, "tinker": TinkerHarness, "slime": SlimeHarness}


@pytest.fixture(params=list(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    made = HARNESSES[request.param](tmp_path)
    yield made
    if isinstance(made, TinkerHarness):
        made.service.close()


def reef_steps(harness: Harness) -> None:
    if not harness.steps_are_reefs():
        pytest.skip("slime cuts rollouts into steps itself (--global-batch-size)")


def test_sft_loss_really_decreases(harness: Harness) -> None:
    """cross_entropy on a learnable toy task: the job loss and the replies' likelihood improve."""
    reef_steps(harness)
    component = harness.make()
    before = harness.reply_logprob(component, "colour 3", "red")
    losses = []
    for job in range(8):
        outcome = harness.run(component, f"toy:data:{job}", colour_samples())
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["steps"] == 2
        assert outcome.metrics["unrenderable_samples"] == 0
        losses.append(outcome.metrics["loss"])
    assert losses[-1] < 0.6 * losses[0]
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))
    assert harness.reply_logprob(component, "colour 3", "red") > before + 5


def test_policy_gradient_raises_the_probability_of_rewarded_replies(harness: Harness) -> None:
    """importance_sampling with group-centred advantages: the rewarded reply gains."""
    reef_steps(harness)
    component = harness.make(batch_size=8)
    prompt = "Yes or no?"

    def gap() -> float:
        return harness.reply_logprob(component, prompt, "yes") - harness.reply_logprob(
            component, prompt, "no"
        )

    start = gap()
    for job in range(6):
        samples = [
            TrajectorySample(exchange(prompt, reply), reward=reward, group_id=f"g{job}-{k}")
            for k in range(4)
            for reply, reward in (("yes", 1.0), ("no", 0.0))
        ]
        outcome = harness.run(component, f"rl:data:{job}", samples, objective="importance_sampling")
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["mean_reward"] == 0.5
    assert gap() > start + 3


def test_samples_without_a_finite_reward_do_not_train_a_policy_gradient(harness: Harness) -> None:
    """rule: P-UP-9: an objective that needs a reward needs a finite one
    (``reward``, else ``extra.reef.reward``); SFT needs none."""
    component = harness.make()
    samples = [
        TrajectorySample(exchange("q", "a"), sample_id="a"),
        TrajectorySample(exchange("q", "b", reward=1.0), sample_id="b"),
        TrajectorySample(exchange("q", "c", reward="high"), sample_id="c"),
        TrajectorySample(exchange("q", "d"), reward=0.0, sample_id="d"),
    ]
    outcome = harness.run(component, "rl:data:0", samples, objective="importance_sampling")
    assert outcome.metrics["samples_without_reward"] == 2
    assert outcome.metrics["samples"] == 2
    assert harness.run(component, "sft:data:0", samples).metrics["samples"] == 4


def test_unrenderable_samples_are_left_out_and_counted(harness: Harness) -> None:
    """rule: P-REND-5: over extra.reef.max_tokens, over the model's context, no reply to train."""
    component = harness.make()
    copied = exchange("q", "a")
    copied["steps"][1]["is_copied_context"] = True
    samples = [
        TrajectorySample(exchange("q", "fits"), sample_id="fits"),
        TrajectorySample(exchange("q", "a", max_tokens=5), sample_id="short"),
        TrajectorySample(exchange("q", "x" * 200), sample_id="long"),
        TrajectorySample(copied, sample_id="copied"),
    ]
    outcome = harness.run(component, "toy:data:0", samples)
    assert outcome.event == "finished"
    assert outcome.metrics["unrenderable_samples"] == 3
    assert outcome.metrics["samples"] == 1


def test_the_outcome_says_what_the_loss_consumed(harness: Harness) -> None:
    """``metrics.consumed``: a line per sample and step, with the tokens its loss counted and
    the reward and advantage it trained with; a sample left out (unrenderable, no reward) has
    none. Agent ECC's plugin writes its consumption lines from it."""
    component = harness.make(batch_size=2)
    samples = [
        TrajectorySample(exchange("q", "red"), reward=1.0, sample_id="s0", group_id="g"),
        TrajectorySample(exchange("q", "blue"), reward=0.0, sample_id="s1", group_id="g"),
        TrajectorySample(exchange("q", "x" * 200), reward=1.0, sample_id="long", group_id="g"),
        TrajectorySample(exchange("q", "none"), sample_id="unrewarded", group_id="g"),
        TrajectorySample(exchange("q", "green"), reward=0.5, sample_id="s4", group_id="h"),
    ]
    outcome = harness.run(component, "rl:data:0", samples, objective="importance_sampling")
    consumed = {line["sample_id"]: line for line in outcome.metrics["consumed"]}
    assert set(consumed) == {"s0", "s1", "s4"}
    if harness.steps_are_reefs():
        assert [consumed[s]["step"] for s in ("s0", "s1", "s4")] == [0, 0, 1]
    assert {s: consumed[s]["reward"] for s in consumed} == {"s0": 1.0, "s1": 0.0, "s4": 0.5}
    assert {s: consumed[s]["advantage"] for s in consumed} == {"s0": 0.5, "s1": -0.5, "s4": 0.0}
    for sample_id, reply in {"s0": "red", "s1": "blue", "s4": "green"}.items():
        (sequence,) = component.renderer.render_sample(exchange("q", reply)).sequences
        assert consumed[sample_id]["loss_tokens"] == sum(sequence.loss_mask[1:])
    assert (
        sum(line["loss_tokens"] for line in consumed.values()) == outcome.metrics["trained_tokens"]
    )


@pytest.mark.parametrize(
    ("scheduling", "steps", "dropped"),
    [
        (None, 3, 0),
        ({"remainder": "train"}, 3, 0),
        ({"remainder": "drop"}, 2, 1),
        ({"remainder": "pad"}, 3, 0),
        ({"packing_length": 1000}, 1, 0),
    ],
)
def test_batches_follow_the_batch_size_and_the_scheduling_parameter(
    harness: Harness, scheduling: dict[str, Any] | None, steps: int, dropped: int
) -> None:
    """rule: P-SIZE-6: 7 samples at batch size 3 train 3 steps; a shorter last step follows
    ``remainder``; with ``packing_length`` a step trains packs of tokens."""
    reef_steps(harness)
    component = harness.make(batch_size=3)
    parameters = {} if scheduling is None else {"scheduling": scheduling}
    outcome = harness.run(component, "toy:data:0", colour_samples()[:7], **parameters)
    assert outcome.metrics["steps"] == steps
    assert outcome.metrics["dropped_samples"] == dropped


def test_a_job_smaller_than_the_batch_trains_one_partial_step(harness: Harness) -> None:
    """rule: P-SIZE-6."""
    reef_steps(harness)
    component = harness.make(batch_size=8)
    outcome = harness.run(
        component, "toy:data:0", colour_samples()[:2], scheduling={"remainder": "drop"}
    )
    assert outcome.metrics["steps"] == 1
    assert outcome.metrics["samples"] == 2


def test_bad_parameters_refuse_the_submission(harness: Harness) -> None:
    component: TrainingComponent = harness.make()
    with pytest.raises(PluginConfigError, match="remainder"):
        component.submit(
            JobData("toy:data:0", tuple(colour_samples())), {"scheduling": {"remainder": "x"}}
        )
    with pytest.raises(PluginConfigError, match="objective"):
        component.submit(JobData("toy:data:0", tuple(colour_samples())), {"objective": "dpo"})
    never = component.poll(JobHandle("toy:data:0", component.name))
    assert never is not None
    assert never.event == "failed"


def test_a_job_id_trains_once(harness: Harness) -> None:
    """Resubmitting a job that ended (also after a restart) trains nothing twice."""
    component = harness.make()
    first = harness.run(component, "toy:data:0", colour_samples())
    weights = component.publish().artifact_id
    assert harness.run(component, "toy:data:0", colour_samples()) == first
    assert component.publish().artifact_id == weights
    component.close()
    restarted = harness.make()
    assert harness.run(restarted, "toy:data:0", colour_samples()) == first
    assert restarted.publish().artifact_id == weights


def test_a_failed_job_keeps_the_last_finished_weights(harness: Harness) -> None:
    component = harness.make()
    harness.run(component, "toy:data:0", colour_samples())
    before = component.publish().artifact_id
    outcome = harness.run(component, "task:data:0", [TaskSample("t1", {"instruction": "x"})])
    assert outcome.event == "failed"
    assert "tasks" in (outcome.error or "")
    assert component.publish().artifact_id == before


def test_an_artifact_keeps_its_id_after_a_restart(harness: Harness) -> None:
    """The same weights have the same artifact_id, after a restart too
    (docs/decisions.md#artifacts)."""
    component = harness.make()
    harness.run(component, "toy:data:0", colour_samples())
    artifact = component.publish()
    assert artifact.artifact_id.startswith("sha256:")
    component.close()
    assert harness.make().publish() == artifact
