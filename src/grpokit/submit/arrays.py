"""Submit a sweep's points as Slurm job arrays: one per distinct request, none above ``MaxArraySize``.

Points whose ``cluster`` sections differ (``cluster.mem_gb=4,8`` swept) cannot share an array (one
array is one ``#SBATCH`` request), and Slurm refuses an array with more tasks than its
``MaxArraySize``: such a sweep goes out as several arrays. ``cluster.array_parallelism`` is the
number of a sweep's tasks running at once, so the arrays of one request share it (each gets
``max(1, array_parallelism // arrays)``). A submission Slurm refuses is one line
(:class:`SubmissionError`) with what Slurm said, and arrays already queued by the same command are
cancelled: a sweep is submitted whole or not at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import shutil
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.config.schema import ClusterConf
from grpokit.run_folder.layout import CHAIN, MANIFEST, POINT, SUBMISSIONS, SUBMITIT_DIR
from grpokit.run_folder.manifest import read_manifest, slurm_ids
from grpokit.slurm import log_lines, sbatch
from grpokit.slurm.cluster import array_chunks, max_array_size
from grpokit.slurm.executor import make_executor
from grpokit.slurm.scancel import scancel
from grpokit.submit import snapshot
from grpokit.submit.point_job import RunPointTask

log = logging.getLogger(__name__)


class SubmissionError(RuntimeError):
    """Slurm refused a submission; ``str()`` is one line: what Slurm said and what to change.

    Attributes:
        cancelled: Slurm ids of arrays this submission had queued and then cancelled.
        job_ids: per point (in the order submitted), its cancelled task's id, or None.
    """

    def __init__(self, message: str, cancelled: list[str] | None = None, job_ids: list[str | None] | None = None):
        super().__init__(message)
        self.cancelled = cancelled or []
        self.job_ids = job_ids or []


def plan_arrays(specs: list[PointSpec], max_size: int) -> list[list[int]]:
    """Positions in ``specs`` per array: grouped by identical ``cluster`` sections, then chunked."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(json.dumps(dataclasses.asdict(spec.cluster), sort_keys=True, default=str), []).append(i)
    arrays = []
    for members in groups.values():
        arrays += [[members[j] for j in chunk] for chunk in array_chunks(len(members), max_size)]
    return arrays


def array_requests(specs: list[PointSpec], max_size: int) -> list[tuple[list[int], ClusterConf]]:
    """Each array: its points' positions in ``specs`` and its ``cluster`` section, whose
    ``array_parallelism`` is its share of the request's (``max(1, array_parallelism // arrays)``)."""
    arrays = plan_arrays(specs, max_size)

    def request(members: list[int]) -> str:
        return json.dumps(dataclasses.asdict(specs[members[0]].cluster), sort_keys=True, default=str)

    counts: dict[str, int] = {}
    for members in arrays:
        counts[request(members)] = counts.get(request(members), 0) + 1
    out = []
    for members in arrays:
        cluster = specs[members[0]].cluster
        share = int(cluster.array_parallelism) // counts[request(members)]
        out.append((members, dataclasses.replace(cluster, array_parallelism=max(1, share))))
    return out


def _fix_for(said: str) -> str:
    low = said.lower()
    if "partition" in low:
        return "set cluster.partition to one sinfo lists"
    if "memory" in low:
        return "lower cluster.mem_gb (scontrol show node: RealMemory)"
    if "time limit" in low:
        return "lower cluster.timeout_min (scontrol show partition: MaxTime)"
    if "array" in low:
        return "submit fewer points at once (scontrol show config: MaxArraySize)"
    if "node configuration" in low:
        return "lower cluster.gpus_per_node, cpus_per_task, mem_gb or nodes (scontrol show node)"
    if "account" in low or "qos" in low:
        return "set cluster.account / cluster.qos to ones you may use (sacctmgr show assoc user=$USER)"
    return "change the cluster.* setting Slurm names"


def slurm_said(exc: BaseException, captured: str = "") -> str:
    """Slurm's own words from a failed sbatch (submitit's ``FailedJobError`` holds sbatch's stderr)."""
    text = "\n".join(s for s in (str(exc), captured) if s)
    errors = log_lines.sbatch_errors(text)
    if errors:
        return errors[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def submit_arrays(folder: Path, specs: list[PointSpec], *, name: str, max_size: int | None = None) -> list[str]:
    """Submit every point; returns each point's Slurm id (``ARRAY_TASK``), in ``specs`` order.

    Raises:
        SubmissionError: sbatch (or submitit) failed; arrays this call had queued are cancelled.
    """
    max_size = max_size or max_array_size()
    ids: list[str | None] = [None] * len(specs)
    queued: list[str] = []
    arrays = array_requests(specs, max_size)
    for members, cluster in arrays:
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):  # submitit prints sbatch's stderr itself
                executor = make_executor(folder, cluster, name=name, num_points=len(members))
                snapshot.use(executor, folder.parent)  # the sweep's frozen code, when it has one
                jobs = executor.map_array(RunPointTask(), [specs[i].to_json() for i in members])
        except Exception as exc:  # submitit raises FailedJobError, OSError (no sbatch), ...
            said = slurm_said(exc, captured.getvalue())
            scancel(queued)
            undone = f"; cancelled array(s) {', '.join(queued)} it had queued" if queued else ""
            raise SubmissionError(
                f"Slurm refused the submission: {said}; fix: {_fix_for(said)}{undone}", cancelled=queued, job_ids=ids
            ) from None
        array_id = str(jobs[0].job_id).split("_")[0]
        queued.append(array_id)
        for i, job in zip(members, jobs, strict=True):
            ids[i] = str(job.job_id)
    if len(arrays) > 1:
        log.info("submitted as %d arrays (MaxArraySize %d): %s", len(arrays), max_size, ", ".join(queued))
    return [str(i) for i in ids]


def _only_this_submissions_files(sweep_dir: Path, specs: list[PointSpec]) -> bool:
    """The folder holds nothing but what the sweep command wrote for this submission."""
    runs = {Path(s.run_dir).name for s in specs}
    for entry in sweep_dir.iterdir():
        if entry.name in (MANIFEST, SUBMISSIONS, SUBMITIT_DIR, CHAIN):
            continue
        if entry.name not in runs or not entry.is_dir() or {p.name for p in entry.iterdir()} - {POINT}:
            return False
    return True


def after_refusal(sweep_dir: Path, specs: list[PointSpec], exc: SubmissionError) -> str:
    """Leave the sweep folder consistent after a refused submission; returns what was done (a phrase).

    - a resubmission into an existing sweep: its manifest still names the jobs it had (unchanged);
    - a new sweep with tasks that were queued and then cancelled: the manifest records those ids
      (status.py shows them cancelled) and the other points as not submitted;
    - a new sweep with nothing queued: the folder is removed, as for a sweep refused by validation
      (only when it holds nothing but this command's own files: manifest, point.json, submitit/).
    """
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / MANIFEST
    if not path.exists():
        return "nothing was submitted"
    manifest = read_manifest(sweep_dir)
    if any(p.job_id for p in manifest.points):
        return f"nothing was submitted; {path} is unchanged"
    if any(exc.job_ids):
        by_index = {s.index: j for s, j in zip(specs, exc.job_ids, strict=False)}
        for entry in manifest.points:
            if by_index.get(entry.index):
                for key, value in slurm_ids(by_index[entry.index]).items():
                    setattr(entry, key, value)
        manifest.submission_refused = str(exc)
        manifest.write(sweep_dir)
        return f"{path} records the cancelled tasks"
    if _only_this_submissions_files(sweep_dir, specs):
        shutil.rmtree(sweep_dir, ignore_errors=True)
        return f"nothing was submitted and no sweep folder was left ({sweep_dir} removed)"
    return f"nothing was submitted; {sweep_dir} keeps the files it had"


def dry_run_section(specs: list[PointSpec], max_size: int | None = None) -> list[str]:
    """``dry_run.md`` lines: each array the sweep would be submitted as, with its ``#SBATCH`` request."""
    if not specs or specs[0].cluster.kind != "slurm":
        return []
    max_size = max_size or max_array_size()
    arrays = array_requests(specs, max_size)
    head = "## Slurm request (one array)" if len(arrays) == 1 else f"## Slurm request ({len(arrays)} arrays)"
    lines = [head]
    if len(arrays) > 1:
        lines.append(
            f"{len(specs)} points in {len(arrays)} arrays (Slurm's MaxArraySize is {max_size}; points whose "
            "cluster settings differ cannot share one); cluster.array_parallelism is shared between them."
        )
    for members, cluster in arrays:
        first, last = specs[members[0]].name, specs[members[-1]].name
        if len(arrays) > 1:
            lines.append(f"### points {first} .. {last} ({len(members)})" if len(members) > 1 else f"### point {first}")
        folder = Path(specs[0].run_dir).parent / "submitit"  # where submit_arrays is given it (submit_slurm)
        preview = sbatch.preview(cluster, name=specs[0].sweep_name, num_points=len(members), folder=folder)
        lines += ["```", preview, "```", ""]
    return lines
