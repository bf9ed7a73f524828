"""Text the smoke model's BPE tokenizer is trained on: task files, and the tool-memory scaffolding."""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from transformers.utils.chat_template_utils import render_jinja_template

log = logging.getLogger(__name__)

# The tool-memory task's prompt and tool schemas (search_memory / read_memory; the format of
# shared/reference's verl multi-turn tool example), so the tokenizer learns their words.
TOOL_MEMORY_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_memory",
            "description": "Search user memory and return candidate memory ids.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_memory",
            "description": "Read one memory by id.",
            "parameters": {
                "type": "object",
                "properties": {"memory_id": {"type": "string"}},
                "required": ["memory_id"],
            },
        },
    },
]
TOOL_MEMORY_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a memory-using assistant. Use tools before answering."},
    {
        "role": "user",
        "content": "Question: Which tea should be prepared for this user?\nSearch hint: tea preference\n"
        "Use the memory tools.",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "search_memory", "arguments": {"query": "tea"}}}],
    },
    {"role": "tool", "content": "['mem_tea', 'mem_music']"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "read_memory", "arguments": {"memory_id": "mem_tea"}}}
        ],
    },
    {"role": "tool", "content": "The user prefers jasmine green tea for late afternoon breaks."},
    {"role": "assistant", "content": "FINAL: jasmine green tea"},
]

_TEXT_SUFFIXES = (".jsonl", ".json", ".txt", ".csv", ".parquet")


def default_tokenizer_data() -> list[Path]:
    """GSM8K's train.jsonl and the NLU k-fold 1 train CSVs under the shared data folder.

    The folder is ``$GRPOKIT_SHARED_DATA``, else ``<repo>/../shared/data``. Missing files are
    left out with a warning (the builder then trains on the scaffolding text alone).
    """
    root = Path(os.environ.get("GRPOKIT_SHARED_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data"))
    paths = [root / "gsm8k" / "train.jsonl", *sorted((root / "nlu" / "kfold1" / "trainset").glob("*.csv"))]
    found = [path for path in paths if path.is_file()]
    if not found:
        log.warning(
            "no default tokenizer data under %s (set GRPOKIT_SHARED_DATA or pass --tokenizer-data); "
            "training the tokenizer on prompt scaffolding only",
            root,
        )
    return found


def iter_texts(paths: Iterable[str | Path] | None = None) -> Iterator[str]:
    """Yield the text of `paths` (files or folders searched for the suffixes below).

    .txt: one text per line; .jsonl / .json: every string value of each record, nested ones
    included (GSM8K: question, answer); .csv: the string cells, delimiter sniffed among
    ``;,\\t`` (the NLU files use ';'); .parquet: the string cells. None: `default_tokenizer_data`.
    Raises FileNotFoundError for a missing path, ValueError for another suffix.
    """
    for path in _expand(default_tokenizer_data() if paths is None else paths):
        suffix = path.suffix.lower()
        if suffix == ".txt":
            with path.open(encoding="utf-8") as lines:
                yield from (line.rstrip("\n") for line in lines if line.strip())
        elif suffix == ".jsonl":
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        yield from _strings(json.loads(line))
        elif suffix == ".json":
            yield from _strings(json.loads(path.read_text(encoding="utf-8")))
        elif suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as handle:
                dialect = csv.Sniffer().sniff(handle.readline(), delimiters=";,\t")
                handle.seek(0)
                for row in csv.DictReader(handle, dialect=dialect):
                    yield from (cell for cell in row.values() if isinstance(cell, str) and not _is_number(cell))
        elif suffix == ".parquet":
            import pandas as pd

            frame = pd.read_parquet(path)
            for column in frame.columns:
                for cell in frame[column]:
                    yield from _strings(cell.tolist() if hasattr(cell, "tolist") else cell)
        else:
            raise ValueError(f"tokenizer data {path}: unsupported suffix {suffix!r}; use one of {_TEXT_SUFFIXES}")


def scaffolding_texts(template: str) -> list[str]:
    """Rendered prompt scaffolding: the tool-memory conversation with its tools, in `template`."""
    rendered, _ = render_jinja_template(
        [TOOL_MEMORY_CONVERSATION], tools=TOOL_MEMORY_TOOLS, chat_template=template, add_generation_prompt=True
    )
    return rendered


def _expand(paths: Iterable[str | Path]) -> Iterator[Path]:
    for item in paths:
        path = Path(item)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _TEXT_SUFFIXES)
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"tokenizer data {path} does not exist; pass existing files to --tokenizer-data")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
