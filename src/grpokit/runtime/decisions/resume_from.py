"""Make a checkpoint folder safe to resume from, before the trainer starts.

verl's ``resume_mode=auto`` trusts ``latest_checkpointed_iteration.txt``. A job killed during a
save can leave that tracker pointing at a partial or missing ``global_step_N``; here the newest
*complete* step (:mod:`grpokit.runtime.decisions.checkpoints`: every file present, with its size recorded at
save time or an intact header) becomes the tracker's value, partial or damaged folders are moved
aside (kept, renamed ``*.incomplete-<time>``) so verl never loads them, and old complete steps
beyond ``max_actor_ckpt_to_keep`` are pruned across attempts (verl prunes only what the current
process saved, verl#7395). The only complete checkpoint is never deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from grpokit.run_folder import now
from grpokit.runtime.decisions.checkpoints import TRACKER_FILE, latest_complete, list_checkpoints, read_tracker

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


def prepare_resume(ckpt_dir: Path, keep: int | None = None) -> dict:
    """Repair the tracker, set partial checkpoints aside and prune; returns what was done.

    Args:
        ckpt_dir: verl's ``trainer.default_local_dir``.
        keep: ``trainer.max_actor_ckpt_to_keep`` (None or <= 0: keep all).

    Returns:
        ``{"resume_step": int | None, "tracker_was": int | None, "set_aside": [...], "pruned": [...],
        "note": str}``; note: one line saying what was set aside and why, and the step resumed
        (empty when nothing was set aside), for ``status.json``.
    """
    ckpt_dir = Path(ckpt_dir)
    report = {"resume_step": None, "tracker_was": None, "set_aside": [], "pruned": [], "note": ""}
    if not ckpt_dir.is_dir():
        return report
    report["tracker_was"] = read_tracker(ckpt_dir)
    best = latest_complete(ckpt_dir)
    for info in list_checkpoints(ckpt_dir):
        if not info.complete and (best is None or info.step > best.step):
            target = info.path.with_name(f"{info.path.name}.incomplete-{now().replace(':', '')}")
            log.warning(
                "checkpoint %s is incomplete (%s): moved to %s", info.path, "; ".join(info.problems), target.name
            )
            info.path.rename(target)
            report["set_aside"].append(str(target))
            if not report["note"]:  # the first one's first problem: what a reader acts on
                report["note"] = f"checkpoint {info.path.name} set aside as {target.name}: {info.problems[0]}"
    if report["note"]:
        also = f" (and {len(report['set_aside']) - 1} more)" if len(report["set_aside"]) > 1 else ""
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
            "tracker said %s; resuming from step %d, the newest complete checkpoint", report["tracker_was"], best.step
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
