"""Per-attempt metrics of one run folder, merged into one series.

Format (verl's ``file`` logger, ``verl/utils/tracking.py::FileLogger``): one JSON object per line,
``{"step": N, "data": {"<metric key>": float, ...}}``. Each attempt writes its own file
``<run_dir>/attempts/<k>/metrics.jsonl`` because the logger opens its file with mode "wb" (a resumed
job would erase the earlier lines). The merged series lives in ``<run_dir>/metrics.jsonl``
(docs/run-folder.md).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from grpokit.run_folder.atomic import write_bytes_atomic
from grpokit.run_folder.layout import METRICS, RunFolder

log = logging.getLogger(__name__)

METRICS_FILE = METRICS
# verl's validation accuracy per data source (``verl/trainer/ppo/metric_utils.py``).
VAL_ACC_RE = re.compile(r"^val-core/(.+)/acc/mean@1$")


def val_acc_keys(columns) -> list[str]:
    """The ``val-core/<data_source>/acc/mean@1`` columns, sorted."""
    return sorted(c for c in columns if VAL_ACC_RE.match(str(c)))


def read_jsonl(path: Path | str) -> list[dict]:
    """Read a file-logger JSONL file into a list of ``{"step": int, "data": dict}`` records.

    A truncated last line (the job was killed while writing it) is dropped with a warning; a
    malformed line anywhere else raises ``ValueError`` naming the file and line number.
    Lines without a ``step`` or ``data`` key raise ``ValueError`` too.
    Raises ``FileNotFoundError`` when ``path`` does not exist.
    """
    path = Path(path)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    records: list[dict] = []
    last = len(lines) - 1
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            # Only the final line may be partial (no newline after it yet); anything else is damage.
            if lineno - 1 == last:
                log.warning("%s:%d: dropping a partial last line (%s)", path, lineno, exc)
                continue
            raise ValueError(f"{path}:{lineno}: not a JSON line ({exc}); fix or remove the line") from exc
        if not isinstance(rec, dict) or "step" not in rec or not isinstance(rec.get("data"), dict):
            raise ValueError(
                f'{path}:{lineno}: expected verl\'s file-logger record {{"step": N, "data": {{...}}}}, '
                f"got keys {sorted(rec) if isinstance(rec, dict) else type(rec).__name__}"
            )
        records.append(rec)
    return records


def attempt_dirs(run_dir: Path | str) -> list[tuple[int, Path]]:
    """``[(k, run_dir/attempts/k), ...]`` sorted by attempt number k (numeric folder names only)."""
    return [(a.number, a.path) for a in RunFolder(run_dir).attempts()]


def merge_attempts(run_dir: Path | str) -> pd.DataFrame:
    """Merge ``attempts/<k>/metrics.jsonl`` of a run folder into one frame.

    Returns a DataFrame with columns ``step`` (int), ``attempt`` (int, the attempt whose line was
    kept) and one float column per metric key (NaN where that step did not log the key), one row
    per step, sorted by step. A step logged by several attempts keeps the line of the latest
    attempt (a requeued job re-runs the steps after its last checkpoint). Attempts without a
    metrics file are skipped; a run with none gives an empty frame with columns step, attempt.
    """
    # step -> (attempt, data); later attempts (and later lines) overwrite earlier ones. Plain dicts
    # and one DataFrame at the end: per-row pandas work dominated report time on large sweeps.
    merged: dict[int, tuple[int, dict]] = {}
    for k, folder in attempt_dirs(run_dir):
        path = folder / METRICS_FILE
        if not path.exists():
            continue
        for rec in read_jsonl(path):
            merged[int(rec["step"])] = (k, rec["data"])
    if not merged:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "attempt": pd.Series(dtype="int64")})
    steps = sorted(merged)
    keys: dict[str, None] = {}
    for s in steps:
        keys.update(dict.fromkeys(merged[s][1]))
    keys.pop("step", None)
    keys.pop("attempt", None)
    names = list(keys)
    table = [[merged[s][1].get(k, math.nan) for k in names] for s in steps]
    try:
        # One float block: the common case (verl logs numbers only) and much faster than per column.
        values = pd.DataFrame(np.asarray(table, dtype=np.float64), columns=names)
    except (TypeError, ValueError):
        values = pd.DataFrame(table, columns=names)
    values.insert(0, "attempt", np.asarray([merged[s][0] for s in steps], dtype=np.int64))
    values.insert(0, "step", np.asarray(steps, dtype=np.int64))
    return values


def frame_to_jsonl(df: pd.DataFrame) -> bytes:
    """Render a merged frame in the file-logger format; NaN (a key absent at that step) is left out."""
    metric_cols = [c for c in df.columns if c not in ("step", "attempt")]
    out = bytearray()
    for step, values in zip(df["step"].tolist(), df[metric_cols].to_dict("records"), strict=True):
        data = {k: v for k, v in values.items() if not (isinstance(v, float) and math.isnan(v))}
        out += orjson.dumps({"step": int(step), "data": data}) + b"\n"
    return bytes(out)


def write_merged(run_dir: Path | str) -> Path:
    """Write ``<run_dir>/metrics.jsonl`` from :func:`merge_attempts`, atomically (temp file + rename).

    Returns the path written. The file holds only verl's format (no attempt number).
    """
    run_dir = Path(run_dir)
    target = run_dir / METRICS_FILE
    write_bytes_atomic(target, frame_to_jsonl(merge_attempts(run_dir)))
    log.info("merged metrics of %s -> %s", run_dir, target)
    return target
