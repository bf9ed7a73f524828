"""Make a checkpoint folder safe to resume from, before the trainer starts.

verl's ``resume_mode=auto`` trusts ``latest_checkpointed_iteration.txt`` (``find_latest_ckpt_path``:
a tracker naming a folder that is not there makes verl train from step 0). A job killed during a
save can leave that tracker pointing at a partial or missing ``global_step_N``; here the newest
*complete and intact* step becomes the tracker's value (rewritten atomically): complete by
:mod:`grpokit.runtime.decisions.checkpoints` (every file present, with its size recorded at save time or an
intact header), intact by the CRC-32s torch.save recorded in every ``*.pt`` (:func:`check_crcs`: read
once, for the step about to be resumed only; a step whose check fails is set aside and the next older
complete one checked). Partial or damaged folders are moved aside (kept, renamed
``*.incomplete-<time>``) so verl never loads them; a tracker naming a folder that is not there (set
aside or removed earlier) is only rewritten. Old complete steps beyond ``max_actor_ckpt_to_keep`` are
pruned across attempts (verl prunes only what the current process saved, verl#7395). The only
complete checkpoint is never deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from grpokit.run_folder import now
from grpokit.runtime.decisions.checkpoints import (
    TRACKER_FILE,
    CheckpointInfo,
    check_crcs,
    latest_complete,
    list_checkpoints,
    read_tracker,
)

log = logging.getLogger(__name__)


def _write_tracker(ckpt_dir: Path, step: int) -> None:
    tmp = ckpt_dir / f".{TRACKER_FILE}.tmp"
    tmp.write_text(str(step))
    os.replace(tmp, ckpt_dir / TRACKER_FILE)


class ResumeRefused(ValueError):
    """The checkpoint folder cannot be resumed by this point as it is configured (message: why, and the fix)."""


def check_world_size(ckpt_dir: Path, nnodes: int, gpus_per_node: int) -> int | None:
    """Refuse to resume a checkpoint saved by another number of GPU ranks; returns the resume step.

    verl's FSDP checkpoint has one shard per rank (``model_world_size_<W>_rank_<r>.pt``) and each
    rank loads the file of its own rank at the current world size: with another GPU count the
    trainer dies on a missing file, or would resume a mismatched shard layout.

    Args:
        ckpt_dir: verl's ``trainer.default_local_dir``.
        nnodes, gpus_per_node: ``trainer.nnodes`` and ``trainer.n_gpus_per_node`` of the point.

    Returns:
        The step that will be resumed (None when there is no complete checkpoint).

    Raises:
        ResumeRefused: the newest complete checkpoint's world size differs from nnodes x gpus_per_node.
    """
    best = latest_complete(ckpt_dir)
    if best is None:
        return None
    world = nnodes * gpus_per_node
    if best.world_size is None or best.world_size == world:
        return best.step
    raise ResumeRefused(
        f"checkpoint {best.path} was saved by {best.world_size} GPU ranks "
        f"(model_world_size_{best.world_size}_rank_*.pt) but this attempt trains on {world} "
        f"(trainer.nnodes={nnodes} x trainer.n_gpus_per_node={gpus_per_node}); verl's FSDP checkpoints load only "
        "at the world size they were saved with. Fix: resume with the same GPU count "
        f"({best.world_size} GPUs in all), or start a fresh point (another sweep_name), e.g. from the merged model "
        f"of this step (launch/merge.py <run folder>, then model.path=<run folder>/hf). {ckpt_dir} was left as it was."
    )


def _intact(info: CheckpointInfo) -> list[str]:
    """The CRC-32 check of a complete step, logged with its cost; the problems found (empty: intact)."""
    crc = check_crcs(info.path)
    gb = crc.bytes / 1e9
    log.info(
        "checked the CRC-32s of %s: %d files, %.2f GB in %.2f s (%.2f GB/s)%s",
        info.path.name,
        crc.files,
        gb,
        crc.seconds,
        gb / crc.seconds if crc.seconds > 0 else 0.0,
        f": {len(crc.problems)} damaged" if crc.problems else "",
    )
    return crc.problems


def _set_aside(info: CheckpointInfo, problems: list[str], stamp: str, report: dict) -> None:
    """Rename ``info.path`` to ``<name>.incomplete-<stamp>`` (kept, never loaded) and note why.

    A step that is not there (the tracker names a folder set aside or removed earlier, or it went
    meanwhile) has nothing to move: it is only noted, so the tracker gets rewritten.
    """
    target = info.path.with_name(f"{info.path.name}.incomplete-{stamp}")
    try:
        info.path.rename(target)
    except FileNotFoundError:
        why = problems[0] if not info.path.exists() and problems else f"{info.path} does not exist"
        log.warning("checkpoint %s is not there (%s): nothing to set aside", info.path, why)
        line = why
    else:
        log.warning(
            "checkpoint %s is incomplete or damaged (%s): moved to %s", info.path, "; ".join(problems), target.name
        )
        report["set_aside"].append(str(target))
        line = f"checkpoint {info.path.name} set aside as {target.name}: {problems[0]}"
    report["skipped"] += 1
    if not report["note"]:  # the first one's first problem: what a reader acts on
        report["note"] = line


def prepare_resume(ckpt_dir: Path, keep: int | None = None) -> dict:
    """Choose the step to resume, set newer partial or damaged ones aside, fix the tracker, prune; say what was done.

    From the newest step down: a step that is not complete (:func:`list_checkpoints`), or whose ``*.pt``
    files fail their CRC-32 check (:func:`check_crcs`, which reads them: only the chosen step and any
    damaged newer ones are read), is set aside; the first complete and intact one is resumed.

    Args:
        ckpt_dir: verl's ``trainer.default_local_dir``.
        keep: ``trainer.max_actor_ckpt_to_keep`` (None or <= 0: keep all).

    Returns:
        ``{"resume_step": int | None, "tracker_was": int | None, "set_aside": [paths moved], "pruned":
        [steps], "note": str, "skipped": int}``; note: one line saying what was set aside (or which
        step named by the tracker is not there) and why, and the step resumed (empty when nothing was
        skipped), for ``status.json``; skipped: steps newer than the one resumed.

    Raises:
        OSError: a folder could not be renamed or pruned (other than one that is not there).
    """
    ckpt_dir = Path(ckpt_dir)
    report = {"resume_step": None, "tracker_was": None, "set_aside": [], "pruned": [], "note": "", "skipped": 0}
    if not ckpt_dir.is_dir():
        return report
    report["tracker_was"] = read_tracker(ckpt_dir)
    stamp = now().replace(":", "")
    best = None
    for info in reversed(list_checkpoints(ckpt_dir)):
        problems = _intact(info) if info.complete else info.problems
        if not problems:
            best = info
            break
        _set_aside(info, problems, stamp, report)
    if report["note"]:
        also = f" (and {report['skipped'] - 1} more)" if report["skipped"] > 1 else ""
        then = f"resuming from {best.path.name}" if best else "no complete checkpoint: training from scratch"
        report["note"] += f"{also}; {then}"
    if best is None:
        if (ckpt_dir / TRACKER_FILE).exists():
            log.warning(
                "no complete checkpoint in %s: removing the tracker (was %s), training from scratch",
                ckpt_dir,
                report["tracker_was"],
            )
            (ckpt_dir / TRACKER_FILE).unlink()
        return report
    if report["tracker_was"] != best.step:
        log.warning(
            "tracker said %s; resuming from step %d, the newest complete and intact checkpoint",
            report["tracker_was"],
            best.step,
        )
        _write_tracker(ckpt_dir, best.step)
    report["resume_step"] = best.step
    if keep and keep > 0:
        complete = sorted((i for i in list_checkpoints(ckpt_dir) if i.complete), key=lambda i: i.step)
        for info in complete[:-keep]:
            if info.step == best.step:
                continue
            shutil.rmtree(info.path)
            report["pruned"].append(info.step)
        if report["pruned"]:
            log.info("pruned checkpoints %s (max_actor_ckpt_to_keep=%d)", report["pruned"], keep)
    return report
