"""Publication latency: from a job's end to the engine answering with the new artifact, beside
the time it takes to save the weights.

The local component trains a small Hugging Face Llama (a LoRA adapter for vLLM, the whole
weights for SGLang); after each job the trainer's publication runs as ``reef serve`` runs it
(:class:`reef.runtime.PublishedComponent`: the component publishes, the scenario's
:class:`reef.engines.publisher.Publisher` loads the artifact into the engine over HTTP and
the trainer waits for it), then one chat call is routed to the engine and must come back
naming the new artifact. The engine is the stand-in of :mod:`doubles.engine_standins` on
loopback (it loads nothing into a GPU, so this is Reef's own share of the latency). The
baseline, measured in the same run on the same model after each job, is saving the weights
durably (``save_model_folder``: what the component writes at each job's end).

    .venv/bin/python benchmarks/bench_publication.py [--engines vllm sglang] [--jobs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Reef's stand-ins of vLLM and SGLang live with reef-core's tests (reef-core/tests/doubles).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reef-core" / "tests"))
from bench_local_component import HF_CONFIG, settings, trajectory

SAMPLES = 16


def measure(engine: str, jobs: int, folder: Path) -> tuple[list[float], list[float]]:
    """Per job: seconds from its end to the engine answering with its artifact, and seconds to
    save its weights."""
    from doubles.engine_standins import sglang_standin, vllm_standin

    from reef.components.local.artifacts import save_model_folder
    from reef.components.local.component import LocalComponent
    from reef.core.job_data import JobData, TrajectorySample
    from reef.engines.admin import EngineAdmin
    from reef.engines.publisher import Publisher
    from reef.engines.sglang import SglangFullWeights
    from reef.engines.vllm import VllmAdapters
    from reef.runtime import PublishedComponent
    from reef.testing.service import serve_on_loopback

    model = "hf-lora" if engine == "vllm" else "hf"
    app, _ = (vllm_standin if engine == "vllm" else sglang_standin)("bench")
    admin: EngineAdmin = VllmAdapters() if engine == "vllm" else SglangFullWeights("bench")
    latencies: list[float] = []
    saves: list[float] = []
    with serve_on_loopback(app) as url, tempfile.TemporaryDirectory() as state:
        local = LocalComponent.from_config(settings(model, Path(state) / "state", folder))
        publisher = Publisher("bench", admin, "bench", url=url, source=local.artifacts, keep=2)
        publisher.start()
        published = PublishedComponent(local, publisher, timeout=60)
        published.publish()  # the first weights, before any job
        client = httpx.Client(base_url=url, timeout=60)
        try:
            for index in range(jobs):
                data = JobData(
                    f"bench:publish:{index}",
                    [TrajectorySample(trajectory(index * SAMPLES + i)) for i in range(SAMPLES)],
                )
                outcome = local.wait(local.submit(data))
                ended = time.perf_counter()
                assert outcome.event == "finished", outcome.error
                artifact = published.publish()
                route = publisher.route()
                assert route is not None
                assert route.artifact_id == artifact.artifact_id
                answer = client.post(
                    "/v1/chat/completions",
                    json={"model": route.model, "messages": [{"role": "user", "content": "hi"}]},
                ).json()
                assert publisher.answered(route, answer) == artifact.artifact_id, answer
                latencies.append(time.perf_counter() - ended)
                start = time.perf_counter()
                save_model_folder(Path(state) / "saved", local.model)
                saves.append(time.perf_counter() - start)
        finally:
            client.close()
            publisher.stop()
            local.close()
    return latencies, saves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", choices=("vllm", "sglang"),
                        default=["vllm", "sglang"])  # fmt: skip
    parser.add_argument("--jobs", type=int, default=5, help="timed jobs per engine")
    args = parser.parse_args()
    from reef.testing.hf_model import make_hf_model_folder

    with tempfile.TemporaryDirectory() as work:
        folder = make_hf_model_folder(Path(work) / "model", config=dict(HF_CONFIG), seed=0)
        for engine in args.engines:
            latencies, saves = measure(engine, args.jobs, folder)
            latency, save = statistics.median(latencies), statistics.median(saves)
            weights = "LoRA adapter" if engine == "vllm" else "full weights"
            print(
                f"{engine:6} ({weights}), median of {len(latencies)}: job end -> engine answers"
                f" with the new artifact {latency * 1000:.1f} ms; saving the weights"
                f" {save * 1000:.1f} ms; publication / save {latency / save:.2f}"
            )


if __name__ == "__main__":
    main()
