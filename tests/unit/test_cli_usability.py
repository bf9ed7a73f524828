"""The daily commands in a newcomer's terminal: status's table at 80/120/200 columns and piped,
a sweep named instead of its folder, a closed pipe, a mistyped experiment, the dry run's summary,
env.json's trainer variables, and plots without labelled lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GRPOKIT = [str(REPO / ".venv" / "bin" / "grpokit")]


def make_sweep(folder: Path, n: int, name: str = "lr_sweep") -> Path:
    """A sweep folder with ``n`` points that were never submitted (no Slurm ids: status asks nothing)."""
    points = []
    for i in range(n):
        point = f"{i:03d}_train_batch_size-{8 * (i + 1)}_lr-1e-06"
        (folder / point).mkdir(parents=True)
        points.append(
            {
                "index": i,
                "name": point,
                "run_dir": str(folder / point),
                "swept": {"data.train_batch_size": 8 * (i + 1), "actor_rollout_ref.actor.optim.lr": 1e-6},
            }
        )
    (folder / "manifest.json").write_text(json.dumps({"sweep": name, "points": points}))
    return folder


@pytest.mark.parametrize("command", ["grpokit status", "python launch/status.py"])
def test_status_json_into_a_closed_pipe_ends_quietly(tmp_path, command):
    # Enough rows to fill the pipe's buffer, so the writer meets the closed end (`| head -c 100`).
    # Both ways the README names the command: the console script and the checkout's shim.
    folder = make_sweep(tmp_path / "sw", 300)
    program = GRPOKIT[0] + " status" if command == "grpokit status" else f"{sys.executable} {REPO}/launch/status.py"
    run = subprocess.run(
        f"{program} {folder} --json | head -c 100 >/dev/null; echo rc=${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in run.stderr and "BrokenPipeError" not in run.stderr, run.stderr
    assert run.stderr == ""
    assert run.stdout.strip() == "rc=141"


def test_curves_without_a_reward_line_draw_no_legend_and_warn_nothing(tmp_path):
    import warnings

    import matplotlib.pyplot as plt
    import pandas as pd

    from grpokit.reports.plots import plot_curves
    from grpokit.reports.report_table import SweepReport
    from grpokit.run_folder.sweep_reader import load_sweep

    sweep = load_sweep(make_sweep(tmp_path / "sw", 2))
    table = pd.DataFrame({"index": [0, 1], "name": [p.name for p in sweep.points]})
    # Points that logged validation only (no critic/rewards/mean): the reward panel has no line.
    curves = {i: pd.DataFrame({"step": [1, 2], "val-core/gsm8k/acc/mean@1": [0.1, 0.2]}) for i in (0, 1)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found" is a UserWarning
        path = plot_curves(SweepReport(sweep=sweep, table=table, curves=curves), tmp_path / "curves.png")
    assert path.stat().st_size > 0
    plt.close("all")


def _status_text(folder: Path, width: int | None) -> str:
    import io

    from rich.console import Console

    from grpokit.reports.status_table import collect_rows, render_table
    from grpokit.run_folder.sweep_reader import load_sweep

    sweep = load_sweep(folder)
    rows = collect_rows(sweep)
    for r, state in zip(rows, ["skipped_no_gpu", "running", "failed", "not submitted"], strict=True):
        r.state, r.job_id, r.step, r.target_step = state, f"123456_{r.index}", 12, 200
        r.reason = "trainer exited 1: CUDA out of memory in actor update at /home/x/verl/workers/fsdp.py:123 " * 2
    buf = io.StringIO()
    # width None is the piped console of `grpokit status` (PIPED_WIDTH, nothing cut).
    Console(file=buf, width=width or 100_000, color_system=None).print(render_table(sweep, rows, width))
    return buf.getvalue()


def test_status_table_keeps_point_state_step_and_job_whole_at_80_100_120_200_and_piped(tmp_path):
    folder = make_sweep(tmp_path / "sw", 4)
    names = [f"{i:03d}_train_batch_size-{8 * (i + 1)}_lr-1e-06" for i in range(4)]
    for width in (80, 100, 120, 200, None):
        text = _status_text(folder, width)
        lines = text.splitlines()
        if width is not None:
            assert max(len(line) for line in lines) <= width, (width, text)
        header = next(line for line in lines if "point " in line).replace("┃", " ").split()
        assert {"point", "job", "state", "step", "reason"} <= set(header), (width, header)  # no 'po…'

        states = ["skipped_no_gpu", "running", "failed", "not submitted"]
        for i, (name, state) in enumerate(zip(names, states, strict=True)):
            # the name whole on one line; when narrow, its NNN prefix and the swept values in their columns
            whole = width is None or width >= 200
            row = next(line for line in lines if (name if whole else f"{i:03d} ") in line)
            if not whole:
                assert f" {8 * (i + 1)} " in row and "1e-06" in row, (width, row)
            assert state in row and f"123456_{i}" in row and "12/200" in row, (width, row)
            if width is None:
                assert row.rstrip(" │").endswith("fsdp.py:123"), row  # piped: the reason whole too
            else:
                assert "…" in row  # the reason cut with an ellipsis
    assert "progress" not in _status_text(folder, 80) and "progress" in _status_text(folder, 200)
    # issue 25: at 100 columns progress, reward, attempts and the swept keys all stay
    header_100 = " ".join(_status_text(folder, 100).splitlines()[1:5])
    for column in ("progress", "reward", "att", "lr", "batch_size"):
        assert column in header_100, (column, header_100)


def test_a_sweep_named_by_its_name_is_found_under_the_projects_logs(tmp_path, monkeypatch):
    from grpokit.run_folder.locate import SweepNotFound, resolve_sweep

    monkeypatch.setenv("GRPOKIT_HOME", str(tmp_path))  # the project folder holding logs/
    folder = make_sweep(tmp_path / "logs" / "lr_sweep", 2)
    make_sweep(tmp_path / "logs" / "gsm8k_grpo" / "sweep-1", 1)
    assert resolve_sweep("lr_sweep") == folder and resolve_sweep(str(folder)) == folder
    assert resolve_sweep("lr_sweep/001_train_batch_size-16_lr-1e-06") == folder / "001_train_batch_size-16_lr-1e-06"
    env = {**os.environ, "GRPOKIT_HOME": str(tmp_path)}
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    ok = subprocess.run([*GRPOKIT, "status", "lr_sweep", "--json"], env=env, cwd=cwd, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert [r["name"] for r in json.loads(ok.stdout)] == [
        p["name"] for p in json.loads(folder.joinpath("manifest.json").read_text())["points"]
    ]
    for command in (
        ["status", "lr_swep"],
        ["report", "lr_swep"],
        ["cancel", "lr_swep", "--dry-run"],
        ["logs", "lr_swep", "0"],
    ):
        bad = subprocess.run([*GRPOKIT, *command], env=env, cwd=cwd, capture_output=True, text=True)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert "no sweep folder 'lr_swep'" in bad.stderr and "nearest: lr_sweep" in bad.stderr, bad.stderr
    with pytest.raises(SweepNotFound, match="nearest: gsm8k_grpo/sweep-1, lr_sweep$"):
        resolve_sweep("nothing_like_it")  # no close name: the latest sweeps are listed


def test_a_dry_run_prints_a_summary_and_keeps_the_full_text_in_dry_run_md(kit, kit_overrides, tmp_path):
    out = kit.run(
        "sweep.py",
        ["-m", *kit_overrides, *kit.slurm_cluster, "sweep_name=dry", "dry_run=true", "verl.data.train_batch_size=8,16"],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    path = tmp_path / "logs" / "dry" / "dry_run.md"
    full = path.read_text()
    assert "#SBATCH --array=0-1%" in full and "data.train_batch_size=16 " in full
    shown = out.stdout
    assert "#SBATCH --" not in shown and "data.train_batch_size=16 " not in shown  # no command line

    assert len(shown.splitlines()) < 20, shown
    assert "Dry run of sweep dry: 2 point(s)" in shown and "array of 2:" in shown and str(path) in shown
    assert "000_train_batch_size-8" in shown and "train_batch_size=16" in shown


def test_a_64_point_summary_lists_the_first_and_last_points_and_counts_the_rest():
    from types import SimpleNamespace

    from grpokit.submit.dry_run_summary import point_lines

    specs = [SimpleNamespace(name=f"{i:03d}_lr-{i}", swept={"actor.optim.lr": i}) for i in range(64)]
    lines = point_lines(specs)
    assert len(lines) == 20 and "... 45 more ..." in lines[15]
    assert lines[0].split() == ["000_lr-0", "lr=0"] and lines[-1].split() == ["063_lr-63", "lr=63"]


def test_a_mistyped_experiment_is_one_line_with_the_real_choices_exit_2(tmp_path):
    run = subprocess.run(
        [*GRPOKIT, "sweep", "experiment=gsm8k_grop", f"logs_root={tmp_path / 'logs'}", "dry_run=true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    problems = [line for line in run.stderr.splitlines() if line.startswith("[all points]")]
    assert problems == [
        "[all points] experiment: no experiment 'gsm8k_grop' (choices: gsm8k_grpo, length_grpo, memalpha_grpo, "
        "memalpha_grpo_full, tool_memory_grpo, verl_script); fix: did you mean experiment=gsm8k_grpo?"
    ], run.stderr
    assert (
        " _grpo" not in run.stderr
        and "(choices: _grpo" not in run.stderr
        and "search path" not in run.stderr.lower()
        and "Traceback" not in run.stderr
    )
    assert not (tmp_path / "logs").exists()


def test_group_choices_pass_real_values_sweeps_and_leave_hydra_syntax_alone():
    from grpokit.validate.group_choices import group_problems

    ok = ["-m", "experiment=gsm8k_grpo,memalpha_grpo", "+model=tiny", "cluster=choice(local,slurm)", "lr=1"]
    assert group_problems(ok) == []
    (bad,) = group_problems(["cluster=slurmm"])
    assert bad.key == "cluster" and bad.fix == "did you mean cluster=slurm?"


def test_env_json_and_verl_cmd_hold_every_variable_the_job_sets_for_the_trainer(tmp_path, bare_point, monkeypatch):
    import dataclasses
    import importlib.util
    import signal

    # the driver with its stand-ins for Ray, a sidecar, the trainer and Slurm (test_driver_lifecycle.py)
    found = importlib.util.spec_from_file_location("lifecycle", Path(__file__).parent / "test_driver_lifecycle.py")
    lifecycle = importlib.util.module_from_spec(found)
    found.loader.exec_module(lifecycle)
    make_spec, run_attempt = lifecycle.make_spec, lifecycle.run_attempt

    class RecordingTrainer(lifecycle.doubles.StandInTrainer):  # keeps the environment it was started with
        def __init__(self, cmd, log_path, *, env, **kwargs):
            super().__init__(cmd, log_path, env=env, **kwargs)
            self.env = dict(env)

    monkeypatch.setattr(lifecycle.doubles, "StandInTrainer", RecordingTrainer)

    from grpokit.runtime.driver import STOP_SIGNALS

    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        # A compute node without internet (W&B offline), a user's variable and a secret in runtime.env.
        spec = make_spec(
            bare_point, tmp_path, steps=2, wandb_mode="offline", env={"MY_FLAG": "1", "HF_TOKEN": "hf_abc123"}
        )
        logger = "trainer.logger=[console,file,wandb]"  # W&B offline: its run lands in the run folder
        spec = dataclasses.replace(
            spec, verl_overrides=[logger if o.startswith("trainer.logger=") else o for o in spec.verl_overrides]
        )
        r = run_attempt(spec)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert r.code == 0, r.status
    run_dir = Path(spec.run_dir)
    recorded = json.loads((run_dir / "env.json").read_text())["trainer_env"]
    given = r.trainers[0].env  # what the trainer process was started with
    for key in ("WANDB_MODE", "WANDB_RUN_ID", "WANDB_DIR", "MY_FLAG", "VERL_FILE_LOGGER_PATH", "RAY_ADDRESS"):
        assert recorded[key] == given[key], key
    assert recorded["WANDB_MODE"] == "offline" and recorded["MY_FLAG"] == "1"
    assert recorded["HF_TOKEN"] == "<set>" and "PATH" not in recorded  # inherited, unchanged: not listed
    header = (run_dir / "verl_cmd.sh").read_text().splitlines()[3]
    assert {"WANDB_MODE", "MY_FLAG", "HF_TOKEN", "RAY_ADDRESS"} <= set(header.lstrip("# ").split())
    for name in ("env.json", "verl_cmd.sh"):
        assert "hf_abc123" not in (run_dir / name).read_text(), name
