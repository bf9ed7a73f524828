"""Chained evaluation (after=[merge,eval]) on the local Slurm cluster: 3 points, one of which fails.

Real: Hydra, validation, submitit, Slurm (an array, afterok dependencies, --kill-on-invalid-dep),
Ray, the driver, the chained jobs, verl's model merger on a real checkpoint (the trainer double
saves the tiny model's real weights as verl's world-size-1 FSDP shard: FAKE_TRAINER_REAL_WEIGHTS),
serve-eval's HTTP client and verl's GSM8K scoring, report.py. TEST DOUBLES: the trainer
(tests/doubles/fake_verl_trainer.py) and, in place of ``vllm serve`` (it needs a GPU), the
OpenAI-compatible chat server tests/doubles/openai_chat_double.py, given as chain.server_command.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slurm

CHAT_DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "openai_chat_double.py"


def _answers(gsm8k_dir: Path, out: Path, n: int = 3) -> None:
    """Canned answers for the first ``n`` test questions: the trained double answers all right, the
    base double only the first (so the chain's accuracies are known: base 1/3, trained 3/3)."""
    rows = pd.read_parquet(gsm8k_dir / "test.parquet").head(n).to_dict("records")
    keys = [(r["prompt"][-1]["content"][:60], str(r["reward_model"]["ground_truth"])) for r in rows]
    (out / "trained.json").write_text(json.dumps({q: f"so #### {gt}" for q, gt in keys}))
    (out / "base.json").write_text(json.dumps({keys[0][0]: f"so #### {keys[0][1]}"}))


def _slurm_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r", "--states=all"], capture_output=True, text=True)
    return out.stdout.strip()


def _wait_chain(sweep_dir: Path, timeout: float) -> dict:
    """chain.json once every chained job either wrote a final chain_status.json or left the queue."""
    deadline = time.monotonic() + timeout
    while True:
        chain = json.loads((sweep_dir / "chain.json").read_text())
        runs = {p["name"]: Path(p["run_dir"]) for p in json.loads((sweep_dir / "manifest.json").read_text())["points"]}
        done = []
        for name, rec in chain["points"].items():
            status = runs[name] / "chain_status.json"
            final = status.exists() and json.loads(status.read_text())["state"] in ("completed", "failed", "skipped")
            state = _slurm_state(rec["job_id"])
            done.append(final or state.startswith(("CANCELLED", "FAILED", "COMPLETED")) or state == "")
        if all(done):
            return chain
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout
            pytest.fail(f"chained jobs not done after {timeout:.0f} s: {json.dumps(chain)[:2000]}\n{squeue}")
        time.sleep(3.0)


@pytest.mark.timeout(1200)  # 3 points then 2 chained jobs (a real merge each) on a loaded 2-core host
def test_after_merge_eval_runs_after_points_fails_truthfully_and_follows_a_resubmission(
    kit, slurm, kit_overrides, gsm8k_dir, tmp_path
):
    name = "chain"
    _answers(gsm8k_dir, tmp_path)
    template = ["python", str(CHAT_DOUBLE), "--port", "{port}", "--served-model-name", "{name}"]
    template += ["--answers", f"{tmp_path}/{{name}}.json"]
    env = {"FAKE_TRAINER_STEP_S": "0.2", "FAKE_TRAINER_REAL_WEIGHTS": "1"}
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit.slurm_cluster,
            *kit_overrides,
            # the third point's trainer exits 3 at step 3 of its first run (the other values do nothing)
            "++runtime.env.FAKE_TRAINER_PROFILE=none-a,none-b,fail-once",
            # a crash is final at once (no automatic retry after 60 s): the test is about the chain
            "runtime.max_retries=0",
            "after=[merge,eval]",
            # the chained job's request fitted to the test cluster (one CPU, 1 GB, 10 minutes), the first
            # 3 test rows, and the vLLM stand-in (a template element is quoted for Hydra's grammar)
            "chain.cpus_per_task=1",
            "chain.mem_gb=1",
            "chain.timeout_min=10",
            "chain.limit=3",
            "chain.max_tokens=64",
            "chain.server_command=[" + ",".join(f"'{t}'" for t in template) + "]",
            f"sweep_name={name}",
        ],
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    print(out.stdout)
    assert "chained merge,eval after each point (afterok): job(s)" in out.stdout
    sweep_dir = tmp_path / "logs" / name
    points = kit.manifest(sweep_dir)["points"]
    chain = json.loads((sweep_dir / "chain.json").read_text())
    assert chain["after"] == ["merge", "eval"]
    for p in points:  # afterok on the point's own array task (the id a requeue keeps)
        assert chain["points"][p["name"]]["after"] == p["job_id"]
        script = Path(sweep_dir / "submitit" / f"{chain['points'][p['name']]['job_id']}_submission.sh")
        text = script.read_text()
        assert f"#SBATCH --dependency=afterok:{p['job_id']}" in text and "#SBATCH --kill-on-invalid-dep=yes" in text
    statuses = kit.wait_final([Path(p["run_dir"]) for p in points], timeout=900)
    assert [s["state"] for s in statuses] == ["completed", "completed", "failed"], statuses
    _wait_chain(sweep_dir, timeout=600)

    ok, bad = points[:2], points[2]
    for p in ok:
        run = Path(p["run_dir"])
        record = json.loads((run / "chain_status.json").read_text())
        assert record["state"] == "completed", record
        assert record["job_id"] == chain["points"][p["name"]]["job_id"]
        assert record["merge"]["step"] == 4 and (run / "hf" / "model.safetensors").exists()
        # started only after the point's job ended (afterok)
        assert record["started"] >= kit.read_status(run)["attempts"][-1]["end"]
        assert record["eval"] == {**record["eval"], "n": 3, "base": pytest.approx(1 / 3), "trained": 1.0}
        assert json.loads((run / "eval" / "eval_summary.json").read_text())["models"]["trained"]["accuracy"] == 1.0
    # the failed point's chained job never ran: Slurm cancelled it (DependencyNeverSatisfied)
    assert not (Path(bad["run_dir"]) / "chain_status.json").exists()
    assert not (Path(bad["run_dir"]) / "hf").exists()
    state = _slurm_state(chain["points"][bad["name"]]["job_id"])
    assert state == "" or state.startswith("CANCELLED"), state

    rep = kit.run("report.py", [str(sweep_dir), "--out", str(tmp_path / "report")], timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]
    table = pd.read_csv(tmp_path / "report" / "report.csv")
    print(table[["name", "state", "chain", "chain_reason", "base_acc", "trained_acc", "acc_delta"]].to_string())
    assert list(table["chain"]) == ["completed", "completed", "cancelled"]
    assert list(table["trained_acc"][:2]) == [1.0, 1.0] and table["acc_delta"][0] == pytest.approx(2 / 3)
    assert table["chain_reason"][2].startswith("never ran: point failed (afterok:")
    st = kit.run("status.py", [str(sweep_dir), "--json"], timeout=300)
    rows = json.loads(st.stdout)
    rows = rows["points"] if isinstance(rows, dict) else rows
    assert [r["chain"] for r in rows] == ["completed", "completed", "cancelled"], st.stdout[-2000:]

    # resubmit.py: the failed point gets a new task and a new chained job after it (the old one in history)
    old_chain = chain["points"][bad["name"]]["job_id"]
    # the resubmitted job takes the submitting shell's environment, as the sweep's did (sbatch --export=ALL)
    again = kit.run("resubmit.py", [str(sweep_dir)], env=env, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    chain = json.loads((sweep_dir / "chain.json").read_text())
    new = kit.manifest(sweep_dir)["points"][2]
    rec = chain["points"][bad["name"]]
    assert rec["after"] == new["job_id"] != bad["job_id"] and rec["history"][0]["job_id"] == old_chain
    kit.wait_final([Path(bad["run_dir"])], timeout=600, states={"completed"})
    _wait_chain(sweep_dir, timeout=600)
    record = json.loads((Path(bad["run_dir"]) / "chain_status.json").read_text())
    assert record["state"] == "completed" and record["job_id"] == rec["job_id"], record
    rep = kit.run("report.py", [str(sweep_dir), "--out", str(tmp_path / "report2")], timeout=300)
    table = pd.read_csv(tmp_path / "report2" / "report.csv")
    assert list(table["chain"]) == ["completed"] * 3 and table["trained_acc"][2] == 1.0


@pytest.mark.timeout(300)
def test_afterok_on_a_task_follows_its_last_attempt_after_a_requeue(slurm, tmp_path):
    """The Slurm fact the chain relies on: a requeued array task keeps its id, and a job
    ``afterok`` on it (submitted as the chain submits, grpokit.submit.dependent) starts only after
    the task's last attempt completed, not when the first one was requeued."""
    from grpokit.config.schema import ClusterConf
    from grpokit.submit.chain import ChainJob
    from grpokit.submit.dependent import submit_dependent

    trace = tmp_path / "trace.txt"
    body = (
        f'if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then echo first >> {trace}; '
        "scontrol requeue ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}; sleep 60; "
        f"else sleep 3; echo last >> {trace}; fi"
    )
    out = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--array=0", "-c", "1", "--mem=100M", "-J", "chain-requeue"]
        + ["-o", str(tmp_path / "task_%A_%a.out"), "--wrap", body],
        capture_output=True,
        text=True,
        check=True,
    )
    task = f"{out.stdout.strip().split(';')[0]}_0"
    chained = submit_dependent(
        tmp_path,
        ChainJob(),
        ["sh", "-c", f"echo chained >> {trace}"],
        cluster=ClusterConf(),
        name="chain-requeue-after",
        dependency=f"afterok:{task}",
        timeout_min=10,  # submitit signals USR2 90 s before the limit: a 2-minute job got it 30 s in, under load
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        lines = trace.read_text().split() if trace.exists() else []
        if "chained" in lines or _slurm_state(chained).startswith(("CANCELLED", "FAILED")):
            break
        time.sleep(2)
    logs = "".join(p.read_text()[-2000:] for p in sorted((tmp_path / "submitit").glob("*_log.err")))
    assert trace.read_text().split() == ["first", "last", "chained"], (_slurm_state(task), _slurm_state(chained), logs)
