"""The Memory-RL reward on real NLU rows, through a real memory server on 127.0.0.1 and the
OpenAI-compatible TEST DOUBLE standing in for vLLM; plus the data builder it is fed by."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import inspect
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
from omegaconf import OmegaConf

from grpokit.tasks.memalpha import data
from grpokit.tasks.memalpha.reward import (
    AnswerBackendError,
    MemoryServerError,
    compute_score,
    normalize_memory,
    parse_memory,
    score_answer,
)
from grpokit.tasks.memalpha.server import ServerSettings, create_app

REPO = Path(__file__).resolve().parents[2]
NLU_DIR = Path("/work/shared/data/nlu")
SERVER_KEY = "reward-test-key-31ab"
MODEL = "answer-double"


def _load_double() -> ModuleType:
    path = REPO / "tests" / "doubles" / "openai_answer_double.py"
    spec = importlib.util.spec_from_file_location("grpokit_test_openai_answer_double_r", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


double_mod = _load_double()


@pytest.fixture(scope="module")
def memory_server_url() -> Iterator[str]:
    double_app = double_mod.create_double_app(model=MODEL)
    with double_mod.serve_in_thread(double_app) as double_url:
        settings = ServerSettings(
            answer_base_url=f"{double_url}/v1", answer_model=MODEL, server_key=SERVER_KEY, timeout_s=10
        )
        with double_mod.serve_in_thread(create_app(settings)) as url:
            yield f"{url}/batch_process"


@pytest.fixture(autouse=True)
def _server_key(monkeypatch):
    monkeypatch.setenv("GRPOKIT_MEMORY_SERVER_KEY", SERVER_KEY)


@pytest.fixture(scope="module")
def nlu_rows(tmp_path_factory) -> list[dict]:
    """verl rows built from the real NLU-Evaluation-Data split, read back from parquet as verl does
    (nested lists come back as numpy arrays)."""
    frames = data.load_memalpha_splits(f"nlu:{NLU_DIR}", seed=0, num_rows={"train": 3, "test": 2})
    rows = data.convert_rows(frames["train"].to_dict("records"), "train", num_rows=3, qa_per_row=4, chunk_chars=2000)
    path = tmp_path_factory.mktemp("memalpha") / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return pd.read_parquet(path).to_dict("records")


def _targets(row: dict) -> list[tuple[str, str]]:
    qas = row["reward_model"]["ground_truth"]["questions_and_answers"]
    return [(qa["question"].split("\n")[0].removeprefix("Sentence: "), qa["answer"]) for qa in qas]


def score(row: dict, solution: str, url: str, **kwargs) -> dict:
    return asyncio.run(
        compute_score(
            row["data_source"],
            solution,
            row["reward_model"]["ground_truth"],
            row["extra_info"],
            memory_server_url=url,
            **kwargs,
        )
    )


# ---- the reward on real rows ------------------------------------------------------------------


def test_memory_with_all_target_mappings_scores_above_one(nlu_rows, memory_server_url):
    for row in nlu_rows:
        memory = {
            "core": "",
            "semantic": [{f"m{i}": f"{s} -> {label}"} for i, (s, label) in enumerate(_targets(row))],
            "episodic": [],
        }
        result = score(row, json.dumps(memory), memory_server_url)
        assert result["memalpha_acc"] == 1.0 and result["memalpha_format"] == 1.0
        assert 0.5 < result["memalpha_compression"] < 1.0
        assert result["score"] > 1.0
        assert result["score"] == pytest.approx(1.0 + 0.05 + 0.05 * result["memalpha_compression"])
        assert set(result) == {
            "score",
            "memalpha_acc",
            "memalpha_format",
            "memalpha_compression",
            "memalpha_memory_chars",
            "memalpha_answer_errors",
        }
        assert result["memalpha_answer_errors"] == 0.0


def test_half_the_mappings_score_half(nlu_rows, memory_server_url):
    row = nlu_rows[0]
    half = _targets(row)[:2]
    memory = {"semantic": [{"m": "\n".join(f"Sentence: {s}\nLabel: {label}" for s, label in half)}]}
    assert score(row, json.dumps(memory), memory_server_url)["memalpha_acc"] == 0.5


def test_empty_memory_scores_the_format_and_compression_terms_only(nlu_rows, memory_server_url):
    row = nlu_rows[0]
    empty = score(row, '{"core": "", "semantic": [], "episodic": []}', memory_server_url)
    assert empty["memalpha_acc"] == 0.0 and empty["memalpha_compression"] == 1.0
    assert empty["score"] == pytest.approx(0.05 + 0.05)
    nothing = score(row, "", memory_server_url)
    assert nothing["memalpha_format"] == 0.0
    assert nothing["score"] == pytest.approx(0.05)  # the compression term alone


def test_invalid_json_gets_format_zero_and_is_used_as_raw_text(nlu_rows, memory_server_url):
    row = nlu_rows[0]
    (s, label), *_ = _targets(row)
    result = score(row, f"Memory: {s} -> Label: {label}, and more", memory_server_url)
    assert result["memalpha_format"] == 0.0
    assert result["memalpha_acc"] == 0.25  # the raw text still answers the one mapping it holds
    assert result["score"] == pytest.approx(0.25 + 0.05 * result["memalpha_compression"])


def test_think_block_and_code_fence_are_accepted(nlu_rows, memory_server_url):
    row = nlu_rows[0]
    memory = {"semantic": [{"m1": f"{s} -> {label}"} for s, label in _targets(row)]}
    solution = f"<think>let me write it</think>\n```json\n{json.dumps(memory)}\n```"
    result = score(row, solution, memory_server_url)
    assert result["memalpha_format"] == 1.0 and result["memalpha_acc"] == 1.0


def test_unreachable_server_fails_loudly(nlu_rows):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/batch_process"
    start = time.monotonic()
    with pytest.raises(MemoryServerError, match=rf"memory server {re.escape(url)} unreachable after 3 tries"):
        score(nlu_rows[0], "{}", url, retries=2, backoff_s=0.01, timeout_s=2)
    assert time.monotonic() - start < 10


def test_wrong_key_fails_at_once_naming_the_env_var(nlu_rows, memory_server_url, monkeypatch):
    monkeypatch.setenv("GRPOKIT_MEMORY_SERVER_KEY", "wrong")
    with pytest.raises(MemoryServerError, match="HTTP 401.*GRPOKIT_MEMORY_SERVER_KEY"):
        score(nlu_rows[0], "{}", memory_server_url, retries=3, backoff_s=5)


def test_verl_loads_it_as_an_async_reward_with_reward_kwargs(nlu_rows, memory_server_url):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    path = REPO / "src" / "grpokit" / "tasks" / "memalpha" / "reward.py"
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(path),
                    "name": "compute_score",
                    "reward_kwargs": {"memory_server_url": memory_server_url, "max_tokens": 64},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    assert inspect.iscoroutinefunction(fn)  # verl's reward loop awaits it instead of using a thread
    row = nlu_rows[1]
    memory = {"semantic": [{"m": f"{s}: {label}"} for s, label in _targets(row)]}
    result = asyncio.run(
        fn(
            data_source=row["data_source"],
            solution_str=json.dumps(memory),
            ground_truth=row["reward_model"]["ground_truth"],
            extra_info=dict(row["extra_info"]),
        )
    )
    assert result["memalpha_acc"] == 1.0


# ---- a failing answer LLM is never a silent zero (issue 12 item 7) -----------------------------


def _all_targets_memory(row: dict) -> str:
    return json.dumps({"semantic": [{f"m{i}": f"{s} -> {label}"} for i, (s, label) in enumerate(_targets(row))]})


def _with_failing_questions(row: dict, failing: int) -> dict:
    """The row with its first ``failing`` questions carrying the answer double's fail marker (each
    of those calls gets HTTP 500 from the answer server, the others are answered)."""
    gt = dict(row["reward_model"]["ground_truth"])
    qas = [dict(qa) for qa in gt["questions_and_answers"]]
    for qa in qas[:failing]:
        qa["question"] = qa["question"] + "\nFAIL_ANSWER"
    return {**row, "reward_model": {"ground_truth": {**gt, "questions_and_answers": qas}}}


def test_some_failed_answer_calls_are_counted_not_scored_as_wrong(nlu_rows, memory_server_url, caplog):
    row = _with_failing_questions(nlu_rows[0], 1)  # 1 of 4 calls fails: 0.25 <= 0.5
    result = score(row, _all_targets_memory(row), memory_server_url)
    assert result["memalpha_answer_errors"] == 1.0
    assert result["memalpha_acc"] == 1.0  # the 3 answered questions, all right
    (line,) = [r.getMessage() for r in caplog.records if "answer calls failed" in r.getMessage()]
    assert f"memory server {memory_server_url}: 1 of 4 answer calls failed at the answer server" in line
    assert "InternalServerError" in line and "500" in line


def test_failed_answer_calls_past_the_threshold_fail_loudly(nlu_rows, memory_server_url):
    row = _with_failing_questions(nlu_rows[0], 1)
    with pytest.raises(AnswerBackendError, match=r"1 of 4 answer calls failed.*max_answer_error_fraction=0.2"):
        score(row, _all_targets_memory(row), memory_server_url, max_answer_error_fraction=0.2)
    row = _with_failing_questions(nlu_rows[0], 3)
    with pytest.raises(AnswerBackendError, match=r"3 of 4 answer calls failed.*75%.*=0.5"):
        score(row, _all_targets_memory(row), memory_server_url)  # the default threshold, 0.5
    # 1.0 never raises: every error is then only counted
    result = score(row, _all_targets_memory(row), memory_server_url, max_answer_error_fraction="1.0")
    assert result["memalpha_answer_errors"] == 3.0 and result["memalpha_acc"] == 1.0
    with pytest.raises(ValueError, match="max_answer_error_fraction must be in"):
        score(row, "{}", memory_server_url, max_answer_error_fraction=1.5)


@pytest.mark.parametrize("backend", ["http_500", "down"])
def test_answer_server_failing_or_down_is_not_a_silent_zero(nlu_rows, backend):
    """The issue's condition: the answer server answers HTTP 500 to every call, or is not running;
    before, compute_score returned the format + compression terms (0.0976) and logged nothing."""
    double_app = double_mod.create_double_app(model=MODEL, fail_status=500 if backend == "http_500" else None)
    with double_mod.serve_in_thread(double_app) as double_url:
        pass  # "down": started for a free port, then stopped
    with contextlib.ExitStack() as stack:
        if backend == "http_500":
            double_url = stack.enter_context(double_mod.serve_in_thread(double_app))
        settings = ServerSettings(
            answer_base_url=f"{double_url}/v1",
            answer_model=MODEL,
            server_key=SERVER_KEY,
            timeout_s=5,
            answer_retries=0,
        )
        url = stack.enter_context(double_mod.serve_in_thread(create_app(settings))) + "/batch_process"
        row = nlu_rows[0]
        error = "InternalServerError" if backend == "http_500" else "APIConnectionError"
        with pytest.raises(AnswerBackendError) as raised:
            score(row, _all_targets_memory(row), url)
    text = str(raised.value)
    assert f"memory server {url}: 4 of 4 answer calls failed" in text
    assert f"(answer server {double_url}/v1): {error}" in text


def test_a_mem_alpha_server_without_error_kinds_marks_failures_by_the_error_prefix():
    from grpokit.tasks.memalpha.reward import _backend_errors

    body = {"result": [["\\boxed{1}", "Error: answer model call failed: boom"]], "status": "success"}
    assert _backend_errors(body, body["result"][0]) == [None, "answer model call failed: boom"]


# ---- scoring and parsing (pure) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("\\boxed{37}", "37", 1.0),
        ("37", "37", 1.0),
        (" '37' ", "37", 1.0),
        ("The label is \\boxed{ 37 }.", "37", 1.0),
        ("<think>maybe \\boxed{12}</think>\\boxed{37}", "37", 1.0),
        ("\\boxed{07}", "7", 0.0),
        ("The label is 37", "37", 0.0),
        ("\\boxed{37} or \\boxed{9}", "9", 0.0),
        ("\\boxed{label 37}", "37", 0.0),
        ("Error: answer model call failed", "37", 0.0),
        ("", "0", 0.0),
    ],
)
def test_score_answer_follows_mem_alpha(prediction, gold, expected):
    assert score_answer(prediction, gold) == expected


def test_parse_and_normalize_memory():
    assert parse_memory('[{"m1": "x"}]') == ('[{"m1": "x"}]', 0.0)  # JSON, but not an object
    parsed, fmt = parse_memory('{"core": {"a": 1}, "semantic": [{"a": "x", "b": "y"}, "z", {"c": 3}]}')
    assert fmt == 1.0
    memory, chars = normalize_memory(parsed)
    assert memory == {
        "core": '{"a": 1}',
        "semantic": [{"a": "x"}, {"b": "y"}, {"s3": "z"}, {"c": "3"}],
        "episodic": [],
    }
    assert chars == len('{"a": 1}') + 4
    memory, chars = normalize_memory({"semantic": {"k1": "v1"}, "episodic": "went out", "extra": "ignored"})
    assert memory["semantic"] == [{"k1": "v1"}] and memory["episodic"] == [{"e1": "went out"}]
    assert chars == len("v1") + len("went out")
    assert normalize_memory("raw text") == ({"core": "", "semantic": [{"m1": "raw text"}], "episodic": []}, 8)
    assert normalize_memory("") == ({"core": "", "semantic": [], "episodic": []}, 0)


def test_compression_is_clipped_at_zero(nlu_rows, memory_server_url):
    row = nlu_rows[0]
    source_chars = row["reward_model"]["ground_truth"]["source_chars"]
    result = score(row, json.dumps({"core": "x" * (2 * source_chars)}), memory_server_url)
    assert result["memalpha_compression"] == 0.0


# ---- data builder -------------------------------------------------------------------------------


def test_nlu_source_builds_mem_alpha_rows_with_a_label_permutation():
    train_pool = data.load_nlu_split(data.resolve_nlu_dir(NLU_DIR), "trainset")
    assert len(train_pool) == 9960
    ids = data.label_permutation([label for _, label in train_pool], seed=0)
    assert len(ids) == 64 and sorted(ids.values()) == list(range(64))
    assert ids != data.label_permutation(ids, seed=1)
    assert ids != dict(zip(sorted(ids), range(64), strict=True))  # shuffled, not alphabetical
    frame = data.build_memalpha_nlu_rows(train_pool, train_pool, ids, num_rows=2, seed=0)
    row = frame.iloc[0]
    chunks = json.loads(row["chunks"])
    assert len(chunks) == row["num_chunks"] == 10
    examples = data.extract_examples(chunks[0])
    assert len(examples) == 40
    by_sentence = dict(train_pool)
    assert all(int(label) == ids[by_sentence[s]] for s, label in examples)
    qas = json.loads(row["questions_and_answers"])
    assert len(qas) == 50 and qas[0]["question"].endswith("Put your final answer as \\boxed{label}.")
    assert row["data_source"].startswith("icl_nlu")


def test_cut_chunk_keeps_whole_examples():
    chunk = "Sentence: a\nLabel: 12\n\nSentence: b\nLabel: 345\n\nSentence: c\nLabel: 6"
    cut = data.cut_chunk(chunk, chunk.index("345") + 2)
    assert cut == "Sentence: a\nLabel: 12"
    assert data.extract_examples(cut) == [("a", "12")]
    assert data.extract_examples("Sentence: b\nLabel: 34", drop_trailing=True) == []


def test_prepare_data_main_writes_verl_rows_and_round_trips_mem_alpha_parquet(tmp_path):
    parser = argparse.ArgumentParser()
    data.add_arguments(parser)
    data.main(parser.parse_args(["--source", str(NLU_DIR), "--out", str(tmp_path / "a"), "--num-train", "5"]))
    train = pd.read_parquet(tmp_path / "a" / "train.parquet")
    test = pd.read_parquet(tmp_path / "a" / "test.parquet")
    assert len(train) == 5 and len(test) == 16
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = train.iloc[0]
    assert row["data_source"] == "memalpha_nlu_memory_json" and row["ability"] == "memory"
    content = row["prompt"][0]["content"]
    assert content.startswith("You are a memory writer.") and data.MEMORY_SCHEMA in content
    gt = row["reward_model"]["ground_truth"]
    assert len(gt["questions_and_answers"]) == 4 == row["extra_info"]["num_reward_questions"]
    context = content.split("Context:\n", 1)[1]
    assert gt["source_chars"] == len(context) <= 2000
    for s, label in data.extract_examples(content.split("Context:")[0].replace(" -> Label: ", "\nLabel: ")):
        assert f"Sentence: {s}\nLabel: {label}" in context
    assert row["extra_info"]["memalpha_source"].startswith("icl_nlu")

    # The Mem-α-format rows written beside it convert the same way from a local folder.
    mixed = pd.read_parquet(tmp_path / "a" / "memalpha_source" / "train.parquet")
    squad = mixed.iloc[:1].assign(data_source="squad")
    pd.concat([squad, mixed]).to_parquet(tmp_path / "train.parquet")
    pd.read_parquet(tmp_path / "a" / "memalpha_source" / "test.parquet").to_parquet(tmp_path / "test.parquet")
    args = ["--source", str(tmp_path), "--out", str(tmp_path / "b"), "--qa-per-row", "2", "--chunk-chars", "500"]
    data.main(parser.parse_args(args))
    again = pd.read_parquet(tmp_path / "b" / "train.parquet")
    assert len(again) == len(mixed)  # the squad row is not an NLU row
    assert all(gt["source_chars"] <= 500 for gt in again["reward_model"].map(lambda r: r["ground_truth"]))
    assert not (tmp_path / "b" / "memalpha_source").exists()


def test_bad_source_names_the_fix(tmp_path):
    parser = argparse.ArgumentParser()
    data.add_arguments(parser)
    with pytest.raises(FileNotFoundError, match="no trainset"):
        data.main(parser.parse_args(["--source", f"nlu:{tmp_path}", "--out", str(tmp_path / "o")]))
    with pytest.raises(FileNotFoundError, match="no train.parquet"):
        data.main(parser.parse_args(["--source", str(tmp_path), "--out", str(tmp_path / "o")]))
