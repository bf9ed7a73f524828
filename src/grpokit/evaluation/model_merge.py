"""Merge a run's FSDP checkpoint into a Hugging Face model folder with verl's model merger.

verl 0.9.1 CLI (``verl/model_merger/base_model_merger.py::parse_args``)::

    python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <out>
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from grpokit.paths import kit_command
from grpokit.run_folder.layout import CHECKPOINTS, HF_DIR
from grpokit.run_folder.manifest import MANIFEST, read_manifest
from grpokit.run_folder.status_record import read_status
from grpokit.runtime.decisions.checkpoints import CheckpointInfo, inspect_checkpoint, list_checkpoints

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """No usable checkpoint: the message lists what is missing and how to proceed."""


class SweepFolderGiven(ValueError):
    """A sweep folder (it holds ``manifest.json``) was given where a point's run folder is needed;
    ``str()`` is one line naming a point folder to pass instead."""


def _sweep_points(sweep_dir: Path) -> list[Path]:
    """The run folders of the sweep in ``sweep_dir``, in index order (from ``manifest.json``; its
    sub-folders when the manifest cannot be read)."""
    try:
        points = read_manifest(sweep_dir).points
    except ValueError:  # ManifestError: a damaged manifest; the folders still tell
        return sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name[:3].isdigit())
    return [sweep_dir / p.run_dir if not Path(p.run_dir).is_absolute() else Path(p.run_dir) for p in points]


def sweep_folder_line(sweep_dir: Path) -> str:
    """The one line for ``grpokit merge <sweep folder>``: pass a point folder, the first with a complete
    checkpoint named (else the first point), and how many points the sweep has."""
    points = _sweep_points(sweep_dir)
    if not points:
        return f"{sweep_dir} is a sweep folder ({MANIFEST}) with no points: pass a point's run folder"
    merged = [p for p in points if any(i.complete for i in list_checkpoints(p / CHECKPOINTS))]
    example, which = (merged[0], "the first with a complete checkpoint") if merged else (points[0], "its first")
    return (
        f"{sweep_dir} is a sweep folder ({MANIFEST}), not a point's run folder: pass one of its "
        f"{len(points)} point folders, e.g. {which}: {kit_command('merge', str(example))}"
    )


def _why_no_checkpoint(run_dir: Path) -> str:
    """Why a run folder holds no checkpoint, from its ``status.json``: it never trained, has not
    trained a step yet, or (it trained) saving was off."""
    try:
        status = read_status(run_dir, pending_if_missing=False)
    except ValueError:  # a damaged status.json: nothing known
        status = None
    state = status.state if status is not None else None
    if state == "skipped_no_gpu":
        return (
            "the point never trained (skipped_no_gpu: its node had no GPU; every stage but training ran). "
            f"Resubmit it to a GPU partition: {kit_command('resubmit', str(run_dir.parent))}"
        )
    if status is not None and not status.last_step:
        return f"the point has not trained a step yet (state {state}; see {kit_command('logs', str(run_dir))})"
    return "the run saves only with trainer.save_freq > 0 (and at its last step)"


def choose_checkpoint(run_dir: Path, step: int | None = None) -> CheckpointInfo:
    """The checkpoint to merge: ``global_step_<step>`` when given, else the latest complete one.

    Raises CheckpointError when the run has no checkpoints, the step does not exist, or the chosen
    checkpoint is incomplete (its problems are listed).
    """
    ckpt_dir = run_dir / CHECKPOINTS
    infos = list_checkpoints(ckpt_dir)
    if not infos:
        raise CheckpointError(f"no checkpoints under {ckpt_dir}: {_why_no_checkpoint(run_dir)}")
    if step is not None:
        chosen = next((i for i in infos if i.step == step), None)
        if chosen is None:
            raise CheckpointError(f"{ckpt_dir}: no global_step_{step}; steps present: {[i.step for i in infos]}")
        chosen = inspect_checkpoint(chosen.path, chosen.tracked) if chosen.path.exists() else chosen
        if not chosen.complete:
            raise CheckpointError(
                f"{chosen.path} is incomplete: "
                + "; ".join(chosen.problems)
                + f". Complete steps: {[i.step for i in infos if i.complete] or 'none'}"
            )
        return chosen
    complete = [i for i in infos if i.complete]
    if not complete:
        details = " | ".join(f"step {i.step}: " + "; ".join(i.problems) for i in infos)
        raise CheckpointError(f"no complete checkpoint under {ckpt_dir}: {details}")
    return complete[-1]


def merge_command(ckpt: CheckpointInfo, target_dir: Path, python: str | None = None) -> list[str]:
    """argv of verl's merger for one checkpoint (FSDP backend) writing into target_dir."""
    return [
        python or sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(ckpt.actor_dir),
        "--target_dir",
        str(target_dir),
    ]


#: The merger's whole output (stdout and stderr) for the latest merge of a run, beside ``hf/``.
MERGE_LOG = "merge.log"
#: What the rehearsal trainer writes into ``actor/`` (grpokit.rehearsal.rehearsal_trainer.REHEARSAL_MARK).
REHEARSAL_MARK = "rehearsal.json"


class MergeError(subprocess.CalledProcessError):
    """verl's model merger exited non-zero; ``str()`` is one line (:func:`merge_failure_line`)."""

    def __init__(self, returncode: int, cmd: list[str], stderr: str, checkpoint: Path, log_path: Path) -> None:
        super().__init__(returncode, cmd, stderr=stderr)
        self.checkpoint, self.log_path = checkpoint, log_path

    def __str__(self) -> str:
        return merge_failure_line(self.checkpoint, self.returncode, self.stderr or "", self.log_path)


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a traceback's exception), stripped; "" when none."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def merge_failure_line(checkpoint: Path, returncode: int, output: str, log_path: Path | None) -> str:
    """One line for a failed merge: the checkpoint, the merger's exit status, its last output line
    (the exception) and where its whole output is, e.g. ``merging .../global_step_2/actor failed:
    verl's model merger exited 1: AttributeError: ... (whole output: <run>/merge.log)``."""
    said = last_line(output)
    where = f" (whole output: {log_path})" if log_path else ""
    what = f"merging {checkpoint} failed: verl's model merger exited {returncode}"
    return what + (f": {said}" if said else "") + where


def rehearsal_refusal(actor_dir: Path) -> str | None:
    """Why a rehearsal checkpoint cannot be merged, or None (not a rehearsal's, or it holds real weights).

    The rehearsal trainer (``rehearse=true``) writes ``actor/rehearsal.json``; its shards hold the
    model's weights only when the sweep chained ``merge`` (``FAKE_TRAINER_REAL_WEIGHTS=1``).
    """
    mark = Path(actor_dir) / REHEARSAL_MARK
    try:
        data = json.loads(mark.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("real_weights"):
        return None
    return (
        f"{actor_dir} is a rehearsal checkpoint without weights (rehearse=true saves the model's weights only "
        "when the sweep has after=[merge,...]); there is nothing to merge: rehearse with after=[merge,eval]"
    )


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """What ``grpokit merge`` would do. checkpoint: the chosen one; target: ``<run>/hf``; argv: verl's
    merger command; target_holds_model: ``hf/`` exists and is not empty (a real merge then needs
    ``--overwrite``, and the merger writes its files over the ones there)."""

    checkpoint: CheckpointInfo
    target: Path
    argv: list[str]
    target_holds_model: bool

    def describe(self, overwrite: bool) -> str:
        """One line: what the real merge would do with ``overwrite`` (the dry run prints it)."""
        step = f"step {self.checkpoint.step} ({self.checkpoint.path})"
        if not self.target_holds_model:
            return f"would merge {step} into {self.target} (new)"
        if overwrite:
            return f"{self.target} already holds a merged model: --overwrite would write {step} over it"
        return (
            f"{self.target} already holds a merged model: it would be kept and nothing merged "
            f"(the merge stops, exit 2); add --overwrite to write {step} over it"
        )


def plan_merge(run_dir: Path, step: int | None = None, python: str | None = None) -> MergePlan:
    """The merge of ``run_dir``'s checkpoint (``step``, else the latest complete) into ``<run_dir>/hf``.

    Raises:
        FileNotFoundError: ``run_dir`` is not a folder.
        SweepFolderGiven: ``run_dir`` is a sweep folder (the line names a point folder to pass).
        CheckpointError: see :func:`choose_checkpoint`; also a rehearsal checkpoint without weights.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run folder (logs/<sweep>/<NNN>_<slug>)")
    if (run_dir / MANIFEST).is_file():
        raise SweepFolderGiven(sweep_folder_line(run_dir))
    ckpt = choose_checkpoint(run_dir, step)
    refusal = rehearsal_refusal(ckpt.actor_dir)
    if refusal:
        raise CheckpointError(refusal)
    target = run_dir / HF_DIR
    holds = target.is_dir() and any(target.iterdir())
    return MergePlan(ckpt, target, merge_command(ckpt, target, python), holds)


def merge_run(run_dir: Path, step: int | None = None, overwrite: bool = False, dry_run: bool = False) -> list[str]:
    """Merge the chosen checkpoint of run_dir into ``<run_dir>/hf``; returns the argv run.

    The merger's whole output goes to ``<run_dir>/merge.log``; after a failure no empty or partial
    ``hf/`` is left (one that held a model before, with ``overwrite``, is kept as the merger left it).
    dry_run: run nothing and refuse nothing that only the merge itself would refuse (``hf/`` holding a
    model); :meth:`MergePlan.describe` says what the real merge would do.

    Raises FileNotFoundError, SweepFolderGiven and CheckpointError (see :func:`plan_merge`),
    FileExistsError when ``hf/`` already holds files and overwrite is False, and
    :class:`MergeError` (a CalledProcessError whose ``str()`` is one line: checkpoint, exit status,
    the merger's last line, the log) when the merger fails.
    """
    plan = plan_merge(run_dir, step)
    if dry_run:
        return plan.argv
    if plan.target_holds_model and not overwrite:
        raise FileExistsError(f"{plan.target} already holds a merged model; pass --overwrite to replace it")
    argv = plan.argv
    log.info("merging step %d of %s: %s", plan.checkpoint.step, run_dir, " ".join(argv))
    log_path = Path(run_dir) / MERGE_LOG
    with open(log_path, "w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        if not plan.target_holds_model:  # what is there now is this merge's own, empty or partial
            shutil.rmtree(plan.target, ignore_errors=True)
        raise MergeError(
            done.returncode, argv, log_path.read_text(errors="replace"), plan.checkpoint.actor_dir, log_path
        )
    return argv
