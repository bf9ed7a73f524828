"""grpokit logs (finding the point, following across attempts) and status's ETA, on files; the
Slurm runs of logs, cancel and status are tests/integration/test_daily_commands_slurm.py."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from grpokit.cli import logs
from grpokit.reports.status_table import eta_s


def sweep(tmp_path: Path) -> Path:
    folder = tmp_path / "sw"
    points = []
    for i, name in enumerate(["000_n-2", "001_n-4"]):
        (folder / name).mkdir(parents=True)
        points.append({"index": i, "name": name, "run_dir": str(folder / name)})
    (folder / "manifest.json").write_text(json.dumps({"sweep": "sw", "points": points}))
    return folder


def test_find_run_dir_by_folder_index_name_and_prefix(tmp_path):
    folder = sweep(tmp_path)
    for point in ("1", "001", "001_n-4"):
        assert logs.find_run_dir(folder, point) == folder / "001_n-4"
    (folder / "000_n-2" / "point.json").write_text("{}")
    assert logs.find_run_dir(folder / "000_n-2", None) == folder / "000_n-2"
    with pytest.raises(logs.PointNotFound, match="its points: 000_n-2, 001_n-4"):
        logs.find_run_dir(folder, "7")
    with pytest.raises(logs.PointNotFound, match="is a sweep folder: name a point"):
        logs.find_run_dir(folder, None)


def test_follow_prints_new_lines_moves_to_the_next_attempt_and_ends_when_final(tmp_path):
    run = tmp_path / "000"
    first = run / "attempts" / "1"
    first.mkdir(parents=True)
    (first / "trainer.log").write_text("old line\n")
    (run / "status.json").write_text(
        json.dumps({"state": "running", "attempts": [{"attempt": 1, "start": "x", "end": None}]})
    )
    out = io.StringIO()
    done = threading.Thread(target=logs.follow, args=(run, ("trainer",), 0, 0.05, out))
    done.start()
    time.sleep(0.3)
    with open(first / "trainer.log", "a") as f:
        f.write("step:1\nstep:2 partial")
    time.sleep(0.3)
    second = run / "attempts" / "2"
    (second / "sidecars").mkdir(parents=True)
    (second / "trainer.log").write_text("step:3\n")
    time.sleep(0.3)
    (run / "status.json").write_text(
        json.dumps(
            {
                "state": "completed",
                "attempts": [{"attempt": 1, "start": "x", "end": "x"}, {"attempt": 2, "start": "y", "end": "y"}],
            }
        )
    )
    done.join(timeout=5)
    text = out.getvalue()
    assert not done.is_alive()
    assert "old line" not in text and "[trainer] step:1\n" in text and "partial" not in text
    assert text.index("==> attempt 2:") < text.index("[trainer] step:3") < text.index("000 is completed")


def test_show_without_attempts_says_so(tmp_path):
    out = io.StringIO()
    assert logs.show(tmp_path, logs.KINDS, 5, out) == 0
    assert "no attempt has started yet (state pending)" in out.getvalue()


def test_eta_is_steps_left_times_the_median_recent_step_time():
    df = pd.DataFrame({"step": [1, 2, 3, 4], "timing_s/step": [100.0, 2.0, 3.0, 4.0]})
    assert eta_s(df, 4, 10, last=3) == 6 * 3.0
    assert eta_s(df, 4, None) is None and eta_s(df.drop(columns="timing_s/step"), 4, 10) is None
    assert eta_s(df, 12, 10) == 0
