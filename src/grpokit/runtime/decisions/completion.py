"""Whether a trainer that exited 0 finished its point: ``completed`` follows verl 0.9.1's contract.

verl's fit loop (``verl/trainer/ppo/ray_trainer.py::RayPPOTrainer.fit``) counts steps from 1,
sets ``is_last_step = global_steps >= total_training_steps``, saves a checkpoint when
``trainer.save_freq > 0`` and (``is_last_step`` or ``global_steps % save_freq == 0``), and returns
after the last step. ``save_freq <= 0`` (verl's default, -1) never saves. The same loop also
returns, exit code 0, *without* reaching the last step: when the data runs out first
(``total_training_steps`` above ``len(train_dataloader) x total_epochs``; the dataloader drops the
last partial batch), when a resumed run has no epoch left, or with ``trainer.val_only``.

So a point is ``completed`` only when its trainer exited 0 **and** the target step was reached
**and**, when ``save_freq > 0``, the newest complete checkpoint
(:func:`grpokit.runtime.decisions.checkpoints.latest_complete`) is at or past the target. Otherwise the
point ends ``failed`` with ``ended_by`` ``early_exit`` (target step not reached) or
``no_final_checkpoint`` (reached, but the final save is missing or incomplete), a reason naming
the last step, the target and the checkpoint state; ``resubmit.py`` picks it up and a re-run
resumes it from its newest complete checkpoint.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from grpokit.config.point import PointSpec
from grpokit.run_folder.layout import AttemptFolder
from grpokit.runtime.decisions.checkpoints import latest_complete

#: What verl's ``RayPPOTrainer._create_dataloader`` prints once it knows the step count.
_TOTAL_STEPS_RE = re.compile(r"Total training steps: (\d+)")


@dataclasses.dataclass(frozen=True)
class Completion:
    """The outcome of an attempt whose trainer exited 0.

    state: ``completed`` or ``failed``. ended_by: ``completed``, ``early_exit`` or
    ``no_final_checkpoint``. reason: empty when completed, else one paragraph naming last step,
    target step and checkpoint state. target_step: the target used (None when unknown).
    """

    state: str
    ended_by: str
    reason: str
    target_step: int | None


def total_steps_from_log(trainer_log: Path) -> int | None:
    """The step count verl printed (``Total training steps: N``, the last one); None when absent."""
    if not Path(trainer_log).exists():
        return None
    found = _TOTAL_STEPS_RE.findall(Path(trainer_log).read_text(errors="replace"))
    return int(found[-1]) if found else None


def _int_setting(spec: PointSpec, key: str) -> int | None:
    value = spec.verl_value(key)
    if value is None:  # the point leaves verl's default
        from grpokit.config.overrides import flat_base

        value = flat_base().get(key)
    return None if value in (None, "null", "None") else int(float(value))


def judge(
    *, target_step: int | None, save_freq: int | None, last_step: int | None, ckpt_dir: Path, attempt: str = ""
) -> Completion:
    """Decide ``completed`` or not for a trainer that exited 0 (see the module docstring).

    Args:
        target_step: ``trainer.total_training_steps`` (or verl's printed count); None when unknown,
            then only the checkpoint rule applies.
        save_freq: ``trainer.save_freq`` (None or <= 0: verl saves no checkpoint, none is required).
        last_step: the highest step in this attempt's ``metrics.jsonl`` (None when it logged none).
        ckpt_dir: verl's ``trainer.default_local_dir``.
        attempt: the attempt folder's name for the reason text (e.g. ``attempts/2``).
    """
    best = latest_complete(ckpt_dir)
    ckpt_step = best.step if best else None
    saving = save_freq is not None and save_freq > 0
    reached = max((s for s in (last_step, ckpt_step) if s is not None), default=None)
    where = f" ({attempt}/metrics.jsonl)" if attempt else ""
    ckpt_text = (
        f"newest complete checkpoint global_step_{ckpt_step} in {ckpt_dir}"
        if ckpt_step is not None
        else f"no complete checkpoint in {ckpt_dir}"
    )
    save_text = f"save_freq={save_freq}" if saving else f"save_freq={save_freq}: verl saves none"
    if target_step is not None and (reached is None or reached < target_step):
        at = f"at step {last_step}" if last_step is not None else "without logging a step"
        return Completion(
            "failed",
            "early_exit",
            f"trainer exited 0 {at}{where} of target_step {target_step}; {ckpt_text} ({save_text}). "
            "verl returns early when the data runs out (len(train_dataloader) x trainer.total_epochs < "
            "trainer.total_training_steps), with trainer.val_only, or when a resumed run has no epoch left; "
            "fix the data or the step count, then resubmit.py resumes the point from its newest checkpoint",
            target_step,
        )
    final = target_step if target_step is not None else last_step
    if saving and final is not None and (ckpt_step is None or ckpt_step < final):
        return Completion(
            "failed",
            "no_final_checkpoint",
            f"trainer exited 0 at step {reached} of target_step {target_step} but {ckpt_text}, "
            f"not the final step {final} (with {save_text} verl saves at the last step); "
            "resubmit.py resumes the point from its newest complete checkpoint",
            target_step,
        )
    return Completion("completed", "completed", "", target_step)


def judge_attempt(spec: PointSpec, attempt_dir: Path, last_step: int | None) -> Completion:
    """:func:`judge` for a point's attempt: target from the point (else verl's printed count in
    ``trainer.log``), ``save_freq`` from the point or verl's default."""
    target = _int_setting(spec, "trainer.total_training_steps")
    if target is None:
        target = total_steps_from_log(AttemptFolder(attempt_dir).trainer_log)
    return judge(
        target_step=target,
        save_freq=_int_setting(spec, "trainer.save_freq"),
        last_step=last_step,
        ckpt_dir=Path(spec.checkpoint_dir),
        attempt=f"attempts/{Path(attempt_dir).name}",
    )
