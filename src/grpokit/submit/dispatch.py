"""Submit: the validated points handed to Slurm (one job array per request) or run here one
after another; the dry run's record of what would be submitted.

The last stage of the sweep command (grpokit.submit.stages), shared with resubmission
(grpokit.submit.resubmit_points), which sends points out the same way.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpokit.config.point import PointSpec, kit_notices
from grpokit.run_folder import RunFolder, SweepFolder
from grpokit.submit import chain
from grpokit.submit.point_job import RunPointTask
from grpokit.validate import Problem, SweepValidationError

log = logging.getLogger(__name__)


def check_picklable(specs: list[PointSpec]) -> None:
    """What submitit will pickle must pickle now, not fail after submission (hydra#3038)."""
    import cloudpickle

    problems = []
    for spec in specs:
        for what, obj in (("the task", RunPointTask()), ("the point spec", spec.to_json())):
            try:
                cloudpickle.dumps(obj)
            except Exception as exc:
                problems.append(
                    Problem(
                        spec.name,
                        what,
                        f"cannot be pickled: {type(exc).__name__}: {exc}",
                        "keep only plain values (str, numbers, lists, dicts) in the config",
                    )
                )
    if problems:
        raise SweepValidationError(problems)


def write_dry_run(
    sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any], note: str = "", rows: list | None = None
) -> Path:
    """``dry_run.md``: where each setting came from (one table for the sweep), then per point the
    verl command line and the Slurm request. ``rows``: :func:`grpokit.submit.provenance.sweep_sources`
    of ``specs`` (computed here when None)."""
    from grpokit.config.explicit import data_caps
    from grpokit.runtime.processes import trainer
    from grpokit.submit.arrays import dry_run_section
    from grpokit.submit.provenance import sweep_sources, sweep_table

    rows = sweep_sources(specs) if rows is None else rows
    lines = [f"# Dry run of sweep {specs[0].sweep_name}: {len(specs)} point(s){note}, nothing submitted", ""]
    lines += [f"Note: {notice}\n" for notice in kit_notices(specs)]  # what the kit changed on its own
    lines += sweep_table(rows)
    lines += dry_run_section(specs)  # one array per request and MaxArraySize, as submit_slurm sends them
    varying = {s.key for point in rows for s in point} - {
        s.key for s in rows[0] if all(any(t.key == s.key and t.value == s.value for t in p) for p in rows)
    }
    for spec, point in zip(specs, rows, strict=True):
        cmd = trainer.command(spec, [])
        caps = data_caps(spec)
        own = "; ".join(f"{s.key}={s.value} ({s.source})" for s in point if s.key in varying)
        lines += [f"## {spec.name}", f"run folder: {spec.run_dir}", *([caps] if caps else [])]
        lines += [*([f"this point's own: {own}"] if own else []), ""]
        lines += ["```", " \\\n  ".join(cmd), "```", ""]
    path = SweepFolder(sweep_dir).dry_run
    path.write_text("\n".join(lines))
    return path


def submit_slurm(sweep_dir: Path, specs: list[PointSpec], cluster: dict[str, Any]) -> list[str]:
    """Submit every point (one job array per request and ``MaxArraySize``); returns the Slurm ids.

    A submission Slurm refuses ends the command (exit 2) with one line saying what Slurm said and
    what to change; nothing stays queued, and the sweep folder is left as it was before the
    submission (a new one is removed, see :func:`grpokit.submit.arrays.after_refusal`).
    """
    from grpokit.submit.arrays import SubmissionError, after_refusal, submit_arrays

    try:
        ids = submit_arrays(sweep_dir / "submitit", specs, name=specs[0].sweep_name)
    except SubmissionError as exc:
        print(f"{exc}; {after_refusal(sweep_dir, specs, exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    chain.follow(sweep_dir, specs, ids)  # after=[merge,eval]: each point's chained job (grpokit.submit.chain)
    return ids


def arrays_phrase(job_ids: list[str | None]) -> str:
    """``Slurm array 120`` or ``Slurm arrays 120, 121`` (a sweep above MaxArraySize goes out as
    several); a point submitted alone (submitit submits an array of one as a plain job, id ``120``
    not ``120_0``): ``Slurm job 120``."""
    ids = [str(j) for j in job_ids if j]
    arrays = list(dict.fromkeys(j.split("_")[0] for j in ids if "_" in j))
    jobs = list(dict.fromkeys(j for j in ids if "_" not in j))
    parts = [
        f"Slurm {word}{'s' if len(found) > 1 else ''} {', '.join(found)}"
        for word, found in (("array", arrays), ("job", jobs))
        if found
    ]
    return " and ".join(parts) or "no Slurm job"


def run_local(specs: list[PointSpec]) -> list[int]:
    """Run points one after another on this machine (a workstation's GPU holds one at a time).

    Returns each point's driver exit status (:class:`grpokit.runtime.decisions.outcome.Exit`: 0 for
    completed, skipped_no_gpu, stopped with a checkpoint; 1 for failed or cancelled)."""
    codes = []
    for spec in specs:
        Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
        point_file = RunFolder(spec.run_dir).point
        point_file.write_text(spec.to_json())
        log.info("running %s locally", spec.name)
        codes.append(subprocess.call([sys.executable, "-m", "grpokit.runtime.driver", str(point_file)]))
    return codes
