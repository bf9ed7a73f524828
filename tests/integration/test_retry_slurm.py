"""Automatic retry of crashed points on the real Slurm test cluster (issue 16.3).

Two points of one array, the trainer TEST DOUBLE's profile swept per point: ``fail-once`` exits 3
at step 3 of its first run only (a crash a node caused), ``crash-always`` raises the same
``RuntimeError`` (a CUDA error) at step 2 of every run (a bug that follows the point). With
``runtime.max_retries=1`` (the default) the first is retried on another node and completes; the
second crashes again on another node and ends ``failed``: same crash twice. A third point,
``settings-error``, fails at start-up on a package its environment lacks (a ``ModuleNotFoundError``
before the first step, as verl's logger set-up does): it ends ``failed`` after one attempt, no node
excluded, no retry spent.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def slurm_job(task_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", task_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)


@pytest.mark.timeout(900)  # four attempts, each starting Ray (40-150 s on a loaded 2-core machine)
def test_a_crash_is_retried_on_another_node_and_the_same_crash_twice_stops(kit, slurm, kit_overrides, tmp_path):
    name = "retry"
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            # a knob of the trainer TEST DOUBLE per point (an environment variable of its trainer),
            # not a setting a user would sweep: one point crashes once, the other on every run
            "+runtime.env.FAKE_TRAINER_PROFILE=fail-once,crash-always,settings-error",
            # 5 s instead of the default 60 s between a crash and its retry: the test's time
            "runtime.retry_backoff_s=5",
            f"sweep_name={name}",
        ],
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    points = kit.manifest(tmp_path / "logs" / name)["points"]
    run_dirs = [Path(p["run_dir"]) for p in points]
    once, always, settings = kit.wait_final(run_dirs, timeout=780)

    # 1. crashed once: retried on another node, after the backoff, resumed from its checkpoint
    assert once["state"] == "completed", once.get("reason")
    first, second = once["attempts"]
    assert (first["ended_by"], second["ended_by"]) == ("failed", "completed"), once["attempts"]
    assert first["crash"] == "exit 3" and len(first["nodes"]) == 1, first
    assert first["retry"] == f"retry 1 of runtime.max_retries=1 in 5 s, excluding {first['nodes'][0]}"
    assert first["reason"].startswith("trainer exited with 3"), first["reason"]
    job = slurm_job(points[0]["job_id"])
    assert job["ExcNodeList"] == first["nodes"][0], job
    assert job["NodeList"] != first["nodes"][0], "the retry ran on the crashed node"
    gap = dt.datetime.fromisoformat(second["start"]) - dt.datetime.fromisoformat(first["end"])
    assert gap.total_seconds() >= 5, f"the retry started {gap} after the crash"
    assert second["resume_step"] == 2
    merged = [json.loads(x)["step"] for x in (run_dirs[0] / "metrics.jsonl").read_text().splitlines()]
    assert merged == [1, 2, 3, 4], "every step once"

    # 2. the same crash on two nodes: failed, and it says so
    assert always["state"] == "failed", always
    a1, a2 = always["attempts"]
    assert a1["ended_by"] == a2["ended_by"] == "failed" and a1["crash"] == a2["crash"] == "RuntimeError"
    assert a1["nodes"] != a2["nodes"], always["attempts"]
    same = f"same crash twice on {a1['nodes'][0]}, {a2['nodes'][0]} (RuntimeError): not retried"
    assert a2["retry"] == same and always["reason"].startswith(same), always["reason"][:300]
    assert "RuntimeError: CUDA error: an illegal memory access" in always["reason"]
    deadline = time.monotonic() + 60  # status.json is final just before the job ends
    while (job := slurm_job(points[1]["job_id"]))["JobState"] in ("RUNNING", "COMPLETING", "PENDING"):
        assert time.monotonic() < deadline, job
        time.sleep(1)
    assert job["Restarts"] == "1", f"requeued again after the same crash twice: {job}"

    # 3. a settings error at start-up: failed after one attempt, its cause named, no node excluded
    assert settings["state"] == "failed", settings
    (only,) = settings["attempts"]
    assert only["crash"] == "ModuleNotFoundError", only
    assert only["retry"] == (
        "not retried: a settings error (ModuleNotFoundError) is the same on every node, no node excluded"
    )
    assert "No module named 'swanlab'" in settings["reason"], settings["reason"][:300]
    job = slurm_job(points[2]["job_id"])
    assert job.get("ExcNodeList") in (None, "(null)"), job
