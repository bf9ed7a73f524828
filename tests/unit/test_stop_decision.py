"""The stop decision table (grpokit.runtime.decisions.stop_decision) and the own-task Slurm id, without Slurm."""

from __future__ import annotations

import signal
import subprocess

import pytest

from grpokit.run_folder.status_record import Attempt
from grpokit.runtime.decisions.stop_decision import (
    MIN_SAVE_BUDGET_S,
    TIMEOUT_MARGIN_S,
    StopRequest,
    count_timeouts,
    decide,
    decide_hang,
    save_budget_s,
)
from grpokit.slurm import stop_view, task

USR2, TERM, INT = signal.SIGUSR2, signal.SIGTERM, signal.SIGINT
LEAD = 60.0

CASES = [
    # (signal, time left, time-outs so far, budget, in Slurm, Slurm requeues, Slurm preempts)
    #   -> (state, ended_by, requeue)
    ("warning, budget left", USR2, LEAD + 20, 0, 1, True, None, False, ("requeued", "timeout", True)),
    ("warning at the margin", USR2, LEAD + TIMEOUT_MARGIN_S, 0, 1, True, None, False, ("requeued", "timeout", True)),
    ("warning, budget spent", USR2, LEAD - 5, 1, 1, True, None, False, ("failed", "timeout", False)),
    ("warning, no budget at all", USR2, LEAD, 0, 0, True, None, False, ("failed", "timeout", False)),
    ("time left unknown counts as time-out", USR2, None, 0, 2, True, None, None, ("requeued", "timeout", True)),
    ("time left unknown, budget spent", USR2, None, 2, 2, True, None, None, ("failed", "timeout", False)),
    # a sibling still pending shows its full limit: the task's own line is what is read, so a
    # signal with much time left is not a time-out and is not bounded
    ("scancel --signal, much time left", USR2, 3600, 5, 1, True, None, False, ("requeued", "preempted", True)),
    # a preemption's warning near the end of a short allocation: Slurm says it preempts
    ("preemption near the limit", USR2, LEAD + 10, 1, 1, True, None, True, ("requeued", "preempted", True)),
    ("USR2 outside Slurm", USR2, None, 0, 1, False, None, None, ("requeued", "preempted", False)),
    ("SIGTERM, Slurm requeues", TERM, 500, 0, 1, True, True, True, ("requeued", "preempted", False)),
    ("SIGTERM, preempted in CANCEL mode", TERM, 500, 0, 1, True, False, True, ("requeued", "preempted", True)),
    ("SIGTERM, scancel", TERM, 500, 0, 1, True, False, False, ("cancelled", "cancelled", False)),
    ("SIGTERM at the limit", TERM, 0, 0, 1, True, False, False, ("failed", "timeout", False)),
    ("SIGTERM, unknown", TERM, None, 0, 1, False, None, None, ("requeued", "preempted", False)),
    ("Ctrl-C", INT, None, 0, 1, False, None, None, ("cancelled", "cancelled", False)),
    # one second past the margin is no longer the time-limit warning: not bounded by the budget
    (
        "warning past the margin",
        USR2,
        LEAD + TIMEOUT_MARGIN_S + 1,
        0,
        0,
        True,
        None,
        False,
        ("requeued", "preempted", True),
    ),
    # a preemption never spends the time-out budget, even when it is spent
    ("preemption, budget spent", USR2, LEAD - 5, 3, 1, True, None, True, ("requeued", "preempted", True)),
    # scontrol cannot tell the restart count, but Slurm says it preempts: the job requeues itself
    ("SIGTERM, preempting, restart unknown", TERM, 500, 0, 1, True, None, True, ("requeued", "preempted", True)),
    ("Ctrl-C in a Slurm job", INT, 500, 0, 1, True, None, None, ("cancelled", "cancelled", False)),
]


@pytest.mark.parametrize(
    ("sig", "left", "so_far", "budget", "in_slurm", "requeues", "preempts", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(sig, left, so_far, budget, in_slurm, requeues, preempts, expected):
    d = decide(
        sig,
        time_left_s=left,
        lead_s=LEAD,
        timeouts_so_far=so_far,
        max_timeout_requeues=budget,
        in_slurm=in_slurm,
        slurm_requeues=requeues,
        slurm_preempting=preempts,
    )
    assert (d.state, d.ended_by, d.requeue) == expected
    assert d.why


def test_time_out_attempts_are_bounded_by_budget_plus_one():
    """Replaying warnings: with budget B, the (B+1)-th time-out attempt fails the point."""
    for budget in (0, 1, 3):
        so_far, attempts = 0, 0
        while True:
            attempts += 1
            d = decide(
                USR2,
                time_left_s=LEAD,
                lead_s=LEAD,
                timeouts_so_far=so_far,
                max_timeout_requeues=budget,
                in_slurm=True,
            )
            so_far += 1
            if not d.requeue:
                assert d.state == "failed"
                break
        assert attempts == budget + 1


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # the placeholder task: SLURM_JOB_ID equals the array id; its own id is <array>_<task>
        ({"SLURM_JOB_ID": "44", "SLURM_ARRAY_JOB_ID": "44", "SLURM_ARRAY_TASK_ID": "2"}, "44_2"),
        ({"SLURM_JOB_ID": "46", "SLURM_ARRAY_JOB_ID": "44", "SLURM_ARRAY_TASK_ID": "1"}, "44_1"),
        ({"SLURM_JOB_ID": "50"}, "50"),
        ({}, None),
    ],
)
def test_own_slurm_task_id(monkeypatch, env, expected):
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert task.slurm_task_id() == expected


def _scontrol(monkeypatch, fields: str, restart_env: str | None = None):
    monkeypatch.setenv("SLURM_JOB_ID", "44")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "44")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    if restart_env is None:
        monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    else:
        monkeypatch.setenv("SLURM_RESTART_COUNT", restart_env)
    seen = []

    def fake_run(cmd, **_kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=f"JobId=44 ArrayJobId=44 ArrayTaskId=2 {fields}\n", stderr="")

    monkeypatch.setattr(stop_view.subprocess, "run", fake_run)
    return seen


@pytest.mark.parametrize(
    ("fields", "restart_env", "expected"),
    [
        # lines as Slurm 22.05's `scontrol show job -o` printed them on the local cluster
        ("Restarts=0 StartTime=2026-12-01T10:01:30 PreemptTime=None", None, (False, False)),
        ("Restarts=0 StartTime=2026-12-01T10:01:30 PreemptTime=2026-12-01T10:01:35", None, (False, True)),
        # an earlier run's preemption does not make this run's warning a preemption
        ("Restarts=1 StartTime=2026-12-01T10:05:00 PreemptTime=2026-12-01T10:01:35", "1", (False, False)),
        ("Restarts=2 StartTime=2026-12-01T10:05:00", "1", (True, None)),
        ("JobState=COMPLETING", None, (None, None)),
    ],
)
def test_slurm_stop_view_reads_this_tasks_record(monkeypatch, fields, restart_env, expected):
    seen = _scontrol(monkeypatch, fields, restart_env)
    view = stop_view.slurm_stop_view()
    assert (view.requeueing, view.preempting) == expected
    assert seen == [["scontrol", "show", "job", "-o", "44_2"]], "the task's own id, never the array's"


def test_a_refused_query_is_asked_again_so_a_cancel_is_not_taken_for_a_preemption(monkeypatch):
    """A slurmctld busy with other jobs answers a query with an error now and then (seen in CI: a
    scancel read as "Slurm's intent unknown" and recorded as a preemption): scontrol is asked again
    within its time-out; an error until the end is still "unknown"."""
    monkeypatch.setenv("SLURM_JOB_ID", "44")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    answers = [
        subprocess.CompletedProcess([], 1, stdout="", stderr="slurm_load_jobs error: Socket timed out on send/recv"),
        subprocess.CompletedProcess([], 0, stdout="JobId=44 Restarts=0 StartTime=2026-12-01T10:01:30 PreemptTime=None"),
    ]
    monkeypatch.setattr(stop_view.subprocess, "run", lambda cmd, **_kw: answers.pop(0))
    monkeypatch.setattr(stop_view, "RETRY_PAUSE_S", 0.01)
    view = stop_view.slurm_stop_view()
    assert (view.requeueing, view.preempting) == (False, False)  # scancel: not requeued, not preempted
    refused = subprocess.CompletedProcess([], 1, stdout="", stderr="Unable to contact slurm controller")
    monkeypatch.setattr(stop_view.subprocess, "run", lambda cmd, **_kw: refused)
    assert stop_view.slurm_stop_view(timeout_s=0.1) == stop_view.SlurmStopView(None, None)
    # an answer that is Slurm's word (the task is no longer listed) is not asked again
    asked = []
    gone = subprocess.CompletedProcess([], 1, stdout="", stderr="slurm_load_jobs error: Invalid job id specified")
    monkeypatch.setattr(stop_view.subprocess, "run", lambda cmd, **_kw: asked.append(cmd) or gone)
    assert stop_view.slurm_stop_view() == stop_view.SlurmStopView(None, None) and len(asked) == 1


@pytest.mark.parametrize(
    ("sig", "left", "expected"),
    [
        (USR2, None, 900),  # runtime.save_deadline_s
        (USR2, 600, 600 - 15),  # ends kill_grace_s before the task's own end
        (USR2, 10, MIN_SAVE_BUDGET_S),  # never below the minimum
        (TERM, None, 2 * 15),  # SIGTERM: only KillWait is left
        (TERM, 20, MIN_SAVE_BUDGET_S),
        (INT, None, 2 * 15),
    ],
)
def test_save_budget(sig, left, expected):
    assert save_budget_s(sig, time_left_s=left, save_deadline_s=900, grace_s=15) == expected


def test_stop_request_deadline_on_a_fake_clock():
    """The deadline is on the driver's clock, so a test clock decides when it is overdue."""
    clock = [1000.0]
    req = StopRequest(
        USR2, at=clock[0], save_budget_s=save_budget_s(USR2, time_left_s=LEAD + 20, save_deadline_s=900, grace_s=15)
    )
    assert req.save_budget_s == LEAD + 5 and req.deadline == 1000.0 + LEAD + 5 and req.name == "SIGUSR2"
    clock[0] += LEAD + 5
    assert not req.overdue(clock[0])
    clock[0] += 0.1
    assert req.overdue(clock[0])
    d = req.decide(lead_s=LEAD, timeouts_so_far=0, max_timeout_requeues=1, in_slurm=True)
    assert (d.state, d.ended_by, d.requeue) == ("requeued", "timeout", True)


@pytest.mark.parametrize(
    ("ended", "since", "expected"),
    [
        ([], None, 0),
        ([("timeout", None)], None, 0),  # the running attempt itself is not counted
        ([("timeout", None), ("hung", None), ("preempted", None), (None, None)], None, 2),
        # attempts before the explicit resubmission "r1" do not count against it
        ([("timeout", None), ("timeout", "r1"), ("killed", "r1"), (None, "r1")], "r1", 1),
    ],
)
def test_count_timeouts(ended, since, expected):
    attempts = [
        Attempt(k, "2026-01-01T00:00:00+00:00", ended_by=e, resubmission=r) for k, (e, r) in enumerate(ended, 1)
    ]
    assert count_timeouts(attempts, since) == expected


@pytest.mark.parametrize(
    ("so_far", "budget", "in_slurm", "expected"),
    [
        (0, 3, True, ("requeued", "hung", True)),
        (3, 3, True, ("failed", "hung", False)),
        (0, 3, False, ("failed", "hung", False)),  # outside Slurm: run the same command again
    ],
)
def test_hang_decision(so_far, budget, in_slurm, expected):
    d = decide_hang(timeouts_so_far=so_far, max_timeout_requeues=budget, in_slurm=in_slurm)
    assert (d.state, d.ended_by, d.requeue) == expected
    assert "max_timeout_requeues" in d.why or not in_slurm
