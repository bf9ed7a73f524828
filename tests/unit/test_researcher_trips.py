"""Issue 37: what a newcomer and a researcher still tripped on, each as the user meets it.

status piped with --watch, status of a point's run folder, resume=true with a mistyped name, cancel
with no points named; a wrong value refused on the key typed and labelled with the points that hold
it; the job id a one-point sweep gets; a dry run that leaves no Hydra file behind.
"""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    """The user's environment with this checkout's code first; verl's check in-process (the suite's CPU)."""
    path = f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    return {**os.environ, "PYTHONPATH": path, "GRPOKIT_VALIDATE_IN_PROCESS": "1", **extra}


def _sweep_command(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess:
    env = _env(GRPOKIT_HOME=str(home)) if home is not None else _env()
    return subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _point(sweep: Path, index: int, state: str, job_id: str | None = None) -> dict:
    """A run folder as the driver leaves it (docs/run-folder.md), run locally unless ``job_id``."""
    run = sweep / f"{index:03d}_lr-{index}"
    run.mkdir(parents=True)
    ended = state != "running"
    attempt = {
        "attempt": 1,
        "start": "2026-01-01T00:00:00+00:00",
        "end": "2026-01-01T00:05:00+00:00" if ended else None,
        "ended_by": state if ended else None,
        "elapsed_s": 300.0 if ended else None,
    }
    status = {"state": state, "reason": "", "target_step": 4, "last_step": 2, "attempts": [attempt]}
    (run / "status.json").write_text(json.dumps(status))
    (run / "point.json").write_text("{}")
    return {"index": index, "name": run.name, "run_dir": str(run), "swept": {"lr": index}, "job_id": job_id}


def _sweep_folder(folder: Path, points: list[dict]) -> Path:
    (folder / "manifest.json").write_text(json.dumps({"sweep": folder.name, "swept_keys": ["lr"], "points": points}))
    return folder


def _finish(run: Path) -> None:
    done = json.loads((run / "status.json").read_text())
    done["state"], done["attempts"][0]["end"], done["attempts"][0]["ended_by"] = "completed", "x", "completed"
    (run / "status.json").write_text(json.dumps(done))


# --- 1. status, resume, cancel -------------------------------------------------------------------


def test_status_watch_piped_prints_each_refresh_as_it_comes_and_the_last_line_on_its_own(tmp_path):
    sweep = tmp_path / "sw"
    _sweep_folder(sweep, [_point(sweep, 0, "completed"), _point(sweep, 1, "running")])
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "launch" / "status.py"), str(sweep), "--watch", "0.5"],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        seen = b""
        deadline = time.monotonic() + 60
        while b"\xe2\x94\x98" not in seen:  # the first table's bottom-right corner (┘), while the point runs
            assert time.monotonic() < deadline, f"nothing read from the pipe while the point ran: {seen!r}"
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                seen += os.read(proc.stdout.fileno(), 65536)
        assert proc.poll() is None, "the first table came only once the command ended"
        _finish(sweep / "001_lr-1")
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    lines = (seen + rest).decode().splitlines()
    assert lines[-1] == "every point is final"
    assert lines[-2].rstrip().endswith("┘"), lines[-2]  # the table's border, then the line of its own
    assert sum("sweep sw (2 points)" in line for line in lines) >= 2  # one table per refresh


def test_status_of_a_point_folder_shows_that_point_of_its_sweep(tmp_path, capsys):
    from grpokit.cli import status

    sweep = tmp_path / "sw"
    _sweep_folder(sweep, [_point(sweep, 0, "completed"), _point(sweep, 1, "failed")])
    assert status.main([str(sweep / "001_lr-1"), "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert f"point 001_lr-1 of sweep {sweep}" in out and "status" in out
    assert "001_lr-1" in out and "000_lr-0" not in out and "failed" in out
    assert status.main([str(sweep / "001_lr-1"), "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["001_lr-1"]

    lone = tmp_path / "moved" / "000_lr-0"  # a run folder copied out of its sweep
    lone.mkdir(parents=True)
    (lone / "point.json").write_text("{}")
    assert status.main([str(lone)]) == 2
    err = capsys.readouterr().err
    assert "is a point's run folder" in err and "holds no manifest.json" in err and "Traceback" not in err


def test_resume_of_a_mistyped_sweep_name_names_the_nearest_sweeps(tmp_path):
    from grpokit.run_folder.claim import SweepFolderError, check_before_validation

    logs = tmp_path / "logs"
    for name in ("lr_sweep", "gsm8k_grpo"):
        (logs / name).mkdir(parents=True)
        (logs / name / "manifest.json").write_text(json.dumps({"points": []}))
        (logs / name / "submissions.jsonl").write_text("")
    with pytest.raises(SweepFolderError, match=r"to resume \(nearest: lr_sweep\); nothing was submitted"):
        check_before_validation(logs / "lr_swep", resume=True, generated=False)
    # the sweep command as typed (refused before any point is validated)
    run = _sweep_command("sweep_name=lr_swep", "resume=true", f"logs_root={logs}", cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "no sweep folder" in run.stderr and "nearest: lr_sweep" in run.stderr, run.stderr


def test_cancel_with_no_points_named_speaks_of_the_whole_sweep(tmp_path):
    from grpokit.cli.cancel import cancel

    sweep = tmp_path / "sw"
    _sweep_folder(sweep, [_point(sweep, 0, "completed"), _point(sweep, 1, "failed")])
    out = io.StringIO()
    assert cancel(sweep, [], dry_run=True, out=out) == 0
    assert "none of the sweep's 2 point(s) is queued or running" in out.getvalue()
    assert "named" not in out.getvalue()
    out = io.StringIO()
    assert cancel(sweep, ["1"], dry_run=True, out=out) == 0
    assert "none of the 1 point(s) named is queued or running" in out.getvalue()
