"""The smoke-model builder: loading, chat template vs verl's qwen3_coder parser, shapes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from verl.experimental.agent_loop.tool_parser import Qwen3XMLToolParser, ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.tokenizer.continuous_token import QwenContinuousTokenBuilder

from grpokit.models import build_model, build_tokenizer, count_parameters, model_config, resolve_shape
from grpokit.models.tiny import QWEN_SPECIAL_TOKENS, TOOL_MEMORY_TOOLS, _write_processor_files, iter_texts
from grpokit.validate.model_checks import model_positions

# A tool whose parameters have several JSON-schema types, so the parser's type conversion is exercised.
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a record up.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "exact": {"type": "boolean"},
                "filters": {"type": "object"},
            },
            "required": ["query"],
        },
    },
}
TOOL_CALL_ARGUMENTS = {"query": "jasmine tea\nafter lunch", "limit": 3, "exact": False, "filters": {"kind": "drink"}}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _assistant_response_ids(tokenizer, messages: list[dict], tools: list[dict]) -> list[int]:
    """Token ids of the last assistant turn as the model would generate them (after the prompt)."""
    prompt = tokenizer.apply_chat_template(messages[:-1], tools=tools, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert full.startswith(prompt)
    return tokenizer.encode(full[len(prompt) :].rstrip("\n"), add_special_tokens=False)


def test_tiny_model_loads_and_runs_forward_on_cpu(tiny_model_dir: Path, tokenizer) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["torch_dtype"] == "bfloat16"
    assert config["vocab_size"] == len(tokenizer) == 4096
    assert config["eos_token_id"] == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert config["pad_token_id"] == tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert config["bos_token_id"] == tokenizer.bos_token_id
    generation = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert tokenizer.eos_token_id in generation["eos_token_id"]

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.dtype == torch.bfloat16
    assert 2.0e6 < model.num_parameters() < 2.5e6  # gpu-stack.md: 2.2 M
    batch = tokenizer(["Natalia sold 48/2 = 24 clips in May."], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, batch.input_ids.shape[1], 4096)
    assert torch.isfinite(logits).all()


def test_tokenizer_round_trips_text_and_keeps_special_token_ids(tokenizer) -> None:
    text = "Weng earns $12 an hour. 12/60 = $0.2 per minute.\n#### 10"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert tokenizer.encode("hello", add_special_tokens=True)[0] != tokenizer.bos_token_id
    first = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert first == 4096 - len(QWEN_SPECIAL_TOKENS)
    for offset, (content, _) in enumerate(QWEN_SPECIAL_TOKENS):
        assert tokenizer.encode(content, add_special_tokens=False) == [first + offset]


def test_chat_template_renders_tools_into_system_prompt_and_tool_responses(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Which tea?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "lookup", "arguments": {"query": "tea"}}}],
        },
        {"role": "tool", "content": "jasmine"},
        {"role": "tool", "content": "green"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[LOOKUP_TOOL], tokenize=False, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nUse tools.\n\n# Tools")
    assert json.dumps(LOOKUP_TOOL, ensure_ascii=False) in system
    assert (
        "<|im_start|>user\n<tool_response>\njasmine\n</tool_response>\n<tool_response>\ngreen\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n")
    no_tools = tokenizer.apply_chat_template(messages[:2], tokenize=False)
    assert no_tools == "<|im_start|>system\nUse tools.<|im_end|>\n<|im_start|>user\nWhich tea?<|im_end|>\n"


def test_rendered_tool_call_parses_back_with_verls_qwen3_coder_parser(tokenizer) -> None:
    messages = [
        {"role": "user", "content": "Find tea."},
        {
            "role": "assistant",
            "content": "I will search.",
            "tool_calls": [
                {"type": "function", "function": {"name": "lookup", "arguments": TOOL_CALL_ARGUMENTS}},
                {"type": "function", "function": {"name": "search_memory", "arguments": {"query": "tea"}}},
            ],
        },
    ]
    tools = [LOOKUP_TOOL, *TOOL_MEMORY_TOOLS]
    response_ids = _assistant_response_ids(tokenizer, messages, tools)
    assert tokenizer.decode(response_ids).startswith(
        "I will search.\n<tool_call>\n<function=lookup>\n<parameter=query>\njasmine tea\nafter lunch\n</parameter>\n"
    )

    parser = ToolParser.get_tool_parser("qwen3_coder", tokenizer)
    assert isinstance(parser, Qwen3XMLToolParser)
    schemas = [OpenAIFunctionToolSchema.model_validate(tool) for tool in tools]
    content, calls = asyncio.run(parser.extract_tool_calls(response_ids, schemas))

    assert content.strip() == "I will search."
    assert [call.name for call in calls] == ["lookup", "search_memory"]
    assert json.loads(calls[0].arguments) == TOOL_CALL_ARGUMENTS
    assert json.loads(calls[1].arguments) == {"query": "tea"}


def test_chat_template_supports_verls_continuous_token_merge(tokenizer) -> None:
    """verl's multi-turn rollout appends tool turns by diffing renders; the template must be prefix-stable."""
    builder = QwenContinuousTokenBuilder(tokenizer)
    prompt = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Which tea?"}]
    tools = [LOOKUP_TOOL]
    runtime_ids = builder.build_initial_tokens(prompt, tools=tools)
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": {"query": "tea"}}}],
    }
    generated = _assistant_response_ids(tokenizer, [*prompt, assistant], tools)
    runtime_ids = builder.merge_assistant_tokens(runtime_ids, generated).token_ids
    updated = [*prompt, assistant, {"role": "tool", "content": "jasmine"}]
    merged = builder.merge_context_tokens([*prompt, assistant], updated, runtime_ids, tools=tools).token_ids
    expected = tokenizer.apply_chat_template(updated, tools=tools, tokenize=False, add_generation_prompt=True)
    assert merged == tokenizer.encode(expected, add_special_tokens=False)


def test_enable_thinking_controls_the_generation_prompt(tokenizer) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    render = lambda **kw: tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)  # noqa: E731
    assert render().endswith("<|im_start|>assistant\n")
    assert render(enable_thinking=True).endswith("<|im_start|>assistant\n<think>\n")
    assert render(enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_build_tokenizer_pads_to_the_exact_vocab_with_specials_at_their_ids() -> None:
    tokenizer = build_tokenizer(["a small corpus", "with few merges"], 1024, first_special_id=900)
    assert len(tokenizer) == 1024
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == 900
    assert tokenizer.convert_tokens_to_ids("</think>") == 900 + len(QWEN_SPECIAL_TOKENS) - 1
    assert tokenizer.convert_ids_to_tokens(899) == "<|reserved_899|>"
    assert tokenizer.convert_ids_to_tokens(1023) == "<|reserved_1023|>"
    assert tokenizer.decode(tokenizer.encode("a small corpus")) == "a small corpus"
    with pytest.raises(ValueError, match="first_special_id"):
        build_tokenizer(["x"], 1024, first_special_id=1010)


def test_iter_texts_reads_jsonl_csv_and_txt(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"question": "How many?", "meta": {"answer": "#### 4"}}) + "\n")
    (tmp_path / "b.csv").write_text('answerid;intent;answer\n15605;query;"what alarms do i have"\n')
    (tmp_path / "c.txt").write_text("first line\n\nsecond line\n")
    assert list(iter_texts([tmp_path])) == [
        "How many?",
        "#### 4",
        "query",
        "what alarms do i have",
        "first line",
        "second line",
    ]
    with pytest.raises(FileNotFoundError, match="--tokenizer-data"):
        list(iter_texts([tmp_path / "missing.txt"]))


def test_build_model_is_seeded_and_uses_the_given_tokenizer_data(tmp_path: Path) -> None:
    data = tmp_path / "corpus.txt"
    data.write_text("zyxwvut zyxwvut zyxwvut\n" * 50)
    first = build_model(tmp_path / "a", like="tiny", tokenizer_data=[data], seed=7)
    second = build_model(tmp_path / "b", like="tiny", tokenizer_data=[data], seed=7)
    assert AutoTokenizer.from_pretrained(first).tokenize(" zyxwvut") == ["Ġzyxwvut"]
    weights = [AutoModelForCausalLM.from_pretrained(path).state_dict() for path in (first, second)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_tiny_qwen35_shape_loads_and_runs_forward_on_cpu(tmp_path: Path) -> None:
    data = tmp_path / "corpus.txt"
    data.write_text("Natalia sold clips to 48 of her friends.\n")
    path = build_model(tmp_path / "q35", like="tiny-qwen3.5", tokenizer_data=[data])
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    assert model.config.layer_types == ["linear_attention", "full_attention"]
    ids = AutoTokenizer.from_pretrained(path)("Natalia sold clips", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids).logits).all()


def test_qwen35_08b_shape_is_the_published_multimodal_form_with_the_stated_parameter_count(
    tmp_path: Path,
) -> None:
    # The full-shape model is 1.7 GB of weights: the config is written and read back and the
    # parameters are counted on the meta device (build_model writes the weights of this config).
    shape = resolve_shape("qwen3.5-0.8b")
    tokenizer = build_tokenizer(
        ["a b c"], shape.vocab_size, first_special_id=shape.first_special_id, bpe_vocab_size=300
    )
    model_config(shape, tokenizer).save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["Qwen3_5ForConditionalGeneration"] and written["model_type"] == "qwen3_5"
    assert written["dtype"] == "bfloat16" and written["text_config"]["dtype"] == "bfloat16"
    vision = written["vision_config"]
    assert (vision["depth"], vision["hidden_size"], vision["intermediate_size"]) == (12, 768, 3072)
    assert (vision["num_heads"], vision["out_hidden_size"], vision["patch_size"]) == (12, 1024, 16)
    assert written["image_token_id"] == tokenizer.convert_tokens_to_ids("<|image_pad|>") == 248_056
    assert written["vision_start_token_id"] == tokenizer.convert_tokens_to_ids("<|vision_start|>") == 248_053
    # What the kit's validation reads for the longest sequence (text_config.max_position_embeddings).
    assert model_positions(written) == (262_144, "text_config.max_position_embeddings")

    config = AutoConfig.from_pretrained(tmp_path)
    text = config.text_config
    assert text.vocab_size == len(tokenizer) == 248_320
    assert (text.hidden_size, text.intermediate_size, text.num_hidden_layers) == (1024, 3584, 24)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (8, 2, 256)
    assert text.layer_types.count("full_attention") == 6 and text.layer_types[3] == "full_attention"
    assert text.rope_parameters["rope_theta"] == 1e7 and text.rope_parameters["partial_rotary_factor"] == 0.25
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == text.eos_token_id == 248_046
    # The reference run's 852.99 M; its language model 752,393,024 (tied embeddings counted once).
    assert count_parameters(config) == 852_985_920
    assert count_parameters(text) == 752_393_024


def test_multimodal_shape_writes_the_processor_files_vllm_and_verl_load(tmp_path: Path) -> None:
    shape = resolve_shape("qwen3.5-0.8b")
    tokenizer = build_tokenizer(
        ["a b c"], shape.vocab_size, first_special_id=shape.first_special_id, bpe_vocab_size=300
    )
    _write_processor_files(tmp_path, model_config(shape, tokenizer))
    image = json.loads((tmp_path / "preprocessor_config.json").read_text())
    video = json.loads((tmp_path / "video_preprocessor_config.json").read_text())
    assert image["processor_class"] == video["processor_class"] == "Qwen3VLProcessor"
    assert image["image_processor_type"] == "Qwen2VLImageProcessorFast"
    assert video["video_processor_type"] == "Qwen3VLVideoProcessor"
    assert image["patch_size"] == video["patch_size"] == 16 and image["merge_size"] == 2


def test_unknown_shape_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="qwen3.5-0.8b"):
        resolve_shape("qwen9")
