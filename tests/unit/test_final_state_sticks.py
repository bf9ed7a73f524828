"""A final state that comes back (issue 36 item 1): once a killed point is shown final, no later read
shows it running until a new attempt of it starts.

The sequence of the field report: ``kill -9`` of a job's driver; Slurm says FAILED (``failed |
killed (signal 9) at step 26; last checkpoint step 20``); Slurm forgets the job (MinJobAge) while
the heartbeat is not stale yet (it showed ``running`` for up to 180 s), then the heartbeat turns
stale; the next start of the point (a resubmission: a new job) closes the killed attempt with
Slurm's real end state and the driver's last beat as its end. Real files throughout: status.json,
heartbeat.json (its mtime is the driver's last beat), verl's tracker, metrics.jsonl.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time

import pytest

from grpokit.reports.status_table import status_row
from grpokit.reports.summary import gpu_hours, point_reason
from grpokit.run_folder import heartbeat, liveness
from grpokit.run_folder.attempt_end import AttemptEnd, read_end
from grpokit.run_folder.liveness import Evidence, decide
from grpokit.run_folder.point_state import ShownEvidence, point_state, shown_state
from grpokit.run_folder.status_file import StatusFile
from grpokit.run_folder.status_record import read_status
from grpokit.run_folder.sweep_reader import Point
from grpokit.slurm.job_states import KIT_STATE, SlurmJobState

START = dt.datetime(2026, 12, 3, 7, 0, tzinfo=dt.UTC)
REASON = "killed (signal 9) at step 26; last checkpoint step 20 (job 51_0, Slurm: FAILED)"


def _killed_point(tmp_path, *, last_beat_s: float) -> Point:
    """A point whose driver was killed at step 26 (checkpoint 20), its last beat ``last_beat_s`` ago."""
    run = tmp_path / "logs" / "s" / "000"
    (run / "attempts" / "1").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / liveness.TRACKER).write_text("20")
    (run / "attempts" / "1" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {}}) + "\n" for s in range(1, 27))
    )
    status = StatusFile(run)
    status.start_attempt(target_step=40, slurm={"job_id": "52", "array_job_id": "51", "array_task_id": 0, "gpus": 2})
    _rewrite_start(run, START)
    heartbeat.open_record(run, attempt=1, job_id="51_0", beat_s=30.0)  # stale after 180 s
    beat = time.time() - last_beat_s
    os.utime(run / "heartbeat.json", (beat, beat))
    return _read(run, "51_0")


def _rewrite_start(run, start: dt.datetime) -> None:
    data = json.loads((run / "status.json").read_text())
    data["attempts"][-1]["start"] = start.isoformat()
    (run / "status.json").write_text(json.dumps(data))


def _read(run, job_id: str) -> Point:
    return Point(index=0, name="000", run_dir=run, job_id=job_id, status=read_status(run))


def _age(point: Point, seconds: float) -> None:
    beat = time.time() - seconds
    os.utime(point.run_dir / "heartbeat.json", (beat, beat))


def test_killed_point_stays_failed_with_the_same_reason_until_a_new_attempt(tmp_path):
    point = _killed_point(tmp_path, last_beat_s=20)
    failed = SlurmJobState("51_0", "FAILED", "squeue", exit_code="0:9")

    # Slurm says FAILED: final, the cause from Slurm's exit code
    assert point_state(point, failed) == "failed"
    assert point_reason(point, failed) == REASON

    # Slurm forgets the job; the heartbeat is 40 s old (stale only after 180 s): still failed, same reason
    _age(point, 40)
    assert point_state(point, None) == "failed"
    assert point_reason(point, None) == REASON

    # ... and once the heartbeat is stale: the same verdict, not "no heartbeat for ..."
    _age(point, 3600)
    assert (point_state(point, None), point_reason(point, None)) == ("failed", REASON)

    # the elapsed column stops at the driver's last beat: a later read shows the same time
    recorded = read_end(point.run_dir, 1)
    assert recorded is not None and recorded.slurm_state == "FAILED"
    end = dt.datetime.fromisoformat(recorded.end)
    later = end + dt.timedelta(hours=5)
    row = status_row(point, None, now=later)
    assert row.state == "failed" and row.eta_s is None
    assert abs(row.elapsed_s - (end - START).total_seconds()) < 1
    assert gpu_hours(point, None, now=later) == pytest.approx((end - START).total_seconds() * 2 / 3600, abs=1e-3)

    # a new attempt (a resubmission: a new job) closes the killed one with Slurm's real end state
    status = StatusFile(point.run_dir)
    previous = liveness.killed_attempt_end(point.run_dir, status.record, None)
    assert previous == recorded
    status.start_attempt(
        target_step=40, slurm={"job_id": "90", "array_job_id": "90", "array_task_id": 0}, previous_end=previous
    )
    heartbeat.open_record(point.run_dir, attempt=2, job_id="90_0", beat_s=30.0)
    closed = read_status(point.run_dir).attempts[0]
    assert (closed.ended_by, closed.slurm_state, closed.end) == ("killed", "FAILED", recorded.end)
    assert closed.reason == REASON
    again = _read(point.run_dir, "90_0")
    assert point_state(again, None) == "running"  # the new attempt runs: the old verdict is not its
    assert point_state(again, SlurmJobState("90_0", "RUNNING", "squeue")) == "running"


def test_the_decision_is_pure_over_the_same_sequence():
    """:func:`liveness.decide` alone: Slurm's FAILED, then no Slurm answer with a fresh and a stale
    heartbeat and the recorded end, then a queued requeue (Slurm holds the job again)."""
    base = dict(attempt=1, job_id="51_0", last_step=26, checkpoint_step=20, stale_after_s=180.0)
    first = decide(Evidence(**base, slurm_state="FAILED", slurm_word="failed", slurm_exit_code="0:9", beat_age_s=5))
    assert (first.state, first.reason, first.slurm_state) == ("failed", REASON, "FAILED")
    settled = AttemptEnd(1, first.state, first.reason, first.ended_by, "51_0", first.slurm_state, "2026-12-03T07:05:00")
    for age in (40.0, 3600.0):
        later = decide(Evidence(**base, beat_age_s=age, settled=settled))
        assert (later.state, later.reason, later.ended_at) == ("failed", REASON, "2026-12-03T07:05:00")
    assert decide(Evidence(**base, slurm_state="PENDING", slurm_word="queued", settled=settled)) is None
    # without the recorded end the fresh heartbeat proves nothing (what showed "running" before)
    assert decide(Evidence(**base, beat_age_s=40.0)) is None


def test_revoked_is_cancelled_in_the_one_table():
    assert KIT_STATE["REVOKED"] == "cancelled"
    verdict = decide(Evidence(attempt=1, job_id="7", slurm_state="REVOKED", slurm_word="cancelled"))
    assert verdict.state == "cancelled"
    assert not hasattr(liveness, "_SLURM_WORD")  # no second table of Slurm's end states


def test_the_shown_state_is_one_pure_function_of_the_evidence():
    """:func:`shown_state` over the field report's sequence: status.json ``running`` (the driver was
    killed), the verdict once decided, Slurm's answer then its absence; then a new attempt."""
    killed = dict(recorded="running", this_jobs=True, submitted=True)
    assert shown_state(ShownEvidence(**killed, slurm_word="failed", verdict="failed")) == "failed"
    assert shown_state(ShownEvidence(**killed, slurm_word=None, verdict="failed")) == "failed"  # Slurm forgot
    assert shown_state(ShownEvidence(**killed, slurm_word="unknown", verdict="failed")) == "failed"
    # a new attempt started (a requeue, a resubmission): Slurm's live word, else status.json's
    assert shown_state(ShownEvidence(**killed, slurm_word="running")) == "running"
    assert shown_state(ShownEvidence(**killed, slurm_word=None)) == "running"
    assert shown_state(ShownEvidence(**killed, slurm_word="queued", verdict="failed")) == "queued"
