"""Evaluate two OpenAI-compatible endpoints (base and trained model) on a test parquet.

Rows follow verl's GSM8K preprocessing (examples/data_preprocess/gsm8k.py): ``prompt`` (chat
messages), ``data_source``, ``reward_model.ground_truth``, ``extra_info.{index, question}``.
Answers are scored with the same rule as training: verl's ``verl.utils.reward_score.gsm8k.compute_score``
(strict ``#### <number>``), or a verl-style ``compute_score(data_source, solution_str, ground_truth,
extra_info)`` given as ``module:function``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from openai import AsyncOpenAI
from verl.utils.reward_score import gsm8k

from grpokit.run_folder.layout import EVAL_ANSWERS, EVAL_DISAGREEMENTS, EVAL_SUMMARY

log = logging.getLogger(__name__)

Scorer = Callable[[str, str, str, dict], float]


@dataclass
class EvalItem:
    """One test row: index, question text, chat messages, ground truth, data_source."""

    index: int
    question: str
    messages: list[dict]
    ground_truth: str
    data_source: str


@dataclass
class Endpoint:
    """An OpenAI-compatible server: name (label in outputs), base_url (``http://h:p/v1``), api_key,
    model (the served model name)."""

    name: str
    base_url: str
    api_key: str
    model: str


def _plain(v):
    """numpy/pyarrow containers from parquet into plain Python."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def load_items(parquet: Path | str, limit: int | None = None) -> list[EvalItem]:
    """Read the test parquet; raises ValueError naming a missing column."""
    df = pd.read_parquet(parquet)
    for col in ("prompt", "reward_model"):
        if col not in df.columns:
            raise ValueError(
                f"{parquet}: no column {col!r} (expected verl's RL dataset format); has {list(df.columns)}"
            )
    if limit is not None:
        df = df.head(limit)
    items = []
    for i, row in enumerate(df.to_dict("records")):
        messages = _plain(row["prompt"])
        extra = _plain(row.get("extra_info")) or {}
        reward = _plain(row["reward_model"])
        question = extra.get("question") or next((m["content"] for m in messages if m["role"] == "user"), "")
        items.append(
            EvalItem(
                index=int(extra.get("index", i)),
                question=str(question),
                messages=messages,
                ground_truth=str(reward["ground_truth"]),
                data_source=str(row.get("data_source", "openai/gsm8k")),
            )
        )
    return items


def gsm8k_scorer(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """verl's GSM8K rule (strict format, 1.0 or 0.0)."""
    return float(gsm8k.compute_score(solution_str, ground_truth))


def load_scorer(spec: str | None) -> Scorer:
    """``None`` -> :func:`gsm8k_scorer`; ``"pkg.module:function"`` -> that verl-style compute_score."""
    if not spec:
        return gsm8k_scorer
    mod_name, _, fn = spec.partition(":")
    if not fn:
        raise ValueError(f"--reward {spec!r}: expected module:function")
    func = getattr(importlib.import_module(mod_name), fn)

    def score(data_source, solution_str, ground_truth, extra_info=None):
        out = func(
            data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info or {}
        )
        return float(out["score"] if isinstance(out, dict) else out)

    return score


async def _answer_all(
    ep: Endpoint, items: list[EvalItem], max_tokens: int, concurrency: int, timeout_s: float
) -> list[str]:
    client = AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, timeout=timeout_s, max_retries=2)
    sem = asyncio.Semaphore(concurrency)

    async def one(item: EvalItem) -> str:
        async with sem:
            resp = await client.chat.completions.create(
                model=ep.model,
                messages=item.messages,
                temperature=0.0,
                max_tokens=max_tokens,
            )
            return resp.choices[0].message.content or ""

    try:
        return await asyncio.gather(*(one(it) for it in items))
    finally:
        await client.close()


def answer_all(
    ep: Endpoint, items: list[EvalItem], max_tokens: int, concurrency: int = 16, timeout_s: float = 600.0
) -> list[str]:
    """Greedy (temperature 0) answers of one endpoint, in item order; ``max_tokens`` per answer
    (``chain.max_tokens``, :class:`grpokit.config.schema.ChainConf`)."""
    return asyncio.run(_answer_all(ep, items, max_tokens, concurrency, timeout_s))


def compare(items: list[EvalItem], answers: dict[str, list[str]], scorer: Scorer = gsm8k_scorer) -> dict:
    """Score every endpoint's answers.

    Returns ``{"accuracy": {name: float}, "n": int, "rows": [per item dict], "disagreements":
    [rows where the scores differ]}``. Each row: index, question, ground_truth, and per endpoint
    ``<name>_answer``, ``<name>_extracted`` (verl's strict extraction), ``<name>_score``.
    """
    names = list(answers)
    rows = []
    for i, item in enumerate(items):
        row = {"index": item.index, "question": item.question, "ground_truth": item.ground_truth}
        for name in names:
            text = answers[name][i]
            row[f"{name}_answer"] = text
            row[f"{name}_extracted"] = gsm8k.extract_solution(text, method="strict")
            row[f"{name}_score"] = scorer(item.data_source, text, item.ground_truth, {"index": item.index})
        rows.append(row)
    n = len(items)
    acc = {name: (sum(r[f"{name}_score"] for r in rows) / n if n else float("nan")) for name in names}
    disagree = [r for r in rows if len({r[f"{name}_score"] for name in names}) > 1]
    return {"accuracy": acc, "n": n, "rows": rows, "disagreements": disagree}


def write_results(result: dict, endpoints: list[Endpoint], out_dir: Path) -> dict[str, Path]:
    """Write ``eval_summary.json``, ``answers.jsonl`` and ``disagreements.jsonl`` under out_dir
    (names: :mod:`grpokit.run_folder.layout`); returns ``{"summary", "answers", "disagreements": path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "n": result["n"],
        "models": {ep.name: {"model": ep.model, "accuracy": result["accuracy"][ep.name]} for ep in endpoints},
        "disagreements": len(result["disagreements"]),
        "endpoints": [{k: v for k, v in asdict(ep).items() if k != "api_key"} for ep in endpoints],
    }
    paths = {
        "summary": out_dir / EVAL_SUMMARY,
        "answers": out_dir / EVAL_ANSWERS,
        "disagreements": out_dir / EVAL_DISAGREEMENTS,
    }
    paths["summary"].write_text(json.dumps(summary, indent=2))
    for key in ("answers", "disagreements"):
        rows = result["rows"] if key == "answers" else result["disagreements"]
        paths[key].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths
