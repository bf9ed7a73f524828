"""Issue 25: what a newcomer still tripped on, each as the user meets it (the command as typed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GRPOKIT = str(REPO / ".venv" / "bin" / "grpokit")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _sweep(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("value", ["range(8,8)", "range(0)"])
def test_a_sweep_with_no_points_is_one_line_naming_the_key(tmp_path, value):
    run = _sweep("-m", f"verl.data.train_batch_size={value}", "dry_run=true", f"logs_root={tmp_path}", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "IndexError" not in run.stderr
    problem = [line for line in run.stderr.splitlines() if line.startswith("[all points]")]
    assert len(problem) == 1 and "verl.data.train_batch_size" in problem[0] and "no points" in problem[0]
    assert not any(tmp_path.iterdir()), "nothing is written for a refused sweep"


def test_launcher_refuses_an_empty_list_of_points_in_one_line(capsys):
    from grpokit.submit.sweep import launch_sweep

    with pytest.raises(SystemExit) as exc:
        launch_sweep(None, None, [], 0)
    assert exc.value.code == 2
    assert "no points" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [
        "sweep",
        "run",
        "status",
        "report",
        "resubmit",
        "logs",
        "cancel",
        "merge",
        "serve-eval",
        "prepare-data",
        "download",
        "make-tiny-model",
    ],
)
def test_every_command_prints_its_help(command):
    from grpokit.cli import COMMANDS

    assert command in COMMANDS
    run = subprocess.run([GRPOKIT, command, "--help"], env=_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "usage" in run.stdout.lower() and "Exception" not in run.stdout + run.stderr


def test_ctrl_c_during_validation_is_one_line_and_exit_130(tmp_path):
    # A terminal's Ctrl-C: SIGINT to the whole foreground process group (the command and the
    # validator it forks), sent once the forked validator exists (the command is validating).
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "launch" / "sweep.py"),
            "-m",
            "verl.data.train_batch_size=8,16",
            "dry_run=true",
            f"logs_root={tmp_path}",
        ],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while proc.poll() is None and not children.read_text().split():
        pass  # the validator is forked within the first second
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip() == "interrupted; nothing submitted"
    assert not any(tmp_path.iterdir())


def test_ctrl_c_after_submission_began_names_the_folder(monkeypatch, capsys, tmp_path):
    import grpokit.cli
    import grpokit.submit.sweep as sweep

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "submitting_into", tmp_path / "sw")
    monkeypatch.setattr("grpokit.cli.sweep.entry", interrupted)
    assert grpokit.cli.main(["sweep", "model=tiny"]) == 130
    assert (
        capsys.readouterr().err.strip()
        == f"interrupted while submitting; see what reached Slurm with: grpokit status {tmp_path / 'sw'}"
    )
