"""The chained job of each point (``after=[merge,eval]``) as report columns, from the files and Slurm.

Sources: ``<sweep>/chain.json`` (the chained job's id per point, :mod:`grpokit.submit.chain`),
``<run>/chain_status.json`` (what the job itself recorded, :mod:`grpokit.evaluation.chained_job`) and
Slurm's view of the job. Columns: ``chain`` (``queued``, ``running``, ``completed``, ``failed``,
``skipped``, ``cancelled``, ``not_submitted``, ``unknown``), ``chain_reason``, ``base_acc``,
``trained_acc``, ``acc_delta`` (accuracy on the point's test file, from ``eval/eval_summary.json``
through chain_status.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpokit.run_folder.layout import RunFolder
from grpokit.slurm.job_states import SlurmJobState

COLUMNS = ("chain", "chain_reason", "base_acc", "trained_acc", "acc_delta")


def read_sweep_chain(sweep_dir: Path) -> dict[str, Any] | None:
    """``<sweep>/chain.json``, or None for a sweep that never chained."""
    from grpokit.run_folder.layout import SweepFolder

    path = SweepFolder(sweep_dir).chain
    return json.loads(path.read_text()) if path.exists() else None


def chain_job_ids(chain: dict[str, Any] | None) -> list[str]:
    """Every point's current chained job id (for one Slurm query with the points' ids)."""
    return [r["job_id"] for r in ((chain or {}).get("points") or {}).values() if r.get("job_id")]


def _own_status(run_dir: Path, job_id: str | None) -> dict[str, Any] | None:
    path = RunFolder(run_dir).chain_status
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    # A record of an earlier chained job (before a resubmission) says nothing about the current one.
    return data if job_id is None or str(data.get("job_id")) == str(job_id) else None


def chain_columns(
    record: dict[str, Any] | None, run_dir: Path, point_state: str, slurm: SlurmJobState | None
) -> dict[str, Any]:
    """The point's chain columns (:data:`COLUMNS`); ``record``: its entry of chain.json (None: the
    point was never chained), ``slurm``: Slurm's view of the chained job (None: Slurm has none)."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if record is None:
        return out
    job_id = record.get("job_id")
    if not job_id:
        out.update(chain="not_submitted", chain_reason=f"Slurm refused the chained job: {record.get('refused')}")
        return out
    own = _own_status(run_dir, job_id)
    word = slurm.kit_state if slurm else None
    if own is not None:
        ev = own.get("eval") or {}
        out.update(base_acc=ev.get("base"), trained_acc=ev.get("trained"), acc_delta=ev.get("delta"))
        if own.get("state") == "running" and word not in (None, "queued", "running"):
            # it recorded 'running' and never closed: killed (time limit past SIGTERM, node failure)
            out.update(chain=word, chain_reason=f"job {job_id} ended {slurm.state} while running ({own.get('reason')})")
        else:
            state = own.get("state")
            reason = own.get("reason") or (
                f"job {job_id} recorded {state} without a reason; see {RunFolder(run_dir).chain_status} and its "
                "Slurm output"
            )
            out.update(chain=state, chain_reason=reason)
        return out
    after = record.get("after")
    if word in ("queued", "running"):
        why = slurm.reason if slurm and slurm.reason and slurm.reason != "None" else f"afterok:{after}"
        out.update(chain=word, chain_reason=f"job {job_id}: {why}")
    elif point_state not in ("completed", "skipped_no_gpu", "queued", "running", "requeued", "pending"):
        out.update(
            chain="cancelled",
            chain_reason=f"never ran: point {point_state} (afterok:{after} never satisfied; Slurm cancelled job "
            f"{job_id}, --kill-on-invalid-dep)",
        )
    elif word is not None:
        out.update(chain=word, chain_reason=f"job {job_id} ended {slurm.state} without chain_status.json")
    else:
        why = f"Slurm no longer knows job {job_id} and it wrote no chain_status.json"
        out.update(chain="unknown", chain_reason=why)
    return out


#: Chain states that say something went wrong: the status table's reason column shows the chain's reason.
CHAIN_TROUBLE = ("failed", "cancelled", "not_submitted", "unknown")


def shown_reason(point_reason: str | None, point_state: str, chain: str | None, chain_reason: str | None) -> str:
    """The status table's reason for a point with a chained job: the chain's (``chain failed: merge:
    ...``) when the chain is in trouble (:data:`CHAIN_TROUBLE`) and the point itself ended well
    (completed, skipped_no_gpu), else the point's own; "" when neither has one."""
    if chain in CHAIN_TROUBLE and point_state in ("completed", "skipped_no_gpu"):
        return f"chain {chain}: {chain_reason or 'no reason recorded'}"
    return point_reason or ""
