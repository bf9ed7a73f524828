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


def _finish(run: Path) -> None:
    done = json.loads((run / "status.json").read_text())
    done["state"], done["attempts"][0]["end"], done["attempts"][0]["ended_by"] = "completed", "x", "completed"
    (run / "status.json").write_text(json.dumps(done))


# --- 1. status, resume, cancel -------------------------------------------------------------------


def test_status_watch_piped_prints_each_refresh_as_it_comes_and_the_last_line_on_its_own(
    tmp_path, point_folder, sweep_manifest
):
    sweep = tmp_path / "sw"
    sweep_manifest(sweep, [point_folder(sweep, 0, "completed"), point_folder(sweep, 1, "running")])
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


def test_status_of_a_point_folder_shows_that_point_of_its_sweep(tmp_path, capsys, point_folder, sweep_manifest):
    from grpokit.cli import status

    sweep = tmp_path / "sw"
    sweep_manifest(sweep, [point_folder(sweep, 0, "completed"), point_folder(sweep, 1, "failed")])
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


def test_cancel_with_no_points_named_speaks_of_the_whole_sweep(tmp_path, point_folder, sweep_manifest):
    from grpokit.cli.cancel import cancel

    sweep = tmp_path / "sw"
    sweep_manifest(sweep, [point_folder(sweep, 0, "completed"), point_folder(sweep, 1, "failed")])
    out = io.StringIO()
    assert cancel(sweep, [], dry_run=True, out=out) == 0
    assert "none of the sweep's 2 point(s) is queued or running" in out.getvalue()
    assert "named" not in out.getvalue()
    out = io.StringIO()
    assert cancel(sweep, ["1"], dry_run=True, out=out) == 0
    assert "none of the 1 point(s) named is queued or running" in out.getvalue()


# --- 2. the key and the points a refusal names ---------------------------------------------------


def test_a_list_for_a_key_the_kit_derives_from_is_refused_on_that_key(tmp_path):
    run = _sweep_command("-m", "verl.actor_rollout_ref.rollout.n=[]", "dry_run=true", cwd=tmp_path, home=tmp_path)
    assert run.returncode == 2, run.stderr
    problems = [line for line in run.stderr.splitlines() if line.startswith("[")]
    assert len(problems) == 1, run.stderr
    assert problems[0].startswith("[all points] verl.actor_rollout_ref.rollout.n: [] is not an integer"), problems
    assert "ListConfig" not in run.stderr and "TypeError" not in run.stderr and "cannot be computed" not in run.stderr
    # the same check as data.train_batch_size=[] (which was refused on its key already), on every key
    # a kit derivation reads
    from grpokit.config.compose import compose_kit
    from grpokit.config.resolvers import derivation_inputs
    from grpokit.validate.command_line import check

    _, (listed,) = check(["verl.data.train_batch_size=[8,16]"])  # a list typed for a sweep
    assert listed.fix.endswith("to sweep these values: verl.data.train_batch_size=8,16"), listed
    inputs = derivation_inputs(compose_kit([]))
    assert "verl.actor_rollout_ref.rollout.max_num_seqs" in inputs["verl.actor_rollout_ref.rollout.n"]
    for key in inputs:
        _, found = check([f"{key}=[]"])
        assert [p.key for p in found] == [key] and "[] is not" in found[0].message, (key, found)


def test_a_bad_value_of_a_swept_key_names_only_the_points_that_hold_it(tmp_path):
    run = _sweep_command("-m", "verl.data.train_batch_size=8,eight,16", "dry_run=true", cwd=tmp_path, home=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "all points" not in run.stderr, run.stderr
    problems = [line for line in run.stderr.splitlines() if line.startswith("[")]
    assert problems == [
        "[001_train_batch_size-eight] verl.data.train_batch_size: 'eight' is not an integer; "
        "fix: set verl.data.train_batch_size=<integer>, e.g. verl.data.train_batch_size=8"
    ], run.stderr
    assert "1 problem(s) in 1 point(s)" in run.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["verl.data.train_batch_size=8,eight,16"],
        ["verl.data.train_batch_size=8,16", "verl.actor_rollout_ref.rollout.n=4,-8,2", "cluster=slurm"],
        ["experiment=gsm8k_grpo,gsm8k_grpo", "verl.data.max_response_length=range(256,1025,256)"],
        ["verl.data.train_batch_size=8,16", "verl.data.train_batch_size=32,x"],  # typed twice: the last wins
    ],
)
def test_the_points_named_are_those_hydras_sweeper_makes(argv):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from grpokit.config.point import point_name
    from grpokit.submit.points import swept_keys
    from grpokit.validate.value_points import dimensions, points_with

    parsed = OverridesParser.create().parse_overrides(argv)
    (jobs,) = BasicSweeper.split_arguments(parsed, None)  # what the sweep command's launcher receives
    keys = swept_keys(jobs)
    names = []
    for index, overrides in enumerate(jobs):  # as grpokit.submit.points names each point
        pairs = [o.split("=", 1) for o in overrides]
        names.append(point_name(index, {k.lstrip("+~"): v for k, v in pairs if k.lstrip("+~") in keys}))
    dims = dimensions(parsed)
    for key, values in dims:
        for value in values:
            holding = [n for n, job in zip(names, jobs, strict=True) if f"{key}={value}" in job]
            expected = None if len(holding) == len(names) else holding
            assert points_with(dims, key, value) == expected, (key, value)
    if argv[-1] == "verl.data.train_batch_size=32,x":  # the values typed first are in no point
        assert points_with(dims, "verl.data.train_batch_size", "8") is None


# --- 3. the job id of a one-point sweep ----------------------------------------------------------


def test_a_point_submitted_alone_is_called_a_job_not_an_array():
    from grpokit.submit.dispatch import arrays_phrase

    assert arrays_phrase(["120"]) == "Slurm job 120"
    assert arrays_phrase(["120_0", "120_1", None]) == "Slurm array 120"
    assert arrays_phrase(["120_0", "121_0"]) == "Slurm arrays 120, 121"
    assert arrays_phrase(["120_0", "120_1", "121"]) == "Slurm array 120 and Slurm job 121"  # MaxArraySize split


def test_the_docs_give_the_job_id_form_of_a_one_point_sweep_too():
    text = " ".join((REPO / "docs" / "preemption-and-retries.md").read_text().split())
    assert "scancel --signal=USR2 <array id>_<task id>" not in text  # "Invalid job id specified" for a plain job
    assert "`scancel --signal=USR2 <job>`" in text and "`job` column" in text
    assert "`<array id>_<task id>`" in text and "a plain `<job id>`" in text


# --- 4. a dry run leaves no Hydra file -----------------------------------------------------------


def test_a_dry_run_outside_a_checkout_leaves_only_its_dry_run_files(tmp_path, tiny_model_dir, gsm8k_dir):
    home = tmp_path / "project"  # the project folder of a wheel user: the working folder
    home.mkdir()
    point = ["model=tiny", f"model.path={tiny_model_dir}", f"experiment.data_dir={gsm8k_dir}", "dry_run=true"]
    run = _sweep_command("-m", *point, "sweep_name=dry", "verl.data.train_batch_size=8,16", cwd=home, home=home)
    assert run.returncode == 0, run.stderr[-3000:]
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    assert left == ["logs/dry/dry_run.md", "logs/dry/manifest.json"], left  # no logs/.hydra/multirun.yaml

    # refused while its points are validated (after Hydra's sweeper ran): the response is longer than the model holds
    refused = _sweep_command(
        "-m", *point, "sweep_name=bad", "verl.data.max_response_length=100000", cwd=home, home=home
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file()) == left
