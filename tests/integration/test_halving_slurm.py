"""Successive halving (halving.rungs) on the local Slurm cluster: 8 -> 4 -> 2 points.

Real: Hydra, validation, submitit, Slurm (arrays, afterany dependencies), Ray, the driver, the
halving controller jobs, resubmission from checkpoints, status.py. TEST DOUBLE: the trainer
(tests/doubles/fake_verl_trainer.py), whose validation accuracy grows with rollout.n, so the ranking
is known: the larger n, the better.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def _wait_halving_done(sweep_dir: Path, timeout: float) -> dict:
    """halving.json once its last stage (the final target) has every point in a final state."""
    deadline = time.monotonic() + timeout
    while True:
        path = sweep_dir / "halving.json"
        state = json.loads(path.read_text()) if path.exists() else None
        if state and state["stage"] == len(state["rungs"]):
            last = state["stages"][-1]
            runs = {
                p["name"]: Path(p["run_dir"]) for p in json.loads((sweep_dir / "manifest.json").read_text())["points"]
            }
            statuses = [json.loads((runs[n] / "status.json").read_text()) for n in last["points"]]
            if all(len(s["attempts"]) == 3 and s["state"] in ("completed", "failed", "pruned") for s in statuses):
                return state
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout
            pytest.fail(f"halving not done after {timeout:.0f} s: {json.dumps(state)[:2000]}\n{squeue}")
        time.sleep(2.0)


@pytest.mark.timeout(1500)  # 14 point starts, 4 at once, plus 2 controllers; a loaded 2-core host takes minutes each
def test_halving_8_to_4_to_2_survivors_resume_pruned_say_why(kit, slurm, kit_overrides, tmp_path):
    name = "halving"
    ns = "2,3,4,5,6,7,8,9"
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit.slurm_cluster,
            *kit_overrides,
            f"verl.actor_rollout_ref.rollout.n={ns}",
            "verl.trainer.total_training_steps=6",
            "halving.rungs=[2,4]",
            "halving.keep=0.5",
            f"sweep_name={name}",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.2"},
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    print(out.stdout)
    assert "successive halving: rungs [2, 4] then 6 steps, keep 0.5 by val_acc (max)" in out.stdout
    sweep_dir = tmp_path / "logs" / name
    state = _wait_halving_done(sweep_dir, timeout=1380)
    print(json.dumps(state, indent=1))

    stages = state["stages"]
    assert [len(s["points"]) for s in stages] == [8, 4, 2]
    assert [s["target"] for s in stages] == [2, 4, 6]
    points = {p["name"]: p for p in kit.manifest(sweep_dir)["points"]}
    # On a loaded 2-core host a job may fail to start Ray (an environment failure, not the kit's
    # ranking): such a point is "out" of the ranking, never pruned, never continued; the best of
    # the others go on (max(1, floor(0.5 x 8)) = 4, then 2), best = largest n.
    out = stages[0]["out"]
    assert len(out) <= 4 and all(kit.read_status(points[n]["run_dir"]).get("last_step") is None for n in out), out
    ranked = [n for n in sorted(points, key=lambda n: -int(points[n]["swept"]["verl.actor_rollout_ref.rollout.n"]))]
    ranked = [n for n in ranked if n not in out]
    assert stages[1]["points"] == ranked[:4] and stages[2]["points"] == ranked[:2]
    assert [r["name"] for r in stages[0]["ranked"]] == ranked

    for n, entry in points.items():
        run = Path(entry["run_dir"])
        status = kit.read_status(run)
        if n in out:
            assert status["state"] == "failed", status
            continue
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        if n in stages[2]["points"]:
            # two resubmissions, each resuming from the rung's checkpoint: every step once
            assert status["state"] == "completed" and status["last_step"] == 6, status
            assert steps == [1, 2, 3, 4, 5, 6]
            assert [a["resume_step"] for a in status["attempts"]] == [None, 2, 4]
            assert [h["state"] for h in entry["history"]] == ["completed (rung 1)", "completed (rung 2)"]
        else:
            rung = 2 if n in stages[1]["points"] else 1
            assert status["state"] == "pruned", status
            assert status["reason"].startswith(f"rung {rung} (step {2 * rung}): rank "), status["reason"]
            assert "by val_acc (val-core/openai/gsm8k/acc/mean@1)" in status["reason"] and "< cut" in status["reason"]
            assert steps == list(range(1, 2 * rung + 1))

    rows = json.loads(kit.run("status.py", [str(sweep_dir), "--json"], timeout=120).stdout)
    states = {r["name"]: (r["state"], r["step"]) for r in rows}
    print(kit.run("status.py", [str(sweep_dir), "--width", "250"], timeout=120).stdout)
    expected = (
        [("completed", 6)] * 2 + [("pruned", 4)] * 2 + [("pruned", 2)] * (4 - len(out)) + [("failed", None)] * len(out)
    )
    assert sorted(states.values(), key=str) == sorted(expected, key=str)
