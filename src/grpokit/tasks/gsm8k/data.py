"""GSM8K in verl's row format (verl's ``examples/data_preprocess/gsm8k.py``, re-implemented).

Row: ``data_source="openai/gsm8k"``, ``prompt=[{"role": "user", "content": question + " " +
INSTRUCTION}]``, ``ability="math"``, ``reward_model={"style": "rule", "ground_truth": <text after
"####", commas removed>}``, ``extra_info={"split", "index", "answer", "question"}``. verl's built-in
GSM8K scorer (``verl/utils/reward_score/gsm8k.py``) reads ``data_source`` and ``ground_truth``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from grpokit.tasks.prepared import RowProblems, read_jsonl, staged_output

log = logging.getLogger(__name__)

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS = ("train", "test")


EXAMPLE_LINE = '{"question": "...", "answer": "...\\n#### 42"}'


def extract_solution(answer: str) -> str:
    """The number after ``####`` with thousands separators removed.

    Raises:
        ValueError: the answer has no ``####`` line.
    """
    if "####" not in answer:
        raise ValueError(f"no '####' in GSM8K answer: {answer[-80:]!r}")
    return answer.split("####")[-1].strip().replace(",", "")


def row_problem(example: Any) -> tuple[str, str, str] | None:
    """``(field, what, fix)`` of the first fault of a raw GSM8K example, None when it is usable.

    Usable: ``question`` a non-empty string; ``answer`` a string whose text after the last ``####``
    is a number (commas allowed), what verl's GSM8K rule reward compares against.
    """
    question, answer = example.get("question"), example.get("answer")
    if "question" not in example:
        return "question", "missing", 'add "question": "<the problem text>"'
    if not isinstance(question, str) or not question.strip():
        return "question", f"{type(question).__name__} {str(question)[:40]!r}, not a non-empty string", "give the text"
    if "answer" not in example:
        return "answer", "missing", 'add "answer": "<solution>\\n#### <number>"'
    if not isinstance(answer, str):
        return "answer", f"a {type(answer).__name__}, not a string", 'write it as "<solution>\\n#### <number>"'
    if "####" not in answer:
        return "answer", f"no '####' in {answer[-40:]!r}", "end the answer with a line '#### <final number>'"
    final = extract_solution(answer)
    try:
        float(final.replace("$", ""))
    except ValueError:
        return "answer", f"{final[:40]!r} after '####' is not a number", "put the final number after '####'"
    return None


def to_row(example: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    question = example["question"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["answer"])},
        "extra_info": {"split": split, "index": index, "answer": example["answer"], "question": question},
    }


def _hub_split(source: str, split: str) -> list[dict[str, Any]]:
    """Raw examples of one split of a hub dataset: ``datasets`` (config ``main``), then ModelScope."""
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


def load_split(source: str, split: str, problems: RowProblems | None = None) -> list[dict[str, Any]]:
    """Checked raw examples of one split from a local folder (``<split>.jsonl``) or a hub dataset id.

    Every bad row (not UTF-8, not a JSON object, a field missing or malformed, see
    :func:`row_problem`) and an empty split go to ``problems``; without ``problems`` they raise one
    :class:`~grpokit.tasks.prepared.DataError` here. Raises FileNotFoundError for a missing
    ``<split>.jsonl`` and RuntimeError when neither hub loads the id.
    """
    own = problems is None
    problems = problems if problems is not None else RowProblems()
    local = Path(source)
    if local.is_dir():
        path = local / f"{split}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: a local GSM8K folder holds train.jsonl and test.jsonl")
        numbered = read_jsonl(path, problems, example=EXAMPLE_LINE)  # lazy: problems stay in line order
        where = f"{path}:{{}}"
    else:
        numbered = list(enumerate(_hub_split(source, split), start=1))
        where = f"{source} split {split} row {{}}"
        if not numbered:
            problems.add(f"{source} split {split}", "", "no rows", "pass a dataset with GSM8K rows")
    examples = []
    for number, example in numbered:
        fault = row_problem(example)
        if fault is None:
            examples.append(example)
        else:
            problems.add(where.format(number), *fault)
    if own:
        problems.raise_if_any()
    return examples


def build(source: str, out: Path) -> dict[str, int]:
    """Write ``train.parquet``, ``test.parquet`` and ``manifest.json`` to ``out``; returns the row counts.

    Both splits are read and checked first; a :class:`~grpokit.tasks.prepared.DataError` lists every
    bad row of both, and ``out`` is then left untouched.
    """
    problems = RowProblems()
    examples = {split: load_split(source, split, problems) for split in SPLITS}
    problems.raise_if_any()
    local = Path(source)
    source_files = [local / f"{split}.jsonl" for split in SPLITS] if local.is_dir() else []
    counts = {}
    with staged_output(
        out, task="gsm8k", source=str(local.resolve()) if local.is_dir() else source, source_files=source_files
    ) as tmp:
        for split in SPLITS:
            rows = [to_row(ex, split, i) for i, ex in enumerate(examples[split])]
            pd.DataFrame(rows).to_parquet(tmp / f"{split}.parquet")
            counts[split] = len(rows)
    for split in SPLITS:
        log.info("%s: %d rows -> %s", split, counts[split], Path(out) / f"{split}.parquet")
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
