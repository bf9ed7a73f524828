"""Make a checkpoint folder safe to resume from, before the trainer starts.

verl's ``resume_mode=auto`` trusts ``latest_checkpointed_iteration.txt``. A job killed during a
save can leave that tracker pointing at a partial or missing ``global_step_N``; here the newest
*complete* step (:mod:`grpokit.runtime.checkpoints`) becomes the tracker's value, partial folders
are moved aside (kept, renamed ``*.incomplete``) so verl never loads them, and old complete steps
beyond ``max_actor_ckpt_to_keep`` are pruned across attempts (verl prunes only what the current
process saved, verl#7395). The only complete checkpoint is never deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from grpokit.runtime.checkpoints import TRACKER_FILE, latest_complete, list_checkpoints, read_tracker
from grpokit.runtime.status import now

log = logging.getLogger(__name__)


def _write_tracker(ckpt_dir: Path, step: int) -> None:
    tmp = ckpt_dir / f".{TRACKER_FILE}.tmp"
    tmp.write_text(str(step))
    os.replace(tmp, ckpt_dir / TRACKER_FILE)


def prepare_resume(ckpt_dir: Path, keep: int | None = None) -> dict:
    """Repair the tracker, set partial checkpoints aside and prune; returns what was done.

    Args:
        ckpt_dir: verl's ``trainer.default_local_dir``.
        keep: ``trainer.max_actor_ckpt_to_keep`` (None or <= 0: keep all).

    Returns:
        ``{"resume_step": int | None, "tracker_was": int | None, "set_aside": [...], "pruned": [...]}``.
    """
    ckpt_dir = Path(ckpt_dir)
    report = {"resume_step": None, "tracker_was": None, "set_aside": [], "pruned": []}
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
