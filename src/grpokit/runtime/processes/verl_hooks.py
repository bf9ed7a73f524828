"""The kit's one hook into verl's trainer: checkpoint on demand at a step boundary, then stop.

verl 0.9.1's v1 trainer has no signal handling and no "save before the allocation ends" hook; its
training loop runs in a Ray actor. The job passes ``worker_process_setup_hook`` (a Ray runtime_env
field) pointing at :func:`setup_worker`, which runs in every Ray worker of the trainer and, once
``verl.trainer.ppo.v1.trainer_base`` is imported there, wraps ``PPOTrainer.on_step_begin``. The
wrapper looks for the driver's save request (:mod:`grpokit.runtime.control`); when there is one it
saves the last completed step with verl's own ``_save_checkpoint`` (unless that step is already
saved), marks it saved, and raises :class:`StopForRequeue`, which ends the run.

This is the only module that touches verl's internals: a verl upgrade is checked here.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
from pathlib import Path

from grpokit.runtime import control
from grpokit.runtime.processes.watchdog import install_stack_handler

log = logging.getLogger(__name__)
TARGET = "verl.trainer.ppo.v1.trainer_base"
SETUP_HOOK = "grpokit.runtime.processes.verl_hooks.setup_worker"


class StopForRequeue(RuntimeError):
    """Raised in the trainer after an on-demand checkpoint: the job stops and comes back later."""


def _already_saved(trainer, step: int) -> bool:
    root = Path(str(trainer.config.trainer.default_local_dir))
    tracker = root / "latest_checkpointed_iteration.txt"
    return (root / f"global_step_{step}").is_dir() and tracker.exists() and tracker.read_text().strip() == str(step)


def _wrap(on_step_begin):
    def on_step_begin_with_save_request(self):
        request = control.save_requested()
        if request is None:
            return on_step_begin(self)
        step = self.global_steps - 1  # the last completed (and logged) step
        ctl = Path(os.environ[control.ENV])
        if step > 0 and not _already_saved(self, step):
            log.warning("save requested (%s): saving step %d before stopping", request.get("reason"), step)
            self.global_steps = step
            try:
                self._save_checkpoint()
            finally:
                self.global_steps = step + 1
        control.mark_saved(ctl, step, str(self.config.trainer.default_local_dir))
        raise StopForRequeue(f"checkpointed step {step} on request ({request.get('reason')}); stopping")

    on_step_begin_with_save_request.__wrapped__ = on_step_begin
    return on_step_begin_with_save_request


def patch(module) -> None:
    """Wrap ``PPOTrainer.on_step_begin`` of verl's trainer module (idempotent)."""
    cls = module.PPOTrainer
    if not hasattr(cls.on_step_begin, "__wrapped__"):
        cls.on_step_begin = _wrap(cls.on_step_begin)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches :data:`TARGET` right after it is imported, so unrelated workers pay nothing."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def setup_worker() -> None:
    """Ray ``worker_process_setup_hook``: arm the patch in this worker (no-op without a control dir);
    install the stack dump the hang watchdog asks for
    (:func:`grpokit.runtime.processes.watchdog.install_stack_handler`)."""
    install_stack_handler()
    if not os.environ.get(control.ENV):
        return
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
