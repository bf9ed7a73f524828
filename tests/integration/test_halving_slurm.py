"""Successive halving (halving.rungs) on the local Slurm cluster: 4 -> 2 -> 1 points.

Real: Hydra, validation, submitit, Slurm (arrays, afterany dependencies), Ray, the driver, the
halving controller jobs and the restart of one (its first controller is cancelled while it waits,
as a lost node or an admin would end it), resubmission from checkpoints, status.py. TEST DOUBLE: the trainer
(tests/doubles/fake_verl_trainer.py), whose validation accuracy grows with rollout.n, so the ranking
is known: the larger n, the better.
"""

from __future__ import annotations

import json
import re
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
            # a survivor shows 'completed' at its rung until its resubmitted job starts: done at step 6
            if all(
                s["state"] in ("failed", "pruned") or (s["state"], s.get("last_step")) == ("completed", 6)
                for s in statuses
            ):
                return state
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout
            pytest.fail(f"halving not done after {timeout:.0f} s: {json.dumps(state)[:2000]}\n{squeue}")
        time.sleep(2.0)


@pytest.mark.timeout(1500)  # 7 point starts, 4 at once, plus 2 controllers; a loaded 2-core host takes minutes each
def test_halving_4_to_2_to_1_survivors_resume_pruned_say_why(kit, slurm, kit_overrides, tmp_path):
    """4 points, rungs at steps 2 and 4, keep half: 2 pruned at rung 1, 1 at rung 2, 1 trains to step 6.

    Real conditions kept: one Slurm array for the first stage, a controller job per rung behind an
    ``afterany`` dependency on it, the first controller cancelled while it waits and its restart
    (``afternotok``) doing its work, a completed controller's restart never running, the survivors
    resubmitted twice and resuming from each rung's checkpoint (every step once), the pruned points
    saying their rank and cut. 4 points give each kind of outcome (pruned at rung 1, pruned at rung 2,
    completed) as 8 did, with 7 point starts instead of 14 (one array wave: array_parallelism 4).
    """
    name = "halving"
    ns = "2,3,4,5"
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
            # 5 s instead of 60 s between a failed attempt (a Ray that did not start) and its retry: the test's time
            "runtime.retry_backoff_s=5",
            f"sweep_name={name}",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.2"},
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    print(out.stdout)
    assert "successive halving: rungs [2, 4] then 6 steps, keep 0.5 by val_acc (max)" in out.stdout
    sweep_dir = tmp_path / "logs" / name
    first = json.loads((sweep_dir / "halving.json").read_text())["stages"][0]
    # The stage-0 controller ends before it ran (cancelled while it waits for the array, as a lost
    # node or an admin would end it): its restart (afterany:<array>,afternotok:<controller>) runs it.
    assert first["controller_restart"] and f"restarted once as job {first['controller_restart']}" in out.stdout
    subprocess.run(["scancel", first["controller"]], check=True, timeout=60)
    state = _wait_halving_done(sweep_dir, timeout=1380)
    print(json.dumps(state, indent=1))

    stages = state["stages"]
    assert [len(s["points"]) for s in stages] == [4, 2, 1]
    assert [s["target"] for s in stages] == [2, 4, 6]
    points = {p["name"]: p for p in kit.manifest(sweep_dir)["points"]}
    submitit_dir = sweep_dir / "submitit"
    assert (submitit_dir / f"{first['controller_restart']}_0_log.out").exists(), "the restart did not run"
    assert not (submitit_dir / f"{first['controller']}_0_log.out").exists()
    assert stages[1]["controller"] and stages[1]["controller_restart"]
    assert (submitit_dir / f"{stages[1]['controller']}_0_log.out").exists()
    assert not (submitit_dir / f"{stages[1]['controller_restart']}_0_log.out").exists(), "restarted a completed one"
    # On a loaded 2-core host a job may fail to start Ray: the start is tried again in the job, then
    # on another node (runtime.max_retries=1), so a point is "out" of the ranking (failed, never
    # pruned, never continued) only when Ray failed four times; the best of the others go on
    # (max(1, floor(0.5 x 4)) = 2, then 1), best = largest n.
    out = stages[0]["out"]
    assert len(out) <= 1 and all(kit.read_status(points[n]["run_dir"]).get("last_step") is None for n in out), out
    ranked = [n for n in sorted(points, key=lambda n: -int(points[n]["swept"]["verl.actor_rollout_ref.rollout.n"]))]
    ranked = [n for n in ranked if n not in out]
    assert stages[1]["points"] == ranked[:2] and stages[2]["points"] == ranked[:1]
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
            trained = [a for a in status["attempts"] if a["ended_by"] == "completed"]  # not a Ray start retried
            assert [a["resume_step"] for a in trained] == [None, 2, 4], status["attempts"]
            assert [h["state"] for h in entry["history"]] == ["completed (rung 1)", "completed (rung 2)"]
        else:
            rung = 2 if n in stages[1]["points"] else 1
            assert status["state"] == "pruned", status
            assert status["reason"].startswith(f"rung {rung} (step {2 * rung}): rank "), status["reason"]
            reason = status["reason"]
            said = re.search(r"by val_acc \(val-core/openai/gsm8k/acc/mean@1\) (\S+) ([<=]) cut (\S+) \(", reason)
            if "val-core/openai/gsm8k/acc/mean@1) none, cut " in reason:  # no value logged: ranked last
                assert "(not logged, which ranks last; " in reason, reason
            else:  # the sign is true to the numbers; a tie says how it was broken (issue 37: "0.532 < cut 0.532")
                assert said, reason
                value, sign, cut = float(said[1]), said[2], float(said[3])
                assert (value < cut and sign == "<") or (value == cut and sign == "=" and "(a tie: " in reason), reason
            assert steps == list(range(1, 2 * rung + 1))

    rows = json.loads(kit.run("status.py", [str(sweep_dir), "--json"], timeout=120).stdout)
    states = {r["name"]: (r["state"], r["step"]) for r in rows}
    print(kit.run("status.py", [str(sweep_dir), "--width", "250"], timeout=120).stdout)
    expected = (
        [("completed", 6)] * 1 + [("pruned", 4)] * 1 + [("pruned", 2)] * (2 - len(out)) + [("failed", None)] * len(out)
    )
    assert sorted(states.values(), key=str) == sorted(expected, key=str)
