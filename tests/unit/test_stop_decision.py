"""The stop decision table (grpokit.runtime.stop_decision) and the own-task Slurm id, without Slurm."""

from __future__ import annotations

import signal

import pytest

from grpokit.runtime import environment
from grpokit.runtime.stop_decision import TIMEOUT_MARGIN_S, decide

USR2, TERM, INT = signal.SIGUSR2, signal.SIGTERM, signal.SIGINT
LEAD = 60.0

CASES = [
    # (signal, time left, time-outs so far, budget, in Slurm, Slurm requeues) -> (state, ended_by, requeue)
    ("warning, budget left", USR2, LEAD + 20, 0, 1, True, None, ("requeued", "timeout", True)),
    ("warning at the margin", USR2, LEAD + TIMEOUT_MARGIN_S, 0, 1, True, None, ("requeued", "timeout", True)),
    ("warning, budget spent", USR2, LEAD - 5, 1, 1, True, None, ("failed", "timeout", False)),
    ("warning, no budget at all", USR2, LEAD, 0, 0, True, None, ("failed", "timeout", False)),
    ("time left unknown counts as time-out", USR2, None, 0, 2, True, None, ("requeued", "timeout", True)),
    ("time left unknown, budget spent", USR2, None, 2, 2, True, None, ("failed", "timeout", False)),
    # a sibling still pending shows its full limit: the task's own line is what is read, so a
    # preemption with much time left is not a time-out and is not bounded
    ("preemption, much time left", USR2, 3600, 5, 1, True, None, ("requeued", "preempted", True)),
    ("USR2 outside Slurm", USR2, None, 0, 1, False, None, ("requeued", "preempted", False)),
    ("SIGTERM, Slurm requeues", TERM, 500, 0, 1, True, True, ("requeued", "preempted", False)),
    ("SIGTERM, scancel", TERM, 500, 0, 1, True, False, ("cancelled", "cancelled", False)),
    ("SIGTERM at the limit", TERM, 0, 0, 1, True, False, ("failed", "timeout", False)),
    ("SIGTERM, unknown", TERM, None, 0, 1, False, None, ("requeued", "preempted", False)),
    ("Ctrl-C", INT, None, 0, 1, False, None, ("cancelled", "cancelled", False)),
]


@pytest.mark.parametrize(
    ("sig", "left", "so_far", "budget", "in_slurm", "requeues", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(sig, left, so_far, budget, in_slurm, requeues, expected):
    d = decide(
        sig,
        time_left_s=left,
        lead_s=LEAD,
        timeouts_so_far=so_far,
        max_timeout_requeues=budget,
        in_slurm=in_slurm,
        slurm_requeues=requeues,
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
    assert environment.slurm_task_id() == expected
