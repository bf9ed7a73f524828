"""An attempt's ``startup.json`` read back, and its one-line view (``status``, ``report``, the benches).

The file is written by the job's driver (:mod:`grpokit.runtime.startup` has its format); readers
on the login node use this module only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from grpokit.run_folder.layout import ATTEMPTS_DIR, STARTUP

if TYPE_CHECKING:
    from grpokit.run_folder.status_record import Attempt

#: short labels for the one-line view
LABELS = {
    "ray_ready": "ray",
    "trainer_launched": "launch",
    "verl_import": "verl import",
    "task_runner": "task runner",
    "tokenizer": "tokenizer",
    "dataset": "dataset",
    "worker_group": "workers",
    "actor_ref": "actor+ref",
    "rollout_spawn": "rollout spawn",
    "engine_start": "engine proc",
    "engine_compiled": "engine load+compile",
    "engine_ready": "engine up",
    "weight_sync": "weight sync",
    "checkpoint_load": "ckpt load",
    "first_generation": "first request",
}


def read(attempt_dir: Path) -> dict | None:
    """``startup.json`` of an attempt, or None when absent or not JSON."""
    path = Path(attempt_dir) / STARTUP
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def latest(run_dir: Path, attempts: Sequence[Attempt]) -> dict | None:
    """The timeline of the latest attempt in `attempts` (``status.json``'s list) of the point in
    `run_dir`; None before one was written."""
    if not attempts:
        return None
    return read(Path(run_dir) / ATTEMPTS_DIR / str(attempts[-1].attempt))


def one_line(data: dict | None) -> str:
    """``start-up 476 s to first generation: ray 12 | verl import 19 | ...`` (empty without data);
    a timeline that did not reach the first request says how far it got."""
    if not data or not data.get("phases"):
        return ""
    parts = " | ".join(f"{LABELS.get(p['phase'], p['phase'])} {p['took_s']:.0f}" for p in data["phases"])
    first = data.get("first_generation_s")
    head = f"start-up {first:.0f} s to first generation" if first is not None else "start-up (no generation yet)"
    eng = data.get("engine") or {}
    extra = f" [compile cache {eng['compile_cache']}]" if eng.get("compile_cache") else ""
    return f"{head}: {parts}{extra}"
