"""Automatic bounded retry of a crashed point, on other nodes (issue 16.3).

A *crash* is an attempt whose trainer exited non-zero by itself (no stop signal, no watchdog):
``ended_by: failed`` with the trainer's exit code; or an attempt whose Ray did not start (after
the in-job tries of :func:`grpokit.runtime.processes.ray_cluster.start_cluster`) or died under the trainer,
``ended_by: ray_failed``: a node problem (a loaded or broken node), retried elsewhere like a crash.
Time-outs, preemptions and hangs are requeued by their own rules
(:mod:`grpokit.runtime.decisions.stop_decision`, the watchdog); start-up refusals (``invalid``), sidecar
failures and early exits are not retried (a retry would meet them again). The crash's *kind* is
the class of the first error line in ``trainer.log`` (:mod:`grpokit.runtime.decisions.first_error`:
``RuntimeError: CUDA error ...`` -> ``RuntimeError``), or ``exit <code>`` when the log holds no
traceback, or ``ray_failed`` for Ray.

:func:`decide` (pure, the table below) takes the attempt's crash and the point's earlier attempts
since its last explicit resubmission, each with the ``crash`` kind and the ``nodes`` it ran on
(kept in ``status.json``'s attempts):

=====================================================  =========================================
situation                                               decision
=====================================================  =========================================
not under Slurm                                         no retry (run the same command again)
``runtime.max_retries`` is 0                            no retry
a settings error (:func:`is_settings_error`)            no retry, no node excluded: "a settings
                                                        error is the same on every node"
an earlier crash of the same kind on other nodes        no retry: "same crash twice on A, B (kind)"
``runtime.max_retries`` crashes already retried         no retry: the budget is spent
otherwise                                               retry after ``retry_backoff_s x 2^k``
                                                        (k = retries so far), excluding the nodes
                                                        of every crash since the resubmission
=====================================================  =========================================

A *settings error* is a crash no other node would avoid: a missing package or module
(``ModuleNotFoundError``, ``ImportError``), a tracker's refusal (W&B's ``UsageError``, ``AuthenticationError``),
a config error of OmegaConf or Hydra (``ConfigAttributeError``, ``ValidationError``, ...), at any step; and
the errors a program raises on its own settings (``ValueError``, ``AssertionError``, ``TypeError``,
``KeyError``, ``AttributeError``, ``NotImplementedError``) before the attempt logged its first step.
Hardware, driver, NCCL and network errors (``RuntimeError``, ``OutOfMemoryError``, ``OSError``, an exit
code without a traceback, Ray) keep the retry and the node exclusion.

A crash of the same kind on the same nodes (the exclusion could not apply) counts against the
budget only. The exclusion is dropped when it would leave the partition fewer nodes than the job
needs (the job would never start), and the decision says so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpokit.run_folder.status_record import Attempt

#: ``ended_by`` of an attempt whose trainer crashed (exited non-zero by itself).
CRASH = "failed"
#: ``ended_by`` of an attempt whose Ray did not start or died: retried as a crash of this kind.
RAY_FAILED = "ray_failed"
#: ``ended_by`` values that are crashes (:func:`decide`'s ``earlier`` attempts count them).
RETRIED = (CRASH, RAY_FAILED)

#: Crash kinds that no other node avoids, at any step (see the module docstring).
SETTINGS_KINDS = frozenset(
    {
        "ModuleNotFoundError",
        "ImportError",
        "SyntaxError",
        "UsageError",  # wandb.errors.UsageError: no API key and not offline, a bad project name
        "AuthenticationError",  # wandb.errors.AuthenticationError: a wrong key
        "ConfigAttributeError",
        "ConfigKeyError",
        "ConfigTypeError",
        "ValidationError",
        "MissingMandatoryValue",
        "InterpolationResolutionError",
        "ConfigCompositionException",
        "HydraException",
        "InstantiationException",
    }
)
#: Crash kinds that are settings errors when raised before the attempt's first step.
SETTINGS_KINDS_AT_START = frozenset(
    {"ValueError", "AssertionError", "TypeError", "KeyError", "AttributeError", "NotImplementedError"}
)

_CLASS = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::|$)")


@dataclasses.dataclass(frozen=True)
class Decision:
    """What happens after a crash.

    Attributes:
        retry: requeue the point (``scontrol requeue``, then its ``ExcNodeList`` and start time).
        exclude: Slurm node names the retry must not run on (``ExcNodeList=``).
        backoff_s: seconds before the retry may start (Slurm's ``StartTime=now+<s>``).
        why: one line for the attempt's reason and the driver's log.
    """

    retry: bool
    why: str
    exclude: tuple[str, ...] = ()
    backoff_s: float = 0.0


def crash_kind(first_error_line: str | None, exit_code: int | None) -> str:
    """The kind of a crash: the exception class of ``first_error_line`` (its last dotted part,
    e.g. ``torch.OutOfMemoryError: ...`` -> ``OutOfMemoryError``), else ``exit <code>``."""
    match = _CLASS.match((first_error_line or "").strip())
    if match:
        return match.group(1).rsplit(".", 1)[-1]
    return f"exit {exit_code}"


def is_settings_error(kind: str, *, before_first_step: bool) -> bool:
    """Whether a crash of ``kind`` (:func:`crash_kind`) would meet every node alike (module docstring)."""
    return kind in SETTINGS_KINDS or (before_first_step and kind in SETTINGS_KINDS_AT_START)


def decide(
    *,
    kind: str,
    nodes: list[str],
    earlier: Sequence[Attempt],
    max_retries: int,
    backoff_s: float,
    in_slurm: bool,
    partition_nodes: int | None = None,
    pinned: str | None = None,
    before_first_step: bool = False,
) -> Decision:
    """Retry or not, after a crash of ``kind`` on ``nodes`` (see the module's table).

    Args:
        kind: :func:`crash_kind` of this attempt.
        nodes: the Slurm nodes this attempt ran on.
        earlier: the point's earlier attempts since its last resubmission (``status.json``'s
            :class:`~grpokit.run_folder.status_record.Attempt` records: ``ended_by``, ``crash``, ``nodes``).
        max_retries: ``runtime.max_retries`` (retries per point since its last resubmission).
        backoff_s: ``runtime.retry_backoff_s``, doubled for each retry already made.
        in_slurm: whether the attempt ran as a Slurm job (only Slurm requeues it).
        partition_nodes: nodes of the job's partition (None: unknown, exclusion always applied).
        pinned: the job's own ``--nodelist`` (``cluster.additional_parameters.nodelist``), None when
            it names none: then no node is excluded (Slurm holds a job whose ``ExcNodeList``
            overlaps its ``ReqNodeList`` pending for ever, ``BadConstraints``).
        before_first_step: the attempt logged no training step (its errors at start-up are settings).
    """
    if not in_slurm:
        return Decision(False, "not retried outside Slurm: run the same command again to resume")
    if max_retries <= 0:
        return Decision(False, "not retried (runtime.max_retries=0)")
    if is_settings_error(kind, before_first_step=before_first_step):
        when = " at start-up" if before_first_step and kind in SETTINGS_KINDS_AT_START else ""
        why = f"not retried: a settings error{when} ({kind}) is the same on every node, no node excluded"
        return Decision(False, why)
    crashes = [a for a in earlier if a.ended_by in RETRIED and a.crash]
    for before in crashes:
        if before.crash == kind and set(before.nodes or []) != set(nodes):
            where = ", ".join([*(before.nodes or ["?"]), *nodes])
            return Decision(False, f"same crash twice on {where} ({kind}): not retried")
    used = len(crashes)
    if used >= max_retries:
        return Decision(False, f"not retried: runtime.max_retries={max_retries} spent ({used} retried crash(es))")
    exclude = sorted({n for a in crashes for n in (a.nodes or [])} | set(nodes))
    note = f"excluding {', '.join(exclude)}"
    if pinned:
        exclude, note = [], f"no node excluded (the point asks for nodelist={pinned})"
    elif partition_nodes is not None and partition_nodes - len(exclude) < max(len(nodes), 1):
        exclude, note = [], f"no node excluded (the partition has {partition_nodes} node(s))"
    wait = float(backoff_s) * 2**used
    why = f"retry {used + 1} of runtime.max_retries={max_retries} in {wait:g} s, {note}"
    return Decision(True, why, tuple(exclude), wait)
