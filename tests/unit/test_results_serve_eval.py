"""grpokit serve-eval against real HTTP stand-ins for vLLM (tests/doubles/openai_chat_double.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from grpokit.evaluation import compare as evaluation
from grpokit.runtime.processes.ports import reserve_ports
from grpokit.serving import vllm
from grpokit.slurm.gpus import visible_gpus

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "openai_chat_double.py"
SUFFIX = ' Let\'s think step by step and output the final answer after "####".'
QUESTIONS = [
    ("A worker earns $8 a day and works every day of the week. How much in a week?", "56"),
    ("Tom has 3 apples and buys 4 more. How many apples?", "7"),
    ("Half of 10 is?", "5"),
]
BASE_ANSWERS = {
    "works every day": "A work week has 5 days, so 8 * 5 = 40. #### 40",
    "Tom has 3": "3 + 4 = 7 #### 7",
    "Half of 10": "10 / 2 = 5 #### 5.",  # the period is captured by verl's regex: scores 0
}
TRAINED_ANSWERS = {
    "works every day": "Every day of the week is 7 days, so 8 * 7 = 56. #### 56",
    "Tom has 3": "3 + 4 = 7 #### 7",
    "Half of 10": "10 / 2 = 5 #### 5.",
}


def write_test_parquet(path: Path) -> Path:
    """Rows as verl's examples/data_preprocess/gsm8k.py writes them."""
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": q + SUFFIX}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": gt},
            "extra_info": {"split": "test", "index": i, "answer": f"#### {gt}", "question": q},
        }
        for i, (q, gt) in enumerate(QUESTIONS)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def start_double(tmp_path: Path, name: str, answers: dict, key: str, delay: float = 0.0):
    port = reserve_ports(1, host="127.0.0.1")[0]
    (tmp_path / f"{name}.json").write_text(json.dumps(answers))
    argv = [
        sys.executable,
        str(DOUBLE),
        "--port",
        str(port),
        "--served-model-name",
        name,
        "--answers",
        str(tmp_path / f"{name}.json"),
        "--record",
        str(tmp_path / f"{name}.requests.jsonl"),
        "--startup-delay",
        str(delay),
    ]
    log = tmp_path / f"{name}.log"
    proc = vllm.start(argv, log, vllm.server_env(os.environ, key))
    return proc, f"http://127.0.0.1:{port}/v1", log


@pytest.fixture
def servers(tmp_path):
    started = []
    try:
        base = start_double(tmp_path, "base", BASE_ANSWERS, "kb", delay=1.0)
        trained = start_double(tmp_path, "trained", TRAINED_ANSWERS, "kt")
        started = [base[0], trained[0]]
        for (proc, url, log), key in ((base, "kb"), (trained, "kt")):
            vllm.wait_ready(f"{url}/models", key, proc, 60, log, name="server")
        yield {"base": base[1], "trained": trained[1]}
    finally:
        for proc in started:
            vllm.stop(proc, grace_s=5)


def load_cli():
    """The command's module (grpokit.cli), as ``grpokit <command>`` runs it."""
    return importlib.import_module(f"grpokit.cli.{'serve_eval'}")


@pytest.mark.timeout(120)
def test_eval_end_to_end_against_http_doubles(servers, tmp_path, monkeypatch, capsys):
    parquet = write_test_parquet(tmp_path / "test.parquet")
    monkeypatch.setenv("GRPOKIT_EVAL_BASE_KEY", "kb")
    monkeypatch.setenv("GRPOKIT_EVAL_TRAINED_KEY", "kt")
    out = tmp_path / "eval"
    cli = load_cli()
    rc = cli.main(
        [
            "--base-url",
            servers["base"],
            "--base-name",
            "base",
            "--trained-url",
            servers["trained"],
            "--trained-name",
            "trained",
            "--test-parquet",
            str(parquet),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    summary = json.loads((out / "eval_summary.json").read_text())
    assert summary["n"] == 3
    assert summary["models"]["base"]["accuracy"] == pytest.approx(1 / 3)
    assert summary["models"]["trained"]["accuracy"] == pytest.approx(2 / 3)
    assert "kb" not in (out / "eval_summary.json").read_text()  # keys never written
    dis = [json.loads(line) for line in (out / "disagreements.jsonl").read_text().splitlines()]
    assert len(dis) == 1
    d = dis[0]
    assert d["index"] == 0 and d["ground_truth"] == "56" and "every day of the week" in d["question"]
    assert d["base_extracted"] == "40" and d["base_score"] == 0.0 and "5 days" in d["base_answer"]
    assert d["trained_extracted"] == "56" and d["trained_score"] == 1.0
    assert len((out / "answers.jsonl").read_text().splitlines()) == 3
    # Greedy decoding, the right served name, the prompt as in the parquet.
    reqs = [json.loads(x) for x in (tmp_path / "trained.requests.jsonl").read_text().splitlines()]
    assert len(reqs) == 3 and all(r["temperature"] == 0 and r["model"] == "trained" for r in reqs)
    assert {r["messages"][0]["content"] for r in reqs} == {q + SUFFIX for q, _ in QUESTIONS}
    assert "base: accuracy 0.3333" in capsys.readouterr().out


def test_scores_are_verls_gsm8k_rule():
    from verl.utils.reward_score.gsm8k import compute_score

    for text, gt in [("#### 56", "56"), ("#### 5.", "5"), ("so 1,000 #### 1,000", "1000"), ("56", "56")]:
        assert evaluation.gsm8k_scorer("openai/gsm8k", text, gt) == compute_score(text, gt)


def test_custom_reward_function(tmp_path, monkeypatch):
    (tmp_path / "my_reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(ground_truth in solution_str), 'extra': 1}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    score = evaluation.load_scorer("my_reward:compute_score")
    assert score("x", "it is 56", "56", {}) == 1.0 and score("x", "no", "56", {}) == 0.0
    with pytest.raises(ValueError, match="module:function"):
        evaluation.load_scorer("my_reward")


def test_load_items_rejects_other_formats(tmp_path):
    pd.DataFrame({"question": ["q"]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="no column 'prompt'"):
        evaluation.load_items(tmp_path / "x.parquet")
    items = evaluation.load_items(write_test_parquet(tmp_path / "t.parquet"), limit=2)
    assert [i.ground_truth for i in items] == ["56", "7"] and items[0].messages[0]["role"] == "user"


@pytest.mark.timeout(60)
def test_wait_ready_reports_exit_with_log_tail(tmp_path):
    proc = vllm.start(
        [sys.executable, str(DOUBLE), "--port", "1"], tmp_path / "bad.log", vllm.server_env(os.environ, "k")
    )
    with pytest.raises(vllm.ServerError, match=r"^server base exited with 2 during start-up[\s\S]*--served-model-name"):
        vllm.wait_ready("http://127.0.0.1:1/v1/models", "k", proc, 30, tmp_path / "bad.log", name="server base")


@pytest.mark.timeout(60)
def test_wrong_key_is_not_ready(tmp_path):
    proc, url, log = start_double(tmp_path, "m", {}, "right")
    try:
        vllm.wait_ready(f"{url}/models", "right", proc, 30, log, name="m")
        assert not vllm.is_ready(f"{url}/models", "wrong")
        with pytest.raises(
            vllm.ServerError, match="^m not ready at .* after 2 s .process alive.; its last health answer: HTTP 401"
        ):
            vllm.wait_ready(f"{url}/models", "wrong", proc, 2, log, name="m")
    finally:
        vllm.stop(proc, grace_s=5)
    assert proc.poll() is not None


def test_vllm_command_and_key_off_argv():
    spec = vllm.VllmServe(
        model="/m/hf",
        served_model_name="trained",
        host="127.0.0.1",
        port=8001,
        dtype="bfloat16",
        gpu_memory_utilization=0.4,
        max_num_seqs=16,
    )
    argv = spec.command(python="python")
    assert argv == [
        "python",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "/m/hf",
        "--served-model-name",
        "trained",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "2048",
        "--gpu-memory-utilization",
        "0.4",
        "--max-num-seqs",
        "16",
        "--limit-mm-per-prompt",
        '{"image": 0, "video": 0}',
    ]
    assert not any("key" in a.lower() for a in argv)


def test_gpu_placement(monkeypatch):
    assert vllm.place(2, ["3"]) == ["3", "3"]
    assert vllm.place(2, ["0", "1", "2"]) == ["0", "1"]
    assert vllm.place(2, []) == [None, None]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert visible_gpus(probe=True) == ["4", "5"]


def test_defaults_from_run_folder_and_errors(tmp_path, capsys, bare_point):
    cli = load_cli()
    run = tmp_path / "000_a"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match="point.json not found: pass a run folder"):
        cli.resolve(cli.parse_args(["--run-dir", str(run)]))
    # point.json as the sweep writes it (PointSpec.to_json); serve-eval reads it, not verl_cmd.sh.
    spec = bare_point(
        tmp_path,
        0,
        {"kind": "local"},
        name=run.name,
        verl_overrides=[
            "actor_rollout_ref.model.path=/models/Qwen2.5-0.5B",
            "data.val_files=['/data/gsm8k/test.parquet']",
            "trainer.total_epochs=1",
        ],
        experiment={"name": "gsm8k_grpo"},
        model={"name": "qwen", "path": "/models/Qwen2.5-0.5B"},
    )
    (run / "point.json").write_text(spec.to_json())
    with pytest.raises(ValueError, match="grpokit merge"):
        cli.resolve(cli.parse_args(["--run-dir", str(run)]))
    (run / "hf").mkdir()
    (run / "hf" / "config.json").write_text("{}")
    args = cli.resolve(cli.parse_args(["--run-dir", str(run)]))
    assert args.base == "/models/Qwen2.5-0.5B" and args.test_parquet == "/data/gsm8k/test.parquet"
    assert args.trained == str(run / "hf") and args.out == run / "eval"
    assert cli.main(["--base", "b"]) == 2
    assert "missing --test-parquet" in capsys.readouterr().err
