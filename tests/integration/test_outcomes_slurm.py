"""Truthful outcomes on the local Slurm cluster (issue 12 items 6-8).

Real: Hydra, verl's schema, submitit, Slurm, Ray, the driver, resubmit.py, status.py. TEST
DOUBLE: the trainer (tests/doubles/fake_verl_trainer.py follows verl 0.9.1's fit loop: the step
count, the data running out, the save at the last step, the loggers named in trainer.logger).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


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
    from grpokit.results.status_table import collect_rows
    from grpokit.results.sweep_folder import load_sweep

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


@pytest.mark.timeout(600)
def test_a_point_whose_trainer_exits_0_before_its_target_is_failed_and_resubmitted(kit, slurm, kit_overrides, tmp_path):
    # GSM8K with total_epochs 1 and batch 8: 16 rows run out after 2 of the 4 steps (verl's fit
    # loop then returns 0 without its last step), 32 rows give exactly 4, 64 rows more than enough.
    _, run_dirs = _sweep(
        kit,
        tmp_path,
        "early",
        [*kit_overrides, "verl.data.train_batch_size=8", "verl.data.train_max_samples=16,32,64"],
    )
    assert len(run_dirs) == 3
    short, exact, plenty = kit.wait_final(run_dirs, timeout=420)

    assert short["state"] == "failed", short
    assert short["attempts"][-1]["ended_by"] == "early_exit" and short["attempts"][-1]["exit_code"] == 0
    assert short["last_step"] == 2 and short["target_step"] == 4
    assert "trainer exited 0 at step 2 (attempts/1/metrics.jsonl) of target_step 4" in short["reason"]
    assert "newest complete checkpoint global_step_2" in short["reason"]
    for done in (exact, plenty):
        assert done["state"] == "completed" and done["last_step"] == 4 == done["target_step"], done

    sweep_dir = tmp_path / "logs" / "early"
    assert_status_rows(kit, sweep_dir, {0: ("failed", 2), 1: ("completed", 4), 2: ("completed", 4)})

    # resubmit.py picks it up (and only it); the new attempt runs in the same folder, is not skipped
    again = kit.run("resubmit.py", [str(sweep_dir)], timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resubmitted {run_dirs[0].name}" in again.stdout and run_dirs[1].name not in again.stdout
    second = wait_attempts(kit, run_dirs[0], 2, timeout=300)
    # verl resumes at step 2, finds no epoch left and returns 0 again: still failed, truthfully
    assert second["state"] == "failed" and second["attempts"][-1]["ended_by"] == "early_exit"
    assert "trainer exited 0 without logging a step (attempts/2/metrics.jsonl) of target_step 4" in second["reason"]
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert [len(p.get("history") or []) for p in manifest["points"]] == [1, 0, 0]
