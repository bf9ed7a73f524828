"""``rehearse=true``: a 4-point sweep rehearsed end to end on the local Slurm cluster (issue 25).

The command is a user's sweep plus one switch: no ``runtime.trainer_cmd`` and no
``runtime.needs_gpu`` (what the other tests pass to use the test double); the kit's rehearsal
trainer (grpokit.rehearsal.rehearsal_trainer) stands in for verl's, everything else is real (Hydra, verl's
schema, submitit, one Slurm array, Ray, checkpoints, status, report). ``wait=true`` awaits the
points (no sleeps). The results say ``rehearsal`` wherever they show.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def test_a_4_point_rehearsal_runs_the_slurm_path_and_says_so(kit, slurm, kit_overrides, tmp_path):
    user = [o for o in kit_overrides if not o.startswith(("runtime.trainer_cmd=", "runtime.needs_gpu="))]
    user = [o for o in user if not o.startswith(("verl.trainer.total_training_steps=", "verl.trainer.save_freq="))]
    started = time.monotonic()
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *user,
            *kit.slurm_cluster,
            "sweep_name=rehearsal",
            "rehearse=true",
            "wait=true",
            "verl.trainer.total_training_steps=2",
            "verl.trainer.save_freq=1",
            "verl.data.train_batch_size=8,16",
            "verl.actor_rollout_ref.rollout.n=2,4",
        ],
        timeout=900,
    )
    wall = time.monotonic() - started
    print(f"4-point rehearsal, submission to every point final: {wall:.0f} s")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "submitted 4 point(s)" in out.stdout and "4 completed" in out.stdout
    sweep = tmp_path / "logs" / "rehearsal"
    manifest = kit.manifest(sweep)
    assert manifest["rehearsal"] is True and len({p["array_job_id"] for p in manifest["points"]}) == 1
    for p in manifest["points"]:
        run = Path(p["run_dir"])
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "completed" and status["rehearsal"] is True
        cmd = (run / "verl_cmd.sh").read_text()
        assert "grpokit.rehearsal.rehearsal_trainer" in cmd and "verl.trainer.main_ppo" not in cmd
        assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2]
    rows = json.loads(kit.run("status.py", [str(sweep), "--json"]).stdout)
    assert [r["state"] for r in rows] == ["completed"] * 4 and all(r["rehearsal"] for r in rows)
    table = kit.run("status.py", [str(sweep), "--width", "160"]).stdout
    assert "REHEARSAL" in table
    report = kit.run("report.py", [str(sweep), "--no-plots"])
    assert report.returncode == 0, report.stderr[-2000:]
    md = (sweep / "report" / "report.md").read_text()
    assert md.startswith("# Sweep rehearsal (rehearsal)") and "stand-in trainer" in md
