"""Data of the Memory-RL task: Mem-α NLU rows -> verl rows for a memory writer.

Input (``--source``), rows in Mem-α's format (hub dataset ``YuWangX/Memalpha``, see
docs/memalpha-notes.md): columns ``instance_id``, ``chunks`` (JSON list of strings),
``questions_and_answers`` (JSON list of ``{"question", "answer"}``), ``data_source`` (e.g.
``icl_nlu_8296shot_balance``), ``metadata`` (JSON), ``num_chunks``, ``num_questions``. Accepted:

- a local folder with ``train.parquet`` / ``test.parquet`` (or ``data/memalpha/`` below it);
- ``nlu:<folder>`` (or a folder detected as such): NLU-Evaluation-Data CSVs (``trainset/``,
  ``testset/``, ``;``-separated, sentence in ``answer_from_anno``, label in ``scenario_intent``),
  turned into Mem-α-format rows by :func:`build_memalpha_nlu_rows` (labels mapped to a seeded
  permutation of integers, as Mem-α/HELMET do);
- a hub id, loaded with ``datasets.load_dataset`` (ModelScope's ``MsDataset`` as fallback).

Output (the reference account's Memory-RL rows): ``DIR/train.parquet`` and ``DIR/test.parquet``,
one row per NLU source row: ``data_source="memalpha_nlu_memory_json"``, ``prompt`` (one user turn:
the writer instruction, the JSON schema, the target mappings and the context = the first chunk cut to
``--chunk-chars`` at an example boundary), ``ability="memory"``, ``reward_model={"style": "rule",
"ground_truth": {"questions_and_answers": [...], "source_chars": len(context)}}``, ``extra_info``
with ``split``, ``index``, ``memalpha_source``, ``instance_id``, ``num_reward_questions``. The
reward questions ask for the labels of the first ``--qa-per-row`` examples of that context; unlike
the reference account they end with Mem-α's ``Put your final answer as \\boxed{label}.``, because
the scorer reads a boxed or bare label and a chatty answer would score 0.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from grpokit.tasks.prepared import DataError, RowProblems, staged_output

log = logging.getLogger(__name__)

VERL_DATA_SOURCE = "memalpha_nlu_memory_json"
NLU_SOURCE_PREFIX = "icl_nlu"
QUESTION_SUFFIX = "What are the labels for the above sentence? Put your final answer as \\boxed{label}."
MEMORY_SCHEMA = '{"core":"","semantic":[{"m1":"..."}],"episodic":[]}'

# One labelled example: "Sentence: <text>" on one line, "Label: <digits>" on the next.
EXAMPLE_RE = re.compile(r"Sentence:[ \t]*([^\n]*?)[ \t]*\n[ \t]*Label:[ \t]*(\d+)")

Example = tuple[str, str]  # (sentence, label digits)


# ---- Mem-α rows -> verl rows ---------------------------------------------------------------


def cut_chunk(chunk: str, chunk_chars: int) -> str:
    """``chunk`` cut to at most ``chunk_chars`` characters at the last blank line (an example
    boundary), so no example loses the end of its label; a hard cut when there is none."""
    if len(chunk) <= chunk_chars:
        return chunk
    head = chunk[:chunk_chars]
    boundary = head.rfind("\n\n")
    return head[:boundary] if boundary > 0 else head


def extract_examples(text: str, limit: int | None = None, *, drop_trailing: bool = False) -> list[Example]:
    """Unique ``(sentence, label)`` pairs of ``Sentence: ...\\nLabel: N`` examples, in order.

    ``drop_trailing`` drops a match that ends at the very end of ``text`` (after a hard cut its
    label may be cut short, "12" read as "1").
    """
    examples: list[Example] = []
    seen: set[str] = set()
    for m in EXAMPLE_RE.finditer(text):
        sentence = m.group(1).strip()
        if not sentence or sentence in seen or (drop_trailing and m.end() == len(text)):
            continue
        seen.add(sentence)
        examples.append((sentence, m.group(2)))
        if limit is not None and len(examples) >= limit:
            break
    return examples


def label_question(sentence: str) -> str:
    """Mem-α's label question for one sentence."""
    return f"Sentence: {sentence}\n{QUESTION_SUFFIX}"


def writer_prompt(context: str, targets: Sequence[Example]) -> str:
    """The memory writer's user turn (the reference account's prompt)."""
    mappings = "\n".join(f"- Sentence: {s} -> Label: {label}" for s, label in targets)
    return (
        "You are a memory writer.\n\n"
        "Read the context and write compact memory JSON that helps answer future label questions.\n"
        "Return only valid JSON with this exact schema:\n"
        f"{MEMORY_SCHEMA}\n\n"
        f"Target mappings:\n{mappings}\n\n"
        f"Context:\n{context}"
    )


def _json_field(value: Any, name: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"Mem-α column '{name}' is not valid JSON: {value[:80]!r}") from e
    return value


def verl_row(source_row: Mapping[str, Any], split: str, index: int, qa_per_row: int, chunk_chars: int) -> dict | None:
    """One verl row from one Mem-α NLU row, or ``None`` when its first chunk has no example."""
    chunks = list(_json_field(source_row["chunks"], "chunks"))
    if not chunks:
        return None
    chunk = str(chunks[0])
    context = cut_chunk(chunk, chunk_chars)
    hard_cut = len(context) < len(chunk) and not chunk[len(context) :].startswith("\n\n")
    targets = extract_examples(context, qa_per_row, drop_trailing=hard_cut)
    if not targets:
        return None
    qas = [{"question": label_question(s), "answer": label} for s, label in targets]
    return {
        "data_source": VERL_DATA_SOURCE,
        "prompt": [{"role": "user", "content": writer_prompt(context, targets)}],
        "ability": "memory",
        "reward_model": {
            "style": "rule",
            "ground_truth": {"questions_and_answers": qas, "source_chars": len(context)},
        },
        "extra_info": {
            "split": split,
            "index": index,
            "memalpha_source": str(source_row.get("data_source", "")),
            "instance_id": str(source_row.get("instance_id", "")),
            "num_reward_questions": len(qas),
        },
    }


CHUNKS_FIX = 'a JSON list of text chunks, e.g. ["Sentence: ...\\nLabel: 3\\n\\n..."]'


def chunks_fault(source_row: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(field, what, fix)`` when a Mem-α row's ``chunks`` cannot be read, else None."""
    if "chunks" not in source_row:
        return "chunks", "missing", f"add the column: {CHUNKS_FIX}"
    value = source_row["chunks"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return "chunks", f"not valid JSON ({exc.msg} at column {exc.colno})", CHUNKS_FIX
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return "chunks", f"a {type(value).__name__}, not a list", CHUNKS_FIX
    return None


def convert_rows(
    source_rows: Iterable[Mapping[str, Any]],
    split: str,
    *,
    num_rows: int | None,
    qa_per_row: int,
    chunk_chars: int,
    origin: str | None = None,
    problems: RowProblems | None = None,
) -> list[dict]:
    """verl rows from the NLU rows (``data_source`` starting ``icl_nlu``) of ``source_rows``.

    A row whose ``chunks`` cannot be read is named ``<origin> row <n>`` (n from 1) with the fix in
    ``problems`` and left out; without ``problems`` the first one raises a
    :class:`~grpokit.tasks.prepared.DataError`.
    """
    out: list[dict] = []
    skipped = 0
    for number, row in enumerate(source_rows, start=1):
        if not str(row.get("data_source", "")).startswith(NLU_SOURCE_PREFIX):
            continue
        fault = chunks_fault(row)
        if fault is not None:
            where = f"{origin or split} row {number}"
            if problems is None:
                raise DataError([f"{where}: field {fault[0]!r}: {fault[1]}; fix: {fault[2]}"])
            problems.add(where, *fault)
            continue
        converted = verl_row(row, split, len(out), qa_per_row, chunk_chars)
        if converted is None:
            skipped += 1
            continue
        out.append(converted)
        if num_rows is not None and len(out) >= num_rows:
            break
    if skipped:
        log.warning("%s: skipped %d NLU rows whose first chunk has no Sentence/Label example", split, skipped)
    return out


# ---- NLU-Evaluation-Data -> Mem-α rows ------------------------------------------------------


def resolve_nlu_dir(path: str | Path) -> Path | None:
    """The folder holding ``trainset/`` and ``testset/`` CSVs under ``path`` (itself or
    ``kfold1/``), or ``None`` when ``path`` is not in that layout."""
    root = Path(path)
    for candidate in (root, root / "kfold1"):
        if (candidate / "trainset").is_dir() and any((candidate / "trainset").glob("*.csv")):
            return candidate
    return None


NLU_COLUMNS = ("scenario", "intent", "answer_from_anno")


def nlu_split_files(nlu_dir: Path, split: str) -> list[Path]:
    """The CSV files of one NLU split (``trainset``/``testset``), sorted; FileNotFoundError when none."""
    folder = nlu_dir / split
    if (folder / "csv").is_dir():  # upstream's testset keeps its CSVs one level down
        folder = folder / "csv"
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise FileNotFoundError(f"no NLU CSV files in {folder}; expected NLU-Evaluation-Data's {split}/*.csv")
    return files


def _read_nlu_csv(path: Path, problems: RowProblems) -> list[tuple[str, str]]:
    """``(sentence, label name)`` of one ``;``-separated NLU CSV; each bad row goes to ``problems``."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        problems.add(
            f"{path}:{line}", "", f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {column})", "save as UTF-8"
        )
        return []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=";")
    header = next(reader, None)
    if not header:
        problems.add(
            str(path), "", "no rows (the file is empty)", f"a header line with {', '.join(NLU_COLUMNS)}, then rows"
        )
        return []
    missing = [c for c in NLU_COLUMNS if c not in header]
    if missing:
        problems.add(
            f"{path}:1", "", f"header lacks columns {missing}", "use NLU-Evaluation-Data's ';'-separated CSV header"
        )
        return []
    at = {c: header.index(c) for c in NLU_COLUMNS}
    pairs: list[tuple[str, str]] = []
    bad = 0
    for fields in reader:
        where = f"{path}:{reader.line_num}"
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            problems.add(
                where, "", f"{len(fields)} fields, the header has {len(header)}", "one ';'-separated value per column"
            )
            bad += 1
            continue
        values = {c: fields[i].strip() for c, i in at.items()}
        empty = [c for c in NLU_COLUMNS if not values[c]]
        if empty:
            problems.add(where, empty[0], "empty", f"give the row's {empty[0]} (or delete the row)")
            bad += 1
            continue
        pairs.append((" ".join(values["answer_from_anno"].split()), f"{values['scenario']}_{values['intent']}"))
    if not pairs and not bad:
        problems.add(str(path), "", "no rows below the header", "add rows or remove the file")
    return pairs


def load_nlu_split(nlu_dir: Path, split: str, problems: RowProblems | None = None) -> list[tuple[str, str]]:
    """``(sentence, label name)`` pairs of one split (``trainset``/``testset``), files sorted.

    Sentence is ``answer_from_anno``; label is ``scenario_intent``. Raises ``FileNotFoundError``
    when the split folder has no CSV. Every bad row (not UTF-8, a field count unlike the header's,
    an empty scenario/intent/sentence) and a file without rows go to ``problems``; without
    ``problems`` they raise one :class:`~grpokit.tasks.prepared.DataError` here.
    """
    own = problems is None
    problems = problems if problems is not None else RowProblems()
    pairs: list[tuple[str, str]] = []
    for f in nlu_split_files(nlu_dir, split):
        pairs.extend(_read_nlu_csv(f, problems))
    if own:
        problems.raise_if_any()
    return pairs


def label_permutation(labels: Iterable[str], seed: int) -> dict[str, int]:
    """Label names -> a seeded random permutation of ``0..n-1`` (Mem-α hides label names)."""
    names = sorted(set(labels))
    ids = list(range(len(names)))
    random.Random(seed).shuffle(ids)
    return dict(zip(names, ids, strict=True))


def _balanced_sample(by_label: Mapping[str, Sequence[str]], count: int, rng: random.Random) -> list[tuple[str, str]]:
    """``count`` examples drawn round-robin over shuffled labels, no sentence twice."""
    pools = {label: rng.sample(list(s), len(s)) for label, s in by_label.items()}
    labels = sorted(pools)
    rng.shuffle(labels)
    picked: list[tuple[str, str]] = []
    while len(picked) < count and any(pools.values()):
        for label in labels:
            if pools[label] and len(picked) < count:
                picked.append((pools[label].pop(), label))
    return picked


def _dialogue_chunk(examples: Sequence[tuple[str, int]], day: date) -> str:
    body = "\n\n".join(f"Sentence: {s}\nLabel: {label}" for s, label in examples)
    return (
        f"Dialogue on {day.isoformat()}:\n"
        f"user: Please remember these labelled classification examples.\n\n{body}\n\n"
        "assistant: Noted, I will remember them."
    )


def build_memalpha_nlu_rows(
    chunk_pool: Sequence[tuple[str, str]],
    question_pool: Sequence[tuple[str, str]],
    label_ids: Mapping[str, int],
    *,
    num_rows: int,
    chunks_per_row: int = 10,
    shots_per_chunk: int = 40,
    questions_per_row: int = 50,
    seed: int = 0,
    split: str = "train",
) -> pd.DataFrame:
    """Mem-α-format NLU rows (columns as the hub dataset's) from ``(sentence, label name)`` pools.

    Each row: ``chunks_per_row`` dated dialogue chunks of ``shots_per_chunk`` label-balanced
    ``Sentence:/Label:`` examples from ``chunk_pool``, and up to ``questions_per_row`` questions
    from ``question_pool`` whose sentences are not in the row's chunks (Mem-α asks about unseen
    sentences). ``data_source`` is ``icl_nlu_kfold1_<shots>shot_balance``.
    """
    rng = random.Random(f"{seed}-{split}")
    by_label: dict[str, list[str]] = {}
    for sentence, label in chunk_pool:
        by_label.setdefault(label, []).append(sentence)
    total_shots = chunks_per_row * shots_per_chunk
    rows = []
    for i in range(num_rows):
        shots = _balanced_sample(by_label, total_shots, rng)
        rng.shuffle(shots)
        start = date(2024, 1, 1) + timedelta(days=rng.randrange(365))
        chunks = [
            _dialogue_chunk(
                [(s, label_ids[label]) for s, label in shots[c * shots_per_chunk : (c + 1) * shots_per_chunk]],
                start + timedelta(days=c),
            )
            for c in range(chunks_per_row)
        ]
        seen = {s for s, _ in shots}
        candidates = [(s, label) for s, label in question_pool if s not in seen]
        questions = rng.sample(candidates, min(questions_per_row, len(candidates)))
        qas = [{"question": label_question(s), "answer": str(label_ids[label])} for s, label in questions]
        rows.append(
            {
                "instance_id": i,
                "prompt": "",
                "chunks": json.dumps(chunks, ensure_ascii=False),
                "questions_and_answers": json.dumps(qas, ensure_ascii=False),
                "data_source": f"{NLU_SOURCE_PREFIX}_kfold1_{total_shots}shot_balance",
                "metadata": json.dumps(
                    {
                        "source": "NLU-Evaluation-Data KFold_1 (Liu et al. 2019, CC BY 4.0)",
                        "split": split,
                        "seed": seed,
                    }
                ),
                "num_chunks": len(chunks),
                "num_questions": len(qas),
            }
        )
    return pd.DataFrame(rows)


# ---- sources ---------------------------------------------------------------------------------


def _local_parquet(folder: Path, split: str) -> Path | None:
    for candidate in (folder / f"{split}.parquet", folder / "data" / "memalpha" / f"{split}.parquet"):
        if candidate.is_file():
            return candidate
    return None


def load_hub_split(hub_id: str, split: str) -> pd.DataFrame:
    """One split of a hub dataset via ``datasets``, else ModelScope; ``RuntimeError`` naming both causes."""
    try:
        import datasets

        return datasets.load_dataset(hub_id, split=split).to_pandas()
    except Exception as hf_error:  # report both hubs' reasons below
        try:
            from modelscope.msdatasets import MsDataset

            return MsDataset.load(hub_id, split=split).to_hf_dataset().to_pandas()
        except Exception as ms_error:
            raise RuntimeError(
                f"could not load split {split!r} of {hub_id!r}: Hugging Face: {hf_error}; "
                f"ModelScope: {ms_error}. "
                "Download train.parquet/test.parquet and pass their folder as --source."
            ) from hf_error


def load_memalpha_splits(
    source: str, *, seed: int, num_rows: Mapping[str, int | None], problems: RowProblems | None = None
) -> dict[str, pd.DataFrame]:
    """Mem-α-format frames for ``train`` and ``test`` from ``source`` (see module doc).

    Bad NLU CSV rows go to ``problems`` (without it: one DataError here)."""
    own = problems is None
    problems = problems if problems is not None else RowProblems()
    frames = _load_sources(source, seed=seed, num_rows=num_rows, problems=problems)[0]
    if own:
        problems.raise_if_any()
    return frames


def _load_sources(
    source: str, *, seed: int, num_rows: Mapping[str, int | None], problems: RowProblems
) -> tuple[dict[str, pd.DataFrame], dict[str, str], list[Path]]:
    """(frames, the name of each split's origin for row messages, the local files read)."""
    nlu_path = source[len("nlu:") :] if source.startswith("nlu:") else source
    nlu_dir = resolve_nlu_dir(nlu_path) if Path(nlu_path).is_dir() else None
    if source.startswith("nlu:") and nlu_dir is None:
        raise FileNotFoundError(f"--source {source}: no trainset/*.csv under {nlu_path} or {nlu_path}/kfold1")
    if nlu_dir is not None:
        train_pool = load_nlu_split(nlu_dir, "trainset", problems)
        test_pool = load_nlu_split(nlu_dir, "testset", problems)
        files = nlu_split_files(nlu_dir, "trainset") + nlu_split_files(nlu_dir, "testset")
        if problems.items:
            return {}, {}, files
        label_ids = label_permutation([label for _, label in train_pool + test_pool], seed)
        log.info(
            "NLU data %s: %d train, %d test examples, %d labels",
            nlu_dir,
            len(train_pool),
            len(test_pool),
            len(label_ids),
        )
        # Demonstrations always come from trainset; test rows ask about testset sentences.
        frames = {
            "train": build_memalpha_nlu_rows(
                train_pool, train_pool, label_ids, num_rows=num_rows["train"] or 64, seed=seed, split="train"
            ),
            "test": build_memalpha_nlu_rows(
                train_pool, test_pool, label_ids, num_rows=num_rows["test"] or 16, seed=seed, split="test"
            ),
        }
        return frames, {"train": "NLU build train", "test": "NLU build test"}, files
    folder = Path(source)
    if folder.is_dir():
        frames, origins, files = {}, {}, []
        for split in ("train", "test"):
            path = _local_parquet(folder, split)
            if path is None:
                raise FileNotFoundError(f"--source {source}: no {split}.parquet in it or in its data/memalpha/")
            frames[split] = pd.read_parquet(path)
            origins[split] = str(path)
            files.append(path)
            if frames[split].empty:
                problems.add(str(path), "", "no rows", "pass Mem-α rows (instance_id, chunks, data_source, ...)")
        return frames, origins, files
    frames = {split: load_hub_split(source, split) for split in ("train", "test")}
    return frames, {split: f"{source} split {split}" for split in frames}, []


# ---- command line ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``prepare_data.py memalpha``."""
    parser.add_argument(
        "--source",
        required=True,
        help="Mem-α data: a folder with train/test.parquet, nlu:<NLU-Evaluation-Data folder>, or a hub id "
        "(e.g. YuWangX/Memalpha)",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder for train.parquet and test.parquet")
    parser.add_argument("--num-train", type=int, default=None, help="verl train rows (default: all; NLU build: 64)")
    parser.add_argument("--num-test", type=int, default=None, help="verl test rows (default: all; NLU build: 16)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the NLU build (label permutation, sampling)")
    parser.add_argument("--qa-per-row", type=int, default=4, help="reward questions per row (examples asked)")
    parser.add_argument("--chunk-chars", type=int, default=2000, help="context length limit in characters")


def main(args: argparse.Namespace) -> None:
    """Write ``args.out/{train,test}.parquet`` and ``manifest.json`` (and the Mem-α-format source of
    an NLU build under ``args.out/memalpha_source/``), all or nothing.

    Raises ValueError for a setting below 1, :class:`~grpokit.tasks.prepared.DataError` naming every
    bad input row or a split that ends up empty, FileNotFoundError for a missing source."""
    for name in ("qa_per_row", "chunk_chars", "num_train", "num_test"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    num_rows = {"train": args.num_train, "test": args.num_test}
    problems = RowProblems()
    frames, origins, files = _load_sources(str(args.source), seed=args.seed, num_rows=num_rows, problems=problems)
    problems.raise_if_any()
    converted = {
        split: convert_rows(
            frame.to_dict("records"),
            split,
            num_rows=num_rows[split],
            qa_per_row=args.qa_per_row,
            chunk_chars=args.chunk_chars,
            origin=origins[split],
            problems=problems,
        )
        for split, frame in frames.items()
    }
    problems.raise_if_any()
    for split, rows in converted.items():
        if not rows:
            problems.add(
                origins[split],
                "data_source",
                f"no {split} row with data_source starting {NLU_SOURCE_PREFIX!r} and a Sentence/Label example "
                "in its first chunk",
                "pass Mem-α's NLU rows",
            )
    problems.raise_if_any()
    nlu = str(args.source).startswith("nlu:") or resolve_nlu_dir(str(args.source)) is not None
    options = {k: getattr(args, k) for k in ("num_train", "num_test", "seed", "qa_per_row", "chunk_chars")}
    with staged_output(
        Path(args.out), task="memalpha", source=str(args.source), source_files=files, options=options
    ) as tmp:
        if nlu:
            (tmp / "memalpha_source").mkdir()
            for split, frame in frames.items():
                frame.to_parquet(tmp / "memalpha_source" / f"{split}.parquet", index=False)
        for split, rows in converted.items():
            pd.DataFrame(rows).to_parquet(tmp / f"{split}.parquet", index=False)
    for split, rows in converted.items():
        log.info("wrote %d %s rows to %s", len(rows), split, Path(args.out) / f"{split}.parquet")
