"""One point's numbers: its state word and the summary of its merged metrics.

Metric names are verl 0.9.1's (``verl/trainer/ppo/metric_utils.py``):
``critic/rewards/mean``, ``val-core/<data_source>/acc/mean@1``, ``response_length/{mean,clip_ratio}``,
``timing_s/<stage>`` (seconds per step), ``perf/total_num_tokens`` (tokens in the step's batch),
``perf/throughput`` (tokens / (step seconds x GPUs)).
"""

from __future__ import annotations

import logging
import math
import re
from datetime import datetime

import numpy as np
import pandas as pd

from grpokit.results.slurm_state import SlurmJobState
from grpokit.results.sweep_folder import Point, attempt_elapsed_s

log = logging.getLogger(__name__)

REWARD_KEY = "critic/rewards/mean"
SCORE_KEY = "critic/score/mean"  # same value with no KL-in-reward; used when rewards/mean is absent
RESPONSE_LENGTH_KEY = "response_length/mean"
CLIP_RATIO_KEY = "response_length/clip_ratio"
STEP_TIME_KEY = "timing_s/step"
TOKENS_KEY = "perf/total_num_tokens"
THROUGHPUT_KEY = "perf/throughput"
# The main parts of a GRPO step (rollout, recompute of old log-probs, reference, update, validation).
TIMING_PARTS = ("gen", "old_log_prob", "ref", "update_actor", "testing", "save_checkpoint")
VAL_ACC_RE = re.compile(r"^val-core/(.+)/acc/mean@1$")

# status.json "state" / attempts[].ended_by -> the status word shown.
_STATUS_WORD = {
    "pending": "queued",
    "requeued": "queued",
    "running": "running",
    "completed": "completed",
    "cancelled": "cancelled",
    "skipped_no_gpu": "skipped",
    "failed": "failed",
    "timeout": "timeout",
    "preempted": "preempted",
    "sidecar_failed": "failed",
}


def val_acc_keys(columns) -> list[str]:
    """The ``val-core/<data_source>/acc/mean@1`` columns, sorted."""
    return sorted(c for c in columns if VAL_ACC_RE.match(str(c)))


def point_state(point: Point, slurm: SlurmJobState | None) -> str:
    """queued | running | completed | failed | preempted | timeout | cancelled | skipped |
    not submitted | unknown.

    A live Slurm state (queued/running) wins: status.json lags behind the scheduler. For a finished
    job, the driver's ``ended_by`` wins when it is more specific than Slurm's COMPLETED/FAILED (the
    driver catches the timeout/preemption signal and exits by itself). Without Slurm's answer (job
    aged out, no accounting) status.json decides.
    """
    status = point.status or {}
    attempts = point.attempts
    ended_by = attempts[-1].get("ended_by") if attempts else None
    if slurm is not None and slurm.kit_state != "unknown":
        word = slurm.kit_state
        if word in ("completed", "failed") and ended_by in ("timeout", "preempted"):
            return ended_by
        if word == "completed" and status.get("state") in ("failed", "cancelled"):
            return status["state"]  # the driver failed the point and exited by itself
        return word
    state = status.get("state")
    if state == "failed" and ended_by in ("timeout", "preempted", "cancelled"):
        return ended_by
    if state in _STATUS_WORD:
        return _STATUS_WORD[state]
    return "unknown" if point.job_id else "not submitted"


def _values(df: pd.DataFrame, key: str) -> np.ndarray:
    """The column as float64 (NaN where not logged); all-NaN when the key is absent."""
    if key not in df.columns:
        return np.full(len(df), np.nan)
    col = df[key]
    if col.dtype.kind == "f":
        return col.to_numpy()
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _last(df: pd.DataFrame, key: str) -> float:
    v = _values(df, key)
    v = v[~np.isnan(v)]
    return float(v[-1]) if len(v) else math.nan


def _mean(df: pd.DataFrame, key: str) -> float:
    v = _values(df, key)
    v = v[~np.isnan(v)]
    return float(v.mean()) if len(v) else math.nan


def last_reward(df: pd.DataFrame) -> float:
    """Last logged ``critic/rewards/mean`` (else ``critic/score/mean``); NaN when neither exists."""
    v = _last(df, REWARD_KEY)
    return v if not math.isnan(v) else _last(df, SCORE_KEY)


def metrics_summary(df: pd.DataFrame) -> dict[str, float]:
    """Summary of a merged frame (``grpokit.runtime.metrics.merge_attempts``, sorted by step).

    Keys: ``last_step``; ``final_reward_mean`` (last reward); per data source ``final_acc:<src>``,
    ``best_acc:<src>``, ``best_acc_step:<src>`` (from ``val-core/<src>/acc/mean@1``; the earliest
    step wins a tie); ``final_response_length``, ``final_clip_ratio`` (last logged values);
    ``mean_step_s`` and ``mean_<part>_s`` (mean seconds per step over logged steps);
    ``tokens_per_s`` (sum of perf/total_num_tokens / sum of timing_s/step over steps logging both);
    ``throughput_per_gpu`` (mean perf/throughput). Missing metrics give NaN.
    """
    steps = df["step"].to_numpy()
    out: dict[str, float] = {"last_step": float(steps.max()) if len(steps) else math.nan}
    out["final_reward_mean"] = last_reward(df)
    for key in val_acc_keys(df.columns):
        src = VAL_ACC_RE.match(key).group(1)
        v = _values(df, key)
        ok = ~np.isnan(v)
        if ok.any():
            best = int(np.nanargmax(v))
            out[f"final_acc:{src}"] = float(v[ok][-1])
            out[f"best_acc:{src}"] = float(v[best])
            out[f"best_acc_step:{src}"] = float(steps[best])
        else:
            out[f"final_acc:{src}"] = out[f"best_acc:{src}"] = out[f"best_acc_step:{src}"] = math.nan
    out["final_response_length"] = _last(df, RESPONSE_LENGTH_KEY)
    out["final_clip_ratio"] = _last(df, CLIP_RATIO_KEY)
    out["mean_step_s"] = _mean(df, STEP_TIME_KEY)
    for part in TIMING_PARTS:
        out[f"mean_{part}_s"] = _mean(df, f"timing_s/{part}")
    tokens, secs = _values(df, TOKENS_KEY), _values(df, STEP_TIME_KEY)
    both = ~(np.isnan(tokens) | np.isnan(secs))
    total_s = float(secs[both].sum())
    out["tokens_per_s"] = float(tokens[both].sum()) / total_s if total_s > 0 else math.nan
    out["throughput_per_gpu"] = _mean(df, THROUGHPUT_KEY)
    return out


def gpu_hours(point: Point, slurm: SlurmJobState | None = None, now: datetime | None = None) -> float:
    """Sum over attempts of elapsed seconds x GPUs / 3600.

    Elapsed per attempt comes from status.json (the driver records Slurm's times); for a running
    last attempt without ``elapsed_s``, Slurm's run time is used when known, else now - start.
    GPUs come from status.json's ``slurm.gpus``. NaN when the GPU count is unknown.
    """
    gpus = point.gpus
    attempts = point.attempts
    if gpus is None or not attempts:
        return math.nan if gpus is None else 0.0
    total = 0.0
    for i, att in enumerate(attempts):
        running = i == len(attempts) - 1 and att.get("end") is None and att.get("elapsed_s") is None
        if running and slurm is not None and slurm.elapsed_s is not None and slurm.kit_state == "running":
            total += slurm.elapsed_s
        else:
            total += attempt_elapsed_s(att, now) or 0.0
    return total * gpus / 3600.0
