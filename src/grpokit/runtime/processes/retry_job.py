"""The job's side of a crash retry: what the driver records and asks Slurm
(:mod:`grpokit.runtime.decisions.retry` decides).

The driver hands each attempt's outcome to :func:`on_outcome`; after a crash (or a Ray failure,
:mod:`grpokit.runtime.decisions.retry`) the attempt in
``status.json`` gets ``crash`` (its kind), ``nodes`` (where it ran),
``reason`` (its first line) and ``retry`` (the decision). A retried point is requeued like a
time-out (``scontrol requeue <array>_<task>``, same id and run folder); once Slurm holds it again
(the requeue leaves it ``COMPLETING``, when a pending job's fields may change) the driver sets
``ExcNodeList=<crashed nodes>`` and ``StartTime=now+<backoff>`` with ``scontrol update``.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.run_folder.layout import AttemptFolder
from grpokit.run_folder.status_file import StatusFile
from grpokit.runtime.decisions.first_error import first_error_in_file
from grpokit.runtime.decisions.outcome import Outcome
from grpokit.runtime.decisions.retry import CRASH, RAY_FAILED, Decision, crash_kind, decide
from grpokit.slurm.nodes import partition_node_count
from grpokit.slurm.requeue import delay_and_exclude
from grpokit.slurm.task import JobEnv

log = logging.getLogger(__name__)

#: ``runtime.max_retries`` and ``runtime.retry_backoff_s`` when a point's runtime section lacks them.
DEFAULT_MAX_RETRIES, DEFAULT_BACKOFF_S = 1, 60.0


def on_outcome(
    spec: PointSpec, status: StatusFile, outcome: Outcome, attempt_dir: Path | None, host
) -> tuple[Outcome, Decision | None]:
    """The attempt's outcome, turned into a retry (``requeued``, ``requeue``) when it is a crash
    that :func:`~grpokit.runtime.decisions.retry.decide` retries; ``(outcome, None)`` when it is no crash.

    A crash is recorded in the open attempt of ``status`` (``crash``, ``nodes``, ``reason``,
    ``retry``) and its reason is preceded by the decision's line. ``host``: the driver's view of
    the machine (``in_slurm()``, ``node_names()``).
    """
    if outcome.state != CRASH or attempt_dir is None:
        return outcome, None
    if outcome.ended_by == RAY_FAILED:  # Ray did not start here (tried again in the job) or died: the node
        kind = RAY_FAILED
    elif outcome.ended_by == CRASH and outcome.trainer_exit:
        kind = crash_kind(first_error_in_file(AttemptFolder(attempt_dir).trainer_log), outcome.trainer_exit)
    else:
        return outcome, None
    in_slurm = bool(host.in_slurm())
    try:
        nodes = list(host.node_names()) if in_slurm else []
    except (OSError, subprocess.CalledProcessError):
        nodes = [JobEnv.from_env().nodename or "?"]
    since = status.record.resubmission
    earlier = [a for a in status.record.attempts[:-1] if a.resubmission == since]
    runtime = spec.runtime
    decision = decide(
        kind=kind,
        nodes=nodes,
        earlier=earlier,
        max_retries=int(runtime.max_retries or 0),
        backoff_s=float(runtime.retry_backoff_s or 0),
        in_slurm=in_slurm,
        partition_nodes=partition_node_count() if in_slurm else None,
        pinned=_pinned_nodes(spec),
        before_first_step=not _logged_a_step(AttemptFolder(attempt_dir).metrics),
    )
    first_line = outcome.reason.splitlines()[0] if outcome.reason else ""
    status.update_attempt(crash=kind, nodes=nodes, reason=first_line, retry=decision.why)
    log.info("crash (%s) on %s: %s", kind, ", ".join(nodes) or "this machine", decision.why)
    reason = f"{decision.why}; {outcome.reason}"
    if decision.retry:
        return dataclasses.replace(outcome, state="requeued", reason=reason, requeue=True), decision
    return dataclasses.replace(outcome, reason=reason), decision


def _logged_a_step(metrics: Path) -> bool:
    """Whether the attempt's ``metrics.jsonl`` holds a step (a crash before it is a start-up crash)."""
    try:
        return metrics.stat().st_size > 0
    except OSError:
        return False


def _pinned_nodes(spec: PointSpec) -> str | None:
    """The point's own ``--nodelist`` (``cluster.additional_parameters.nodelist`` or ``w``), else None."""
    extra = getattr(getattr(spec, "cluster", None), "additional_parameters", None) or {}
    value = extra.get("nodelist") or extra.get("w")
    return str(value) if value else None


def exclude_and_delay(decision: Decision | None, task_id: str | None) -> None:
    """After ``scontrol requeue`` of this task: ``scontrol update JobId=<task> ExcNodeList=...
    StartTime=now+<backoff>`` (a no-op without a retry decision). A refusal is logged; the retry
    then runs at once, anywhere."""
    if decision is None or not decision.retry or not task_id:
        return
    delay_and_exclude(task_id, start_in_s=int(decision.backoff_s), exclude=decision.exclude or ())
