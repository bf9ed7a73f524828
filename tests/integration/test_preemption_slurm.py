"""Preemption, time limits, kills during a save and resubmission, on the real Slurm test cluster.

The trainer is the TEST DOUBLE tests/doubles/fake_verl_trainer.py, which follows verl's checkpoint,
tracker and file-logger contracts and the kit's checkpoint-on-demand hook.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

# The tests that preempt whole nodes through `urgent` (and reconfigure the preemption signal) are
# marked cluster_exclusive: `make test` runs them after the parallel part, alone on the cluster.
# The others need only their own jobs and run in the parallel part.
pytestmark = [pytest.mark.slurm]


def preempt_signal(kit, mode: str) -> None:
    out = subprocess.run(
        ["bash", str(kit.repo / "slurm" / "local_cluster.sh"), "reconfigure-preempt-signal", mode],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.fixture
def user_signal_on_preemption(kit):
    """The cluster sends the job's --signal (USR2) with a GraceTime before preempting it."""
    preempt_signal(kit, "on")
    yield
    preempt_signal(kit, "off")


def attempt_steps(run_dir: Path) -> list[list[int]]:
    """Steps logged by each attempt, in attempt order."""
    out = []
    for d in sorted((run_dir / "attempts").iterdir(), key=lambda p: int(p.name)):
        path = d / "metrics.jsonl"
        out.append([json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else [])
    return out


def wait_for_new_steps(run_dir: Path, attempt: int, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    path = run_dir / "attempts" / str(attempt) / "metrics.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.5)
    pytest.fail(f"attempt {attempt} of {run_dir.name} logged < {count} steps in {timeout:.0f} s")


def preempt(node: str, tmp_path: Path) -> str:
    """Submit an `urgent` job that needs every GPU of ``node``: Slurm preempts what runs there."""
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--partition=urgent",
            f"--nodelist={node}",
            "--gpus-per-node=4",
            "--cpus-per-task=1",
            "--mem=500M",
            "--time=1",
            f"--output={tmp_path}/urgent_%j.out",
            "--wrap=sleep 5",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def wait_jobs_gone(job_ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True, timeout=30)
        if not set(job_ids) & set(out.stdout.split()):
            return
        assert time.monotonic() < deadline, f"jobs {job_ids} still in squeue"
        time.sleep(0.5)


def flip_member_bytes(path: Path) -> None:
    """Invert the middle byte of the first member (``<stem>/data.pkl``) of a torch.save zip; the size stays."""
    with zipfile.ZipFile(path) as zf:
        member = zf.infolist()[0]
    with open(path, "r+b") as fh:  # the member's bytes follow its local header: 30 bytes + name + extra
        fh.seek(member.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", fh.read(4))
        middle = member.header_offset + 30 + name_len + extra_len + member.file_size // 2
        fh.seek(middle)
        byte = fh.read(1)
        fh.seek(middle)
        fh.write(bytes([byte[0] ^ 0xFF]))


def check_redone(steps: list[list[int]], allowed: int) -> None:
    """At most ``allowed`` logged steps of an attempt are logged again by the next one."""
    done: list[int] = []
    for attempt in steps:
        if done and attempt:
            assert max(done) - attempt[0] + 1 <= allowed, f"attempts redid too much: {steps}"
        done += attempt


@pytest.mark.cluster_exclusive
def test_point_survives_two_preemptions_and_a_time_limit(
    kit, slurm, kit_overrides, tmp_path, user_signal_on_preemption
):
    """Two preemptions through ``urgent`` (USR2 with a GraceTime), then Slurm's own ``--signal``
    warning at the time limit: four attempts, every step exactly once.

    The third attempt's limit is brought near once it trains (``kit.bring_time_limit_near``: the
    warning comes 0-35 s after the minute it is due, as at a submitted ``--time``), instead of a
    3-minute ``--time`` that every attempt must first spend on its start; the submitted limit is put
    back for the fourth, as for a requeued job."""
    env = {"FAKE_TRAINER_STEP_S": "1"}
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "sweep_name=pre",
            "+cluster.additional_parameters.nodelist=node3",
            # more than attempts 1-3 train: ~6 steps before each preemption, and the third at most
            # ~87 s (steps) before its warning; the fourth trains what is left (40-90 steps)
            "verl.trainer.total_training_steps=110",
            "verl.trainer.save_freq=50",
            "verl.trainer.test_freq=-1",
        ],
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    point = kit.manifest(tmp_path / "logs" / "pre")["points"][0]
    run_dir, job = Path(point["run_dir"]), point["job_id"]

    def wait_attempt_running(attempt: int) -> None:
        deadline = time.monotonic() + 240
        while len(kit.read_status(run_dir)["attempts"]) < attempt or kit.read_status(run_dir)["state"] != "running":
            assert time.monotonic() < deadline, kit.read_status(run_dir)
            time.sleep(1)

    for attempt in (1, 2):
        wait_for_new_steps(run_dir, attempt, 5, timeout=240)
        preempt("node3", tmp_path)
        wait_attempt_running(attempt + 1)
    wait_for_new_steps(run_dir, 3, 2, timeout=240)
    (submitted,) = [int(o.split("=")[1]) for o in kit.slurm_cluster if o.startswith("cluster.timeout_min=")]
    kit.bring_time_limit_near(job, lead_s=60)  # cluster.signal_delay_s of SLURM_TEST_CLUSTER
    deadline = time.monotonic() + 240
    while len(kit.read_status(run_dir)["attempts"]) < 4 or kit.slurm_job(job)["JobState"] not in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, kit.read_status(run_dir)
        time.sleep(0.5)
    kit.set_time_limit(job, submitted)
    status = kit.wait_final([run_dir], timeout=600)[0]
    assert status["state"] == "completed", status.get("reason")
    ended = [a["ended_by"] for a in status["attempts"]]
    assert ended[:3] == ["preempted", "preempted", "timeout"], ended
    steps = attempt_steps(run_dir)
    merged = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert merged == list(range(1, 111)), "every step exactly once in the merged series"
    check_redone(steps, allowed=1)
    assert status["slurm"]["restart_count"] >= 3


def test_kill_during_a_save_resumes_from_the_last_complete_step(kit, kit_overrides, tmp_path):
    """Local path (no Slurm needed): the trainer dies after the model shards of step 4, before the tracker."""
    args = [*kit_overrides, "cluster=local", "sweep_name=kill", "verl.trainer.total_training_steps=6"]
    out = kit.run("sweep.py", args, env={"FAKE_TRAINER_CRASH_IN_SAVE": "4", "FAKE_TRAINER_STEP_S": "0.1"})
    assert out.returncode == 1, out.stderr[-3000:]  # the point run here failed: the command says so
    assert "1 point(s) run here did not succeed" in out.stderr and "(failed)" in out.stderr
    sweep = tmp_path / "logs" / "kill"
    run_dir = Path(kit.manifest(sweep)["points"][0]["run_dir"])
    assert kit.read_status(run_dir)["state"] == "failed"
    ckpt = run_dir / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert not (ckpt / "global_step_4" / "data.pt").exists()
    out = kit.run("resubmit.py", [str(sweep)], env={"FAKE_TRAINER_STEP_S": "0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    status = kit.read_status(run_dir)
    assert status["state"] == "completed", status.get("reason")
    assert status["attempts"][-1]["resume_step"] == 2
    assert list(ckpt.glob("global_step_4.incomplete-*")), "the partial step is set aside, not deleted"
    assert attempt_steps(run_dir)[-1][0] == 3
    merged = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert merged == list(range(1, 7))


def test_resubmit_takes_exactly_the_failed_and_the_timed_out_point(kit, slurm, kit_overrides, tmp_path):
    """A crash (fail-once), a time-out (slow-once) and a completed point; resubmit.py takes the first two.

    Real condition kept: the slow point ends ``failed (timeout)`` on Slurm's own ``--signal`` warning
    at its time limit (``max_timeout_requeues=0``). Its limit is brought near by ``scontrol update
    TimeLimit=`` once it trains (``kit.bring_time_limit_near``) instead of a 3-minute ``--time``, and
    the test needs only its own jobs (it runs in the parallel part of ``make test``).
    """
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "sweep_name=resub",
            "runtime.max_timeout_requeues=0",
            "runtime.max_retries=0",  # the crashed point must end failed for resubmit.py to take it
            "verl.trainer.total_training_steps=25",
            "verl.trainer.save_freq=1",
            "+runtime.env.FAKE_TRAINER_PROFILE=fail-once,slow-once,ok",
        ],
        env={"FAKE_TRAINER_STEP_S": "0.3"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "logs" / "resub"
    points = kit.manifest(sweep)["points"]
    run_dirs = [Path(p["run_dir"]) for p in points]
    slow = run_dirs[1] / "attempts" / "1" / "metrics.jsonl"  # slow-once: 6 s a step, 150 s for its 25
    deadline = time.monotonic() + 300
    while not (slow.exists() and len(slow.read_text().splitlines()) >= 2):
        assert time.monotonic() < deadline, kit.read_status(run_dirs[1])
        time.sleep(0.5)
    kit.bring_time_limit_near(points[1]["job_id"], lead_s=60)  # cluster.signal_delay_s of SLURM_TEST_CLUSTER
    first = kit.wait_final(run_dirs, timeout=600)
    assert [s["state"] for s in first] == ["failed", "failed", "completed"], [s.get("reason") for s in first]
    assert first[1]["attempts"][-1]["ended_by"] == "timeout"
    wait_jobs_gone([p["job_id"] for p in points], timeout=120)  # status.json is final just before the job ends
    # issue 24 item 3: the crashed point's newest save (step 2) loses its data.pt (0 bytes, as a full
    # disk or a cut copy leaves it): the resubmission resumes step 1, says why, and still completes
    ckpt = run_dirs[0] / "checkpoints"
    assert (
        kit.read_status(run_dirs[0])["last_step"] == 2
        and (ckpt / "latest_checkpointed_iteration.txt").read_text() == "2"
    )
    damaged = ckpt / "global_step_2" / "data.pt"
    size = damaged.stat().st_size
    os.truncate(damaged, 0)
    # issue 36 item 3: the timed-out point's newest step was moved away by hand (its tracker still names
    # it: the driver crashed on it before) and the step before has a shard of the same size with bytes
    # flipped (a bad copy): the resubmission resumes the step before that, says why, and completes
    slow_ckpt = run_dirs[1] / "checkpoints"
    newest = int((slow_ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert newest >= 3, newest
    (slow_ckpt / f"global_step_{newest}").rename(slow_ckpt / f"global_step_{newest}.incomplete-by-hand")
    (flipped,) = (slow_ckpt / f"global_step_{newest - 1}" / "actor").glob("model_world_size_*_rank_0.pt")
    flip_member_bytes(flipped)
    out = kit.run("resubmit.py", [str(sweep)])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resubmitted 000_" in out.stdout and "resubmitted 001_" in out.stdout and "002_" not in out.stdout
    entries = kit.manifest(sweep)["points"]
    assert entries[2]["job_id"] == points[2]["job_id"] and not entries[2]["history"]
    assert all(e["history"] and e["job_id"] != p["job_id"] for e, p in zip(entries[:2], points[:2], strict=True))
    deadline = time.monotonic() + 600
    while [kit.read_status(d)["state"] for d in run_dirs[:2]] != ["completed", "completed"]:
        assert time.monotonic() < deadline, [kit.read_status(d) for d in run_dirs[:2]]
        time.sleep(1)
    for d in run_dirs[:2]:
        merged = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()]
        assert merged == list(range(1, 26))
        assert len(kit.read_status(d)["attempts"]) == 2
    second = kit.read_status(run_dirs[0])["attempts"][1]
    first_line = (run_dirs[0] / "attempts" / "2" / "metrics.jsonl").read_text().splitlines()[0]
    assert second["resume_step"] == 1 and json.loads(first_line)["step"] == 2, second
    assert second["checkpoint_set_aside"].startswith("checkpoint global_step_2 set aside as global_step_2.incomplete-")
    why = f"global_step_2/data.pt has 0 bytes, {size} at save (.grpokit-sizes.json); resuming from global_step_1"
    assert second["checkpoint_set_aside"].endswith(why), second["checkpoint_set_aside"]
    slow = kit.read_status(run_dirs[1])["attempts"][1]
    assert slow["resume_step"] == newest - 2, slow
    note = slow["checkpoint_set_aside"]  # the driver names the checkpoint folder by its real path
    assert f"/latest_checkpointed_iteration.txt names step {newest} but /" in note, note
    assert note.endswith(f"/global_step_{newest} does not exist (and 1 more); resuming from global_step_{newest - 2}")
    assert list(slow_ckpt.glob(f"global_step_{newest - 1}.incomplete-*")), "the damaged step is set aside, not deleted"
    driver_log = (run_dirs[1] / "attempts" / "2" / "driver.log").read_text()
    assert f"/{flipped.name} is damaged: member {flipped.stem}/data.pkl" in driver_log
    first_slow = (run_dirs[1] / "attempts" / "2" / "metrics.jsonl").read_text().splitlines()[0]
    assert json.loads(first_slow)["step"] == newest - 1


@pytest.mark.cluster_exclusive
def test_sbatch_single_run_survives_a_preemption_without_user_signal(kit, slurm, kit_overrides, tmp_path):
    """Plain SIGTERM + KillWait: the trainer dies, Slurm requeues, the run resumes from its last save."""
    job = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--time=15",
            "--cpus-per-task=1",
            "--mem=1G",
            "--nodelist=node2",
            f"--output={tmp_path}/sbatch_%j.out",
            str(kit.repo / "slurm" / "train.sbatch"),
            *kit_overrides,
            "cluster.signal_delay_s=60",
            "cluster.timeout_min=15",
            "verl.trainer.total_training_steps=30",
            "verl.trainer.save_freq=3",
        ],
        capture_output=True,
        text=True,
        cwd=kit.repo,
        timeout=60,
        env={**kit.env(), "GRPOKIT_PYTHON": kit.python, "FAKE_TRAINER_STEP_S": "1"},
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    run_dir = tmp_path / "logs" / f"gsm8k_grpo_job{job_id}" / "000"
    deadline = time.monotonic() + 240
    while (
        not (run_dir / "attempts" / "1" / "metrics.jsonl").exists()
        or len((run_dir / "attempts" / "1" / "metrics.jsonl").read_text().splitlines()) < 7
    ):
        assert time.monotonic() < deadline, kit.read_status(run_dir)
        time.sleep(0.5)
    preempt("node2", tmp_path)
    status = kit.wait_final([run_dir], timeout=600)[0]
    assert status["state"] == "completed", status.get("reason")
    assert [a["ended_by"] for a in status["attempts"]][0] in ("preempted", "killed")
    assert status["slurm"]["job_id"] == job_id and status["slurm"]["restart_count"] >= 1
    steps = attempt_steps(run_dir)
    check_redone(steps, allowed=3)  # no user signal: back to the last periodic save (save_freq=3)
    merged = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert merged == list(range(1, 31))
