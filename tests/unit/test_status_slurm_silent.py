"""``status`` when Slurm does not answer (issue 36 item 6): slurmctld stopped.

Slurm's clients here are real executables on PATH (shell scripts in a temporary folder), not mocks:
a ``squeue`` that hangs, one that fails the way squeue does when it cannot reach slurmctld, and one
that answers. ``status`` must return within 5 s from the run folders, with one line saying since
when Slurm has not answered (``<sweep>/slurm_unanswered.json`` keeps the first unanswered ask).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from grpokit.cli import status
from grpokit.run_folder.layout import SLURM_SILENCE

HANG = "#!/bin/sh\nexec sleep 60\n"
NO_CONTROLLER = (
    "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
)
ANSWERS = "#!/bin/sh\nexit 0\n"  # squeue -h for jobs it no longer holds: nothing, exit 0


def _bin(tmp_path: Path, **scripts: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    return folder


def _sweep(tmp_path: Path) -> Path:
    """One point whose job 51_0 runs (status.json running, attempt 1 open, a fresh heartbeat)."""
    sweep = tmp_path / "logs" / "s"
    run = sweep / "000"
    run.mkdir(parents=True)
    status_json = {
        "state": "running",
        "reason": "",
        "target_step": 40,
        "slurm": {"job_id": "52", "array_job_id": "51", "array_task_id": 0},
        "attempts": [{"attempt": 1, "start": "2026-12-03T07:00:00+00:00", "end": None, "ended_by": None}],
    }
    (run / "status.json").write_text(json.dumps(status_json))
    points = [{"index": 0, "name": "000", "run_dir": str(run), "swept": {}, "job_id": "51_0"}]
    (sweep / "manifest.json").write_text(json.dumps({"sweep": "s", "swept_keys": [], "points": points}))
    return sweep


def _status(sweep: Path, capsys, *extra: str) -> tuple[float, str, str]:
    t = time.monotonic()
    assert status.main([str(sweep), *extra]) == 0
    took = time.monotonic() - t
    out = capsys.readouterr()
    return took, out.out, out.err


@pytest.mark.timeout(60)
def test_status_answers_within_5_s_when_squeue_hangs(tmp_path, monkeypatch, capsys):
    sweep = _sweep(tmp_path)
    monkeypatch.setenv(
        "PATH", f"{_bin(tmp_path, squeue=HANG, scontrol=HANG, sacct=HANG)}{os.pathsep}{os.environ['PATH']}"
    )
    took, out, _ = _status(sweep, capsys)
    assert took < 5.0, f"status took {took:.1f} s with a hanging squeue"
    assert "running" in out  # from the run folder
    assert "Slurm has not answered since" in out and "squeue: no answer within" in out
    since = json.loads((sweep / SLURM_SILENCE).read_text())["since"]
    # --json: stdout stays one JSON list, the line goes to stderr; the first ask's time is kept
    took, out, err = _status(sweep, capsys, "--json")
    assert took < 5.0
    assert json.loads(out)[0]["state"] == "running"
    assert "Slurm has not answered since" in err
    assert json.loads((sweep / SLURM_SILENCE).read_text())["since"] == since


@pytest.mark.timeout(60)
def test_a_controller_error_skips_scontrol_and_an_answer_ends_the_silence(tmp_path, monkeypatch, capsys):
    sweep = _sweep(tmp_path)
    asked = tmp_path / "scontrol_was_asked"
    scontrol = f"#!/bin/sh\ntouch {asked}\nexit 1\n"
    bindir = _bin(tmp_path, squeue=NO_CONTROLLER, scontrol=scontrol, sacct=ANSWERS)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    took, out, _ = _status(sweep, capsys)
    assert took < 5.0 and not asked.exists()  # the controller squeue could not reach is not asked again
    assert "Slurm has not answered since" in out and "Unable to contact slurm controller" in out
    assert (sweep / SLURM_SILENCE).exists()
    _bin(tmp_path, squeue=ANSWERS)
    took, out, _ = _status(sweep, capsys)
    assert "Slurm has not answered" not in out and not (sweep / SLURM_SILENCE).exists()
