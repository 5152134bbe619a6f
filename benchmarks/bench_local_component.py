"""The local component's trained tokens per second against a bare PyTorch loop.

The bare loop is the limit of the machine: the same model, the same token batches (rendered
and padded beforehand, not timed), and per step the same forward pass, the cross-entropy of
the trained positions alone (picked out by indices made beforehand), backward pass, gradient
clipping and PyTorch's fused AdamW step, with nothing else, on a worker thread as the
component's jobs run. The component runs what a trainer runs: for each job ``submit``,
``wait`` and ``publish`` (rendering, scheduling, the steps, durable saves of weights,
optimizer state and outcome, the artifact). Each measurement runs in a fresh process,
component and bare loop alternating, for several rounds; a warm-up job of 16 samples (not
timed) comes first in each. Goals: >= 0.9 of the bare loop at 256-sample jobs and >= 0.8 at
16-sample jobs.

    .venv/bin/python benchmarks/bench_local_component.py [--models tiny-gpt hf hf-lora]
        [--samples 16 256] [--rounds 5] [--per-run 256] [--threads 1]

``--per-run`` is how many samples each measurement times (whole jobs, at least one). Both
sides report tokens per second of wall-clock time (the goal's measure: it includes the
component's waits for the disk) and of the process's CPU time (steadier on a busy machine; it
leaves those waits out). Models: ``tiny-gpt`` (the quickstart's: d_model 64, 2 layers, the
byte tokenizer), ``hf`` (a 4-layer Llama of width 128, built from a config on disk, trained
whole) and ``hf-lora`` (the same with a rank-16 LoRA adapter on every linear layer).

On a machine with a CUDA GPU both sides train there (the component's ``device: auto``), in
bfloat16 autocast where the GPU has it; ``scripts/device-check`` runs it so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

GOALS = {16: 0.8, 256: 0.9}
BATCH_SIZE = 8
HF_CONFIG = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}


@attrs.frozen
class Rate:
    """Trained tokens per second of wall-clock time and of the process's CPU time."""

    wall: float
    cpu: float


WORDS = ("the", "agent", "called", "a", "tool", "and", "read", "its", "result", "then",
         "answered", "the", "user", "in", "plain", "words")  # fmt: skip


def settings(model: str, state_dir: Path, model_folder: Path | None) -> dict[str, Any]:
    """The component's settings for ``model``."""
    common = {"state_dir": str(state_dir), "batch_size": BATCH_SIZE, "learning_rate": 1e-4}
    if model == "tiny-gpt":
        return {**common, "d_model": 64, "n_layers": 2, "n_heads": 4, "max_seq_len": 512}
    assert model_folder is not None
    lora = {"lora": {"r": 16, "alpha": 32, "target_modules": ["all-linear"]}}
    return {**common, "model_path": str(model_folder), **(lora if model == "hf-lora" else {})}


def trajectory(n: int) -> dict[str, Any]:
    """A two-call tool-using conversation of a few hundred characters; lengths vary with n."""
    say = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(8 + n % 17))
    call = {"tool_call_id": f"c{n}", "function_name": "lookup", "arguments": {"q": say[:20]}}
    return {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "bench", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": f"Question {n}: {say}?"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "is_copied_context": True,
                "tool_calls": [call],
                "observation": {"results": [{"source_call_id": f"c{n}", "content": say}]},
            },
            {"step_id": 3, "source": "agent", "message": f"The answer: {say}."},
        ],
    }


def jobs(count: int, samples: int) -> list[list[dict[str, Any]]]:
    """A warm-up job of 16 trajectories, then ``count`` jobs of ``samples`` trajectories each,
    the same in every process."""
    timed = [[trajectory(16 + j * samples + i) for i in range(samples)] for j in range(count)]
    return [[trajectory(i) for i in range(16)], *timed]


def run_component(model: str, model_folder: Path | None, work: list[list[Any]]) -> Rate:
    """Trained tokens per second of the component over ``work[1:]`` (``work[0]`` warms up)."""
    from reef.components.local.component import LocalComponent
    from reef.core.job_data import JobData, TrajectorySample

    with tempfile.TemporaryDirectory() as state:
        local = LocalComponent.from_config(settings(model, Path(state), model_folder))

        def job(index: int) -> int:
            data = JobData(f"bench:data:{index}", [TrajectorySample(t) for t in work[index]])
            outcome = local.wait(local.submit(data))
            assert outcome.event == "finished", outcome.error
            local.publish()
            return int(outcome.metrics["trained_tokens"])

        job(0)
        start, cpu = time.perf_counter(), time.process_time()
        tokens = sum(job(index) for index in range(1, len(work)))
        rate = Rate(tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu))
        local.close()
    return rate


def bare_steps(local: Any, work: list[list[Any]]) -> list[list[tuple[Any, ...]]]:
    """Each job's steps as the component cuts them, rendered and padded beforehand:
    ``(ids, attention mask or None, trained positions, their targets, trained tokens)`` per
    step, the trained positions as indices into the flattened next-token predictions (so the
    loss is computed at those alone)."""
    import torch

    from reef.components.interface import Scheduling
    from reef.components.scheduling import plan_steps
    from reef.core.chat_rendering import render_samples

    device = local.device
    jobs_steps = []
    for trajectories in work:
        rendered = [s for _, s in render_samples(local.renderer, trajectories).rendered]
        lengths = [[len(seq.token_ids) for seq in s.sequences] for s in rendered]
        plan = plan_steps(lengths, batch_size=BATCH_SIZE, scheduling=Scheduling())
        steps = []
        for step in plan.steps:
            rows = [rendered[s].sequences[i] for s, i in step.sequences]
            longest = max(len(r.token_ids) for r in rows)
            pad = [longest - len(r.token_ids) for r in rows]
            ids = [[*r.token_ids, *[0] * p] for r, p in zip(rows, pad, strict=True)]
            masks = [[*r.loss_mask[1:], *[0] * p] for r, p in zip(rows, pad, strict=True)]
            attention = [[1] * len(r.token_ids) + [0] * p for r, p in zip(rows, pad, strict=True)]
            tokens = torch.tensor(ids, device=device)
            trained = torch.tensor(masks, device=device).reshape(-1).nonzero().squeeze(1)
            steps.append(
                (
                    tokens,
                    torch.tensor(attention, device=device) if any(pad) else None,
                    trained,
                    tokens[:, 1:].reshape(-1).index_select(0, trained),
                    len(trained),
                )
            )
        jobs_steps.append(steps)
    return jobs_steps


def run_bare(model: str, model_folder: Path | None, work: list[list[Any]]) -> Rate:
    """Trained tokens per second of the bare loop over the same batches."""
    import torch
    import torch.nn.functional as F

    from reef.components.local.component import LocalComponent

    with tempfile.TemporaryDirectory() as state:
        # The component builds the same model and renderer; it trains nothing here.
        local = LocalComponent.from_config(settings(model, Path(state), model_folder))
        model_ = local.model
        steps = bare_steps(local, work)
        parameters = model_.trainable_parameters()
        optimizer = torch.optim.AdamW(parameters, lr=1e-4, fused=True)
        model_.module.train()

        cuda = local.device.type == "cuda"
        # On a GPU, the component's own precision: bfloat16 autocast where the GPU has it.
        bf16 = cuda and torch.cuda.is_bf16_supported()

        def train(job_steps: list[tuple[Any, ...]]) -> int:
            for ids, attention, trained, targets, count in job_steps:
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    logits = model_.logits(ids, attention)
                predictions = logits[:, :-1].reshape(-1, logits.shape[-1]).index_select(0, trained)
                loss = F.cross_entropy(predictions.float(), targets, reduction="sum") / count
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, 1.0)
                optimizer.step()
            return sum(step[4] for step in job_steps)

        def timed() -> Rate:
            train(steps[0])
            start, cpu = time.perf_counter(), time.process_time()
            tokens = sum(train(job_steps) for job_steps in steps[1:])
            if cuda:
                torch.cuda.synchronize()  # the steps queued on the GPU are part of the time
            wall, used = time.perf_counter() - start, time.process_time() - cpu
            return Rate(tokens / wall, tokens / used)

        # On a worker thread, as the component trains: torch's CPU threads behave differently
        # on the main thread (on a busy machine, up to several times slower).
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(timed).result()


def worker(args: argparse.Namespace) -> None:
    """One measurement, in this (fresh) process: prints its tokens per second."""
    import torch

    # One thread each: on a shared 2-core machine two threads per process make both figures
    # swing with the neighbours' load far more than they differ.
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    folder = Path(args.model_folder) if args.model_folder else None
    work = jobs(args.jobs, args.samples)
    run = run_component if args.worker == "component" else run_bare
    rate = run(args.model, folder, work)
    print(json.dumps({"wall": rate.wall, "cpu": rate.cpu}))


def measure(
    kind: str, model: str, samples: int, jobs_count: int, folder: Path | None, threads: int
) -> Rate:
    command = [sys.executable, __file__, "--worker", kind, "--model", model, "--samples",
               str(samples), "--jobs", str(jobs_count), "--threads", str(threads)]  # fmt: skip
    if folder is not None:
        command += ["--model-folder", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} {model} failed:\n{done.stderr[-3000:]}")
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    return Rate(float(rates["wall"]), float(rates["cpu"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-gpt", "hf", "hf-lora"])
    parser.add_argument("--samples", nargs="+", type=int, default=[16, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-run", type=int, default=256, help="samples timed per process")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--worker", choices=["component", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model-folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.samples = args.samples[0]
        worker(args)
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = None
        if any(m.startswith("hf") for m in args.models):
            from reef.testing.hf_model import make_hf_model_folder

            folder = make_hf_model_folder(Path(scratch) / "model", config=HF_CONFIG)
        print(f"batch size {BATCH_SIZE}; {args.per_run} samples timed per process; "
              f"{args.threads} torch thread(s); {args.rounds} rounds, each in fresh processes, "
              "component and bare alternating; ratios of tokens per second of wall-clock time "
              "and of the process's CPU time")  # fmt: skip
        for model in args.models:
            model_folder = folder if model.startswith("hf") else None
            for samples in args.samples:
                jobs_count = max(1, args.per_run // samples)
                walls, cpus = [], []
                for _ in range(args.rounds):
                    component = measure(
                        "component", model, samples, jobs_count, model_folder, args.threads
                    )
                    bare = measure("bare", model, samples, jobs_count, model_folder, args.threads)
                    walls.append(component.wall / bare.wall)
                    cpus.append(component.cpu / bare.cpu)
                    print(f"  {model:8} {samples:4}-sample jobs: component {component.wall:7.0f}"
                          f" tok/s, bare {bare.wall:7.0f} tok/s; wall {walls[-1]:.2f},"
                          f" cpu {cpus[-1]:.2f}", flush=True)  # fmt: skip
                goal = GOALS.get(samples)
                wall = statistics.median(walls)
                verdict = "" if goal is None else (
                    f"; goal >= {goal}: {'met' if wall >= goal else 'NOT met'}"
                )  # fmt: skip
                print(f"{model:8} {samples:4}-sample jobs: component / bare, median of "
                      f"{args.rounds}: wall {wall:.2f} (min {min(walls):.2f}, max "
                      f"{max(walls):.2f}), cpu {statistics.median(cpus):.2f}{verdict}",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
