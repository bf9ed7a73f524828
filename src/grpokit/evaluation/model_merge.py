"""Merge a run's FSDP checkpoint into a Hugging Face model folder with verl's model merger.

verl 0.9.1 CLI (``verl/model_merger/base_model_merger.py::parse_args``)::

    python -m verl.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <out>
"""

from __future__ import annotations

import dataclasses
import logging
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
        CheckpointError: see :func:`choose_checkpoint`.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run folder (logs/<sweep>/<NNN>_<slug>)")
    if (run_dir / MANIFEST).is_file():
        raise SweepFolderGiven(sweep_folder_line(run_dir))
    ckpt = choose_checkpoint(run_dir, step)
    target = run_dir / HF_DIR
    holds = target.is_dir() and any(target.iterdir())
    return MergePlan(ckpt, target, merge_command(ckpt, target, python), holds)


def merge_run(run_dir: Path, step: int | None = None, overwrite: bool = False, dry_run: bool = False) -> list[str]:
    """Merge the chosen checkpoint of run_dir into ``<run_dir>/hf``; returns the argv run.

    dry_run: run nothing and refuse nothing that only the merge itself would refuse (``hf/`` holding a
    model); :meth:`MergePlan.describe` says what the real merge would do.

    Raises FileNotFoundError, SweepFolderGiven and CheckpointError (see :func:`plan_merge`),
    FileExistsError when ``hf/`` already holds files and overwrite is False, and
    subprocess.CalledProcessError (with the merger's ``stderr``) when the merger fails.
    """
    plan = plan_merge(run_dir, step)
    if dry_run:
        return plan.argv
    if plan.target_holds_model and not overwrite:
        raise FileExistsError(f"{plan.target} already holds a merged model; pass --overwrite to replace it")
    argv = plan.argv
    log.info("merging step %d of %s: %s", plan.checkpoint.step, run_dir, " ".join(argv))
    # stderr passed through and kept: a failure's last line (the merger's exception) is its reason
    done = subprocess.run(argv, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, stderr=done.stderr)
    return argv
