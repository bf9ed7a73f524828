"""The outcome of an attempt (grpokit.runtime.decisions.outcome.decide): the precedence table, without a job."""

from __future__ import annotations

import pytest

from grpokit.runtime.decisions.completion import Completion
from grpokit.runtime.decisions.outcome import Exit, Happened, JobFailed, Outcome, decide
from grpokit.runtime.decisions.stop_decision import StopDecision
from grpokit.runtime.processes.ray_cluster import RayStartError
from grpokit.runtime.processes.sidecars import SidecarError

REQUEUE = StopDecision("requeued", "timeout", True, "time-limit warning")
CANCEL = StopDecision("cancelled", "cancelled", False, "scancel")
DONE = Completion("completed", "completed", "", 5)
EARLY = Completion("failed", "early_exit", "trainer exited 0 at step 3 of target_step 5", 5)
RAN = {"trainer_started": True}

CASES = [
    # (id, happened, stop) -> (state, ended_by, requeue, exit)
    (
        "named failure",
        Happened(error=JobFailed("bad point", "invalid")),
        None,
        ("failed", "invalid", False, Exit.FAILED),
    ),
    # a named failure wins over a stop signal that came meanwhile
    (
        "named failure, stop came",
        Happened(error=JobFailed("x", "invalid")),
        REQUEUE,
        ("failed", "invalid", False, Exit.FAILED),
    ),
    (
        "hang within budget",
        Happened(error=JobFailed("hung", "hung", requeue=True)),
        None,
        ("requeued", "hung", True, Exit.REQUEUED),
    ),
    (
        "sidecar start failure",
        Happened(error=SidecarError("exited")),
        None,
        ("failed", "sidecar_failed", False, Exit.FAILED),
    ),
    ("Ray start failure", Happened(error=RayStartError("exited")), None, ("failed", "ray_failed", False, Exit.FAILED)),
    # Slurm signals every process of the job: a sidecar dying then is the stop, not a failure
    (
        "sidecar dies in a stop",
        Happened(error=SidecarError("exited")),
        CANCEL,
        ("cancelled", "cancelled", False, Exit.FAILED),
    ),
    ("driver bug", Happened(error=KeyError("x")), None, ("failed", "failed", False, Exit.FAILED)),
    ("stop before the trainer", Happened(), REQUEUE, ("requeued", "timeout", True, Exit.REQUEUED)),
    ("no GPU", Happened(gpu_missing=True), None, ("skipped_no_gpu", "skipped_no_gpu", False, Exit.OK)),
    ("completed", Happened(**RAN, trainer_exit=0, completion=DONE), None, ("completed", "completed", False, Exit.OK)),
    # the trainer reached its target during the warning's lead: completed, not requeued
    (
        "completed, warning came",
        Happened(**RAN, trainer_exit=0, completion=DONE),
        REQUEUE,
        ("completed", "completed", False, Exit.OK),
    ),
    (
        "early exit",
        Happened(**RAN, trainer_exit=0, completion=EARLY),
        None,
        ("failed", "early_exit", False, Exit.FAILED),
    ),
    (
        "pruned",
        Happened(**RAN, trainer_exit=1, pruned="NaN grad norm", saved_step=2),
        None,
        ("pruned", "pruned", False, Exit.FAILED),
    ),
    (
        "saved on a stop",
        Happened(**RAN, trainer_exit=1, saved_step=2),
        REQUEUE,
        ("requeued", "timeout", True, Exit.REQUEUED),
    ),
    ("trainer crash", Happened(**RAN, trainer_exit=3), None, ("failed", "failed", False, Exit.FAILED)),
]


@pytest.mark.parametrize(("happened", "stop", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outcome_table(happened, stop, expected):
    out = decide(happened, signal_name="SIGUSR2" if stop else None, stop=stop)
    assert (out.state, out.ended_by, out.requeue, out.exit) == expected
    assert out.reason or out.state == "completed"


def test_exit_codes():
    """Requeued exits 0 like completed (Slurm must not record a requeued run as FAILED)."""
    assert [e.code for e in (Exit.OK, Exit.REQUEUED, Exit.FAILED)] == [0, 0, 1]
    assert Outcome("cancelled", "cancelled").exit is Exit.FAILED
    with pytest.raises(AttributeError):
        Outcome("failed", "failed").state = "completed"  # frozen


GONE = "run folder /logs/s/000 was deleted or moved while the point ran: the point was stopped, ..."


@pytest.mark.parametrize(
    ("happened", "stop"),
    [
        (Happened(**RAN, trainer_exit=3, run_folder_gone=GONE), None),  # its writes failed: not a crash
        (Happened(**RAN, trainer_exit=-15, run_folder_gone=GONE), None),  # the driver stopped it
        (Happened(**RAN, trainer_exit=1, saved_step=2, run_folder_gone=GONE), REQUEUE),  # a warning came too
        (Happened(error=OSError(2, "No such file or directory"), run_folder_gone=GONE), None),
        (Happened(**RAN, trainer_exit=1, disk_full="disk full writing /x", run_folder_gone=GONE), None),
        (Happened(**RAN, trainer_exit=1, node_failure="node node2 failed", run_folder_gone=GONE), None),
    ],
    ids=["trainer crashed", "stopped", "stop signal", "driver error", "disk full", "node failure"],
)
def test_a_run_folder_gone_stops_the_point_without_a_retry_or_requeue(happened, stop):
    out = decide(happened, signal_name="SIGUSR2" if stop else None, stop=stop)
    assert (out.state, out.ended_by, out.requeue, out.reason) == ("cancelled", "run_folder_gone", False, GONE)
    # grpokit.runtime.processes.retry_job retries only "failed" outcomes (crashes, Ray): none here
    assert out.state != "failed"


def test_a_run_folder_is_gone_when_its_path_holds_nothing_or_another_folder():
    from grpokit.runtime.decisions import folder_gone

    assert not folder_gone.gone((1, 10), (1, 10))
    assert folder_gone.gone((1, 10), None)  # rm -rf, or mv of it or of its sweep folder
    assert folder_gone.gone((1, 10), (1, 11))  # deleted, then recreated by a writer's mkdir -p
    assert not folder_gone.gone(None, None)  # the attempt never opened: nothing to compare
    assert folder_gone.reason("/logs/s/000").startswith("run folder /logs/s/000 was deleted or moved")
