"""tool_memory data: generator invariants, the parquet files, and loading them with verl's RLHFDataset."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from grpokit.tasks.tool_memory import data
from grpokit.tasks.tool_memory.tools import TOOL_CONFIG_PATH

pytestmark = pytest.mark.timeout(120)

# ChatML that renders `tools` into the system turn: the fallback while the shared tiny model
# fixture (`tiny_model_dir` in tests/conftest.py) does not exist.
_FALLBACK_CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture  # function scope: works whatever scope tiny_model_dir has
def chat_tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    """The shared tiny model's tokenizer when tests/conftest.py provides it, else a small BPE."""
    try:
        return AutoTokenizer.from_pretrained(request.getfixturevalue("tiny_model_dir"))
    except pytest.FixtureLookupError:
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        bpe.train_from_iterator([r["prompt"][1]["content"] for r in data.build_rows(20, 0, "train")], trainer)
        return PreTrainedTokenizerFast(
            tokenizer_object=bpe,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            chat_template=_FALLBACK_CHAT_TEMPLATE,
        )


def _store(row: dict[str, Any]) -> dict[str, Any]:
    return row["extra_info"]["tools_kwargs"]["search_memory"]["create_kwargs"]


def _content(row: dict[str, Any]) -> tuple[str, ...]:
    return (row["prompt"][1]["content"], *(m["text"] for m in _store(row)["memories"]))


def test_rows_have_the_verl_tool_agent_layout() -> None:
    rows = data.build_rows(50, seed=1, split="train")
    for index, row in enumerate(rows):
        assert row["agent_name"] == "tool_agent" and row["data_source"] == data.DATA_SOURCE
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        extra_info = row["extra_info"]
        assert extra_info["need_tools_kwargs"] is True
        assert (extra_info["split"], extra_info["index"]) == ("train", index)
        assert set(extra_info["tools_kwargs"]) == {"search_memory", "read_memory"}
        assert extra_info["tools_kwargs"]["read_memory"] == extra_info["tools_kwargs"]["search_memory"]
        store = _store(row)
        assert row["reward_model"] == {
            "style": "rule",
            "ground_truth": {"target_answer": store["target_answer"], "target_id": store["target_id"]},
        }
        assert f"Search hint: {extra_info['hint']}" in row["prompt"][1]["content"]


def test_stores_have_distractors_sharing_the_keyword() -> None:
    for row in data.build_rows(200, seed=2, split="train"):
        store, hint = _store(row), row["extra_info"]["hint"]
        texts = {m["id"]: m["text"] for m in store["memories"]}
        assert 3 <= len(texts) == len(store["memories"]) <= 7  # ids unique within a store
        answer = store["target_answer"].lower()
        assert [i for i, t in texts.items() if answer in t.lower()] == [store["target_id"]]
        keyword_hits = [i for i, t in texts.items() if hint in t.lower()]
        assert store["target_id"] in keyword_hits and len(keyword_hits) >= 2  # 1+ distractors
        assert len(texts) > len(keyword_hits)  # and memories about other things


def test_rows_are_distinct_seeded_and_split_apart() -> None:
    assert data.build_rows(30, seed=5, split="test") == data.build_rows(30, seed=5, split="test")
    assert data.build_rows(30, seed=5, split="test") != data.build_rows(30, seed=6, split="test")
    train = data.build_rows(1000, seed=0, split="train")
    train_contents = {_content(r) for r in train}
    assert len(train_contents) == len(train)
    for seed in (0, 1):
        test = data.build_rows(200, seed=seed, split="test")
        assert len({_content(r) for r in test}) == len(test)
        assert not train_contents & {_content(r) for r in test}
    assert len({r["extra_info"]["hint"] for r in train}) == len(data.TOPICS)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="split='dev'"):
        data.build_rows(1, seed=0, split="dev")
    with pytest.raises(ValueError, match="num=-1"):
        data.build_rows(-1, seed=0, split="train")


def _cli(argv: list[str], parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or argparse.ArgumentParser()
    data.add_arguments(parser)
    return parser.parse_args(argv)


def test_add_arguments_keeps_a_dispatcher_out_option(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = _cli(["--out", str(tmp_path), "--num-train", "3"], parser)
    assert (args.out, args.num_train, args.num_test, args.seed) == (tmp_path, 3, 64, 0)


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tool_memory_data")
    data.main(_cli(["--out", str(out), "--num-train", "24", "--num-test", "8", "--seed", "7"]))
    return out


def _dataset(path: Path, tokenizer: PreTrainedTokenizerBase, tmp_path: Path, **config: Any) -> RLHFDataset:
    data_config = OmegaConf.create(
        {
            "max_prompt_length": 4096,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "return_raw_chat": True,
            "truncation": "error",
            "cache_dir": str(tmp_path / "cache"),
            **config,
        }
    )
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints dataset sizes and tool schemas
        return RLHFDataset(str(path), tokenizer, data_config)


def test_parquet_loads_with_verls_rlhf_dataset(
    parquet_dir: Path, chat_tokenizer: PreTrainedTokenizerBase, tmp_path: Path
) -> None:
    expected = data.build_rows(24, seed=7, split="train")
    dataset = _dataset(parquet_dir / "train.parquet", chat_tokenizer, tmp_path, tool_config_path=str(TOOL_CONFIG_PATH))
    assert len(dataset) == 24
    assert dataset.tool_schemas is not None and len(dataset.tool_schemas) == 2
    items = [dataset[i] for i in range(len(dataset))]
    for item, row in zip(items, expected, strict=True):
        assert item["agent_name"] == "tool_agent"
        assert item["raw_prompt"] == row["prompt"]
        assert item["tools_kwargs"] == row["extra_info"]["tools_kwargs"]  # what ToolAgentLoop receives
        assert item["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
        assert item["index"] == row["extra_info"]["index"]
    batch = collate_fn(items)  # the dataloader's batch: one object per row
    assert batch["tools_kwargs"].shape == (24,)
    assert set(batch["tools_kwargs"][0]) == {"search_memory", "read_memory"}
    assert (parquet_dir / "test.parquet").exists()
    assert len(_dataset(parquet_dir / "test.parquet", chat_tokenizer, tmp_path)) == 8


def test_length_filter_counts_the_tool_schemas(
    parquet_dir: Path, chat_tokenizer: PreTrainedTokenizerBase, tmp_path: Path
) -> None:
    """With the tool config the prompt is rendered with the tools, so data.tool_config_path matters."""
    with contextlib.redirect_stdout(io.StringIO()):
        schemas = [
            t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
            for t in initialize_tools_from_config(str(TOOL_CONFIG_PATH))
        ]
    rows = data.build_rows(24, seed=7, split="train")
    bare = max(_prompt_tokens(chat_tokenizer, r) for r in rows)
    with_tools = min(_prompt_tokens(chat_tokenizer, r, tools=schemas) for r in rows)
    assert bare < with_tools
    limit = (bare + with_tools) // 2
    path = parquet_dir / "train.parquet"
    assert len(_dataset(path, chat_tokenizer, tmp_path, max_prompt_length=limit)) == 24
    filtered = _dataset(path, chat_tokenizer, tmp_path, max_prompt_length=limit, tool_config_path=str(TOOL_CONFIG_PATH))
    assert len(filtered) == 0


def _prompt_tokens(tokenizer: PreTrainedTokenizerBase, row: dict[str, Any], **kwargs: Any) -> int:
    text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False, **kwargs)
    return len(tokenizer.encode(text, add_special_tokens=False))
