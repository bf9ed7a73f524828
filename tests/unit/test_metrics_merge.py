"""grpokit.run_folder.metrics: reading verl's file-logger JSONL and merging attempts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from grpokit.run_folder.metrics import merge_attempts, read_jsonl, write_merged


def write_attempt(run_dir: Path, k: int, steps: dict[int, dict]) -> Path:
    """attempts/<k>/metrics.jsonl in verl's FileLogger format."""
    folder = run_dir / "attempts" / str(k)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in steps.items()))
    return path


def test_read_jsonl_real_file_logger_output(tmp_path, monkeypatch):
    # verl's own FileLogger writes the file, so the reader is checked against the real format.
    from verl.utils.tracking import FileLogger

    path = tmp_path / "m.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("p", "e")
    logger.log({"critic/rewards/mean": 0.25, "timing_s/step": 3}, step=1)
    logger.log({"critic/rewards/mean": 0.5}, step=2)
    logger.finish()
    recs = read_jsonl(path)
    assert recs == [
        {"step": 1, "data": {"critic/rewards/mean": 0.25, "timing_s/step": 3}},
        {"step": 2, "data": {"critic/rewards/mean": 0.5}},
    ]


def test_read_jsonl_drops_partial_last_line_only(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "data": {"a": 1.0}}\n{"step": 2, "da')
    assert [r["step"] for r in read_jsonl(path)] == [1]
    path.write_text('{"step": 1, "da\n{"step": 2, "data": {"a": 1.0}}\n')
    with pytest.raises(ValueError, match=r"m.jsonl:1"):
        read_jsonl(path)


def test_read_jsonl_rejects_other_shapes(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"global_step": 1, "a": 2}\n')
    with pytest.raises(ValueError, match="file-logger record"):
        read_jsonl(path)


def test_merge_latest_attempt_wins(tmp_path):
    run = tmp_path / "000_a"
    write_attempt(run, 1, {s: {"r": float(s), "only1": 1.0} for s in range(1, 6)})
    # Attempt 2 resumed from the step-3 checkpoint: steps 4 and 5 run again with other values.
    write_attempt(run, 2, {s: {"r": 10.0 * s} for s in range(4, 8)})
    df = merge_attempts(run)
    assert df["step"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert df["attempt"].tolist() == [1, 1, 1, 2, 2, 2, 2]
    assert df["r"].tolist() == [1.0, 2.0, 3.0, 40.0, 50.0, 60.0, 70.0]
    assert df.loc[df.step == 3, "only1"].item() == 1.0
    assert math.isnan(df.loc[df.step == 4, "only1"].item())
    assert list(df.columns[:2]) == ["step", "attempt"]


def test_merge_orders_attempts_numerically_and_skips_missing_files(tmp_path):
    run = tmp_path / "r"
    write_attempt(run, 2, {1: {"r": 2.0}})
    write_attempt(run, 10, {1: {"r": 10.0}})
    (run / "attempts" / "3").mkdir()  # started but died before the logger opened its file
    df = merge_attempts(run)
    assert df["r"].tolist() == [10.0] and df["attempt"].tolist() == [10]


def test_merge_empty_run(tmp_path):
    df = merge_attempts(tmp_path / "nothing")
    assert list(df.columns) == ["step", "attempt"] and len(df) == 0


def test_write_merged_roundtrip_is_file_logger_format(tmp_path):
    run = tmp_path / "r"
    write_attempt(run, 1, {1: {"a": 1.0, "b": 2.0}, 2: {"a": 3.0}})
    write_attempt(run, 2, {2: {"a": 4.0}, 3: {"b": 5.0}})
    path = write_merged(run)
    assert path == run / "metrics.jsonl"
    assert read_jsonl(path) == [
        {"step": 1, "data": {"a": 1.0, "b": 2.0}},
        {"step": 2, "data": {"a": 4.0}},
        {"step": 3, "data": {"b": 5.0}},
    ]
    # No temp files left behind.
    assert sorted(p.name for p in run.iterdir()) == ["attempts", "metrics.jsonl"]
