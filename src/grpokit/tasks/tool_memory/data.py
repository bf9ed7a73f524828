"""Build the tool_memory task's train/test parquet (`python launch/prepare_data.py tool_memory`).

Each row is one user with a small memory store: the target memory answers the question, 1-3
distractors contain the question's search keyword but are about someone else or a rejected
choice, and 1-3 unrelated memories come from other topics. The model must call ``search_memory``,
``read_memory`` on the right id, then answer with ``FINAL: <answer>`` (reward in ``reward.py``).

Row layout (verl's RLHF parquet, as in the reference account's ``build_data.py``)::

    data_source  "grpokit/tool_memory"
    agent_name   "tool_agent"                       # picks verl's ToolAgentLoop
    prompt       [{"role": "system", ...}, {"role": "user", ...}]
    ability      "memory_tool"
    reward_model {"style": "rule", "ground_truth": {"target_answer": str, "target_id": str}}
    extra_info   {"split", "index", "question", "hint", "target_answer", "target_id",
                  "need_tools_kwargs": True,
                  "tools_kwargs": {"search_memory": {"create_kwargs": STORE},
                                   "read_memory": {"create_kwargs": STORE}}}
    STORE        {"memories": [{"id": "mem_1a2b3c", "text": str}], "target_id", "target_answer"}

Rows are drawn from a seeded ``random.Random``; the same ``(num, seed, split)`` gives the same rows.
No two rows of one call share content (question + memory texts), and train and test never share
content whatever their seeds: each content is assigned to one split by a stable hash.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from grpokit.tasks.prepared import staged_output

log = logging.getLogger(__name__)

DATA_SOURCE = "grpokit/tool_memory"
AGENT_NAME = "tool_agent"
ABILITY = "memory_tool"
SPLITS = ("train", "test")
TEST_BUCKETS = 5
"""One content hash bucket in ``TEST_BUCKETS`` belongs to test, the others to train."""

SYSTEM_PROMPT = (
    "You are a memory-using assistant. The user's memories are only reachable through tools: "
    "search_memory(query) returns candidate memory ids, read_memory(memory_id) returns one memory's "
    "text. Search first, read the memory that answers the question (other memories may mention the "
    "same words but be about someone else), then reply with one final line: FINAL: <answer>."
)
USER_TEMPLATE = "Question: {question}\nSearch hint: {hint}\nUse the memory tools, then answer with FINAL: <answer>."


@dataclass(frozen=True)
class Topic:
    """One kind of fact. Every template holds ``{v}`` and contains ``keyword``; values are answers."""

    keyword: str
    questions: tuple[str, ...]
    values: tuple[str, ...]
    user_templates: tuple[str, ...]
    distractor_templates: tuple[str, ...]


TOPICS: tuple[Topic, ...] = (
    Topic(
        "tea",
        ("Which tea should be prepared for this user?", "What tea does the user like best?"),
        ("chamomile", "earl grey", "oolong", "rooibos", "peppermint", "darjeeling", "genmaicha", "jasmine"),
        (
            "The user prefers {v} tea for late afternoon breaks.",
            "For an evening cup, the user always asks for {v} tea.",
            "The user's favourite tea is {v}.",
        ),
        (
            "The user's sister drinks {v} tea every morning.",
            "The user tried {v} tea once and disliked it.",
            "A cafe near the office only sells {v} tea.",
        ),
    ),
    Topic(
        "music",
        ("What music does the user enjoy?", "Which music genre should we play for the user?"),
        ("jazz", "bluegrass", "baroque", "reggae", "synthwave", "flamenco", "bossa nova", "ambient"),
        (
            "The user listens to {v} music while cooking.",
            "The user's favourite kind of music is {v}.",
            "The user relaxes with {v} music after work.",
        ),
        (
            "The user's neighbour plays {v} music loudly at night.",
            "The user finds {v} music distracting.",
            "The user's brother collects {v} music records.",
        ),
    ),
    Topic(
        "trip",
        ("Which city is the user's next trip to?", "Where is the user going on the next trip?"),
        ("Lisbon", "Kyoto", "Oslo", "Marrakesh", "Montreal", "Hanoi", "Tallinn", "Cusco"),
        (
            "The user is planning a trip to {v} next spring.",
            "The user booked flights for a trip to {v} in May.",
            "The user's next trip is a week in {v}.",
        ),
        (
            "The user's manager took a trip to {v} last year.",
            "The user cancelled a trip to {v} because of the weather.",
            "A friend recommended a trip to {v}, but the user is not interested.",
        ),
    ),
    Topic(
        "pet",
        ("What is the name of the user's pet?", "What is the user's pet called?"),
        ("Biscuit", "Pepper", "Mochi", "Juniper", "Clover", "Waffles", "Pickles", "Nugget"),
        (
            "The user's pet cat is called {v}.",
            "The user adopted a pet dog named {v}.",
            "The user's pet rabbit answers to {v}.",
        ),
        (
            "The user's cousin has a pet hamster called {v}.",
            "The user once looked after a neighbour's pet named {v}.",
            "The user's old pet, {v}, lives with the user's parents now.",
        ),
    ),
    Topic(
        "sport",
        ("Which sport does the user play?", "What sport does the user practise?"),
        ("badminton", "rowing", "fencing", "squash", "bouldering", "curling", "handball", "archery"),
        (
            "The user's favourite sport to play is {v}.",
            "The user plays {v}, the user's main sport, twice a week.",
            "The user joined a {v} club because it is the user's sport.",
        ),
        (
            "The user's partner watches {v} on the sport channel.",
            "The user gave up {v} as a sport after an injury.",
            "The user's nephew wants to try {v} as a sport.",
        ),
    ),
    Topic(
        "author",
        ("Who is the user's favourite author?", "Which author does the user read most?"),
        ("Tolstoy", "Le Guin", "Murakami", "Austen", "Achebe", "Calvino", "Borges", "Morrison"),
        (
            "The user's favourite author is {v}.",
            "The user rereads every novel by the author {v}.",
            "The user says {v} is the author who shaped the user's reading.",
        ),
        (
            "The user's book club discussed the author {v} last week.",
            "The user thinks the author {v} is overrated.",
            "The user's father owns every book by the author {v}.",
        ),
    ),
    Topic(
        "breakfast",
        ("What does the user usually eat for breakfast?", "What should we serve the user for breakfast?"),
        ("porridge", "pancakes", "congee", "shakshuka", "granola", "croissants", "omelettes", "muesli"),
        (
            "The user eats {v} for breakfast on weekdays.",
            "The user's usual breakfast is {v}.",
            "The user always orders {v} when eating breakfast out.",
        ),
        (
            "The hotel breakfast last week only had {v}.",
            "The user's daughter wants {v} for breakfast.",
            "The user stopped eating {v} for breakfast years ago.",
        ),
    ),
    Topic(
        "colour",
        ("What is the user's favourite colour?", "Which colour should the user's gift be?"),
        ("indigo", "maroon", "ochre", "lavender", "charcoal", "saffron", "coral", "olive"),
        (
            "The user's favourite colour is {v}.",
            "The user wants everything in the colour {v}.",
            "The user picked {v} as the colour for the new bicycle.",
        ),
        (
            "The office walls are painted a {v} colour the user dislikes.",
            "A friend suggested the colour {v} for the user's kitchen.",
            "The user's brother wears the colour {v} all the time.",
        ),
    ),
    Topic(
        "instrument",
        ("Which instrument is the user learning?", "What instrument does the user play?"),
        ("cello", "ukulele", "clarinet", "harp", "banjo", "oboe", "accordion", "marimba"),
        (
            "The user is learning to play the {v} as a new instrument.",
            "The user's instrument of choice is the {v}.",
            "The user practises the {v}, the user's instrument, every evening.",
        ),
        (
            "The user's son practises the {v}, a loud instrument.",
            "The user sold an old instrument, a {v}, last month.",
            "The user never liked the sound of the {v} as an instrument.",
        ),
    ),
    Topic(
        "allergic",
        ("Which food is the user allergic to?", "What must the user's meals never contain?"),
        ("peanuts", "shellfish", "sesame", "kiwi", "celery", "lupin", "buckwheat", "walnuts"),
        (
            "The user is allergic to {v}.",
            "The user carries medicine because the user is allergic to {v}.",
            "The doctor confirmed the user is allergic to {v}.",
        ),
        (
            "The user's colleague is allergic to {v}.",
            "The user was tested and is not allergic to {v}.",
            "The user's friend thought the user was allergic to {v}, but that was a mistake.",
        ),
    ),
)


@dataclass(frozen=True)
class _Draft:
    question: str
    hint: str
    answer: str
    texts: tuple[str, ...]  # shuffled memory texts
    target_index: int

    def content_key(self) -> str:
        """Stable digest of the content that makes two rows 'the same' (ids excluded)."""
        return hashlib.sha256("\x1f".join((self.question, *self.texts)).encode()).hexdigest()


def _draw(rng: random.Random) -> _Draft | None:
    """One candidate sample, or None when the draw breaks an invariant (the caller redraws)."""
    topic = rng.choice(TOPICS)
    answer, *distractor_values = rng.sample(topic.values, 1 + rng.randint(1, 3))
    target = rng.choice(topic.user_templates).format(v=answer)
    distractor_templates = rng.sample(topic.distractor_templates, len(distractor_values))
    distractors = [t.format(v=v) for t, v in zip(distractor_templates, distractor_values, strict=True)]
    others = []
    for other in rng.sample([t for t in TOPICS if t is not topic], rng.randint(1, 3)):
        others.append(rng.choice(other.user_templates).format(v=rng.choice(other.values)))
    keyword, answer_lc = topic.keyword.lower(), answer.lower()
    # The task only makes sense if search by keyword finds exactly target + distractors and the
    # answer text is in the target alone.
    if any(keyword in text.lower() for text in others):
        return None
    if any(answer_lc in text.lower() for text in (*distractors, *others)):
        return None
    texts = [target, *distractors, *others]
    rng.shuffle(texts)
    return _Draft(rng.choice(topic.questions), topic.keyword, answer, tuple(texts), texts.index(target))


def _split_of(draft: _Draft) -> str:
    return "test" if int(draft.content_key()[:8], 16) % TEST_BUCKETS == 0 else "train"


def _memory_ids(rng: random.Random, count: int) -> list[str]:
    ids: list[str] = []
    while len(ids) < count:
        candidate = f"mem_{rng.getrandbits(24):06x}"
        if candidate not in ids:
            ids.append(candidate)
    return ids


def _row(draft: _Draft, ids: list[str], split: str, index: int) -> dict[str, Any]:
    target_id = ids[draft.target_index]
    memories = [{"id": i, "text": t} for i, t in zip(ids, draft.texts, strict=True)]

    def store() -> dict[str, Any]:
        # A fresh copy per tool: parquet stores them apart anyway; this keeps the dicts unaliased.
        return {
            "memories": [dict(m) for m in memories],
            "target_id": target_id,
            "target_answer": draft.answer,
        }

    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_TEMPLATE.format(question=draft.question, hint=draft.hint)},
        ],
        "ability": ABILITY,
        "reward_model": {
            "style": "rule",
            "ground_truth": {"target_answer": draft.answer, "target_id": target_id},
        },
        "extra_info": {
            "split": split,
            "index": index,
            "question": draft.question,
            "hint": draft.hint,
            "target_answer": draft.answer,
            "target_id": target_id,
            "need_tools_kwargs": True,
            "tools_kwargs": {
                "search_memory": {"create_kwargs": store()},
                "read_memory": {"create_kwargs": store()},
            },
        },
    }


def build_rows(num: int, seed: int, split: str) -> list[dict[str, Any]]:
    """``num`` distinct rows of ``split`` ("train" or "test") drawn with ``random.Random((seed, split))``.

    Raises ``ValueError`` for an unknown split or a negative ``num``, and ``RuntimeError`` when
    ``num`` exceeds what the generator can make distinct (far above 10^5).
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    if num < 0:
        raise ValueError(f"num={num} must be >= 0")
    rng = random.Random(f"{seed}:{split}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    max_draws = 50 * num + 1000
    for _ in range(max_draws):
        if len(rows) == num:
            break
        draft = _draw(rng)
        if draft is None or _split_of(draft) != split or draft.content_key() in seen:
            continue
        seen.add(draft.content_key())
        rows.append(_row(draft, _memory_ids(rng, len(draft.texts)), split, len(rows)))
    if len(rows) < num:
        raise RuntimeError(f"made only {len(rows)} distinct {split} rows of {num} in {max_draws} draws; ask for fewer")
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` to ``path`` (parent folders created) with pyarrow's inferred nested schema."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--out DIR`` (unless the caller already has it), ``--num-train``, ``--num-test``, ``--seed``."""
    # The dispatcher may define --out for every task already; argparse then refuses a second one.
    with contextlib.suppress(argparse.ArgumentError):
        parser.add_argument("--out", type=Path, required=True, help="folder for train.parquet and test.parquet")
    parser.add_argument("--num-train", type=int, default=512, help="train rows (default 512)")
    parser.add_argument("--num-test", type=int, default=64, help="test rows (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")


def main(args: argparse.Namespace) -> None:
    """Write ``<args.out>/train.parquet``, ``test.parquet`` and ``manifest.json``, all or nothing.

    Raises ValueError when ``--num-train`` or ``--num-test`` is below 1 (an empty split)."""
    for name in ("num_train", "num_test"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1 (an empty split), got {getattr(args, name)}")
    out = Path(args.out)
    options = {"num_train": args.num_train, "num_test": args.num_test, "seed": args.seed}
    with staged_output(
        out, task="tool_memory", source="generated (grpokit.tasks.tool_memory.data)", options=options
    ) as tmp:
        for split, num in (("train", args.num_train), ("test", args.num_test)):
            write_parquet(build_rows(num, args.seed, split), tmp / f"{split}.parquet")
    for split, num in (("train", args.num_train), ("test", args.num_test)):
        log.info("wrote %d %s rows to %s", num, split, out / f"{split}.parquet")
