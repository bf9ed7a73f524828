"""tool_memory tools driven through verl's real classes.

Real: verl's tool registry (``initialize_tools_from_config``), ``BaseTool``/``ToolResponse``,
``AgentData``, ``ToolAgentLoop`` (its ``_call_tool`` and its whole ``run``), the ``qwen3_coder``
tool parser, the Continuous Token builder and a Hugging Face tokenizer with a chat template.
Test double: ``ScriptedServerManagerDouble`` stands in for the vLLM server manager (needs a GPU);
it returns scripted assistant turns as token ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import verl
from hydra import compose, initialize_config_dir
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, Qwen3XMLToolParser, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from grpokit.tasks.tool_memory.data import build_rows
from grpokit.tasks.tool_memory.reward import MAX_SCORE, compute_score
from grpokit.tasks.tool_memory.tools import (
    NOT_FOUND,
    TOOL_CONFIG_PATH,
    ReadMemoryTool,
    SearchMemoryTool,
    get_session,
)

# Coroutine tests run on asyncio through anyio's pytest plugin (anyio comes with httpx).
pytestmark = [pytest.mark.timeout(120), pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


STORE: dict[str, Any] = {
    "memories": [
        {"id": "mem_a", "text": "The user's sister drinks oolong tea every morning."},
        {"id": "mem_b", "text": "The user's favourite author is Borges."},
        {"id": "mem_tea", "text": "The user prefers chamomile tea for late afternoon breaks."},
        {"id": "mem_c", "text": "The user tried rooibos tea once and disliked it."},
    ],
    "target_id": "mem_tea",
    "target_answer": "chamomile",
}

# ChatML + qwen3_coder tool calls: the fallback chat template used while the shared tiny model
# fixture (`tiny_model_dir` in tests/conftest.py) does not exist.
_FALLBACK_CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- set call = tool_call.function if tool_call.function is defined else tool_call %}"
    "{{- '\\n<tool_call>\\n<function=' + call.name + '>\\n' }}"
    "{%- for name, value in call.arguments.items() %}"
    "{{- '<parameter=' + name + '>\\n' + (value | string) + '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _fallback_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts` (any text round-trips) with the fallback template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=_FALLBACK_CHAT_TEMPLATE
    )


@pytest.fixture  # function scope: works whatever scope tiny_model_dir has
def chat_tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    """The shared tiny model's tokenizer when tests/conftest.py provides it, else the fallback."""
    try:
        return AutoTokenizer.from_pretrained(request.getfixturevalue("tiny_model_dir"))
    except pytest.FixtureLookupError:
        return _fallback_tokenizer([r["prompt"][1]["content"] for r in build_rows(20, 0, "train")])


@pytest.fixture(scope="module")
def tools() -> dict[str, BaseTool]:
    """Both tools, loaded the way every AgentLoopWorker loads them (BaseTool prints its schema)."""
    with contextlib.redirect_stdout(io.StringIO()):
        tool_list = initialize_tools_from_config(str(TOOL_CONFIG_PATH))
    return {tool.name: tool for tool in tool_list}


def _tools_kwargs(store: dict[str, Any]) -> dict[str, Any]:
    return {"search_memory": {"create_kwargs": store}, "read_memory": {"create_kwargs": store}}


def _agent_data(request_id: str, store: dict[str, Any] = STORE) -> AgentData:
    return AgentData(
        messages=[],
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id=request_id,
        tools_kwargs=_tools_kwargs(store),
    )


def _call_tool_only_loop(tools: dict[str, BaseTool]) -> ToolAgentLoop:
    """A ToolAgentLoop with only what its real ``_call_tool`` reads; the full constructor needs a
    trainer config and server manager (see test_tool_agent_loop_rollout_scores_max)."""
    loop = ToolAgentLoop.__new__(ToolAgentLoop)
    loop.tools = tools
    loop.max_tool_response_length = 256
    loop.tool_response_truncate_side = "middle"
    return loop


async def _call(loop: ToolAgentLoop, agent_data: AgentData, name: str, **arguments: Any) -> tuple[str, float]:
    """One tool call exactly as ToolAgentLoop makes it (create -> execute(agent_data) -> release)."""
    call = FunctionCall(name=name, arguments=json.dumps(arguments))
    response, reward, _ = await loop._call_tool(call, agent_data.tools_kwargs, agent_data)
    assert isinstance(response, ToolResponse)
    agent_data.tool_rewards.append(reward)  # as _handle_processing_tools_state does
    return response.text or "", reward


def test_tool_config_registers_both_tools(tools: dict[str, BaseTool]) -> None:
    assert isinstance(tools["search_memory"], SearchMemoryTool)
    assert isinstance(tools["read_memory"], ReadMemoryTool)
    search_schema = tools["search_memory"].tool_schema.function.parameters
    read_schema = tools["read_memory"].tool_schema.function.parameters
    assert search_schema.required == ["query"] and search_schema.properties["query"].type == "string"
    assert read_schema.required == ["memory_id"] and read_schema.properties["memory_id"].type == "string"
    assert tools["search_memory"].reward_once_per_rollout is True


def test_tool_classes_import_without_pythonpath(tmp_path: Path) -> None:
    """A Ray worker starts in another folder with no PYTHONPATH: the class paths must still import."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "from verl.tools.tool_registry import initialize_tools_from_config as load\n"
        f"print('NAMES', sorted(type(t).__name__ for t in load({str(TOOL_CONFIG_PATH)!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "NAMES ['ReadMemoryTool', 'SearchMemoryTool']" in result.stdout


async def test_search_matches_substrings_and_falls_back(tools: dict[str, BaseTool]) -> None:
    loop = _call_tool_only_loop(tools)
    agent_data = _agent_data("r1")
    text, reward = await _call(loop, agent_data, "search_memory", query="  TEA ")
    assert json.loads(text) == ["mem_a", "mem_tea", "mem_c"]
    assert reward == 0.25
    text, reward = await _call(loop, _agent_data("r2"), "search_memory", query="volcano")
    assert json.loads(text) == ["mem_a", "mem_b"]  # nothing matches: the first two memories
    assert reward == 0.25
    text, reward = await _call(loop, _agent_data("r3"), "search_memory", query="   ")
    assert json.loads(text) == ["mem_a", "mem_b"]
    assert reward == 0.0  # an empty query earns nothing


async def test_read_returns_text_or_not_found(tools: dict[str, BaseTool]) -> None:
    loop = _call_tool_only_loop(tools)
    text, reward = await _call(loop, _agent_data("r1"), "read_memory", memory_id="mem_tea")
    assert (text, reward) == ("The user prefers chamomile tea for late afternoon breaks.", 0.75)
    text, reward = await _call(loop, _agent_data("r2"), "read_memory", memory_id="mem_a")
    assert (text, reward) == ("The user's sister drinks oolong tea every morning.", 0.0)
    text, reward = await _call(loop, _agent_data("r3"), "read_memory", memory_id="mem_zzz")
    assert (text, reward) == (NOT_FOUND, 0.0)
    assert tools["read_memory"]._instances == {}  # every instance was released


async def test_rewards_paid_once_per_rollout(tools: dict[str, BaseTool]) -> None:
    loop = _call_tool_only_loop(tools)
    agent_data = _agent_data("r1")
    rewards = [
        (await _call(loop, agent_data, "search_memory", query="tea"))[1],
        (await _call(loop, agent_data, "search_memory", query="user"))[1],
        (await _call(loop, agent_data, "read_memory", memory_id="mem_tea"))[1],
        (await _call(loop, agent_data, "read_memory", memory_id="mem_tea"))[1],
    ]
    assert rewards == [0.25, 0.0, 0.75, 0.0]
    assert [c["reward"] for c in get_session(agent_data).calls] == rewards


async def test_rewards_repeat_when_configured_so(tools: dict[str, BaseTool]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        search = SearchMemoryTool(
            {"type": "native", "reward_once_per_rollout": False}, tools["search_memory"].tool_schema
        )
    instance_id, _ = await search.create(create_kwargs=STORE)
    agent_data = _agent_data("r1")
    rewards = [(await search.execute(instance_id, {"query": "tea"}, agent_data=agent_data))[1] for _ in range(2)]
    await search.release(instance_id)
    assert rewards == [0.25, 0.25]


async def test_bad_store_becomes_a_tool_error_with_zero_reward(tools: dict[str, BaseTool]) -> None:
    loop = _call_tool_only_loop(tools)
    agent_data = _agent_data("r1", store={"memories": [{"id": "m1"}]})  # no text, no target_id
    text, reward = await _call(loop, agent_data, "read_memory", memory_id="m1")
    assert reward == 0.0
    assert "tools_kwargs.read_memory.create_kwargs" in text and "target_id" in text
    with pytest.raises(ValueError, match="create_kwargs"):
        await tools["read_memory"].create(create_kwargs={})


async def test_concurrent_rollouts_are_isolated(tools: dict[str, BaseTool]) -> None:
    """8 prompts x 4 samples run at once, calls interleaved; each rollout sees only its own store,
    calls and rewards (the 4 samples of a prompt share a store but not their sessions)."""
    loop = _call_tool_only_loop(tools)
    rows = build_rows(8, seed=3, split="train")

    async def rollout(row: dict[str, Any], sample: int) -> tuple[AgentData, list[str]]:
        store = row["extra_info"]["tools_kwargs"]["search_memory"]["create_kwargs"]
        agent_data = _agent_data(f"{row['extra_info']['index']}-{sample}", store)
        queries = [row["extra_info"]["hint"], "user"][: 1 + sample % 2]
        texts = []
        for query in queries:
            texts.append((await _call(loop, agent_data, "search_memory", query=query))[0])
            await asyncio.sleep(0)  # let the other rollouts run between calls
        texts.append((await _call(loop, agent_data, "read_memory", memory_id=store["target_id"]))[0])
        return agent_data, texts

    results = await asyncio.gather(*(rollout(row, sample) for row in rows for sample in range(4)))
    for (agent_data, texts), (row, sample) in zip(results, [(r, s) for r in rows for s in range(4)], strict=True):
        store = row["extra_info"]["tools_kwargs"]["search_memory"]["create_kwargs"]
        own_ids = {m["id"] for m in store["memories"]}
        hint = row["extra_info"]["hint"]
        expected_hits = [m["id"] for m in store["memories"] if hint in m["text"].lower()]
        assert json.loads(texts[0]) == expected_hits
        assert set(json.loads(texts[0])) <= own_ids
        assert row["extra_info"]["target_answer"] in texts[-1]
        assert agent_data.tool_rewards == [0.25] + [0.0] * (sample % 2) + [0.75]
        session = get_session(agent_data)
        assert len(session.calls) == len(texts)
        assert session.calls[0]["arguments"] == {"query": hint}
    assert tools["search_memory"]._instances == {} and tools["read_memory"]._instances == {}


async def test_qwen3_coder_tool_calls_parse_and_execute(
    tools: dict[str, BaseTool], chat_tokenizer: PreTrainedTokenizerBase
) -> None:
    """Scripted assistant turn -> token ids -> the parser ToolAgentLoop uses for format=qwen3_coder."""
    parser = ToolParser.get_tool_parser("qwen3_coder", chat_tokenizer)
    assert isinstance(parser, Qwen3XMLToolParser)
    response = (
        "I will look it up.\n"
        "<tool_call>\n<function=search_memory>\n<parameter=query>\ntea\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=read_memory>\n<parameter=memory_id>\nmem_tea\n</parameter>\n</function>\n"
        "</tool_call>"
    )
    ids = chat_tokenizer.encode(response, add_special_tokens=False)
    schemas = [tool.tool_schema for tool in tools.values()]
    content, calls = await parser.extract_tool_calls(ids, schemas)
    assert content.strip() == "I will look it up."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("search_memory", {"query": "tea"}),
        ("read_memory", {"memory_id": "mem_tea"}),
    ]
    loop = _call_tool_only_loop(tools)
    agent_data = _agent_data("r1")
    results = [await loop._call_tool(call, agent_data.tools_kwargs, agent_data) for call in calls]
    assert json.loads(results[0][0].text) == ["mem_a", "mem_tea", "mem_c"]
    assert results[1][0].text == STORE["memories"][2]["text"]
    assert [r[1] for r in results] == [0.25, 0.75]


class ScriptedServerManagerDouble:
    """Test double for verl's LLM server manager (vLLM needs a GPU): answers each ``generate``
    with the next scripted assistant turn, encoded with the rollout's tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, turns: list[str]):
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.prompts: list[str] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        self.prompts.append(self.tokenizer.decode(prompt_ids))
        turn = self.turns.pop(0) + self.tokenizer.eos_token
        return TokenOutput(token_ids=self.tokenizer.encode(turn, add_special_tokens=False), stop_reason="completed")


def _trainer_config(max_assistant_turns: int = 4):
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(
            "ppo_trainer",
            overrides=[
                "actor_rollout_ref.rollout.name=vllm",
                f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOL_CONFIG_PATH}",
                "actor_rollout_ref.rollout.multi_turn.format=qwen3_coder",
                f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_assistant_turns}",
                "data.max_prompt_length=2048",
                "data.max_response_length=1024",
            ],
        )


async def test_tool_agent_loop_rollout_scores_max(
    tools: dict[str, BaseTool], chat_tokenizer: PreTrainedTokenizerBase
) -> None:
    """search -> read -> FINAL through verl's real ToolAgentLoop.run, scored by compute_score."""
    row = build_rows(1, seed=0, split="train")[0]
    extra_info = row["extra_info"]
    server = ScriptedServerManagerDouble(
        chat_tokenizer,
        [
            "Let me search.\n<tool_call>\n<function=search_memory>\n<parameter=query>\n"
            f"{extra_info['hint']}\n</parameter>\n</function>\n</tool_call>",
            "<tool_call>\n<function=read_memory>\n<parameter=memory_id>\n"
            f"{extra_info['target_id']}\n</parameter>\n</function>\n</tool_call>",
            f"The memory says so.\nFINAL: {extra_info['target_answer']}",
        ],
    )
    config = _trainer_config()
    loop = ToolAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=chat_tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(list(tools.values())),
    )
    output = await loop.run(
        {"temperature": 1.0}, raw_prompt=row["prompt"], tools_kwargs=extra_info["tools_kwargs"], extra_info=extra_info
    )
    assert output.num_turns == 6  # user, call, tool, call, tool, final: the reference's 6.0
    assert output.extra_fields["tool_rewards"] == [0.25, 0.75]
    assert not any(key.startswith("_grpokit") for key in output.extra_fields)  # no batch column
    assert "<tool_response>" in server.prompts[-1] and extra_info["target_answer"] in server.prompts[-1]
    # What the naive reward manager does: decode the response, merge extra_fields into extra_info.
    solution = chat_tokenizer.decode(output.response_ids, skip_special_tokens=True)
    score = compute_score(
        row["data_source"],
        solution,
        row["reward_model"]["ground_truth"],
        {**extra_info, **output.extra_fields, "num_turns": output.num_turns},
    )
    assert score == {
        "score": MAX_SCORE,
        "tool_reward": 1.0,
        "answer_reward": 1.0,
        "format_reward": 0.25,
        "tool_calls": 2.0,
    }
    assert MAX_SCORE == 2.25
