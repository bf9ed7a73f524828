"""Memory selection and answer-prompt building for the Mem-α memory server (pure functions).

The format follows ``memory_server.py`` of wangyu-ustc/Mem-alpha (see docs/memalpha-notes.md):

- A memory is ``{"core": str | None, "semantic": [{id: text}, ...], "episodic": [{id: text}, ...]}``.
- For each question, BM25 (``rank_bm25.BM25Okapi``, lower-cased ``\\w+`` tokens, the whole question
  as the query) ranks the semantic and the episodic items separately and keeps the top ``k`` of
  each, best first (ties keep the writer's order). Core memory is never filtered.
- The system prompt has a one-line role, a MEMORY STRUCTURE section, the CURRENT MEMORY STATE with
  ``<core_memory>`` (only when non-empty), ``<semantic_memory>`` and ``<episodic_memory>`` blocks of
  numbered lines (or "(No memories stored)"), and five short INSTRUCTIONS. Ids are not shown.
- While system prompt + question exceed the token budget, ``k`` drops by one; at ``k == 1`` still too
  long raises :class:`PromptTooLongError`.

Token counting: :func:`hf_token_counter` uses ``transformers.AutoTokenizer`` (the answer model's
tokenizer, so the budget is exact); without one, :func:`regex_token_count` counts words and single
punctuation marks, which is an approximation (subword tokenizers usually give more tokens than
words for rare words and fewer for nothing), so leave headroom in the budget.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rank_bm25 import BM25Okapi

from grpokit.tasks.memalpha.settings import ServerOptions

log = logging.getLogger(__name__)

MemoryItem = dict[str, str]
TokenCounter = Callable[[str], int]

MEMORY_TYPES: tuple[str, str] = ("semantic", "episodic")
NO_MEMORIES = "(No memories stored)"

_WORD_RE = re.compile(r"\w+")
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


class PromptTooLongError(ValueError):
    """The prompt stays over the token budget even with one item of each memory type."""


@dataclass(frozen=True)
class Memory:
    """One writer's memory, validated: ``core`` text ("" when absent) and single-key item lists."""

    core: str
    semantic: list[MemoryItem]
    episodic: list[MemoryItem]


@dataclass(frozen=True)
class BuiltPrompt:
    """The answer prompt for one (memory, question): ``top_k`` is the ``k`` used, ``num_tokens``
    the counted tokens of system prompt + question."""

    system_prompt: str
    question: str
    top_k: int
    num_tokens: int

    def messages(self) -> list[dict[str, str]]:
        """OpenAI chat messages: ``[{"role": "system", ...}, {"role": "user", "content": question}]``."""
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.question},
        ]


def parse_memory(raw: Any, where: str = "memory") -> Memory:
    """Validate one request memory into a :class:`Memory`.

    ``raw`` must be a dict with optional ``core`` (str or None) and optional ``semantic`` /
    ``episodic`` lists whose items are dicts with exactly one key and a string value (Mem-α's
    ``{memory_id: content}``). Raises ``ValueError`` naming ``where`` and the bad key otherwise.
    """
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object with keys core/semantic/episodic, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"core", *MEMORY_TYPES})
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: core, semantic, episodic")
    core = raw.get("core")
    if core is not None and not isinstance(core, str):
        raise ValueError(f"{where}.core must be a string or null, got {type(core).__name__}")
    lists: dict[str, list[MemoryItem]] = {}
    for memory_type in MEMORY_TYPES:
        items = raw.get(memory_type) or []
        if not isinstance(items, list):
            raise ValueError(f"{where}.{memory_type} must be a list of {{id: text}} objects")
        for i, item in enumerate(items):
            if not (isinstance(item, dict) and len(item) == 1):
                raise ValueError(
                    f"{where}.{memory_type}[{i}] must be an object with exactly one key (id -> text), got {item!r:.80}"
                )
            (value,) = item.values()
            if not isinstance(value, str):
                raise ValueError(f"{where}.{memory_type}[{i}] text must be a string, got {type(value).__name__}")
        lists[memory_type] = [dict(item) for item in items]
    return Memory(core=core or "", semantic=lists["semantic"], episodic=lists["episodic"])


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased ``\\w+`` tokens, as Mem-α's server tokenizes for BM25."""
    return _WORD_RE.findall(text.lower())


def rank_items(items: Sequence[MemoryItem], query: str) -> list[MemoryItem]:
    """All ``items`` ordered by BM25 score against ``query``, best first; ties keep input order.

    With no query tokens or no document tokens BM25 is undefined, so the input order is kept
    (Mem-α drops every item there; keeping them is the safer reading for the answer model).
    """
    if not items:
        return []
    query_tokens = bm25_tokens(query)
    corpus = [bm25_tokens(next(iter(item.values()))) for item in items]
    if not query_tokens or not any(corpus):
        return list(items)
    scores = BM25Okapi(corpus).get_scores(query_tokens)
    # sorted() is stable, so equal scores keep the writer's order.
    order = sorted(range(len(items)), key=lambda i: -float(scores[i]))
    return [items[i] for i in order]


def select_top_k(items: Sequence[MemoryItem], query: str, top_k: int) -> list[MemoryItem]:
    """The ``top_k`` best BM25 matches of ``items`` for ``query`` (see :func:`rank_items`)."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    return rank_items(items, query)[:top_k]


def _format_block(items: Sequence[MemoryItem], block_name: str) -> str:
    if not items:
        body = NO_MEMORIES
    else:
        body = "\n".join(f"{i}. {next(iter(item.values()))}" for i, item in enumerate(items, 1))
    return f"<{block_name}>\n{body}\n</{block_name}>"


def build_system_prompt(core: str | None, semantic: Sequence[MemoryItem], episodic: Sequence[MemoryItem]) -> str:
    """The answer model's system prompt for already-selected memories (Mem-α's layout, see module doc)."""
    structure: list[str] = []
    blocks: list[str] = []
    if core and core.strip():
        structure.append("- Core Memory: Fundamental facts about the user (preferences, roles, goals, etc.)")
        blocks.append(f"<core_memory>\n{core}\n</core_memory>")
    structure += [
        "- Semantic Memory: General knowledge, factual or conceptual information",
        "- Episodic Memory: Specific personal experiences or events with time and context",
    ]
    blocks += [_format_block(semantic, "semantic_memory"), _format_block(episodic, "episodic_memory")]
    structure_text = "\n".join(structure)
    blocks_text = "\n\n".join(blocks)
    return (
        "You are a reasoning assistant with access to structured memory. Use the memories below to "
        "answer the user's question accurately.\n\n"
        f"MEMORY STRUCTURE:\n{structure_text}\n\n"
        f"CURRENT MEMORY STATE:\n\n{blocks_text}\n\n"
        "INSTRUCTIONS:\n"
        "- Use the memories above to answer\n"
        "- When the answer comes from memory, refer to it\n"
        "- If memory does not contain the answer, say so clearly\n"
        "- Be helpful and use the context the memories give\n"
        "- Be concise"
    )


def regex_token_count(text: str) -> int:
    """Approximate token count: words (``\\w+``) plus single punctuation marks."""
    return len(_TOKEN_RE.findall(text))


def hf_token_counter(tokenizer_path: str) -> TokenCounter:
    """Token counter from ``transformers.AutoTokenizer.from_pretrained(tokenizer_path)``.

    ``tokenizer_path`` is a local folder or hub id of the answer model. Raises whatever
    ``from_pretrained`` raises (``OSError`` for a missing path).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    # Fast tokenizers can fail with "Already borrowed" when one instance encodes in several
    # threads at once; the server counts tokens in worker threads.
    lock = threading.Lock()

    def count(text: str) -> int:
        with lock:
            return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def build_prompt(
    memory: Memory,
    question: str,
    *,
    top_k: int = ServerOptions.top_k,
    max_prompt_tokens: int = ServerOptions.max_prompt_tokens,
    count_tokens: TokenCounter = regex_token_count,
) -> BuiltPrompt:
    """Select memories for ``question`` and build the prompt under ``max_prompt_tokens``.

    Starts at ``k = top_k`` items per memory type and lowers ``k`` by one while system prompt +
    question count more than ``max_prompt_tokens`` tokens. Ranking is done once: the top ``k`` of a
    fixed BM25 ranking equals a rerun at each ``k``. Raises :class:`PromptTooLongError` when even
    ``k = 1`` is over budget (e.g. a huge core memory or question).
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    ranked = {t: rank_items(getattr(memory, t), question) for t in MEMORY_TYPES}
    question_tokens = count_tokens(question)
    # k beyond the longest list changes nothing; start there so we do not count the same prompt twice.
    k = start_k = max(1, min(top_k, max(len(ranked["semantic"]), len(ranked["episodic"]))))
    while True:
        system_prompt = build_system_prompt(memory.core, ranked["semantic"][:k], ranked["episodic"][:k])
        num_tokens = count_tokens(system_prompt) + question_tokens
        if num_tokens <= max_prompt_tokens:
            if k < start_k:
                log.info(
                    "prompt over %d tokens at k=%d; used k=%d (%d tokens)",
                    max_prompt_tokens,
                    start_k,
                    k,
                    num_tokens,
                )
            return BuiltPrompt(system_prompt=system_prompt, question=question, top_k=k, num_tokens=num_tokens)
        if k == 1:
            raise PromptTooLongError(
                f"prompt has {num_tokens} tokens with one memory item of each type, over the budget of "
                f"{max_prompt_tokens} (core memory is {count_tokens(memory.core)} tokens, question "
                f"{question_tokens}); shorten the memory or raise --max-prompt-tokens"
            )
        k -= 1
