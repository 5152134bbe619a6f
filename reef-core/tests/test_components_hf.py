"""Hugging Face models in the local component and the local engine: a tiny Llama built from a
config on disk (``reef.testing.hf_model``), trained whole and with LoRA through jobs, its
prompts rendered exactly as transformers renders them, its artifacts in the formats engines
load, named by their content in every process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from safetensors.torch import load_file  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: E402

from reef.components.local.artifacts import ModelFolderError, load_model_folder  # noqa: E402
from reef.components.local.causal_lm import SamplingRequest  # noqa: E402
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.components.local.objectives import token_logprobs  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.engines.local import LocalEngine  # noqa: E402
from reef.testing.samples import colour_samples, exchange  # noqa: E402

ARGS = {"enable_thinking": False}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city today.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        },
    },
]


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


#: A multi-turn tool-calling conversation as the agent sent it: replies of tool calls alone
#: with null content, two calls in one reply, reasoning, tool results, a new user turn.
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You help with the weather and with sums."},
    {"role": "user", "content": "Weather in Paris and London?"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Two cities: two calls.",
        "tool_calls": [call("c1", "weather", city="Paris"), call("c2", "weather", city="London")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21"},
    {"role": "tool", "tool_call_id": "c2", "content": "rain, 14"},
    {"role": "assistant", "content": "Paris is sunny; London has rain."},
    {"role": "user", "content": "And 2+3?"},
    {"role": "assistant", "content": "Let me add.", "tool_calls": [call("c3", "add", a=2, b=3)]},
    {"role": "tool", "tool_call_id": "c3", "content": "5"},
    {"role": "assistant", "content": "It is 5."},
]


def as_trajectory(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The ATIF trajectory the record-to-sample stage makes of that conversation."""
    steps: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            steps[-1].setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": message["tool_call_id"], "content": message["content"]}
            )
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": "agent" if role == "assistant" else role,
            "message": message.get("content") or "",
        }
        if message.get("reasoning_content"):
            step["reasoning_content"] = message["reasoning_content"]
        if message.get("tool_calls"):
            step["tool_calls"] = [
                {
                    "tool_call_id": c["id"],
                    "function_name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message["tool_calls"]
            ]
        steps.append(step)
    return {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "t", "version": "1", "tool_definitions": TOOLS},
        "steps": steps,
    }


def component(hf_model_folder: Path, state_dir: Path, **settings: Any) -> LocalComponent:
    config = {
        "state_dir": str(state_dir),
        "model_path": str(hf_model_folder),
        "batch_size": 4,
        "learning_rate": 3e-3,
        "chat_template_args": ARGS,
        **settings,
    }
    return LocalComponent.from_config(config)


def run(local: LocalComponent, job_id: str, samples: list[Any], **parameters: Any) -> Any:
    outcome = local.wait(local.submit(JobData(job_id, samples), parameters or None), timeout=120)
    assert outcome.event == "finished", outcome.error
    return outcome


def reply_logprob(local: LocalComponent, prompt: str, reply: str) -> float:
    (sequence,) = local.renderer.render_sample(exchange(prompt, reply)).sequences
    with torch.no_grad():
        (values,) = token_logprobs(local.model, [sequence.token_ids], local.device)
    return float((values * torch.tensor(sequence.loss_mask[1:], dtype=torch.float32)).sum())


def trained_spans(ids: tuple[int, ...], mask: tuple[int, ...]) -> list[list[int]]:
    spans: list[list[int]] = []
    for position, (token, bit) in enumerate(zip(ids, mask, strict=True)):
        if bit and (position == 0 or not mask[position - 1]):
            spans.append([])
        if bit:
            spans[-1].append(token)
    return spans


@pytest.mark.parametrize("chat_template_args", [{"enable_thinking": False}, {}])
def test_prompts_and_replies_render_exactly_as_transformers_renders_them(
    hf_model_folder: Path, tmp_path: Path, chat_template_args: dict[str, Any]
) -> None:
    """rule: P-REND-3: for each call of a multi-turn tool-calling conversation, the sample's
    tokens before the reply are ``apply_chat_template(..., add_generation_prompt=True)`` of the
    messages the engine got, with the engine's chat template arguments; the trained tokens are
    exactly the reply's, through its stop token."""
    local = component(hf_model_folder, tmp_path, chat_template_args=chat_template_args)
    hf = transformers.AutoTokenizer.from_pretrained(hf_model_folder)
    engine_request = {"model": "m", "tools": TOOLS, "chat_template_kwargs": chat_template_args}
    (sequence,) = local.renderer.render_sample(as_trajectory(MESSAGES)).sequences
    expected_replies = []
    for index, message in enumerate(MESSAGES):
        if message["role"] != "assistant":
            continue
        prompt = hf.apply_chat_template(
            MESSAGES[:index], tools=TOOLS, add_generation_prompt=True, **chat_template_args
        )["input_ids"]
        assert list(sequence.token_ids[: len(prompt)]) == prompt
        assert sequence.loss_mask[len(prompt) - 1] == 0
        assert sequence.loss_mask[len(prompt)] == 1
        # The engine renders the request it is sent exactly so, too.
        request = {**engine_request, "messages": MESSAGES[:index]}
        assert local.renderer.prompt_ids(request) == prompt
        whole = hf.apply_chat_template(MESSAGES[: index + 1], tools=TOOLS, **chat_template_args)[
            "input_ids"
        ]
        reply = whole[len(prompt) :]
        end = max(i for i, t in enumerate(reply) if t in local.tokenizer.stop_token_ids)
        expected_replies.append(reply[: end + 1])
    assert trained_spans(sequence.token_ids, sequence.loss_mask) == expected_replies
    assert hf.decode(expected_replies[-1]).endswith("It is 5.<|im_end|>")


def test_full_weights_train_and_reload_identically(hf_model_folder: Path, tmp_path: Path) -> None:
    """The whole model trains (its loss falls, the right reply gains) and its artifact is a
    transformers safetensors folder that reloads to the same weights and the same id."""
    local = component(hf_model_folder, tmp_path)
    before = reply_logprob(local, "colour 3", "red")
    losses = [run(local, f"toy:data:{job}", colour_samples()).metrics["loss"] for job in range(6)]
    assert losses[-1] < 0.7 * losses[0]
    assert reply_logprob(local, "colour 3", "red") > before + 2
    artifact = local.publish()
    files = {p.name for p in artifact.path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= files
    plain = transformers.AutoModelForCausalLM.from_pretrained(artifact.path)
    ids = torch.tensor([local.renderer.prompt_ids({"messages": MESSAGES[:2], "tools": TOOLS})])
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, local.model.module(ids).logits)
    assert load_model_folder(artifact.path).digest() == artifact.artifact_id


def test_lora_trains_only_an_adapter_saved_as_a_peft_folder(
    hf_model_folder: Path, tmp_path: Path
) -> None:
    """With ``lora`` only the adapter trains; the artifact is a PEFT adapter folder (no base
    weights) that peft loads on the base model to the same outputs; the base folder is
    untouched."""
    base_weights = load_file(str(hf_model_folder / "model.safetensors"))
    local = component(
        hf_model_folder,
        tmp_path,
        lora={"r": 8, "alpha": 16, "target_modules": ["all-linear"]},
        learning_rate=1e-2,
    )
    before = reply_logprob(local, "colour 3", "red")
    losses = [run(local, f"toy:data:{job}", colour_samples()).metrics["loss"] for job in range(6)]
    assert losses[-1] < 0.9 * losses[0]
    assert reply_logprob(local, "colour 3", "red") > before + 1
    artifact = local.publish()
    assert {p.name for p in artifact.path.iterdir()} == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    config = json.loads((artifact.path / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"
    assert config["r"] == 8
    assert Path(config["base_model_name_or_path"]) == hf_model_folder.resolve()
    adapter = load_file(str(artifact.path / "adapter_model.safetensors"))
    assert adapter
    assert all(".lora_A." in name or ".lora_B." in name for name in adapter)
    base = transformers.AutoModelForCausalLM.from_pretrained(hf_model_folder)
    served = peft.PeftModel.from_pretrained(base, artifact.path)
    ids = torch.tensor([local.renderer.prompt_ids({"messages": MESSAGES[:2], "tools": TOOLS})])
    with torch.no_grad():
        assert torch.allclose(served(ids).logits, local.model.module(ids).logits, atol=1e-6)
    for name, tensor in load_file(str(hf_model_folder / "model.safetensors")).items():
        assert torch.equal(tensor, base_weights[name])
    reloaded = load_model_folder(artifact.path, base_model=hf_model_folder)
    assert reloaded.digest() == artifact.artifact_id


def test_artifact_id_is_the_same_in_another_process_and_after_a_restart(
    hf_model_folder: Path, tmp_path: Path
) -> None:
    """docs/decisions.md#artifacts: the same weights (or adapter) have the same artifact_id in
    every process and after a restart."""
    artifacts = {}
    for name, settings in (("whole", {}), ("lora", {"lora": {"r": 4, "alpha": 8}})):
        local = component(hf_model_folder, tmp_path / name, **settings)
        handle = local.submit(JobData("toy:data:0", colour_samples()))
        local.wait(handle)
        artifacts[name] = local.publish()
        local.close()
        restarted = component(hf_model_folder, tmp_path / name, **settings)
        assert restarted.publish() == artifacts[name]
        assert restarted.poll(handle) == local.poll(handle)
    script = (
        "import sys; from pathlib import Path;"
        "from reef.components.local.artifacts import load_model_folder;"
        "base = Path(sys.argv[1]);"
        "print(*(load_model_folder(Path(p), base_model=base).digest() for p in sys.argv[2:]))"
    )
    folders = [str(artifact.path) for artifact in artifacts.values()]
    command = [sys.executable, "-c", script, str(hf_model_folder), *folders]
    other = subprocess.run(command, check=True, capture_output=True, text=True)
    assert other.stdout.split() == [artifact.artifact_id for artifact in artifacts.values()]


def test_policy_gradient_raises_the_probability_of_rewarded_replies(
    hf_model_folder: Path, tmp_path: Path
) -> None:
    """importance_sampling on an HF model with LoRA: the rewarded reply gains."""
    local = component(hf_model_folder, tmp_path, lora={"r": 8}, batch_size=8, learning_rate=2e-2)
    prompt = "Yes or no?"

    def gap() -> float:
        return reply_logprob(local, prompt, "yes") - reply_logprob(local, prompt, "no")

    start = gap()
    for job in range(4):
        samples = [
            TrajectorySample(exchange(prompt, reply), reward=reward, group_id=f"g{job}-{k}")
            for k in range(4)
            for reply, reward in (("yes", 1.0), ("no", 0.0))
        ]
        outcome = run(local, f"rl:data:{job}", samples, objective="importance_sampling")
        assert outcome.metrics["mean_reward"] == 0.5
    assert gap() > start + 1


def test_padding_and_gradient_accumulation_do_not_change_the_step(
    hf_model_folder: Path, tmp_path: Path
) -> None:
    """Sequences of different lengths in one padded pass, or one pass per sequence whose
    gradients accumulate, give the same loss and the same gradient at the optimizer step:
    padding is masked out of attention and loss, and every pass's gradient counts."""
    samples = [TrajectorySample(exchange("q" * (1 + 7 * n), "answer " * (1 + n))) for n in range(4)]
    gradients: list[list[Any]] = []

    def keep_gradients(optimizer: Any, *_: Any) -> None:
        gradients.append(
            [p.grad.clone() for group in optimizer.param_groups for p in group["params"]]
        )

    hook = register_optimizer_step_pre_hook(keep_gradients)
    try:
        losses = []
        for micro in (None, 1, 3):
            local = component(hf_model_folder, tmp_path / str(micro), micro_batch_size=micro)
            outcome = run(local, "toy:data:0", samples)
            assert outcome.metrics["steps"] == 1
            losses.append(outcome.metrics["loss"])
    finally:
        hook.remove()
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-5)
    assert len(gradients) == 3
    for other in gradients[1:]:
        for left, right in zip(gradients[0], other, strict=True):
            assert torch.allclose(left, right, atol=1e-6, rtol=1e-3)


def test_the_engine_serves_the_adapter_with_the_models_own_logprobs(
    hf_model_folder: Path, tmp_path: Path
) -> None:
    """The local engine serves a LoRA artifact on its base: seeded sampling, greedy at
    temperature 0, and the log probabilities it reports are the served model's own."""
    local = component(hf_model_folder, tmp_path, lora={"r": 4}, learning_rate=1e-2)
    run(local, "toy:data:0", colour_samples())
    artifact = local.publish()
    engine = LocalEngine(local.artifacts, chat_template_args=ARGS, base_model=local.base_model)
    request = {"model": "m", "messages": MESSAGES[:2], "tools": TOOLS, "max_tokens": 6}
    answer = engine.complete({**request, "logprobs": True, "top_logprobs": 3, "seed": 3, "n": 2})
    assert answer["system_fingerprint"] == artifact.artifact_id
    assert answer["usage"]["prompt_tokens"] == len(engine.prompt_ids(request))
    again = engine.complete({**request, "logprobs": True, "top_logprobs": 3, "seed": 3, "n": 2})
    assert [c["message"] for c in again["choices"]] == [c["message"] for c in answer["choices"]]
    for choice in answer["choices"]:
        for entry in choice["logprobs"]["content"]:
            assert len(entry["top_logprobs"]) == 3
            assert entry["top_logprobs"][0]["logprob"] >= entry["logprob"] - 1e-5
    # What generate samples is scored by the served model itself: the reported log
    # probabilities are the model's own (before temperature), token for token.
    served = engine._current()[1]
    prompt = tuple(engine.prompt_ids(request))
    sampling = SamplingRequest(prompt, 2, 1.5, 0.9, 6, (), 11, 0)
    for generation in served.generate(sampling):
        with torch.no_grad():
            (values,) = token_logprobs(served, [[*prompt, *generation.token_ids]], local.device)
        own = values[len(prompt) - 1 :].tolist()
        assert own == pytest.approx(list(generation.logprobs), abs=1e-4)
    greedy = engine.complete({**request, "temperature": 0})
    nearly_greedy = engine.complete({**request, "temperature": 1.0, "top_p": 1e-9, "seed": 9})
    assert greedy["choices"][0]["message"] == nearly_greedy["choices"][0]["message"]


def test_bad_settings_are_refused_with_the_reason(hf_model_folder: Path, tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match="model_path"):
        LocalComponent.from_config({"state_dir": str(tmp_path), "lora": {"r": 4}})
    with pytest.raises(PluginConfigError, match=r"\$\.lora\.r"):
        component(hf_model_folder, tmp_path / "a", lora={"r": 0})
    with pytest.raises(ModelFolderError, match=r"config\.json"):
        LocalComponent.from_config(
            {"state_dir": str(tmp_path / "b"), "model_path": str(tmp_path / "missing")}
        )
    with pytest.raises(ModelFolderError, match="lora"):
        component(hf_model_folder, tmp_path / "c", lora={"target_modules": ["no_such_layer"]})


def test_a_policy_objective_trains_without_dropout_so_its_first_ratio_is_one(
    tmp_path: Path,
) -> None:
    """GPT-2 has dropout; the start log probabilities are computed without it, so the training
    pass is too under a policy objective: at the first step every ratio is exactly 1, and with
    every advantage 1 the step's loss is -1 (the mean of -ratio * A over trained tokens)."""
    from reef.testing.hf_model import make_hf_model_folder

    gpt2 = {
        "model_type": "gpt2",
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 2,
        "n_positions": 1024,
        "resid_pdrop": 0.5,
        "embd_pdrop": 0.5,
        "attn_pdrop": 0.5,
    }
    folder = make_hf_model_folder(tmp_path / "gpt2", config=gpt2)
    local = component(folder, tmp_path / "state")
    assert local.model.module.config.resid_pdrop == 0.5
    samples = [
        TrajectorySample(
            as_trajectory([*MESSAGES[:2], {"role": "assistant", "content": text}]), 1.0
        )
        for text in ("It is sunny.", "Rain, mostly, in both.")
    ]
    samples = [attrs.evolve(s, sample_id=f"s{i}") for i, s in enumerate(samples)]
    outcome = run(
        local, "toy:data:0", samples, objective="importance_sampling", reward_baseline="none"
    )
    assert outcome.metrics["step_losses"][0] == pytest.approx(-1.0, abs=1e-6)
    # Under cross_entropy the model's dropout is on: the same pass twice differs.
    local.model.module.train(True)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    assert not torch.equal(local.model.logits(ids, None), local.model.logits(ids, None))
