"""Build a random-weight smoke model (Qwen3 / Qwen3.5 family) with a small BPE tokenizer.

    python launch/make_tiny_model.py --out models/tiny
    python launch/make_tiny_model.py --out models/qwen3.5-0.8b-random --like qwen3.5-0.8b
    python launch/make_tiny_model.py --out DIR --tokenizer-data my.jsonl notes.txt

The folder loads with AutoTokenizer / AutoModelForCausalLM.from_pretrained and serves as
actor_rollout_ref.model.path. See grpokit.models.tiny for the shapes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from grpokit.models.shapes import LIKES


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output folder (created)")
    parser.add_argument("--like", default="tiny", choices=LIKES, help="model shape (default: tiny)")
    parser.add_argument(
        "--tokenizer-data",
        nargs="+",
        type=Path,
        default=None,
        help="text files or folders (.jsonl .json .txt .csv .parquet); default: GSM8K train + NLU sentences",
    )
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the random weights")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from grpokit.models import build_model  # torch and transformers: after parsing (fast --help)

    return build_model(args.out, like=args.like, tokenizer_data=args.tokenizer_data, seed=args.seed)


def entry(argv: list[str] | None = None) -> int:
    """``grpokit make-tiny-model ...`` / ``python launch/make_tiny_model.py ...``; returns the exit status."""
    result = main(argv)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(entry())
