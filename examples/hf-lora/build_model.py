"""Build the example's model folder from ``model.json``: a small Llama with seeded random
weights and a byte-level BPE tokenizer trained on a few kilobytes of text, with a ChatML chat
template that has tools and thinking. transformers, vLLM and SGLang load the folder as they
load a downloaded one; nothing is fetched from a hub.

    .venv/bin/python examples/hf-lora/build_model.py TARGET_FOLDER [--config model.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reef.testing.hf_model import make_hf_model_folder

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="the model folder to write")
    parser.add_argument("--config", type=Path, default=HERE / "model.json")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = json.loads(args.config.read_text(encoding="utf-8"))
    folder = make_hf_model_folder(args.target, config=config, seed=args.seed)
    print(f"model folder: {folder}")


if __name__ == "__main__":
    main()
