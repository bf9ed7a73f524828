"""``rehearse=true`` covers every workload and the chain (issue 35 item 7), on the local Slurm cluster.

The commands are a user's plus one switch (no ``runtime.trainer_cmd``, no sidecar ``command``, no
``chain.server_command``): the kit's rehearsal trainer stands in for verl's and its rehearsal answer
server for ``vllm serve``. Real: Hydra, validation, submitit, Slurm (an array, afterok chains), Ray,
the driver, the kit's memory server and the Mem-alpha reward, verl's model merger on the rehearsal
checkpoint's real weights, serve-eval's client and GSM8K scoring, ``status``. Kept short: one step,
the tiny model, a few rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

#: What every command here keeps of the suite's overrides: the tiny model, real GSM8K, logs under tmp.
USER_KEYS = ("model=", "model.path=", "experiment.data_dir=", "logs_root=")


def user_overrides(kit_overrides: list[str]) -> list[str]:
    return [o for o in kit_overrides if o.startswith(USER_KEYS)]


@pytest.fixture(scope="module")
def memalpha_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real NLU rows (``kit.shared``/data/nlu) built into Mem-alpha parquet by the kit's own command."""
    repo = Path(__file__).resolve().parents[2]
    shared = Path(os.environ.get("GRPOKIT_SHARED", repo.parent / "shared"))  # the suite's shared data
    out = tmp_path_factory.mktemp("memalpha")
    cmd = [sys.executable, str(repo / "launch" / "prepare_data.py"), "memalpha"]
    cmd += ["--source", f"nlu:{shared / 'data' / 'nlu'}", "--out", str(out), "--num-train", "2", "--num-test", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.timeout(600)
def test_a_memalpha_rehearsal_runs_the_answer_server_memory_server_and_reward(
    kit, slurm, kit_overrides, memalpha_data, tmp_path
):
    args = [o for o in user_overrides(kit_overrides) if not o.startswith("experiment.data_dir=")]
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *args,
            *kit.slurm_cluster,
            "experiment=memalpha_grpo",
            f"experiment.data_dir={memalpha_data}",
            "sweep_name=rehearse_memalpha",
            "rehearse=true",
            "wait=true",
            "verl.trainer.total_training_steps=1",
            "verl.trainer.save_freq=1",
        ],
        timeout=500,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    run = Path(kit.manifest(tmp_path / "logs" / "rehearse_memalpha")["points"][0]["run_dir"])
    status = kit.read_status(run)
    assert status["state"] == "completed" and status["rehearsal"] is True, status
    attempt = run / "attempts" / "1"
    driver = (attempt / "driver.log").read_text()
    assert "-m grpokit.rehearsal.answer_server" in driver and "vllm.entrypoints" not in driver
    # the real memory server asked the stand-in, and the real reward scored through both
    answer_log = (attempt / "sidecars" / "answer_llm.log").read_text()
    assert "POST /v1/" in answer_log, answer_log[-2000:]
    assert "/v1/chat/completions" in (attempt / "sidecars" / "memory_server.log").read_text()  # its calls
    metrics = [json.loads(line)["data"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["reward/memalpha_answer_errors"] == 0.0 and metrics[-1]["reward/memalpha_acc"] > 0.0
    endpoints = json.loads((run / "endpoints.json").read_text())["sidecars"]
    assert set(endpoints) == {"answer_llm", "memory_server"}


def _wait_chains(run_dirs: list[Path], timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        paths = [r / "chain_status.json" for r in run_dirs]
        records = [json.loads(p.read_text()) if p.exists() else {} for p in paths]
        if all(r.get("state") in ("completed", "failed", "skipped") for r in records):
            return records
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout
            pytest.fail(f"chained jobs not final after {timeout:.0f} s: {records}\n{squeue}")
        time.sleep(3.0)


@pytest.mark.timeout(900)
def test_a_rehearsal_chain_merges_with_verls_merger_evaluates_and_a_failure_shows_in_status(
    kit, slurm, kit_overrides, tmp_path
):
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *user_overrides(kit_overrides),
            *kit.slurm_cluster,
            "sweep_name=rehearse_chain",
            "rehearse=true",
            "wait=true",
            "verl.trainer.total_training_steps=1",
            "verl.trainer.save_freq=1",
            # the second point saves no weights (a runtime.env typed on the command line wins): its merge fails
            "++runtime.env.FAKE_TRAINER_REAL_WEIGHTS=1,0",
            "after=[merge,eval]",
            # the chained job's request fitted to the test cluster, and the first 3 test rows
            "chain.cpus_per_task=1",
            "chain.mem_gb=1",
            "chain.timeout_min=10",
            "chain.limit=3",
            "chain.max_tokens=32",
        ],
        timeout=500,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    sweep = tmp_path / "logs" / "rehearse_chain"
    runs = [Path(p["run_dir"]) for p in kit.manifest(sweep)["points"]]
    assert [kit.read_status(r)["state"] for r in runs] == ["completed", "completed"]
    ok, bad = _wait_chains(runs, timeout=600)

    assert ok["state"] == "completed" and ok["rehearsal"] is True, ok
    assert ok["merge"]["step"] == 1 and (runs[0] / "hf" / "model.safetensors").exists()  # verl's merger, for real
    assert ok["eval"]["n"] == 3 and ok["eval"]["base"] == 0.0 == ok["eval"]["trained"]  # the stand-in's answers
    server = json.loads((sweep / "chain.json").read_text())["settings"]["server_command"]
    assert server[:3] == ["python", "-m", "grpokit.rehearsal.answer_server"]  # no vLLM: no GPU needed

    actor = runs[1] / "checkpoints" / "global_step_1" / "actor"
    assert bad["state"] == "failed" and bad["reason"].startswith(f"merge: CheckpointError: {actor} is a rehearsal")
    assert not (runs[1] / "hf").exists()
    rows = json.loads(kit.run("status.py", [str(sweep), "--json"]).stdout)
    assert [(r["chain"], r["chain_reason"]) for r in rows] == [
        ("completed", "merge,eval done"),
        ("failed", bad["reason"]),
    ]
    table = kit.run("status.py", [str(sweep), "--width", "400"]).stdout
    assert "chain failed: merge: CheckpointError:" in table, table
    # by hand: one line naming the checkpoint and the cause, no traceback
    merge = kit.run("merge.py", [str(runs[1])])
    cause = bad["reason"].removeprefix("merge: CheckpointError: ")
    assert merge.returncode == 2 and merge.stderr.strip().splitlines()[-1] == f"error: {cause}"
    assert "Traceback" not in merge.stderr
