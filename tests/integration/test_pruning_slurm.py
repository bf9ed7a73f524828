"""Rule-based stopping of a running point (runtime.pruning) on the local Slurm cluster.

Real: Hydra, validation, submitit, Slurm, Ray, the driver and its pruning watcher, the kit's save
request, status.py, report.py. TEST DOUBLE: the trainer (tests/doubles/fake_verl_trainer.py), told
by FAKE_TRAINER_NAN_GRAD_AT to log a NaN ``actor/grad_norm`` at step 2, written as verl's file
logger writes it (orjson: ``null``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(600)
def test_a_nan_grad_norm_prunes_the_point_and_keeps_its_checkpoint(kit, slurm, kit_overrides, tmp_path):
    # Two points of one array: the default rules (NaN/inf stops) and the rule turned off, as a user
    # who tolerates verl's skipped updates would set it; 8 steps of 1 s leave the watcher (1 s
    # polls) time to act well before the end.
    name = "prune_nan"
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit.slurm_cluster,
            *kit_overrides,
            "verl.trainer.total_training_steps=8",
            "runtime.pruning.nonfinite_steps=1,null",
            f"sweep_name={name}",
        ],
        env={"FAKE_TRAINER_STEP_S": "1", "FAKE_TRAINER_NAN_GRAD_AT": "2"},
        timeout=240,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    sweep_dir = tmp_path / "logs" / name
    pruned_dir, tolerant_dir = [Path(p["run_dir"]) for p in kit.manifest(sweep_dir)["points"]]
    pruned, tolerant = kit.wait_final([pruned_dir, tolerant_dir], timeout=420)

    assert pruned["state"] == "pruned" and pruned["attempts"][-1]["ended_by"] == "pruned", pruned
    assert pruned["reason"].startswith("pruned: step 2: non-finite actor/grad_norm=NaN/inf"), pruned["reason"]
    assert "runtime.pruning.nonfinite_steps=1" in pruned["reason"]
    saved = json.loads((pruned_dir / "control" / "saved_for_requeue.json").read_text())["step"]
    assert 2 <= saved < 8 and f"checkpointed step {saved}" in pruned["reason"]
    ckpt = pruned_dir / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(saved)
    assert (ckpt / f"global_step_{saved}" / "data.pt").exists()
    steps = [json.loads(line)["step"] for line in (pruned_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and steps[-1] < 8
    assert len(pruned["attempts"]) == 1  # final: not requeued

    assert tolerant["state"] == "completed" and tolerant["last_step"] == 8, tolerant

    # the login-node views: status (table and JSON) and report show pruned with its reason
    array = kit.manifest(sweep_dir)["points"][0]["array_job_id"]
    deadline = time.monotonic() + 60
    while subprocess.run(["squeue", "-h", "-j", array], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, f"array {array} still in squeue"
        time.sleep(1.0)
    rows = json.loads(kit.run("status.py", [str(sweep_dir), "--json"], timeout=120).stdout)
    assert [r["state"] for r in rows] == ["pruned", "completed"]
    assert rows[0]["reason"].startswith("pruned: step 2: non-finite actor/grad_norm")
    table = kit.run("status.py", [str(sweep_dir), "--width", "250"], timeout=120).stdout
    assert "pruned" in table and "non-finite" in table
    report = kit.run("report.py", [str(sweep_dir)], timeout=180)
    assert report.returncode == 0, report.stderr[-2000:]
    md = (sweep_dir / "report" / "report.md").read_text()
    assert "| pruned " in md and "non-finite actor/grad_norm" in md, md
