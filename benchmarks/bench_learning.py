"""The learning showcase (``examples/learn``) through Reef, beside a bare PyTorch script that
does the same work without Reef, in one run: the held-out success rates each reaches and the
wall time each takes.

The bare script is the fastest plain way to do the showcase's work: the same model folder (the
same seed gives the same weights and tokenizer), the same 16,000 expert trajectories in the
same order rendered by the same chat template, SFT in batches of 16 with PyTorch's fused AdamW
at the same learning rate (gradient norm clipped at 1, as the local component does), then the
same RL: per job 16 training questions (the same ones, drawn from the same generator), 8
answers each sampled at temperature 1, rewards from the same verifier, advantages centred in
each question's group, two steps of 64 answers of the token-mean importance-sampling loss
against the job's start weights. After every job it scores the same held-out questions,
sampled at temperature 1 with the transformers ``generate`` of all of them at once (Reef's
evals ask one item at a time through the engine). Nothing of it is recorded, stored, served or
linked.

Goals: Reef's held-out success after RL within 0.03 of the bare script's, and its wall time
within 1.3x. One seed's success rate on 100 questions moves by about 0.05 from sampling alone,
so compare over several seeds (``--seeds``).

    .venv/bin/python benchmarks/bench_learning.py [--seeds 0] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

LEARN = Path(__file__).resolve().parents[1] / "examples" / "learn"
sys.path.insert(0, str(LEARN))
import run as showcase  # noqa: E402
import task  # noqa: E402

from reef.testing.hf_model import make_hf_model_folder  # noqa: E402

#: The showcase's settings (examples/learn/sft.yaml, rl.yaml and run.py).
SFT_BATCH, SFT_LR, SFT_JOB = 16, 0.003, 4000
RL_BATCH, RL_LR = 64, 0.001
MAX_TOKENS = 96
TEMPLATE_ARGS = {"enable_thinking": False}
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class Bare:
    """The showcase's work in plain PyTorch and transformers."""

    def __init__(self, folder: Path, seed: int) -> None:
        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(folder)
        self.end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def render(self, messages: list[dict[str, Any]], *, prompt: bool) -> list[int]:
        """The chat's token ids (``prompt``: with the assistant's generation prompt)."""
        ids: list[int] = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=prompt, tokenize=True, return_dict=False,
            **TEMPLATE_ARGS,
        )  # fmt: skip
        return ids

    def prompt(self, question: task.Question) -> list[int]:
        return self.render([{"role": "user", "content": question.text}], prompt=True)

    def expert_sequence(self, row: dict[str, Any]) -> tuple[list[int], list[int]]:
        """(prompt ids, completion ids) of one expert trajectory, rendered as Reef renders it."""
        user, agent = row["trajectory"]["steps"]
        call = agent["tool_calls"][0]
        function = {"name": call["function_name"], "arguments": call["arguments"]}
        messages = [
            {"role": "user", "content": user["message"]},
            {"role": "assistant", "content": "", "tool_calls": [{"function": function}]},
        ]
        prompt = self.render(messages[:1], prompt=True)
        whole = self.render(messages, prompt=False)
        completion = whole[len(prompt) :]
        end = completion.index(self.end) + 1  # the reply ends at its end token
        return prompt, completion[:end]

    def _batch(self, sequences: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, ...]:
        width = max(len(p) + len(c) for p, c in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        attention = torch.zeros(len(sequences), width, dtype=torch.long)
        trained = torch.zeros(len(sequences), width)
        for row, (prompt, completion) in enumerate(sequences):
            whole = prompt + completion
            ids[row, : len(whole)] = torch.tensor(whole)
            attention[row, : len(whole)] = 1
            trained[row, len(prompt) : len(whole)] = 1
        return ids, attention, trained

    def logprobs(self, sequences: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, ...]:
        """Each next token's log probability, and the mask of the completions' tokens."""
        ids, attention, trained = self._batch(sequences)
        logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        chosen = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        return chosen, trained[:, 1:]

    def sft(self, sequences: list[tuple[list[int], list[int]]], optimizer: Any) -> None:
        self.model.train()
        for start in range(0, len(sequences), SFT_BATCH):
            chosen, mask = self.logprobs(sequences[start : start + SFT_BATCH])
            self.step(-(chosen * mask).sum() / mask.sum(), optimizer)

    def step(self, loss: torch.Tensor, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        optimizer.step()

    @torch.no_grad()
    def sample(self, prompts: list[list[int]], choices: int, seed: int) -> list[list[int]]:
        """``choices`` answers to each prompt at temperature 1, in one batched ``generate``."""
        self.model.eval()
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        torch.manual_seed(seed)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=attention,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=MAX_TOKENS,
            num_return_sequences=choices,
            eos_token_id=[self.end, pad],
            pad_token_id=pad,
        )
        answers = []
        for row in out[:, width:].tolist():
            end = row.index(self.end) + 1 if self.end in row else len(row)
            answers.append(row[:end])
        return answers

    def score(self, answer: list[int], question: task.Question) -> float:
        text = self.tokenizer.decode(answer, skip_special_tokens=True)
        text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
        calls = []
        for block in _CALL.findall(text):
            try:
                calls.append(json.loads(block))
            except json.JSONDecodeError:
                return 0.0
        rest = _CALL.sub("", text).strip()
        return 0.0 if rest else task.score_calls(calls, question)

    def evaluate(self, questions: list[task.Question], seed: int) -> float:
        answers = self.sample([self.prompt(q) for q in questions], 1, seed)
        return statistics.mean(self.score(a, q) for a, q in zip(answers, questions, strict=True))

    def rl_job(self, questions: list[task.Question], optimizer: Any, seed: int) -> None:
        answers = self.sample([self.prompt(q) for q in questions], showcase.GROUP, seed)
        sequences, advantages = [], []
        for index, question in enumerate(questions):
            group = answers[index * showcase.GROUP : (index + 1) * showcase.GROUP]
            rewards = [self.score(a, question) for a in group]
            mean = statistics.mean(rewards)
            sequences += [(self.prompt(question), a) for a in group]
            advantages += [r - mean for r in rewards]
        self.model.train()
        with torch.no_grad():
            start, _ = self.logprobs(sequences)
        for first in range(0, len(sequences), RL_BATCH):
            part = slice(first, first + RL_BATCH)
            chosen, mask = self.logprobs(sequences[part])
            ratio = (chosen - start[part][:, : chosen.shape[1]]).exp()
            weight = torch.tensor(advantages[part])[:, None]
            self.step(-(ratio * weight * mask).sum() / mask.sum(), optimizer)


def bare_run(folder: Path, seed: int, calls: int, rl_jobs: int, held_out: int) -> dict[str, Any]:
    started = time.monotonic()
    train, evaluated = task.split(seed, held_out)
    model_folder = folder / "model"
    make_hf_model_folder(
        model_folder,
        config=showcase.MODEL,
        seed=seed,
        text=task.corpus(train + evaluated),
        vocab_size=showcase.VOCABULARY,
    )
    bare = Bare(model_folder, seed)
    sequences = [bare.expert_sequence(row) for row in task.expert_rows(train, calls, seed)]
    optimizer = torch.optim.AdamW(bare.model.parameters(), lr=SFT_LR, fused=True)
    sft_curve = [bare.evaluate(evaluated, 0)]
    for start in range(0, len(sequences), SFT_JOB):
        bare.sft(sequences[start : start + SFT_JOB], optimizer)
        sft_curve.append(bare.evaluate(evaluated, len(sft_curve)))
    # The RL stage starts from the SFT weights with a fresh optimizer, as the showcase's second
    # deployment does, and draws its questions as run.py does.
    optimizer = torch.optim.AdamW(bare.model.parameters(), lr=RL_LR, fused=True)
    rng = random.Random(seed)
    rl_curve = [sft_curve[-1]]
    for number in range(rl_jobs):
        questions = rng.sample(train, showcase.QUESTIONS_PER_JOB)
        for _ in range(showcase.GROUP * len(questions)):
            rng.getrandbits(31)  # the seeds run.py draws for its answers
        bare.rl_job(questions, optimizer, seed * 1000 + number)
        rl_curve.append(bare.evaluate(evaluated, 100 + number))
    return {
        "sft": sft_curve[-1],
        "rl": rl_curve[-1],
        "sft_curve": sft_curve,
        "rl_curve": rl_curve,
        "seconds": time.monotonic() - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--folder", type=Path, help="where the runs go (a temporary folder)")
    parser.add_argument("--expert-calls", type=int, default=16000)
    parser.add_argument("--rl-jobs", type=int, default=20)
    parser.add_argument("--held-out", type=int, default=task.HELD_OUT)
    args = parser.parse_args()
    root = args.folder or Path(tempfile.mkdtemp(prefix="bench-learning-"))
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = []
    for seed in args.seeds:
        reef = showcase.run_seed(
            root / "reef", seed, args.expert_calls, args.rl_jobs, args.held_out
        )
        folder = root / "bare" / f"seed-{seed}"
        folder.mkdir(parents=True)
        bare = bare_run(folder, seed, args.expert_calls, args.rl_jobs, args.held_out)
        rows.append((seed, reef, bare))
        print(
            f"seed {seed}: after SFT reef {reef['sft']:.2f} bare {bare['sft']:.2f}; after RL reef"
            f" {reef['rl']:.2f} bare {bare['rl']:.2f}; wall reef {reef['seconds']:.0f} s bare"
            f" {bare['seconds']:.0f} s",
            flush=True,
        )
    (root / "bench_learning.json").write_text(json.dumps(rows, indent=1))
    gap = statistics.mean(reef["rl"] - bare["rl"] for _, reef, bare in rows)
    ratio = sum(r["seconds"] for _, r, _ in rows) / sum(b["seconds"] for _, _, b in rows)
    print(f"n = {len(rows)} seeds, in {root}")
    print(f"held-out success after RL, reef - bare (mean): {gap:+.3f} (goal: within 0.03)")
    print(f"wall time, reef / bare: {ratio:.2f} (goal: at most 1.3)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
