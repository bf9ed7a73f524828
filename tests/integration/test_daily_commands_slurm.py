"""The daily commands on the local Slurm cluster: logs (and -f) of a running point, status --json's
ETA, cancel of a 2-point sweep (one point running, one still queued).

Real: Hydra, submitit, Slurm (scancel's SIGTERM, the array's task limit), Ray, the driver, the
commands as a user types them. TEST DOUBLE: the trainer (tests/doubles/fake_verl_trainer.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _metric_lines(run_dir: Path) -> int:
    path = run_dir / "attempts" / "1" / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.timeout(600)
def test_logs_follow_status_eta_and_cancel_of_a_two_point_sweep(kit, slurm, kit_overrides, tmp_path):
    # One task at a time (a user's array_parallelism=1), so the second point is still queued when
    # the sweep is cancelled; 40 steps of 1 s keep the first one running meanwhile.
    name = "daily"
    cluster = [o for o in kit.slurm_cluster if not o.startswith("cluster.array_parallelism=")]
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *cluster,
            "cluster.array_parallelism=1",
            *kit_overrides,
            "verl.trainer.total_training_steps=40",
            "verl.actor_rollout_ref.rollout.n=2,4",
            f"sweep_name={name}",
        ],
        env={"FAKE_TRAINER_STEP_S": "1"},
        timeout=240,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = tmp_path / "logs" / name
    running, queued = [Path(p["run_dir"]) for p in kit.manifest(sweep_dir)["points"]]
    deadline = time.monotonic() + 300
    while _metric_lines(running) < 3:
        assert time.monotonic() < deadline, kit.read_status(running)
        time.sleep(1.0)

    shown = kit.run("logs.py", [str(sweep_dir), "0", "-n", "5"], timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"==> driver: {running / 'attempts' / '1' / 'driver.log'} (last 5 lines) <==" in shown.stdout
    assert "==> trainer: " in shown.stdout and "step:" in shown.stdout
    bad = kit.run("logs.py", [str(sweep_dir), "9"], timeout=60)
    assert bad.returncode == 2 and f"no point '9' in {sweep_dir}; its points: {running.name}" in bad.stderr

    follow = subprocess.Popen(
        [sys.executable, str(kit.repo / "launch" / "logs.py"), str(running), "-f", "-n", "0", "--only", "trainer"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows = json.loads(kit.run("status.py", [str(sweep_dir), "--json"], timeout=120).stdout)
    assert [r["state"] for r in rows] == ["running", "queued"], rows
    assert rows[0]["target_step"] == 40 and rows[0]["eta_s"] is not None
    assert 0 < rows[0]["eta_s"] <= 40 * 1.5, rows[0]  # steps left x the double's 1 s step
    table = kit.run("status.py", [str(sweep_dir), "--width", "250"], timeout=120).stdout
    assert "ETA" in table and "/40" in table

    time.sleep(3)  # a few more steps for the follower
    dry = kit.run("cancel.py", [str(sweep_dir), "--dry-run"], timeout=120)
    assert f"would cancel {running.name} (running" in dry.stdout and f"would cancel {queued.name} (queued" in dry.stdout
    assert kit.read_status(running)["state"] == "running"
    done = kit.run("cancel.py", [str(sweep_dir)], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cancelled 2 point(s)" in done.stdout, done.stdout
    first, second = kit.wait_final([running, queued], timeout=180)
    assert first["state"] == "cancelled" and first["attempts"][-1]["ended_by"] == "cancelled", first
    assert second["state"] == "cancelled" and second["attempts"] == []
    assert second["reason"].startswith("cancelled by user before it started (grpokit cancel, job ")
    record = json.loads((sweep_dir / "submissions.jsonl").read_text().splitlines()[-1])
    assert record["kind"] == "cancel" and record["points"] == [running.name, queued.name] and record["by"] == "user"

    # the follower printed new trainer lines as they came and ended by itself once the point was final
    stdout, _ = follow.communicate(timeout=60)
    assert follow.returncode == 0
    assert "==> attempt 1: " in stdout and "[trainer] step:" in stdout
    assert f"==> {running.name} is cancelled: nothing more will be written <==" in stdout

    again = kit.run("cancel.py", [str(sweep_dir)], timeout=120)
    assert again.returncode == 0 and "nothing to cancel" in again.stdout
