"""Enough training data for the point's step count, checked before anything is submitted.

verl's trainer (``verl/trainer/ppo/ray_trainer.py``, ``fit``) loops ``trainer.total_epochs`` times
over its train dataloader and returns when the data runs out, even when
``trainer.total_training_steps`` is larger; the dataloader drops the last partial batch
(``drop_last=True``). So a point can take at most ``floor(S / train_batch_size) * total_epochs``
steps, where S is the number of training rows it loads: ``data.train_max_samples`` when that is set
(>0), else the rows of ``data.train_files``. Such a point would train on the GPUs to the end of
its data and end ``failed`` (``early_exit``, :mod:`grpokit.runtime.decisions.completion`). verl also drops
prompts longer than ``data.max_prompt_length`` (``filter_overlong_prompts``), which only lowers
S: the check uses the upper bound, so it never refuses a point that would have had enough data.

Example: GSM8K's ``train_max_samples: 1024`` at 48 steps allows batch sizes up to 21
(1024 // 21 = 48); ``verl.data.train_batch_size=32`` would stop at step 32.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpokit.config.point import PointSpec
from grpokit.problems import Problem


@functools.lru_cache(maxsize=64)
def _parquet_rows(path: str, mtime_ns: int) -> int:
    """Rows of a parquet file from its footer (no data read); keyed by mtime so a rewrite is seen."""
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def train_rows(cfg: DictConfig) -> int | None:
    """Rows in ``data.train_files`` (a path or a list), or None when a file is missing or not parquet
    (``check_files`` reports a missing file; verl reads other formats too, which this does not count)."""
    files = OmegaConf.select(cfg, "data.train_files")
    paths = list(files) if OmegaConf.is_list(files) or isinstance(files, list) else [files]
    total = 0
    for path in map(str, paths):
        file = Path(path)
        if file.suffix != ".parquet" or not file.is_file():
            return None
        total += _parquet_rows(path, file.stat().st_mtime_ns)
    return total


STEPS, CAP, EPOCHS = "trainer.total_training_steps", "data.train_max_samples", "trainer.total_epochs"


def check_data_steps(spec: PointSpec, cfg: DictConfig) -> list[Problem]:
    """One Problem when the point's data cannot last ``trainer.total_training_steps`` steps.

    Nothing to check when ``total_training_steps`` is unset (verl then runs its epochs) or the row
    count is unknown. The fix names the keys that lift the limit and the smallest value of each,
    never a key the user typed bent to fit a preset value the user did not type: when the step
    count comes from the experiment preset (a verl script typing ``data.train_batch_size=1024
    trainer.total_epochs=15``), the fix names that preset key and ``=null`` (verl's own count,
    its epochs over the data), and the preset's data cap with ``-1`` (every row).
    """
    steps = OmegaConf.select(cfg, STEPS)
    if steps is None:
        return []
    rows = train_rows(cfg)
    if rows is None:
        return []
    cap = OmegaConf.select(cfg, CAP)
    samples = min(rows, int(cap)) if cap is not None and int(cap) > 0 else rows
    batch = int(cfg.data.train_batch_size)
    epochs = int(OmegaConf.select(cfg, EPOCHS) or 1)
    per_epoch = samples // batch
    if per_epoch * epochs >= int(steps):
        return []
    capped = f"train_max_samples={cap}" if samples < rows else f"{rows} rows in data.train_files"
    need_samples = int(steps) * batch
    return [
        Problem(
            spec.name,
            "verl.trainer.total_training_steps",
            f"{steps} steps of batch {batch} need {need_samples} prompts, but the data gives "
            f"{per_epoch * epochs} step(s): {samples} prompts ({capped}) // {batch} x total_epochs={epochs}; "
            "verl would stop early and the point end failed",
            _fix(spec, int(steps), batch, epochs, rows, samples, cap),
        )
    ]


def _fix(spec: PointSpec, steps: int, batch: int, epochs: int, rows: int, samples: int, cap) -> str:
    from grpokit.config.explicit import typed_verl_keys

    typed = typed_verl_keys(spec.kit_overrides)
    preset_steps = STEPS not in typed
    preset_cap = CAP not in typed and samples < rows
    per_epoch = samples // batch
    need_samples = steps * batch
    fixes = []
    if need_samples <= rows and (preset_cap or not preset_steps):
        fixes.append(f"verl.data.train_max_samples>={need_samples}")
    if per_epoch > 0 and (EPOCHS not in typed or not preset_steps):
        fixes.append(f"verl.trainer.total_epochs>={math.ceil(steps / per_epoch)} (repeats the data)")
    if preset_steps and per_epoch > 0:
        every = f"; {rows // batch * epochs} with verl.data.train_max_samples=-1 (all {rows} rows)" * preset_cap
        fixes.append(
            f"verl.trainer.total_training_steps=null (verl's own count, total_epochs={epochs} over the data: "
            f"{per_epoch * epochs} steps{every})"
        )
    fix = f"set {', or '.join(fixes)}" if fixes else "lower verl.data.train_batch_size"
    if need_samples > rows and not preset_steps:
        fix = f"the train file has only {rows} rows: lower the steps or the batch, or {fix}"
    preset = [f"verl.{STEPS}={steps}"] * preset_steps + [f"verl.{CAP}={cap}"] * preset_cap
    if preset:
        name = spec.experiment.get("name", "")
        fix = f"the experiment preset {name} sets {' and '.join(preset)} (not typed): {fix}"
    return fix
