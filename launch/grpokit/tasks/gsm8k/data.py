"""GSM8K in verl's row format (verl's ``examples/data_preprocess/gsm8k.py``, re-implemented).

Row: ``data_source="openai/gsm8k"``, ``prompt=[{"role": "user", "content": question + " " +
INSTRUCTION}]``, ``ability="math"``, ``reward_model={"style": "rule", "ground_truth": <text after
"####", commas removed>}``, ``extra_info={"split", "index", "answer", "question"}``. verl's built-in
GSM8K scorer (``verl/utils/reward_score/gsm8k.py``) reads ``data_source`` and ``ground_truth``.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")


def extract_solution(answer: str) -> str:
    """The number after ``####`` with thousands separators removed.

    Raises:
        ValueError: the answer has no ``####`` line.
    """
    if "####" not in answer:
        raise ValueError(f"no '####' in GSM8K answer: {answer[-80:]!r}")
    return answer.split("####")[-1].strip().replace(",", "")


def to_row(example: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    question = example["question"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["answer"])},
        "extra_info": {"split": split, "index": index, "answer": example["answer"], "question": question},
    }


def load_split(source: str, split: str) -> list[dict[str, Any]]:
    """Raw examples of one split from a local folder (``<split>.jsonl``) or a hub dataset id.

    Hub ids are loaded with ``datasets`` (config ``main``), then ModelScope if that fails.
    """
    local = Path(source)
    if local.is_dir():
        path = local / f"{split}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: a local GSM8K folder holds train.jsonl and test.jsonl")
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    try:
        import datasets

        return list(datasets.load_dataset(source, "main", split=split))
    except Exception as hf_error:
        try:
            from modelscope.msdatasets import MsDataset

            return list(MsDataset.load(source, subset_name="main", split=split))
        except Exception as ms_error:
            raise RuntimeError(
                f"could not load {source!r} split {split!r}: Hugging Face: {hf_error}; "
                f"ModelScope: {ms_error}. Pass a local folder with train.jsonl/test.jsonl."
            ) from None


def build(source: str, out: Path) -> dict[str, int]:
    """Write ``train.parquet`` and ``test.parquet`` to ``out``; returns the row counts."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in SPLITS:
        rows = [to_row(ex, split, i) for i, ex in enumerate(load_split(source, split))]
        pd.DataFrame(rows).to_parquet(out / f"{split}.parquet")
        counts[split] = len(rows)
        log.info("%s: %d rows -> %s", split, len(rows), out / f"{split}.parquet")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        default="openai/gsm8k",
        help="hub dataset id (Hugging Face, then ModelScope) or a folder with train/test.jsonl",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for train.parquet and test.parquet")


def main(args: argparse.Namespace) -> None:
    counts = build(args.source, args.out)
    print(f"gsm8k: {counts['train']} train / {counts['test']} test rows in {args.out}")
