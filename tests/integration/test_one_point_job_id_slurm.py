"""Issue 37: the USR2 command the docs give works for a sweep of one point, on the real Slurm test cluster.

submitit submits a sweep of one point as a plain job (id ``N``), not an array (``N_0``); the docs
said ``scancel --signal=USR2 <array id>_<task id>``, which Slurm refuses for it ("Invalid job id
specified"). docs/preemption-and-retries.md now gives ``<job>`` from ``grpokit status``'s job
column. Here: the id ``status --json`` shows is the plain one, ``scancel --signal=USR2`` with it
makes the point checkpoint, requeue and finish, and the array form is refused. The trainer is the
TEST DOUBLE tests/doubles/fake_verl_trainer.py (verl needs a GPU). The array form of the command
is tested by test_array_signals_slurm.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(600)
def test_usr2_to_a_one_point_sweep_by_the_job_id_status_shows(kit, slurm, kit_overrides, tmp_path):
    overrides = [
        *kit_overrides,
        *kit.slurm_cluster,
        "verl.trainer.total_training_steps=12",
        "verl.trainer.save_freq=6",
        "verl.trainer.test_freq=-1",
        "sweep_name=one",
    ]
    out = kit.run("sweep.py", ["-m", *overrides], env={"FAKE_TRAINER_STEP_S": "0.5"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "logs" / "one"
    status = kit.run("status.py", [str(sweep), "--json"])
    assert status.returncode == 0, status.stderr
    ((row),) = json.loads(status.stdout)
    job = row["job_id"]
    assert job and "_" not in job, f"a one-point sweep is a plain job: {job}"
    assert f"as Slurm job {job};" in out.stdout, out.stdout  # not "Slurm array"

    run_dir = Path(kit.manifest(sweep)["points"][0]["run_dir"])
    metrics = run_dir / "attempts" / "1" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline, kit.read_status(run_dir)
        time.sleep(0.5)

    wrong = subprocess.run(["scancel", "--signal=USR2", f"{job}_0"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode != 0 and "Invalid job id" in wrong.stderr, wrong
    right = subprocess.run(["scancel", "--signal=USR2", job], capture_output=True, text=True, timeout=30)
    assert right.returncode == 0, right.stderr

    (final,) = kit.wait_final([run_dir], timeout=400)
    ended = [a["ended_by"] for a in final["attempts"]]
    assert final["state"] == "completed" and ended == ["preempted", "completed"], final
