"""BM25 selection, the answer prompt and its token budget (grpokit.tasks.memalpha.prompt)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grpokit.tasks.memalpha.prompt import (
    NO_MEMORIES,
    Memory,
    PromptTooLongError,
    build_prompt,
    build_system_prompt,
    hf_token_counter,
    parse_memory,
    rank_items,
    regex_token_count,
    select_top_k,
)

# Real NLU-Evaluation-Data sentences (KFold_1 trainset, CC BY 4.0) with made-up integer labels.
SENTENCES = [
    "what alarms do i have set right now",
    "checkout today alarm of meeting",
    "turn the lights off in the kitchen",
    "what movie should i see",
    "will it rain on saturday",
    "play the audiobook swan from first",
    "call a cab",
    "how is my commute",
    "remove finlee's bedtime alarm",
    "attenuate the lights",
]


def _items(n: int, prefix: str = "m") -> list[dict[str, str]]:
    return [{f"{prefix}{i}": f"Sentence: {SENTENCES[i % len(SENTENCES)]} #{i} -> Label: {i}"} for i in range(n)]


def _block(prompt: str, name: str) -> list[str]:
    body = re.search(rf"<{name}>\n(.*?)\n</{name}>", prompt, re.DOTALL)
    assert body, f"no <{name}> block in prompt"
    return body.group(1).splitlines()


def test_bm25_ranks_the_matching_item_first():
    items = [{f"m{i}": f"Sentence: {s}\nLabel: {i}"} for i, s in enumerate(SENTENCES)]
    ranked = rank_items(items, "Sentence: will it rain on saturday\nWhat are the labels for the above sentence?")
    assert ranked[0] == {"m4": "Sentence: will it rain on saturday\nLabel: 4"}
    assert sorted(map(str, ranked)) == sorted(map(str, items))  # a permutation, nothing lost


def test_select_top_k_keeps_k_best_and_ties_keep_order():
    items = _items(30)
    top = select_top_k(items, "call a cab", 3)
    assert len(top) == 3
    assert all("call a cab" in next(iter(t.values())) for t in top)
    # "call a cab" is items 6, 16, 26; equal scores keep the writer's order.
    assert [next(iter(t)) for t in top] == ["m6", "m16", "m26"]
    # No query token matches: every score is 0, so the input order is kept.
    assert select_top_k(items, "zzz qqq", 4) == items[:4]
    assert select_top_k(items, "", 2) == items[:2]
    with pytest.raises(ValueError, match="top_k"):
        select_top_k(items, "x", 0)


def test_build_prompt_default_k_is_20_per_memory_type_separately():
    episodic_items = [{"e0": "went to the cinema"}, {"e1": "asked how is my commute today"}, {"e2": "x"}]
    memory = Memory(core="", semantic=_items(25, "s"), episodic=episodic_items)
    built = build_prompt(memory, "Sentence: how is my commute")
    assert built.top_k == 20
    semantic = _block(built.system_prompt, "semantic_memory")
    episodic = _block(built.system_prompt, "episodic_memory")
    assert len(semantic) == 20 and len(episodic) == 3
    assert semantic[0].startswith("1. Sentence: how is my commute")
    assert episodic[0] == "1. asked how is my commute today"  # ranked on its own
    assert [line.split(".")[0] for line in semantic] == [str(i) for i in range(1, 21)]


def test_system_prompt_layout():
    empty = build_system_prompt(None, [], [])
    assert _block(empty, "semantic_memory") == [NO_MEMORIES]
    assert _block(empty, "episodic_memory") == [NO_MEMORIES]
    assert "<core_memory>" not in empty and "Core Memory" not in empty
    for section in ("MEMORY STRUCTURE:", "CURRENT MEMORY STATE:", "INSTRUCTIONS:"):
        assert section in empty
    assert len(re.findall(r"^- ", empty.split("INSTRUCTIONS:")[1], re.MULTILINE)) == 5

    full = build_system_prompt("User labels intents.", [{"id-1": "a -> 1"}, {"id-2": "b -> 2"}], [{"e": "c"}])
    assert _block(full, "core_memory") == ["User labels intents."]
    assert "- Core Memory:" in full
    assert _block(full, "semantic_memory") == ["1. a -> 1", "2. b -> 2"]
    assert _block(full, "episodic_memory") == ["1. c"]
    assert "id-1" not in full  # ids are not shown to the answer model
    assert "<core_memory>" not in build_system_prompt("   ", [], [])


def test_token_budget_lowers_k_until_the_prompt_fits():
    memory = Memory(core="", semantic=_items(30), episodic=[])
    question = "Sentence: call a cab"
    sizes = {k: build_prompt(memory, question, top_k=k).num_tokens for k in (4, 5, 6)}
    assert sizes[4] < sizes[5] < sizes[6]
    built = build_prompt(memory, question, top_k=20, max_prompt_tokens=sizes[5])
    assert built.top_k == 5
    assert built.num_tokens == sizes[5] <= sizes[5]
    assert built.num_tokens == regex_token_count(built.system_prompt) + regex_token_count(question)
    assert len(_block(built.system_prompt, "semantic_memory")) == 5
    # The kept items are the best ones: the three "call a cab" items come first.
    assert _block(built.system_prompt, "semantic_memory")[0].startswith("1. Sentence: call a cab #6")


def test_token_budget_fails_when_one_item_is_still_too_long():
    memory = Memory(core="word " * 500, semantic=_items(3), episodic=_items(3))
    with pytest.raises(PromptTooLongError, match="over the budget of 300"):
        build_prompt(memory, "call a cab", max_prompt_tokens=300)


def test_hf_tokenizer_counts_tokens_for_the_budget(tmp_path: Path):
    # A real (tiny, word-level) tokenizer saved and loaded through transformers.AutoTokenizer.
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "call": 1, "a": 2, "cab": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)

    count = hf_token_counter(str(tmp_path))
    assert count("call a cab") == 3
    assert count("call a cab, please!") == 6
    memory = Memory(core="", semantic=_items(30), episodic=[])
    with_hf = build_prompt(memory, "call a cab", top_k=10, max_prompt_tokens=10_000, count_tokens=count)
    assert with_hf.num_tokens == count(with_hf.system_prompt) + 3


def test_parse_memory_validates_items():
    m = parse_memory({"core": None, "semantic": [{"a": "x"}]})
    assert m == Memory(core="", semantic=[{"a": "x"}], episodic=[])
    with pytest.raises(ValueError, match=r"memories\[2\]\.semantic\[0\] must be an object with exactly one key"):
        parse_memory({"semantic": [{"a": "x", "b": "y"}]}, where="memories[2]")
    with pytest.raises(ValueError, match="text must be a string"):
        parse_memory({"episodic": [{"a": 3}]})
    with pytest.raises(ValueError, match="unknown keys"):
        parse_memory({"procedural": []})
    with pytest.raises(ValueError, match="core must be a string"):
        parse_memory({"core": ["x"]})
