"""The stop, requeue, retry and cancel decisions through the real :mod:`grpokit.slurm` modules, with
Slurm's clients answered in process by the test double ``tests/doubles/slurm_runner.py`` (in seconds).

Each test runs as array task ``77_1`` (its ``SLURM_*`` variables set) and checks the decision and
the command lines the kit sent: always this task's own id, never its array's.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path

import pytest

from grpokit.runtime.decisions import retry
from grpokit.runtime.parts import Host
from grpokit.runtime.processes import retry_job
from grpokit.runtime.processes.stop_inquiry import StopInquiry
from grpokit.slurm import requeue, scancel

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("slurm_runner_double", REPO / "tests" / "doubles" / "slurm_runner.py")
fake_slurm = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fake_slurm
_spec.loader.exec_module(fake_slurm)
FakeSlurm, FakeTask = fake_slurm.FakeSlurm, fake_slurm.FakeTask

USR2, TERM = signal.SIGUSR2, signal.SIGTERM
LEAD_S = 60.0
PREEMPTED = "2026-12-03T12:30:00"  # after the run's StartTime


@pytest.fixture(autouse=True)
def signal_handlers():
    """``requeue_self`` ignores SIGTERM/USR2 from then on (Slurm signals a requeued job): given back."""
    saved = {s: signal.getsignal(s) for s in (USR2, TERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def stop_decision(signum: int, *, timeouts_so_far: int = 0, max_timeout_requeues: int = 1):
    """The driver's path from a stop signal to its decision: the inquiry asks Slurm through the real
    Host (squeue, scontrol), then the request decides."""
    inquiry = StopInquiry(Host(), save_deadline_s=300, grace_s=30).start()
    try:
        inquiry.arrived(signum, 0.0)
        request = inquiry.complete(wait_s=10)
    finally:
        inquiry.close()
    return request, request.decide(
        lead_s=LEAD_S, timeouts_so_far=timeouts_so_far, max_timeout_requeues=max_timeout_requeues, in_slurm=True
    )


@pytest.mark.parametrize(
    ("signum", "task", "hanging", "expected"),
    [
        (USR2, FakeTask(time_left_s=LEAD_S + 10), (), ("requeued", "timeout", True)),
        (USR2, FakeTask(time_left_s=LEAD_S + 10, preempt_time=PREEMPTED), (), ("requeued", "preempted", True)),
        (USR2, FakeTask(time_left_s=3000), (), ("requeued", "preempted", True)),  # scancel --signal=USR2
        (USR2, FakeTask(time_left_s=3000), ("squeue", "scontrol"), ("requeued", "timeout", True)),  # unknown
        (USR2, None, (), ("requeued", "timeout", True)),  # slurmctld no longer lists the task
        (TERM, FakeTask(time_left_s=500, restarts=1), (), ("requeued", "preempted", False)),
        (TERM, FakeTask(time_left_s=500, restarts=1, preempt_time=PREEMPTED), (), ("requeued", "preempted", False)),
        (TERM, FakeTask(time_left_s=500, preempt_time=PREEMPTED), (), ("requeued", "preempted", True)),
        (TERM, FakeTask(time_left_s=500), (), ("cancelled", "cancelled", False)),
        (TERM, FakeTask(time_left_s=0), (), ("failed", "timeout", False)),
        (TERM, FakeTask(time_left_s=500), ("scontrol",), ("requeued", "preempted", False)),
    ],
    ids=[
        "usr2-time-limit",
        "usr2-preemption",
        "usr2-scancel-signal",
        "usr2-slurm-silent",
        "usr2-task-unknown",
        "term-requeue",
        "term-preempt-requeue",
        "term-preempt-cancel-mode",
        "term-scancel",
        "term-at-limit",
        "term-scontrol-silent",
    ],
)
def test_stop_decision_through_slurms_answers(monkeypatch, signum, task, hanging, expected):
    fake = FakeSlurm({"77_1": task} if task else {}, hanging=hanging).install(monkeypatch)
    request, decision = stop_decision(signum)
    assert (decision.state, decision.ended_by, decision.requeue) == expected, decision.why
    assert fake.commands("squeue") == [["squeue", "-h", "-j", "77_1", "-o", "%L"]], "the task's own line"
    jobs = [c for c in fake.commands("scontrol") if c[:3] != ["scontrol", "show", "config"]]  # KillWait's ask
    assert jobs == [["scontrol", "show", "job", "-o", "77_1"]]
    if task is not None and not hanging:
        assert request.time_left_s == task.time_left_s


def test_time_out_requeues_are_bounded_through_slurm(monkeypatch):
    FakeSlurm({"77_1": FakeTask(time_left_s=LEAD_S)}).install(monkeypatch)
    _, decision = stop_decision(USR2, timeouts_so_far=1, max_timeout_requeues=1)
    assert (decision.state, decision.ended_by, decision.requeue) == ("failed", "timeout", False)


def test_a_restart_already_counted_by_this_run_is_not_a_requeue(monkeypatch):
    """``Restarts`` equal to this run's ``SLURM_RESTART_COUNT``: on SIGTERM Slurm is not requeueing it."""
    env = {**fake_slurm.TASK_ENV, "SLURM_RESTART_COUNT": "2"}
    FakeSlurm({"77_1": FakeTask(time_left_s=500, restarts=2)}).install(monkeypatch, env)
    _, decision = stop_decision(TERM)
    assert (decision.state, decision.ended_by) == ("cancelled", "cancelled")


def test_requeue_self_requeues_this_task_only(monkeypatch):
    fake = FakeSlurm({"77_1": FakeTask(), "77_2": FakeTask()}).install(monkeypatch)
    assert requeue.requeue_self() is True
    assert fake.commands("scontrol") == [["scontrol", "requeue", "77_1"]]
    assert (fake.tasks["77_1"].state, fake.tasks["77_1"].restarts) == ("PENDING", 1)
    assert fake.tasks["77_2"].state == "RUNNING", "a sibling task is untouched"
    assert signal.getsignal(TERM) is signal.SIG_IGN, "Slurm's SIGTERM to a requeued job is ignored"


def test_a_refused_requeue_is_reported(monkeypatch, caplog):
    FakeSlurm({}).install(monkeypatch)
    assert requeue.requeue_self() is False
    assert "Invalid job id specified" in caplog.text


def test_a_crash_retry_runs_later_elsewhere(monkeypatch):
    fake = FakeSlurm({"77_1": FakeTask()}).install(monkeypatch)
    decision = retry.Decision(True, "RuntimeError on node1", exclude=("node1",), backoff_s=120)
    retry_job.exclude_and_delay(decision, "77_1")
    assert fake.tasks["77_1"].updates == ["StartTime=now+120", "ExcNodeList=node1"]
    retry_job.exclude_and_delay(retry.Decision(False, "not retried"), "77_1")
    assert len(fake.commands("scontrol")) == 1, "no retry: nothing sent"


def test_scancel_answers(monkeypatch):
    fake = FakeSlurm({"77_1": FakeTask(), "77_2": FakeTask()}).install(monkeypatch)
    assert scancel.scancel(["77_1", "77_2"]) is None
    assert [t.state for t in fake.tasks.values()] == ["CANCELLED", "CANCELLED"]
    assert scancel.scancel([]) is None and len(fake.calls) == 1, "nothing to cancel: nothing run"
    assert scancel.scancel(["99_0"]) == "scancel: error: Kill job error on job id 99_0: Invalid job id specified"
    fake.hanging.add("scancel")
    assert scancel.scancel(["77_1"]).startswith("scancel 77_1 did not run: ")
