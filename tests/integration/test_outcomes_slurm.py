"""Truthful outcomes on the local Slurm cluster (issue 12 items 6-8).

Real: Hydra, verl's schema, submitit, Slurm, Ray, the driver, resubmit.py, status.py, the memory
server and the Mem-α reward. TEST DOUBLES: the trainer (tests/doubles/fake_verl_trainer.py follows
verl 0.9.1's fit loop: the step count, the data running out, the save at the last step, the
loggers named in trainer.logger; it calls the experiment's reward once, as verl's reward loop
would) and the answer LLM (tests/doubles/openai_answer_double.py, standing in for ``vllm serve``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _memalpha_module():
    path = Path(__file__).with_name("test_memalpha_slurm.py")
    spec = importlib.util.spec_from_file_location("grpokit_test_memalpha_slurm_shared", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_memalpha = _memalpha_module()
memalpha_data = _memalpha.memalpha_data  # the module-scoped fixture: real NLU rows, built by prepare_data.py
memalpha_overrides = _memalpha.memalpha_overrides


def _sweep(kit, tmp_path: Path, name: str, overrides: list[str], env: dict | None = None):
    out = kit.run(
        "sweep.py",
        ["-m", *kit.slurm_cluster, *overrides, f"sweep_name={name}"],
        env={"FAKE_TRAINER_STEP_S": "0.2", **(env or {})},
        timeout=240,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out, [Path(p["run_dir"]) for p in kit.manifest(tmp_path / "logs" / name)["points"]]


def wait_attempts(kit, run_dir: Path, n: int, timeout: float) -> dict:
    """status.json once it has ``n`` attempts and a final state (a resubmitted point's old state
    is final too, so waiting for a final state alone would return at once)."""
    deadline = time.monotonic() + timeout
    while True:
        status = kit.read_status(run_dir)
        if len(status["attempts"]) >= n and status["state"] in kit.final:
            return status
        if time.monotonic() > deadline:
            pytest.fail(f"{run_dir.name}: {len(status['attempts'])} attempt(s), {status['state']} after {timeout} s")
        time.sleep(1.0)


def assert_status_rows(kit, sweep_dir: Path, expected: dict[int, tuple[str, int]]) -> None:
    """status.py runs, and its rows (read in-process) show ``{index: (state, step)}``."""
    from grpokit.reports.status_table import collect_rows
    from grpokit.run_folder.sweep_reader import load_sweep

    # status.json is final a moment before the job leaves Slurm, whose live state wins in status.py
    array = kit.manifest(sweep_dir)["points"][0]["array_job_id"]
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"array {array} still in squeue"
        time.sleep(1.0)
    out = kit.run("status.py", [str(sweep_dir)], timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r.index: (r.state, r.step) for r in collect_rows(load_sweep(sweep_dir))}
    assert rows == expected, (rows, out.stdout)


def prompt_lengths(model_dir: Path, train_file: Path, rows: int) -> list[int]:
    """Token counts of the first ``rows`` prompts as verl's ``RLHFDataset`` filter measures them (the
    model's tokenizer and chat template, ``add_generation_prompt=True``)."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = pq.read_table(train_file, columns=["prompt"]).slice(0, rows).column(0).to_pylist()
    return [
        len(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True)["input_ids"]) for p in prompts
    ]


@pytest.mark.timeout(600)
def test_a_point_whose_trainer_exits_0_before_its_target_is_failed_and_resubmitted(
    kit, slurm, kit_overrides, tiny_model_dir, gsm8k_dir, tmp_path
):
    # A cause the pre-submission check (validate.data_steps) cannot see: verl's
    # data.filter_overlong_prompts (on in the kit's experiments) drops, AFTER train_max_samples, the
    # prompts longer than data.max_prompt_length. 32 GSM8K rows at batch 8 give 4 steps; at a
    # max_prompt_length that keeps only 16-23 of them (2 batches) verl's fit loop runs out after step 2
    # and returns 0 without its last step. The limit comes from the rows' real token lengths.
    lengths = sorted(prompt_lengths(tiny_model_dir, gsm8k_dir / "train.parquet", 32))
    limit = lengths[15]
    kept = sum(n <= limit for n in lengths)
    assert 16 <= kept < 24 and lengths[-1] <= 512, lengths
    common = [*kit_overrides, "verl.data.train_batch_size=8", "verl.data.train_max_samples=32"]

    # the same short data through train_max_samples alone is refused before submission
    name = "early_refused"
    out = kit.run(
        "sweep.py",
        ["-m", *kit.slurm_cluster, *common[:-1], "verl.data.train_max_samples=16", f"sweep_name={name}"],
        timeout=240,
    )
    assert out.returncode == 2 and "nothing was submitted" in out.stderr, (out.stdout + out.stderr)[-3000:]
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("[")]
    # the point (the sweep's only one: 000), the key, the cause and the fix
    assert line.startswith("[000] verl.trainer.total_training_steps: ") and "train_max_samples=16" in line, line
    assert "fix: set verl.data.train_max_samples>=32" in line, line
    assert not subprocess.run(["squeue", "-h", "-n", name], capture_output=True, text=True).stdout.strip()
    assert not (tmp_path / "logs" / name / "manifest.json").exists()

    _, run_dirs = _sweep(
        kit,
        tmp_path,
        "early",
        [*common, "verl.data.filter_overlong_prompts=true", f"verl.data.max_prompt_length={limit},512"],
    )
    assert len(run_dirs) == 2
    short, whole = kit.wait_final(run_dirs, timeout=420)

    assert short["state"] == "failed", short
    assert short["attempts"][-1]["ended_by"] == "early_exit" and short["attempts"][-1]["exit_code"] == 0
    assert short["last_step"] == 2 and short["target_step"] == 4
    assert "trainer exited 0 at step 2 (attempts/1/metrics.jsonl) of target_step 4" in short["reason"]
    assert "newest complete checkpoint global_step_2" in short["reason"]
    assert whole["state"] == "completed" and whole["last_step"] == 4 == whole["target_step"], whole

    sweep_dir = tmp_path / "logs" / "early"
    assert_status_rows(kit, sweep_dir, {0: ("failed", 2), 1: ("completed", 4)})

    # resubmit.py picks it up (and only it); the new attempt runs in the same folder, is not skipped
    again = kit.run("resubmit.py", [str(sweep_dir)], timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resubmitted {run_dirs[0].name}" in again.stdout and run_dirs[1].name not in again.stdout
    second = wait_attempts(kit, run_dirs[0], 2, timeout=300)
    # verl resumes at step 2, finds no epoch left and returns 0 again: still failed, truthfully
    assert second["state"] == "failed" and second["attempts"][-1]["ended_by"] == "early_exit"
    assert "trainer exited 0 without logging a step (attempts/2/metrics.jsonl) of target_step 4" in second["reason"]
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert [len(p.get("history") or []) for p in manifest["points"]] == [1, 0]


@pytest.mark.timeout(600)
def test_a_failing_answer_server_fails_the_memalpha_point_loudly(kit, slurm, tiny_model_dir, memalpha_data, tmp_path):
    # The answer LLM stand-in is told to fail (its --fail-status knob): "engine" answers HTTP 500
    # to every completion while /v1/models still answers (a vLLM whose engine died), "down" fails
    # /v1/models too (what the memory server's /health asks).
    base = memalpha_overrides(kit, tiny_model_dir, memalpha_data, tmp_path)
    cases = {"engine": ",--fail-status,500]", "down": ",--fail-status,500,--fail-models]"}
    run_dirs = {}
    for name, flags in cases.items():
        overrides = [o[:-1] + flags if o.startswith("+sidecars.answer_llm.command=") else o for o in base]
        overrides.append("sidecars.memory_server.start_timeout_s=20")
        _, (run_dirs[name],) = _sweep(kit, tmp_path, f"answer_{name}", overrides)
    engine, down = kit.wait_final([run_dirs["engine"], run_dirs["down"]], timeout=480)

    # engine: the sidecars pass their gates, the reward's first call raises and the trainer fails
    assert engine["state"] == "failed" and engine["attempts"][-1]["ended_by"] == "failed", engine
    endpoints = json.loads((run_dirs["engine"] / "endpoints.json").read_text())["sidecars"]
    memory_url, answer_url = endpoints["memory_server"]["url"], endpoints["answer_llm"]["url"]
    trainer_log = (run_dirs["engine"] / "attempts" / "1" / "trainer.log").read_text()
    assert "AnswerBackendError" in trainer_log, trainer_log[-3000:]
    assert f"memory server {memory_url}/batch_process: " in engine["reason"], engine["reason"]
    assert f"(answer server {answer_url}/v1): InternalServerError" in engine["reason"]
    assert "max_answer_error_fraction=0.5" in engine["reason"]
    server_log = (run_dirs["engine"] / "attempts" / "1" / "sidecars" / "memory_server.log").read_text()
    assert server_log.count("answer model call failed") >= 1, server_log[-3000:]
    assert (
        not (run_dirs["engine"] / "metrics.jsonl").exists()
        or not (run_dirs["engine"] / "metrics.jsonl").read_text().strip()
    ), "no step was trained on rewards that could not be computed"

    # down: the memory server reports itself unhealthy, so the job fails at its health gate
    assert down["state"] == "failed" and down["attempts"][-1]["ended_by"] == "sidecar_failed", down
    assert "sidecar memory_server not ready" in down["reason"], down["reason"]
    assert "its last health answer: HTTP 503" in down["reason"] and '"status":"unhealthy"' in down["reason"]
    assert "answer server http://" in down["reason"] and "answered HTTP 500 to GET /models" in down["reason"]
    server_log = (run_dirs["down"] / "attempts" / "1" / "sidecars" / "memory_server.log").read_text()
    assert server_log.count("unhealthy: answer server") == 1  # logged once, not once per poll
    assert not (run_dirs["down"] / "attempts" / "1" / "trainer.log").exists(), "the trainer must not start"


@pytest.mark.timeout(600)
def test_a_verl_style_logger_setting_keeps_the_kits_metrics(kit, slurm, kit_overrides, tmp_path):
    # [console] as a user would copy it from verl's scripts ([console,wandb] there; wandb needs a
    # network this machine does not have): without the kit's fix no metrics.jsonl is written.
    users = [*kit_overrides, "verl.trainer.logger=[console]"]
    notice = (
        "verl.trainer.logger=[console] leaves out verl's file logger; the kit adds it (trainer.logger=[console,file])"
    )

    dry = kit.run("sweep.py", ["-m", *kit.slurm_cluster, *users, "sweep_name=logger_dry", "dry_run=true"], timeout=240)
    assert dry.returncode == 0, dry.stderr[-3000:]
    dry_md = (tmp_path / "logs" / "logger_dry" / "dry_run.md").read_text()
    assert dry_md.count(notice) == 1 and "trainer.logger=[console,file]" in dry_md
    assert (dry.stdout + dry.stderr).count(notice) == 1  # said once (the printed dry_run.md)

    out, run_dirs = _sweep(kit, tmp_path, "logger", [*users, "verl.trainer.total_training_steps=3"])
    assert (out.stdout + out.stderr).count(notice) == 1, out.stdout + out.stderr
    (status,) = kit.wait_final(run_dirs, timeout=420)
    run_dir = run_dirs[0]
    assert status["state"] == "completed" and status["last_step"] == 3, status
    assert "trainer.logger=[console,file]" in (run_dir / "verl_cmd.sh").read_text()  # what the job ran
    point = json.loads((run_dir / "point.json").read_text())  # what the point records
    assert "trainer.logger=[console,file]" in point["verl_overrides"]
    assert [n.startswith(notice) for n in point["notices"]] == [True]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    # the trainer double honours the list as verl does: no tensorboard backend was asked for
    assert not (run_dir / "attempts" / "1" / "tensorboard").exists()
    assert_status_rows(kit, tmp_path / "logs" / "logger", {0: ("completed", 3)})
