"""One point's numbers: its state word and the summary of its merged metrics.

Metric names are verl 0.9.1's (``verl/trainer/ppo/metric_utils.py``):
``critic/rewards/mean``, ``val-core/<data_source>/acc/mean@1``, ``response_length/{mean,clip_ratio}``,
``timing_s/<stage>`` (seconds per step), ``perf/total_num_tokens`` (tokens in the step's batch),
``perf/throughput`` (tokens / (step seconds x GPUs)).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

import numpy as np
import pandas as pd

from grpokit.run_folder.metrics import VAL_ACC_RE, val_acc_keys
from grpokit.run_folder.point_state import open_attempt_end, open_attempt_verdict, point_state, status_is_this_jobs
from grpokit.run_folder.status_record import Attempt, attempt_elapsed_s
from grpokit.run_folder.sweep_reader import Point
from grpokit.slurm.job_states import LIVE_WORDS, SlurmJobState

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


def point_reason(
    point: Point, slurm: SlurmJobState | None, state: str | None = None, *, whole: bool = False
) -> str | None:
    """Why the point is in its state, one line: the first line of status.json's ``reason`` (this
    job's; ``whole=True``: all its lines, e.g. the trainer.log lines it quotes), else Slurm's reason
    (a pending job's ``Priority``/``Resources``, an exit reason), else for ``unknown`` what is
    missing. An attempt left open and decided from evidence (a kill, a cancel past KillWait) is
    shown by its end's reason, not by the reason status.json held while it ran. None when nothing says."""
    state = state or point_state(point, slurm)
    status = point.status
    verdict = open_attempt_verdict(point, slurm) if state not in LIVE_WORDS else None
    if verdict is not None:  # the attempt's end, not the reason status.json held while it ran
        return verdict.reason
    own = str((status.reason if status is not None else None) or "").strip() if status_is_this_jobs(point) else ""
    if own:
        return own if whole else own.splitlines()[0]
    if slurm is not None and slurm.kit_state == "cancelled" and (not point.attempts or not status_is_this_jobs(point)):
        return "cancelled while pending"  # Slurm's Reason still says why it was pending (JobArrayTaskLimit)
    if slurm is not None and slurm.reason:
        return f"Slurm: {slurm.reason}"
    if state == "unknown" and slurm is not None:
        recorded = (status.state if status is not None else None) or "nothing (no status.json)"
        return f"Slurm says {slurm.state}, but the job recorded {recorded}; see the run folder's attempts/*/driver.log"
    return None


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
    """Summary of a merged frame (``grpokit.run_folder.metrics.merge_attempts``, sorted by step).

    Keys: ``last_step``; ``final_reward_mean`` (last reward); per data source ``final_acc:<src>``
    and the step it was logged at ``final_acc_step:<src>``, ``best_acc:<src>``,
    ``best_acc_step:<src>`` (from ``val-core/<src>/acc/mean@1``; the earliest step wins a tie);
    ``final_response_length``, ``final_clip_ratio`` (last logged values); ``mean_step_s`` and
    ``mean_<part>_s`` (mean seconds per step over logged steps); ``tokens_per_s`` (sum of
    perf/total_num_tokens / sum of timing_s/step over steps logging both); ``throughput_per_gpu``
    (mean perf/throughput). Missing metrics give NaN.
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
            out[f"final_acc_step:{src}"] = float(steps[ok][-1])
            out[f"best_acc:{src}"] = float(v[best])
            out[f"best_acc_step:{src}"] = float(steps[best])
        else:
            out[f"final_acc:{src}"] = out[f"final_acc_step:{src}"] = math.nan
            out[f"best_acc:{src}"] = out[f"best_acc_step:{src}"] = math.nan
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


def held_gpus_for_training(attempt: Attempt) -> bool:
    """Whether an attempt held its GPUs for training: not ``skipped_no_gpu``, and when the driver
    recorded its timings (every closed attempt does), the trainer was launched
    (``timings.trainer_launched_s``). A running attempt and one closed without timings (killed,
    e.g. by SIGKILL) count."""
    if attempt.ended_by == "skipped_no_gpu":
        return False
    return attempt.timings is None or "trainer_launched_s" in attempt.timings


def gpu_hours(point: Point, slurm: SlurmJobState | None = None, now: datetime | None = None) -> float:
    """Sum over the attempts that held GPUs for training (:func:`held_gpus_for_training`) of elapsed
    seconds x GPUs / 3600.

    Elapsed per attempt comes from status.json (the driver records Slurm's times); for a running
    last attempt without ``elapsed_s``, Slurm's run time is used when known, else now - start; an
    open last attempt decided over (a killed driver) ends at its recorded end (the last heartbeat).
    GPUs: :attr:`~grpokit.run_folder.sweep_reader.Point.gpus` (status.json's ``slurm.gpus`` per
    node x the nodes of ``slurm.nodelist``). NaN when the GPU count is unknown.
    """
    gpus = point.gpus
    attempts = point.attempts
    if gpus is None or not attempts:
        return math.nan if gpus is None else 0.0
    total = 0.0
    for i, att in enumerate(attempts):
        if not held_gpus_for_training(att):
            continue
        running = i == len(attempts) - 1 and att.end is None and att.elapsed_s is None
        if running and slurm is not None and slurm.elapsed_s is not None and slurm.kit_state == "running":
            total += slurm.elapsed_s
        elif running and (slurm is None or not slurm.is_live):
            total += attempt_elapsed_s(att, open_attempt_end(point, slurm) or now) or 0.0
        else:
            total += attempt_elapsed_s(att, now) or 0.0
    return total * gpus / 3600.0


def sweep_gpu_hours(per_point: list[float]) -> tuple[float, int]:
    """The sweep's total GPU hours: the sum of the points' :func:`gpu_hours`, and how many points
    were left out of it because their GPU count is unknown (NaN: no status.json with
    ``slurm.gpus`` yet)."""
    known = [float(h) for h in per_point if h is not None and not math.isnan(float(h))]
    return float(sum(known)), len(per_point) - len(known)
