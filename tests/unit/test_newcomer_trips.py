"""Issue 25: what a newcomer still tripped on, each as the user meets it (the command as typed)."""

from __future__ import annotations

import json
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
    from grpokit.submit.stages import launch_sweep

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


def _as_a_shell_starts_a_foreground_job() -> None:
    """SIGINT at its default and unblocked in the command, as an interactive shell starts it: an
    ignored SIGINT is inherited across exec (a test run before this one in the same pytest worker
    may have left it so, e.g. through a library that ignores it), and Python then never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_during_validation_is_one_line_and_exit_130(tmp_path, tmp_path_factory):
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
        env={**_env(), "GRPOKIT_CACHE_DIR": str(tmp_path_factory.mktemp("cold-cache"))},  # validation takes seconds
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_a_shell_starts_a_foreground_job,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    own = Path(f"/proc/{proc.pid}/cmdline").read_bytes()

    def validator() -> int | None:  # a fork has the command's own command line (not sinfo, git, ...)
        for pid in children.read_text().split():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == own:
                    return int(pid)
            except OSError:
                continue
        return None

    while proc.poll() is None and validator() is None:
        pass  # the validator is forked within the first second and works for seconds (a cold cache)
    assert proc.poll() is None, "the command ended before its validator was forked"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip() == "interrupted; nothing submitted"
    # no sweep folder, nor Hydra's own record of the command line (logs_root/.hydra/multirun.yaml:
    # the kit's sweeper does not save it, issue 37)
    assert [p.name for p in tmp_path.iterdir()] == []


def test_ctrl_c_after_submission_began_names_the_folder(monkeypatch, capsys, tmp_path):
    import grpokit.cli
    import grpokit.submit.stages as sweep

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "submitting_into", tmp_path / "sw")
    monkeypatch.setattr("grpokit.cli.sweep.entry", interrupted)
    assert grpokit.cli.main(["sweep", "model=tiny"]) == 130
    assert (
        capsys.readouterr().err.strip()
        == f"interrupted while submitting; see what reached Slurm with: grpokit status {tmp_path / 'sw'}"
    )


def test_sweep_help_names_the_researchers_switches_and_no_internal_note():
    run = subprocess.run(
        [sys.executable, str(REPO / "launch" / "sweep.py"), "--help"], env=_env(), capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    for switch in (
        "resume=true",
        "after=",
        "halving.rungs",
        "halving.keep",
        "use_live_code",
        "runtime.pruning",
        "runtime.wandb_mode",
        "rehearse=true",
    ):
        assert switch in run.stdout, switch
    assert "issue " not in run.stdout.lower()


def test_status_json_keeps_the_whole_reason(tmp_path, point_folder, sweep_manifest):
    reason = (
        "trainer exited with 1; last lines of trainer.log:\nTraceback (most recent call last):\nRuntimeError: CUDA OOM"
    )
    folder = sweep_manifest(tmp_path / "sw", [point_folder(tmp_path / "sw", 0, "failed", reason=reason)])
    run = subprocess.run([GRPOKIT, "status", str(folder), "--json"], env=_env(), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    assert row["state"] == "failed" and row["reason"] == reason
    table = subprocess.run(
        [GRPOKIT, "status", str(folder), "--width", "200"], env=_env(), capture_output=True, text=True
    )
    assert "last lines of trainer.log:" in table.stdout and "CUDA OOM" not in table.stdout  # the table: first line


def test_status_watch_ends_once_every_point_is_final(tmp_path, monkeypatch, capsys, point_folder, sweep_manifest):
    from grpokit.cli import status

    sweep = tmp_path / "sw"
    folder = sweep_manifest(sweep, [point_folder(sweep, 0, "completed"), point_folder(sweep, 1, "running", step=2)])
    running = sweep / "001_lr-1" / "status.json"
    sleeps = []

    def sleep(seconds):  # the point ends while --watch waits for its next redraw
        sleeps.append(seconds)
        done = json.loads(running.read_text())
        done["state"], done["attempts"][0]["end"], done["attempts"][0]["ended_by"] = "completed", "x", "completed"
        running.write_text(json.dumps(done))

    monkeypatch.setattr(status.time, "sleep", sleep)
    assert status.main([str(folder), "--watch", "5", "--width", "120"]) == 0
    assert sleeps == [5.0]  # one redraw while a point ran, none after every point was final
    assert "every point is final" in capsys.readouterr().out


def test_halving_points_at_a_rung_are_waiting_rung_not_completed(tmp_path, point_folder, sweep_manifest):
    from grpokit.reports.report_table import collect_report
    from grpokit.reports.status_table import collect_rows
    from grpokit.run_folder.halving_record import HalvingPlan, HalvingRecord, write_halving
    from grpokit.run_folder.sweep_reader import load_sweep

    sweep = tmp_path / "sw"
    points = [
        point_folder(sweep, 0, "completed", target=2, step=2),
        point_folder(sweep, 1, "completed", target=6, step=6),
        point_folder(sweep, 2, "pruned", target=2, step=2),
    ]
    folder = sweep_manifest(sweep, points)
    write_halving(folder, HalvingRecord(HalvingPlan((2, 4), 0.5, "val_acc", "max", 6), 0, ()))
    rows = collect_rows(load_sweep(folder))
    assert [r.state for r in rows] == ["waiting_rung", "completed", "pruned"]
    assert "rung at step 2 (of 6)" in rows[0].reason
    table = collect_report(load_sweep(folder), ask_slurm=False).table
    assert list(table["state"]) == ["waiting_rung", "completed", "pruned"]
    (folder / "halving.json").unlink()  # not a halving sweep: a point that reached its target is completed
    assert collect_rows(load_sweep(folder))[0].state == "completed"


def test_logs_follow_goes_on_across_halving_rungs_until_the_final_target(tmp_path, monkeypatch):
    import io

    from grpokit.cli import logs
    from grpokit.run_folder.halving_record import HalvingPlan, HalvingRecord, write_halving

    sweep = tmp_path / "sw"
    run = sweep / "000_lr-0"
    (run / "attempts" / "1").mkdir(parents=True)
    write_halving(sweep, HalvingRecord(HalvingPlan((2,), 0.5, "val_acc", "max", 4), 0, ()))
    (run / "attempts" / "1" / "trainer.log").write_text("step:1\nstep:2\n")

    def status(state: str, target: int, ends: list) -> None:
        (run / "status.json").write_text(
            json.dumps(
                {
                    "state": state,
                    "target_step": target,
                    "attempts": [{"attempt": k, "start": "x", "end": e} for k, e in enumerate(ends, 1)],
                }
            )
        )

    status("completed", 2, ["x"])  # trained to the rung: the controller has not ranked it yet
    script = [  # what happens while follow waits (one entry per wait)
        lambda: None,
        lambda: (
            (run / "attempts" / "2").mkdir(),
            (run / "attempts" / "2" / "trainer.log").write_text("step:3\n"),
            status("running", 4, ["x", None]),
        ),
        lambda: (
            (run / "attempts" / "2" / "trainer.log").write_text("step:3\nstep:4\n"),
            status("completed", 4, ["x", "y"]),
        ),
        lambda: None,  # the last lines are printed, then it ends
    ]
    waits = []
    monkeypatch.setattr(logs.time, "sleep", lambda s: (waits.append(s), script[len(waits) - 1]()))
    out = io.StringIO()
    assert logs.follow(run, ("trainer",), 10, 0.01, out) == 0
    text = out.getvalue()
    assert text.index("[trainer] step:2") < text.index("==> attempt 2:") < text.index("[trainer] step:4")
    assert text.rstrip().endswith("000_lr-0 is completed: nothing more will be written <==")
    assert len(waits) == 4  # it did not stop at the rung


def test_heatmap_says_which_step_final_acc_comes_from(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import matplotlib.pyplot as plt
    import pandas as pd

    from grpokit.reports import plots
    from grpokit.reports.summary import metrics_summary

    # points stopped at steps 4, 8 and 12 (halving): final_acc_step says where each value comes from
    merged = pd.DataFrame({"step": [1, 2, 3, 4], "val-core/gsm8k/acc/mean@1": [0.1, None, 0.3, None]})
    assert metrics_summary(merged)["final_acc_step:gsm8k"] == 3
    table = pd.DataFrame(
        {
            "n": ["4", "4", "8", "8"],
            "lr": ["1", "2", "1", "2"],
            "final_acc:gsm8k": [0.1, 0.2, 0.3, 0.4],
            "final_acc_step:gsm8k": [4.0, 8.0, 12.0, 12.0],
        }
    )
    figures = []
    monkeypatch.setattr(plots.plt, "close", lambda fig=None: figures.append(fig))

    def drawn(table):
        report = SimpleNamespace(sweep=SimpleNamespace(name="sw"), table=table)
        assert plots.plot_heatmap(report, tmp_path / "h.png", "n", "lr") is not None
        ax = figures[-1].axes[0]
        return ax.get_title(), [t.get_text() for t in ax.texts]

    title, cells = drawn(table)
    assert "steps differ: 4, 8, 12" in title and "0.100\n@4" in cells and "0.400\n@12" in cells
    title, cells = drawn(table.assign(**{"final_acc_step:gsm8k": 12.0}))
    assert title.endswith(", step 12") and "0.100" in cells
    plt.close("all")


#: Values a researcher quotes for Hydra: a prompt template, a W&B note, a run name.
QUOTED = ["tmpl(x)", "it's", 'say "hi"', "a; b", "run `date`", "line1\nline2 (x)"]


def _hydra_quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_quoted_values_reach_verl_intact(tmp_path):
    from grpokit.config.compose import compose_kit
    from grpokit.config.point import build_point
    from grpokit.config.verl_schema import apply_overrides

    for text in QUOTED:
        overrides = [
            f"verl.data.prompt_key={_hydra_quoted(text)}",
            f"verl.trainer.experiment_name={_hydra_quoted(text)}",
            f"logs_root={tmp_path / 'with space'}",
        ]
        spec = build_point(compose_kit(overrides), index=0, kit_overrides=overrides, swept={})
        verl = apply_overrides(spec.verl_overrides)  # verl's own parser reads what the trainer is given
        assert verl.data.prompt_key == text and verl.trainer.experiment_name == text, spec.verl_overrides
        assert verl.trainer.default_local_dir == spec.checkpoint_dir and " " in spec.checkpoint_dir


def test_a_dry_run_accepts_quoted_values_and_dry_run_md_carries_them(kit, kit_overrides, tmp_path):
    text = 'tmpl(x); it\'s "q" `d`\nline2'
    run = kit.run(
        "sweep.py", [*kit_overrides, "sweep_name=quoted", "dry_run=true", f"verl.data.prompt_key={_hydra_quoted(text)}"]
    )
    assert run.returncode == 0, run.stderr[-2000:]
    dry = (tmp_path / "logs" / "quoted" / "dry_run.md").read_text()
    assert f"data.prompt_key={_hydra_quoted(text)} " in dry


def test_fix_hints_name_the_command_a_wheel_install_has(monkeypatch, bare_point, tmp_path):
    from grpokit import paths
    from grpokit.validate.kit_checks import download_hint

    assert paths.kit_command("prepare-data", "gsm8k --out d") == "python launch/prepare_data.py gsm8k --out d"
    tiny = bare_point(tmp_path, model={"source": "build", "path": "/m/tiny"})
    assert download_hint(tiny) == "python launch/make_tiny_model.py --out /m/tiny"
    monkeypatch.setattr(paths, "_checkout_root", lambda: None)  # a wheel in a virtual environment: no launch/
    assert paths.kit_command("prepare-data", "gsm8k --out d") == "grpokit prepare-data gsm8k --out d"
    assert paths.kit_command("status", "logs/s --watch") == "grpokit status logs/s --watch"
    assert download_hint(tiny) == "grpokit make-tiny-model --out /m/tiny"
    hub = bare_point(tmp_path, model={"hub_id": "Qwen/X", "path": "/m/x"}, kit_overrides=["model=x"])
    assert download_hint(hub).startswith("grpokit download model=x  (fetches Qwen/X")


def test_readme_gives_the_locked_installs_the_makefile_uses():
    """The README's by-hand installs take their versions from the lock the Makefile installs from."""
    import importlib.util

    found = importlib.util.spec_from_file_location(
        "readme_commands", REPO / "tests" / "integration" / "test_readme_commands.py"
    )
    readme = importlib.util.module_from_spec(found)
    sys.modules.setdefault("readme_commands", readme)  # its dataclasses look their module up
    readme.__name__ = "readme_commands"
    found.loader.exec_module(readme)
    commands = readme.shell_commands(REPO / "README.md")
    (torch_cpu,) = [c for c in commands if c.text.startswith("pip install -c constraints/cpu.txt torch")]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_cpu.text
    assert torch_cpu.skip == "needs internet"  # the README test does not reinstall torch
    following = commands[commands.index(torch_cpu) + 1]
    assert following.text.startswith("pip install -c constraints/cpu.txt .")
    assert "[train]" not in following.text.split("#")[0]
    (gpu,) = [c for c in commands if "constraints/gpu.txt" in c.text]
    assert "'.[train]'" in gpu.text
    makefile = (REPO / "Makefile").read_text()
    assert "LOCK  := constraints/$(if $(HAS_GPU),gpu,cpu).txt" in makefile
    assert "pip install -q -c $(LOCK) torch" in makefile and "pip install -q -c $(LOCK) -e" in makefile


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ({"state": "skipped_no_gpu", "last_step": None}, "the point never trained (skipped_no_gpu"),
        ({"state": "failed", "last_step": None}, "has not trained a step yet (state failed"),
        ({"state": "completed", "last_step": 4}, "trainer.save_freq > 0"),
    ],
)
def test_merge_without_a_checkpoint_says_why(tmp_path, status, says):
    run = tmp_path / "sw" / "000_lr-0"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps(status))
    out = subprocess.run([GRPOKIT, "merge", str(run)], env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert says in out.stderr, out.stderr
    assert ("save_freq" in out.stderr) == (status["state"] == "completed")  # not blamed when it never trained


def test_a_launch_script_without_the_kit_says_how_to_get_it(tmp_path):
    # A Python without the kit (the venv not active), from another folder.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = subprocess.run(
        [sys.executable, "-S", str(REPO / "launch" / "status.py"), "x"],  # -S: no site-packages, no kit
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "No module named 'grpokit'" in out.stderr and "source .venv/bin/activate" in out.stderr
    assert "pip install" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_resume_refuses_a_changed_value_before_validating(kit, kit_overrides, tmp_path, monkeypatch, capsys):
    import grpokit.submit.stages as sweep_mod
    from grpokit.cli import sweep

    first = kit.run(
        "sweep.py", ["-m", *kit_overrides, "sweep_name=res", "dry_run=true", "verl.data.train_batch_size=8"]
    )
    assert first.returncode == 0, first.stderr[-2000:]
    (tmp_path / "logs" / "res" / "submissions.jsonl").write_text("")  # as a submitted sweep's folder holds

    def validated(specs):
        raise AssertionError("validated before the resume check")

    monkeypatch.setenv("GRPOKIT_VALIDATE_IN_PROCESS", "1")
    monkeypatch.setattr(sweep_mod, "validate_points", validated)
    code = sweep.entry(["-m", *kit_overrides, "sweep_name=res", "resume=true", "verl.data.train_batch_size=16"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "resume=true refused" in err and "verl.data.train_batch_size: 8 -> 16" in err, err


def test_the_rehearsal_trainer_reads_quoted_values_as_verls_hydra_does():
    """The kit quotes its derived names for verl (``trainer.experiment_name='000'``); the stand-in
    trainer must read them as verl's Hydra does, or W&B ids and folders would carry the quotes."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from grpokit.rehearsal.rehearsal_trainer import parse

    parser = OverridesParser.create()
    for arg in ["a='000'", 'a="x y"', "a='it\\'s'", "a=plain", "a='back\\\\slash'", "a='(x; \"y\")'", "a=[1,2]"]:
        assert parse([arg])["a"] == (parser.parse_override(arg).value() if "[" not in arg else "[1,2]"), arg
