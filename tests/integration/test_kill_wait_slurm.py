"""A cancel is closed by its own driver within Slurm's KillWait (issue 36 item 7), on the local cluster.

Real: Hydra, submitit, Slurm (``scancel``: SIGTERM to every process of the job, SIGKILL ``KillWait``
seconds later; ``scontrol show config`` for KillWait), Ray, the driver. TEST DOUBLE: the trainer
(tests/doubles/fake_verl_trainer.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _step(run_dir: Path) -> int:
    path = run_dir / "attempts" / "1" / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max([json.loads(x)["step"] for x in lines if x.strip()] or [0])


@pytest.mark.timeout(420)
def test_scancel_is_closed_by_the_driver_with_the_cancel_as_reason(kit, slurm, kit_overrides, tmp_path):
    overrides = [*kit_overrides, "verl.trainer.total_training_steps=100", "sweep_name=cancel"]
    out = kit.run("sweep.py", ["-m", *kit.slurm_cluster, *overrides], env={"FAKE_TRAINER_STEP_S": "0.5"}, timeout=240)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = tmp_path / "logs" / "cancel"
    (point,) = kit.manifest(sweep_dir)["points"]
    run_dir = Path(point["run_dir"])
    deadline = time.monotonic() + 240
    while _step(run_dir) < 2:
        assert time.monotonic() < deadline, "the point never trained 2 steps"
        time.sleep(0.5)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    kill_wait = next(int(line.split("=")[1].split()[0]) for line in config.splitlines() if line.startswith("KillWait"))

    subprocess.run(["scancel", point["job_id"]], check=True, timeout=30)
    (status,) = kit.wait_final([run_dir], timeout=120)
    attempt = status["attempts"][-1]
    assert (status["state"], attempt["ended_by"]) == ("cancelled", "cancelled"), status
    assert attempt["end"] is not None, "closed by the driver, not left open for Slurm's SIGKILL"
    assert status["reason"].startswith("SIGTERM and Slurm does not requeue the job (scancel); "), status["reason"]
    log = (run_dir / "attempts" / "1" / "driver.log").read_text()
    assert f"Slurm's KillWait {kill_wait} s" in log, log[-3000:]
    shown = kit.run("status.py", [str(sweep_dir), "--json"], timeout=60)
    (row,) = json.loads(shown.stdout)
    assert (row["state"], row["reason"]) == ("cancelled", status["reason"])
