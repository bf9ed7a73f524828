"""Signals in many-point arrays and on two nodes, on the real Slurm test cluster (issue 12 items 1-2).

Slurm delivers every signal itself: ``scancel --signal=USR2`` with and without ``--batch`` on one
task of a 3-point array (the placeholder task, whose ``SLURM_JOB_ID`` equals the array's id), its
own ``--signal`` warning at a short time limit, a plain ``scancel`` while Ray starts. The trainer
is the TEST DOUBLE tests/doubles/fake_verl_trainer.py (verl needs a GPU); on two nodes it keeps one
Ray actor per node that takes part in every step and writes its node's shards at a save
(``FAKE_TRAINER_NODE_WORKERS=1``), as verl's FSDP workers do.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


# --- helpers ------------------------------------------------------------------------------------
def sweep(kit, tmp_path: Path, name: str, overrides: list[str], env: dict) -> list[dict]:
    out = kit.run("sweep.py", ["-m", *overrides, f"sweep_name={name}"], env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return kit.manifest(tmp_path / "logs" / name)["points"]


def attempt_steps(run_dir: Path) -> list[list[int]]:
    out = []
    for d in sorted((run_dir / "attempts").iterdir(), key=lambda p: int(p.name)):
        path = d / "metrics.jsonl"
        out.append([json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else [])
    return out


def merged_steps(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def redone(steps: list[list[int]]) -> list[int]:
    """Per interruption, how many steps the next attempt logged again."""
    out, done = [], []
    for attempt in steps:
        if done and attempt:
            out.append(max(0, max(done) - attempt[0] + 1))
        done += attempt
    return out


def wait_steps(run_dir: Path, attempt: int, count: int, timeout: float) -> None:
    path = run_dir / "attempts" / str(attempt) / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline, f"attempt {attempt} of {run_dir.name}: < {count} steps in {timeout:.0f} s"
        time.sleep(0.3)


def slurm_job(task_id: str) -> dict[str, str]:
    """``scontrol show job -o <array>_<task>`` as a dict (Restarts, JobState, Reason, ...)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", task_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)


def wait_slurm_done(task_ids: list[str], timeout: float) -> dict[str, dict[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = {t: slurm_job(t) for t in task_ids}
        if all(j["JobState"] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED") for j in jobs.values()):
            return jobs
        assert time.monotonic() < deadline, {t: j["JobState"] for t, j in jobs.items()}
        time.sleep(1)


def placeholder(kit, points: list[dict], timeout: float = 240) -> int:
    """Index of the array's placeholder task (its SLURM_JOB_ID is the array id), once all run."""
    deadline = time.monotonic() + timeout
    while True:
        slurm = [kit.read_status(Path(p["run_dir"])).get("slurm") or {} for p in points]
        if all(s.get("job_id") for s in slurm):
            (index,) = [i for i, s in enumerate(slurm) if s["job_id"] == s["array_job_id"]]
            return index
        assert time.monotonic() < deadline, "not every task started"
        time.sleep(0.5)


def scancel(*args: str) -> None:
    out = subprocess.run(["scancel", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


def wait_attempt_running(kit, run_dir: Path, attempt: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (len(kit.read_status(run_dir)["attempts"]) >= attempt and kit.read_status(run_dir)["state"] == "running"):
        assert time.monotonic() < deadline, kit.read_status(run_dir)
        time.sleep(0.5)


def temp_dirs(run_dir: Path) -> list[Path]:
    """The private folder around every Ray temp dir the job's head and workers used (from their
    logged command lines; ``--temp-dir=<private>/r``, :mod:`grpokit.runtime.processes.ray_temp`)."""
    found = set()
    for log in run_dir.glob("attempts/*/ray/*.log"):
        found |= set(re.findall(r"--temp-dir=(\S+)", log.read_text(errors="replace")))
    for log in run_dir.glob("attempts/*/driver.log"):
        found |= set(re.findall(r"--temp-dir=(\S+)", log.read_text(errors="replace")))
    return sorted(Path(p).parent if Path(p).name == "r" else Path(p) for p in found)


def assert_temp_dirs_gone(run_dir: Path, private_ok: bool = False) -> None:
    """Every Ray temp folder of the job is removed (``private_ok``: or left private, mode 700, for a
    worker that Slurm SIGKILLed on scancel before it could clean up; the user's next Ray start on
    that node removes it)."""
    dirs = temp_dirs(run_dir)
    assert dirs, "no Ray temp dir found in the logs"
    deadline = time.monotonic() + 20  # Slurm's step clean-up runs just after the job's end
    while True:
        left = {str(d): d.stat().st_mode & 0o777 for d in dirs if d.exists()}
        if not left or (private_ok and all(mode == 0o700 for mode in left.values())):
            return
        assert time.monotonic() < deadline, f"Ray temp dirs left behind: { {k: oct(v) for k, v in left.items()} }"
        time.sleep(0.5)


# --- one task of an array is signalled ------------------------------------------------------------
@pytest.mark.timeout(600)
def test_usr2_to_the_placeholder_task_requeues_only_it_with_and_without_batch(kit, slurm, kit_overrides, tmp_path):
    """``scancel --signal=USR2 A_T``, then ``scancel --batch --signal=USR2 A_T`` on its next attempt.

    Before: the placeholder's driver ran ``scontrol requeue <array id>``, which requeued every
    sibling (stopped without a checkpoint, steps redone); ``--batch`` killed the batch shell.
    """
    points = sweep(
        kit,
        tmp_path,
        "usr2",
        [
            *kit_overrides,
            *kit.slurm_cluster,
            "verl.trainer.total_training_steps=30",
            "verl.trainer.save_freq=10",
            "verl.trainer.test_freq=-1",
            "verl.actor_rollout_ref.actor.optim.lr=1e-6,2e-6,3e-6",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.5"},
    )
    run_dirs = [Path(p["run_dir"]) for p in points]
    ph = placeholder(kit, points)
    task = points[ph]["job_id"]
    assert "_" in task, "the manifest names the task as <array id>_<task id>"
    wait_steps(run_dirs[ph], 1, 3, timeout=240)
    scancel("--signal=USR2", task)  # every job step of the task (not its batch shell)
    wait_attempt_running(kit, run_dirs[ph], 2, timeout=180)
    wait_steps(run_dirs[ph], 2, 2, timeout=180)
    scancel("--batch", "--signal=USR2", task)  # the batch shell only: forwarded to the driver
    statuses = kit.wait_final(run_dirs, timeout=400)
    jobs = wait_slurm_done([p["job_id"] for p in points], timeout=120)

    assert [s["state"] for s in statuses] == ["completed"] * 3, [s.get("reason") for s in statuses]
    ended = [a["ended_by"] for a in statuses[ph]["attempts"]]
    assert ended == ["preempted", "preempted", "completed"], [a.get("reason") for a in statuses[ph]["attempts"]]
    assert jobs[task]["Restarts"] == "2"
    assert jobs[task]["JobState"] == "COMPLETED", jobs[task]  # the batch shell survived --batch USR2
    for i, (run_dir, status) in enumerate(zip(run_dirs, statuses, strict=True)):
        assert merged_steps(run_dir) == list(range(1, 31)), f"point {i}: every step exactly once"
        if i == ph:
            assert redone(attempt_steps(run_dir)) == [0, 0], "a save on request redoes no step"
            driver_log = (run_dir / "attempts" / "1" / "driver.log").read_text()
            assert f"requeueing job {task}" in driver_log, "the task's own id, never the array's"
        else:
            assert len(status["attempts"]) == 1, f"sibling {i} was restarted: {status['attempts']}"
            assert jobs[points[i]["job_id"]]["Restarts"] == "0", f"Slurm requeued sibling {i}"


# --- Slurm's own warning at a short time limit ---------------------------------------------------
def run_to_time_limits(kit, points: list[dict], limited: tuple[int, ...], lead_s: int, timeout: float) -> list[dict]:
    """Follow the points until final; each attempt of the points ``limited`` gets its time limit
    brought near (``kit.bring_time_limit_near``) once it has trained 2 steps, and the submitted limit
    back once it ended (the next attempt starts Ray under the submitted limit, as requeued jobs do)."""
    run_dirs = [Path(p["run_dir"]) for p in points]
    (submitted,) = [int(o.split("=")[1]) for o in kit.slurm_cluster if o.startswith("cluster.timeout_min=")]
    near: set[tuple[int, int]] = set()
    restored: set[tuple[int, int]] = set()
    deadline = time.monotonic() + timeout
    while True:
        statuses = [kit.read_status(d) for d in run_dirs]
        if all(s.get("state") in kit.final for s in statuses):
            return statuses
        for i in limited:
            state, attempts, job = statuses[i].get("state"), statuses[i].get("attempts") or [], points[i]["job_id"]
            k = len(attempts)
            if (i, k) not in near and state == "running" and attempts[-1].get("ended_by") is None:
                path = run_dirs[i] / "attempts" / str(k) / "metrics.jsonl"
                if path.exists() and len(path.read_text().splitlines()) >= 2:
                    kit.bring_time_limit_near(job, lead_s)
                    near.add((i, k))
            for done in sorted(p for p in near - restored if p[0] == i):
                ended = state == "requeued" or (state == "running" and k > done[1])
                if ended and kit.slurm_job(job)["JobState"] in ("PENDING", "RUNNING"):  # not while it completes
                    kit.set_time_limit(job, submitted)
                    restored.add(done)
        if time.monotonic() > deadline:
            pytest.fail(f"points not final after {timeout:.0f} s: {[s.get('state') for s in statuses]}")
        time.sleep(0.5)


@pytest.mark.timeout(600)
def test_time_limit_warnings_are_counted_per_task_and_final_points_never_restart(kit, slurm, kit_overrides, tmp_path):
    """3 points, Slurm's own ``--signal`` warning 60 s before each task's limit, one time-out requeue.

    Before: the placeholder read a sibling's time left (``squeue -j <array id>`` lists every
    task), so a warning counted as a preemption and escaped the budget (3 time-out attempts with
    ``max_timeout_requeues=1``), and points already ``failed (timeout)`` were requeued by a sibling.

    Real condition kept: slurmctld itself sends each task's ``--signal=USR2@60`` warning at that
    task's own limit, and the tasks' limits differ (one task never gets one), so only the task's own
    line of squeue tells its time left. The limit is lowered with ``scontrol update TimeLimit=``
    once an attempt trains (``kit.bring_time_limit_near``) instead of a 3-minute ``--time`` whose
    warning came 2 minutes into every attempt; the warning still comes 0-35 s below the lead.
    """
    budget = 1
    points = sweep(
        kit,
        tmp_path,
        "limits",
        [
            *kit_overrides,
            *kit.slurm_cluster,
            "cluster.signal_delay_s=60",
            f"runtime.max_timeout_requeues={budget}",
            "verl.trainer.save_freq=5",
            "verl.trainer.test_freq=-1",
            # all of GSM8K's rows (934 steps), so that the last point's target is in its data
            "verl.data.train_max_samples=-1",
            # one point done within its first allocation, one needing a second (a limit brought near
            # after 2 steps ends the attempt within 90 s: < 185 steps of 0.5 s), one never done
            "verl.trainer.total_training_steps=6,200,900",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.5"},
    )
    run_dirs = [Path(p["run_dir"]) for p in points]
    statuses = run_to_time_limits(kit, points, limited=(1, 2), lead_s=60, timeout=500)
    jobs = wait_slurm_done([p["job_id"] for p in points], timeout=120)
    time.sleep(15)  # longer than a requeued job's wait to run again: nothing may start now
    after = [kit.read_status(d) for d in run_dirs]
    assert [len(s["attempts"]) for s in after] == [len(s["attempts"]) for s in statuses], "a final point restarted"

    for i, (p, run_dir, status) in enumerate(zip(points, run_dirs, after, strict=True)):
        ended = [a["ended_by"] for a in status["attempts"]]
        reasons = [a.get("reason") for a in status["attempts"]]
        assert ended.count("timeout") <= budget + 1, f"point {i}: {ended}"
        assert "preempted" not in ended, f"point {i}: a time-limit warning counted as a preemption: {ended}"
        assert None not in ended and "killed" not in ended, f"point {i}: {ended} {reasons}"
        assert int(jobs[p["job_id"]]["Restarts"]) == len(ended) - 1, f"point {i}: {jobs[p['job_id']]}"
        # every warning was read from the task's own line of squeue
        for k, reason in enumerate(ended, start=1):
            if reason == "timeout":
                log = (run_dir / "attempts" / str(k) / "driver.log").read_text()
                m = re.search(rf"Slurm task {re.escape(p['job_id'])}: own time left (\d+) s", log)
                assert m and int(m.group(1)) <= 60 + 60, f"point {i} attempt {k}: {m and m.group(0)}"
        steps = merged_steps(run_dir)
        assert steps == list(range(1, len(steps) + 1)), f"point {i}: every step once"
        assert all(n <= 1 for n in redone(attempt_steps(run_dir))), f"point {i}: {attempt_steps(run_dir)}"
        if status["state"] == "completed":
            assert ended[-1] == "completed" and steps[-1] == status["target_step"]
    assert after[0]["state"] == "completed", after[0].get("reason")
    assert after[2]["state"] == "failed", after[2].get("reason")
    assert [a["ended_by"] for a in after[2]["attempts"]] == ["timeout"] * (budget + 1)


# --- two nodes: the warning must not reach Ray's worker step ----------------------------------------
@pytest.mark.timeout(420)
def test_two_node_point_keeps_its_ray_worker_through_usr2_and_saves_from_both_nodes(
    kit, slurm, kit_overrides, tmp_path
):
    """``scancel --signal=USR2`` signals every job step, the Ray worker's too (``srun --overlap``).

    Before: the worker's ``ray start --block`` died 0.4 s after USR2, so verl's actors on that node
    were gone before the save; its temp dir was left behind with mode 777.
    """
    (point,) = sweep(
        kit,
        tmp_path,
        "two_nodes_usr2",
        [
            *kit_overrides,
            *kit.slurm_cluster,
            "cluster.nodes=2",
            "verl.trainer.total_training_steps=16",
            "verl.trainer.save_freq=-1",
            "verl.trainer.test_freq=-1",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.5", "FAKE_TRAINER_NODE_WORKERS": "1"},
    )
    run_dir = Path(point["run_dir"])
    wait_steps(run_dir, 1, 3, timeout=300)
    signalled = time.time()
    scancel("--signal=USR2", point["job_id"])
    (status,) = kit.wait_final([run_dir], timeout=300)
    wait_slurm_done([point["job_id"]], timeout=60)

    assert status["state"] == "completed", status.get("reason")
    assert status["attempts"][0]["ended_by"] == "preempted", status["attempts"]
    driver_log = (run_dir / "attempts" / "1" / "driver.log").read_text()
    assert re.search(r"requeued \(preempted\) checkpointed step \d+ on SIGUSR2", driver_log), driver_log[-2000:]
    events = [json.loads(x) for x in (run_dir / "attempts" / "1" / "node_workers.jsonl").read_text().splitlines()]
    nodes = {w["node"] for w in events[0]["workers"]}
    assert len(nodes) == 2, events[0]
    (save,) = [e for e in events if e["event"] == "save"]
    assert {b["node"] for b in save["by"]} == nodes, "both nodes' actors wrote their shards"
    assert all(b["time"] > signalled for b in save["by"]), "the save came after the signal"
    worker_log = next((run_dir / "attempts" / "1" / "ray").glob("ray_worker_*.log")).read_text()
    assert "SIGUSR1: stopping the Ray worker" in worker_log, "the worker lived until the driver stopped it"
    assert "User defined signal 2" not in worker_log
    assert "Ray cluster died" not in driver_log
    assert merged_steps(run_dir) == list(range(1, 17))
    assert redone(attempt_steps(run_dir)) == [0]
    assert_temp_dirs_gone(run_dir)


# --- scancel while Ray starts --------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_scancel_while_ray_starts_is_a_cancellation_not_a_ray_failure(kit, slurm, kit_overrides, tmp_path):
    (point,) = sweep(
        kit,
        tmp_path,
        "cancel_start",
        [*kit_overrides, *kit.slurm_cluster, "cluster.nodes=2", "verl.trainer.total_training_steps=4"],
        env={"FAKE_TRAINER_STEP_S": "0.5"},
    )
    run_dir = Path(point["run_dir"])
    log = run_dir / "attempts" / "1" / "driver.log"
    deadline = time.monotonic() + 240
    while not (log.exists() and "ray worker on" in log.read_text()):
        assert time.monotonic() < deadline, "Ray never started"
        time.sleep(0.1)
    assert "ray ready" not in log.read_text(), "Ray came up before the scancel; the test needs it starting"
    scancel(point["job_id"])
    (status,) = kit.wait_final([run_dir], timeout=120)
    assert status["state"] == "cancelled", status
    assert status["attempts"][0]["ended_by"] == "cancelled"
    assert "while Ray and the sidecars were starting" in status["reason"]
    assert "not ready" not in status["reason"]
    assert_temp_dirs_gone(run_dir, private_ok=True)
