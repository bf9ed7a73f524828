"""An attempt the driver did not close, decided from evidence (issue 24 items 1, 2, 4).

:func:`grpokit.run_folder.liveness.decide` is pure: the evidence (Slurm's answer, the heartbeat,
the driver's record, submitit's stderr, steps) in, the state and reason out. Slurm's and srun's
lines below are the formats Slurm 22.05's slurmstepd and srun print (the local cluster's).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from pathlib import Path

import pytest

from grpokit.reports.summary import point_reason
from grpokit.run_folder import heartbeat, liveness
from grpokit.run_folder.liveness import Cause, Evidence, Verdict, decide, exit_code_cause, stderr_cause
from grpokit.run_folder.point_state import point_state
from grpokit.run_folder.status_file import StatusFile
from grpokit.run_folder.status_record import PointStatus
from grpokit.run_folder.sweep_reader import Point
from grpokit.runtime.decisions import disk_full
from grpokit.runtime.decisions.completion import Completion
from grpokit.runtime.decisions.outcome import Happened
from grpokit.runtime.decisions.outcome import decide as decide_outcome
from grpokit.slurm.job_states import SlurmJobState
from grpokit.submit import wait

KILLED = ["srun: error: node1: task 0: Killed", "srun: launch/slurm: _step_signal: Terminating StepId=51.0"]
NODE_FAIL = [
    "srun: error: Node failure on node2",
    "slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T07:00:01 DUE TO NODE FAILURE, SEE SLURMCTLD "
    "LOG FOR DETAILS ***",
    "srun: error: node2: task 1: Killed",
]
PREEMPTED = ["slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T07:00:01 DUE TO PREEMPTION ***"]
REQUEUED = ["slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T07:00:01 DUE TO JOB REQUEUE ***"]
SCANCEL = ["slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T07:00:01 ***"]
TIME_LIMIT = ["slurmstepd: error: *** JOB 51 ON node1 CANCELLED AT 2026-12-03T07:00:01 DUE TO TIME LIMIT ***"]


# --- causes in submitit's stderr and Slurm's exit code ---------------------------------------------


@pytest.mark.parametrize(
    ("lines", "word", "text"),
    [
        (KILLED, "failed", "killed (signal 9) on node1"),
        (NODE_FAIL, "failed", "node node2 failed"),  # the failed node, not the batch host
        (NODE_FAIL[1:2], "failed", "a node of the job failed (Slurm cancelled it on node1 DUE TO NODE FAILURE)"),
        (PREEMPTED, "preempted", "preempted by Slurm at 2026-12-03T07:00:01"),
        (REQUEUED, "preempted", "requeued by Slurm (scontrol requeue) at 2026-12-03T07:00:01"),
        (SCANCEL, "cancelled", "cancelled (scancel) at 2026-12-03T07:00:01"),
        (TIME_LIMIT, "timeout", "time limit reached at 2026-12-03T07:00:01"),
        (
            ["slurmstepd: error: Detected 1 oom_kill event in StepId=51.0."],
            "failed",
            "killed by the OOM killer (out of memory)",
        ),
        (["srun: error: node3: task 0: Exited with exit code 3"], "failed", "exited with 3 on node3"),
        # the kit's batch script runs the driver without srun: bash reports the kill (the local cluster's line)
        (
            ["/var/spool/slurmd/node1/job00008/slurm_script: line 44: 24382 Killed                  /x/python -u -m"],
            "failed",
            "killed (signal 9)",
        ),
    ],
)
def test_stderr_names_the_cause(lines, word, text):
    cause = stderr_cause(["submitit INFO (2026-12-03) - Starting with JobEnvironment(...)", *lines])
    assert (cause.word, cause.text) == (word, text)
    assert cause.ended_by == ("node_failed" if lines is NODE_FAIL or "NODE FAILURE" in lines[0] else "killed")


# A 2-node point whose worker node was set DOWN (local cluster, Slurm 22.05.8): the batch host's
# slurmstepd line in the job's stderr (submitit's <job>_<task>_log.out) names the surviving node; the
# Ray worker's srun, whose output the driver keeps in attempts/<k>/ray/ray_worker_<node>.log, names
# the failed one.
JOB_STDERR_NODE_FAIL = [
    "submitit INFO (2026-12-03 12:59:44,770) - Starting with JobEnvironment(job_id=798, hostname=vm, "
    "local_rank=0(1), node=0(2), global_rank=0(2))",
    "slurmstepd-node1: error: *** JOB 798 ON node1 CANCELLED AT 2026-12-03T13:00:27 DUE TO NODE FAILURE, "
    "SEE SLURMCTLD LOG FOR DETAILS ***",
    "2026-12-03 13:00:27,419 WARNING submitit: Bypassing signal SIGCONT",
]
RAY_WORKER_NODE_FAIL = [
    "2026-12-03 13:00:10,635\tINFO scripts.py:1274 -- Process exit logs will be saved to: /tmp/rk/logs",
    "slurmstepd-node2: error: *** STEP 798.2 ON node2 CANCELLED AT 2026-12-03T13:00:27 DUE TO NODE FAILURE, "
    "SEE SLURMCTLD LOG FOR DETAILS ***",
    "srun: error: Node failure on node2",
    "2026-12-03 13:00:27,368\tINFO node.py:698 -- Node b35f received SIGTERM. Draining for up to 30.0 seconds",
    "srun: Job step aborted: Waiting up to 12 seconds for job step to finish.",
]


def test_a_node_failure_is_named_by_the_failed_node_from_the_ray_workers_srun(tmp_path):
    attempt = tmp_path / "attempts" / "1"
    assert liveness.run_cause(JOB_STDERR_NODE_FAIL, attempt) == Cause(
        "failed", "a node of the job failed (Slurm cancelled it on node1 DUE TO NODE FAILURE)", "node_failed"
    )  # the job's stderr alone: node1 survived, it does not name the failed node
    (attempt / "ray").mkdir(parents=True)
    (attempt / "ray" / "ray_worker_node2.log").write_text("\n".join(RAY_WORKER_NODE_FAIL))
    assert liveness.run_cause(JOB_STDERR_NODE_FAIL, attempt) == Cause("failed", "node node2 failed", "node_failed")
    assert liveness.node_failure(PREEMPTED + REQUEUED + SCANCEL + KILLED) is None


@pytest.mark.parametrize(
    ("lines", "text"),
    [
        (PREEMPTED, "preempted by Slurm"),
        (REQUEUED, "requeued by Slurm (scontrol requeue)"),
        (SCANCEL, "cancelled (scancel)"),
        (JOB_STDERR_NODE_FAIL, "a node of the job failed"),
    ],
)
def test_node_failure_preemption_admin_requeue_and_scancel_are_told_apart(lines, text):
    assert stderr_cause(lines).text.startswith(text)


def test_stderr_without_slurms_lines_names_nothing():
    assert stderr_cause(["Traceback (most recent call last):", "ValueError: x"]) is None


def test_runs_split_at_each_start_of_the_job():
    lines = ["x Starting with JobEnvironment a", *PREEMPTED, "x Starting with JobEnvironment b", "hello"]
    runs = liveness.split_runs(lines)
    assert len(runs) == 2 and stderr_cause(runs[0]).word == "preempted" and stderr_cause(runs[1]) is None


@pytest.mark.parametrize(
    ("code", "text"),
    [("0:9", "killed (signal 9)"), ("137:0", "killed (signal 9, exit 137)"), ("3:0", "exited with 3"), ("0:0", None)],
)
def test_slurm_exit_codes(code, text):
    assert (exit_code_cause(code).text if exit_code_cause(code) else None) == text


# --- the decision table --------------------------------------------------------------------------

STALE = dict(beat_age_s=400.0, stale_after_s=180.0)
FRESH = dict(beat_age_s=20.0, stale_after_s=180.0)


def test_job_forgotten_and_heartbeat_stale_is_final_with_the_true_reason():
    ev = Evidence(attempt=1, job_id="51_0", stderr=stderr_cause(KILLED), last_step=16, checkpoint_step=15, **STALE)
    v = decide(ev)
    assert v.state == "failed"
    assert v.reason.startswith("killed (signal 9) on node1 at step 16; last checkpoint step 15 (no heartbeat for 400 s")
    assert "Slurm no longer knows job 51_0" in v.reason


def test_a_local_run_whose_driver_stopped_beating_is_final():
    v = decide(Evidence(attempt=1, job_id=None, last_step=3, checkpoint_step=2, **STALE))
    assert v == Verdict(
        "failed", "driver gone at step 3; last checkpoint step 2 (no heartbeat for 400 s, a run outside Slurm)"
    )


def test_an_unreadable_tracker_is_not_called_no_checkpoint():
    ev = Evidence(attempt=1, job_id="7", last_step=5, checkpoint_step=None, checkpoint_folders=True, **STALE)
    assert decide(ev).reason.startswith("driver gone at step 5; checkpoint tracker unreadable (")


def test_job_forgotten_without_stderr_says_the_driver_is_gone():
    v = decide(Evidence(attempt=2, job_id="7", last_step=None, checkpoint_step=None, **STALE))
    assert v == Verdict(
        "failed",
        "driver gone before its first step; no checkpoint (no heartbeat for 400 s and Slurm no longer knows job 7)",
    )


@pytest.mark.parametrize("beat", [FRESH, dict(beat_age_s=None, stale_after_s=None)])
def test_job_forgotten_but_heartbeat_fresh_or_absent_proves_nothing(beat):
    # a fresh beat: squeue may simply not have answered; no record: a folder of a kit without heartbeats
    assert decide(Evidence(attempt=1, job_id="51_0", stderr=stderr_cause(KILLED), **beat)) is None


@pytest.mark.parametrize("state", ["RUNNING", "PENDING", "COMPLETING"])
def test_slurms_live_state_stands_even_with_a_stale_heartbeat(state):
    word = SlurmJobState("1", state, "squeue").kit_state
    assert decide(Evidence(attempt=1, slurm_state=state, slurm_word=word, **STALE)) is None


def test_slurm_ended_the_job_reason_from_stderr_else_exit_code():
    ended = dict(attempt=1, job_id="51", slurm_state="FAILED", slurm_word="failed", slurm_exit_code="0:9")
    v = decide(Evidence(**ended, last_step=16, checkpoint_step=15, **FRESH))
    assert v == Verdict("failed", "killed (signal 9) at step 16; last checkpoint step 15 (job 51, Slurm: FAILED)")
    v = decide(Evidence(**ended, stderr=stderr_cause(NODE_FAIL), last_step=3, checkpoint_step=None))
    assert v.reason.startswith("node node2 failed at step 3; no checkpoint")
    cancelled = decide(Evidence(attempt=1, job_id="5", slurm_state="CANCELLED", slurm_word="cancelled"))
    assert cancelled.state == "cancelled" and cancelled.reason.startswith("Slurm: CANCELLED")


def test_slurms_node_fail_state_names_a_node_failure_when_the_stderr_does_not():
    lost = Evidence(attempt=1, job_id="51", slurm_state="NODE_FAIL", slurm_word="failed", slurm_exit_code="0:0")
    assert decide(dataclasses.replace(lost, last_step=3, checkpoint_step=2)) == Verdict(
        "failed",
        "a node of the job failed (Slurm: NODE_FAIL) at step 3; last checkpoint step 2 (job 51, Slurm: NODE_FAIL)",
    )
    ooms = Evidence(attempt=1, job_id="51", slurm_state="OUT_OF_MEMORY", slurm_word="failed", slurm_exit_code="0:125")
    assert decide(ooms).reason.startswith("killed by the OOM killer (out of memory)")


def test_slurm_completed_without_an_outcome_is_left_to_the_reports():
    assert decide(Evidence(attempt=1, slurm_state="COMPLETED", slurm_word="completed", **STALE)) is None


def test_the_drivers_record_wins_when_status_json_could_not_be_written():
    outcome = {"state": "failed", "ended_by": "disk_full", "reason": "disk full writing /logs/s/000/status.json\nmore"}
    for slurm in (
        dict(slurm_state="FAILED", slurm_word="failed"),
        {},
        dict(slurm_state="RUNNING", slurm_word="running"),
    ):
        v = decide(Evidence(attempt=1, outcome=outcome, **slurm, **FRESH))
        assert v == Verdict("failed", "disk full writing /logs/s/000/status.json")
    requeued = {"state": "requeued", "ended_by": "preempted", "reason": "checkpointed step 4 on USR2"}
    assert decide(Evidence(attempt=1, outcome=requeued, slurm_state="PENDING", slurm_word="queued")) is None
    assert decide(Evidence(attempt=1, outcome=requeued)).state == "preempted"  # Slurm lost it: resubmittable


# --- the record ----------------------------------------------------------------------------------


def test_record_is_fixed_size_and_the_outcome_is_written_in_place(tmp_path):
    path = heartbeat.open_record(tmp_path, attempt=2, job_id="5_1", beat_s=1.0)
    assert path.stat().st_size == heartbeat.RECORD_BYTES
    inode = path.stat().st_ino
    heartbeat.write_outcome(tmp_path, attempt=2, state="failed", ended_by="failed", reason="x" * 10_000)
    assert path.stat().st_size == heartbeat.RECORD_BYTES and path.stat().st_ino == inode  # same bytes
    rec = heartbeat.read_record(tmp_path)
    assert rec.fields["job_id"] == "5_1" and rec.outcome["state"] == "failed"
    assert rec.outcome["reason"].endswith(" [...]") and len(rec.outcome["reason"]) < heartbeat.RECORD_BYTES
    assert rec.stale_after_s == heartbeat.STALE_MIN_S  # 6 beats of 1 s, at least 10 s
    assert not rec.stale and heartbeat.read_record(tmp_path, now_s=time.time() + 60).stale


def test_beater_touches_the_record(tmp_path):
    path = heartbeat.open_record(tmp_path, attempt=1, job_id=None, beat_s=0.05)
    os.utime(path, (0, 0))
    beater = heartbeat.Beater(path, 0.05).start()
    deadline = time.monotonic() + 5
    while path.stat().st_mtime == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    beater.stop()
    assert path.stat().st_mtime > 0


# --- status, resubmit and wait read the verdict --------------------------------------------------


def _open_point(tmp_path: Path, *, stale: bool, stderr: list[str] | None = None, record: dict | None = None) -> Point:
    sweep = tmp_path / "logs" / "s"
    run = sweep / "000"
    (run / "attempts" / "1").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / liveness.TRACKER).write_text("15")
    (run / "attempts" / "1" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {}}) + "\n" for s in range(1, 17))
    )
    status = {
        "state": "running",
        "reason": "",
        "target_step": 40,
        "slurm": {"job_id": "52", "array_job_id": "51", "array_task_id": 0},
        "attempts": [{"attempt": 1, "start": "2026-12-03T07:00:00+00:00", "end": None, "ended_by": None}],
    }
    (run / "status.json").write_text(json.dumps(status))
    heartbeat.open_record(run, attempt=1, job_id="51_0", beat_s=1.0)
    if record:
        heartbeat.write_outcome(run, attempt=1, **record)
    if stale:
        os.utime(run / "heartbeat.json", (time.time() - 3600, time.time() - 3600))
    if stderr is not None:
        (sweep / "submitit").mkdir()
        (sweep / "submitit" / "51_0_0_log.err").write_text("\n".join(["x Starting with JobEnvironment", *stderr]))
    return Point(index=0, name="000", run_dir=run, job_id="51_0", status=PointStatus.from_json(status))


def test_status_shows_a_forgotten_killed_point_final_with_its_reason(tmp_path):
    point = _open_point(tmp_path, stale=True, stderr=KILLED)
    assert point_state(point, None) == "failed"  # resubmittable (RESUBMITTABLE_STATES)
    assert point_reason(point, None).startswith("killed (signal 9) on node1 at step 16; last checkpoint step 15")
    fresh = _open_point(tmp_path / "b", stale=False, stderr=KILLED)
    assert point_state(fresh, None) == "running"


def test_status_shows_the_records_reason_while_slurm_says_failed(tmp_path):
    record = {"state": "failed", "ended_by": "disk_full", "reason": "disk full writing /logs/s/000"}
    point = _open_point(tmp_path, stale=False, record=record)
    slurm = SlurmJobState("51_0", "FAILED", "scontrol", reason="NonZeroExitCode", exit_code="1:0")
    assert point_state(point, slurm) == "failed"
    assert point_reason(point, slurm) == "disk full writing /logs/s/000"


def test_cancelled_while_pending_names_the_end_not_the_wait(tmp_path):
    run = tmp_path / "000"
    run.mkdir()
    point = Point(index=0, name="000", run_dir=run, job_id="51_3", status=None)
    slurm = SlurmJobState("51_3", "CANCELLED", "squeue", reason="JobArrayTaskLimit")
    assert point_state(point, slurm) == "cancelled" and point_reason(point, slurm) == "cancelled while pending"


def test_wait_returns_for_a_forgotten_killed_point(tmp_path, monkeypatch, bare_point):
    point = _open_point(tmp_path, stale=True, stderr=KILLED)
    spec = bare_point(tmp_path / "logs" / "s", 0)
    monkeypatch.setattr(wait.time, "sleep", lambda _s: pytest.fail("waited although the evidence decides"))
    monkeypatch.setattr("grpokit.slurm.job_states.job_states", lambda ids: {})  # Slurm no longer knows 51_0
    assert Path(spec.run_dir) == point.run_dir
    assert wait.wait_for([spec], ["51_0"], [0], slurm_final=lambda ids: {}) == ["failed"]


def test_the_next_start_closes_the_open_attempt_with_its_cause(tmp_path):
    point = _open_point(tmp_path, stale=True)
    found = liveness.killed_attempt_reason(point.run_dir, point.status, NODE_FAIL)
    assert found == ("node_failed", "node node2 failed at step 16; last checkpoint step 15")
    status = StatusFile(point.run_dir)
    status.start_attempt(target_step=40, slurm={}, previous_end=found)
    first = status.record.attempts[0]
    assert first.ended_by == "node_failed" and first.reason.startswith("node node2 failed")
    killed = _open_point(tmp_path / "k", stale=True)
    assert liveness.killed_attempt_reason(killed.run_dir, killed.status, KILLED)[0] == "killed"


def test_the_next_start_names_the_failed_node_from_the_attempts_ray_logs(tmp_path):
    """The driver did not survive (killed on the batch host): the next start finds the node in the
    open attempt's Ray worker log."""
    point = _open_point(tmp_path, stale=True)
    (point.run_dir / "attempts" / "1" / "ray").mkdir()
    (point.run_dir / "attempts" / "1" / "ray" / "ray_worker_node2.log").write_text("\n".join(RAY_WORKER_NODE_FAIL))
    found = liveness.killed_attempt_reason(point.run_dir, point.status, JOB_STDERR_NODE_FAIL)
    assert found == ("node_failed", "node node2 failed at step 16; last checkpoint step 15")


def test_a_forgotten_point_whose_node_failed_is_final_with_the_node(tmp_path):
    point = _open_point(tmp_path, stale=True, stderr=JOB_STDERR_NODE_FAIL[1:])
    (point.run_dir / "attempts" / "1" / "ray").mkdir()
    (point.run_dir / "attempts" / "1" / "ray" / "ray_worker_node2.log").write_text("\n".join(RAY_WORKER_NODE_FAIL))
    assert point_state(point, None) == "failed"
    assert point_reason(point, None).startswith("node node2 failed at step 16; last checkpoint step 15 (no heartbeat")


def test_a_surviving_driver_names_the_failed_node_and_leaves_the_requeue_to_slurm():
    """SIGTERM after Slurm requeued the job for a node failure; the Ray cluster died with the node."""
    from grpokit.runtime.decisions.outcome import JobFailed
    from grpokit.runtime.decisions.stop_decision import StopDecision
    from grpokit.runtime.processes import retry_job

    died = JobFailed("the job's Ray cluster died while the trainer ran; see attempts/*/ray/", "ray_failed")
    slurm_requeues = StopDecision("requeued", "preempted", False, "SIGTERM: Slurm requeues the job")
    happened = Happened(error=died, trainer_started=True, node_failure="node node2 failed")
    out = decide_outcome(happened, signal_name="SIGTERM", stop=slurm_requeues)
    assert (out.state, out.ended_by, out.requeue) == ("requeued", "node_failed", False)
    assert out.reason == "node node2 failed; Slurm requeues the job"
    assert retry_job.on_outcome(None, None, out, Path("/nonexistent"), None) == (out, None)  # no retry spent
    # Slurm does not requeue it (no --requeue): failed, resubmittable, the node named before the symptom
    alone = decide_outcome(Happened(error=died, trainer_started=True, node_failure="node node2 failed"))
    assert (alone.state, alone.ended_by) == ("failed", "node_failed")
    assert alone.reason.startswith("node node2 failed; the job's Ray cluster died")
    # without a node failure the Ray death stays ray_failed (a crash the kit retries)
    assert decide_outcome(Happened(error=died, trainer_started=True)).ended_by == "ray_failed"


# --- a full disk ---------------------------------------------------------------------------------


def test_disk_full_is_named_from_the_error_or_the_free_space():
    free = {"/logs/s/000": 10 << 30, "/ckpt/s/000": 100}
    assert disk_full.cause(["RuntimeError: basic_ios::clear: iostream error"], free) == (
        "disk full writing /ckpt/s/000 (100 bytes free)"
    )
    line = "OSError: [Errno 28] No space left on device: '/logs/s/000/attempts/1/metrics.jsonl'"
    assert disk_full.cause([line], {"/logs": None}) == "disk full writing /logs/s/000/attempts/1/metrics.jsonl"
    assert disk_full.cause(["ValueError: x"], {"/logs": 10 << 30}) is None
    exc = OSError(errno.ENOSPC, "No space left on device", "/logs/s/000/status.json")
    assert disk_full.error_path(exc) == "/logs/s/000/status.json"
    assert disk_full.error_path(OSError(errno.EACCES, "denied")) is None


def test_a_full_disk_fails_the_attempt_as_disk_full_not_a_crash_to_retry():
    from grpokit.runtime.decisions import retry

    crash = Happened(trainer_started=True, trainer_exit=1, disk_full="disk full writing /ckpt/s/000 (0 bytes free)")
    out = decide_outcome(crash)
    assert (out.state, out.ended_by) == ("failed", "disk_full")
    assert out.reason.startswith("disk full writing /ckpt/s/000 (0 bytes free); trainer exited with 1")
    assert out.ended_by not in retry.RETRIED  # runtime.retry_job.on_outcome takes no retry
    assert not out.requeue
    # a point that completed anyway stays completed
    done = Completion("completed", "completed", "", 4)
    assert decide_outcome(Happened(trainer_started=True, trainer_exit=0, completion=done, disk_full="x")).state == (
        "completed"
    )
