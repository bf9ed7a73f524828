"""Frozen code per sweep on the real Slurm test cluster (issue 16.2).

The test makes its own throwaway git checkout of the kit (a copy of this checkout's ``src/`` and
``launch/``, committed in a temporary folder; nothing is installed: ``PYTHONPATH`` points at the
copy's ``src``), submits a 2-point sweep from it whose jobs Slurm holds (``--hold``), edits the
copy's code while they are queued, releases them, and requeues one point with ``scancel
--signal=USR2``. Every process that imports ``grpokit`` in the jobs (the driver, Ray's processes,
verl's Ray workers through the kit's setup hook) appends a line to a marker file saying which code
it ran. The trainer is the TEST DOUBLE tests/doubles/fake_verl_trainer.py (verl needs a GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

#: What the copy's grpokit/__init__.py writes on import: which code, which task, which attempt.
MARK = (
    "import os as _os\n"
    "if _os.environ.get('FROZEN_TEST_MARK'):\n"
    "    with open(_os.environ['FROZEN_TEST_MARK'], 'a') as _f:\n"
    "        _f.write('{code} %s %s\\n' % (_os.environ.get('SLURM_ARRAY_TASK_ID'), "
    "_os.environ.get('SLURM_RESTART_COUNT', '0')))\n"
)


def git(root: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def throwaway_checkout(repo: Path, dest: Path) -> Path:
    """A git checkout in ``dest`` holding this checkout's ``src/`` and ``launch/`` as they are now."""
    files = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "src", "launch")
    for rel in filter(None, files.split("\0")):
        if (repo / rel).is_file() and "__pycache__" not in rel:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, dest / rel)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "throwaway copy")
    return dest


def marks(path: Path) -> set[tuple[str, str, str]]:
    return {tuple(line.split()) for line in path.read_text().splitlines()} if path.exists() else set()


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.timeout(900)  # three attempts, each starting Ray (40-240 s on a loaded 2-core machine)
def test_queued_and_requeued_attempts_run_the_code_of_the_submission(kit, slurm, kit_overrides, tmp_path):
    copy = throwaway_checkout(kit.repo, tmp_path / "kit")
    init = copy / "src" / "grpokit" / "__init__.py"
    init.write_text(init.read_text() + MARK.format(code="old"))  # uncommitted: the snapshot's dirty.diff
    mark = tmp_path / "marks.txt"
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "FROZEN_TEST_MARK": str(mark), "FAKE_TRAINER_STEP_S": "1"}
    name = "frozen"
    out = subprocess.run(
        [
            sys.executable,
            str(copy / "launch" / "sweep.py"),
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "+cluster.additional_parameters.hold=true",  # queued until released: edited meanwhile
            "verl.trainer.total_training_steps=6",
            "verl.actor_rollout_ref.actor.optim.lr=1e-6,2e-6",
            f"sweep_name={name}",
        ],
        capture_output=True,
        text=True,
        cwd=copy,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = tmp_path / "logs" / name
    manifest = kit.manifest(sweep)
    points, run_dirs = manifest["points"], [Path(p["run_dir"]) for p in manifest["points"]]
    head = git(copy, "rev-parse", "HEAD")
    assert manifest["code"] == {"path": str(sweep / "code" / "src"), "commit": head, "dirty": True}
    assert "+" + MARK.format(code="old").splitlines()[0] in (sweep / "code" / "dirty.diff").read_text()

    # the code changes while the jobs are queued ...
    init.write_text(init.read_text().replace(MARK.format(code="old"), MARK.format(code="new")))
    subprocess.run([sys.executable, "-c", "import grpokit"], env={**env, "SLURM_ARRAY_TASK_ID": "live"}, check=True)
    assert ("new", "live", "0") in marks(mark), "the live copy now runs the new code"
    array = points[0]["job_id"].split("_")[0]
    subprocess.run(["scontrol", "release", array], check=True, timeout=30)

    # ... and again between point 0's attempts
    steps = run_dirs[0] / "attempts" / "1" / "metrics.jsonl"
    wait_for("2 steps of point 0", lambda: steps.exists() and len(steps.read_text().splitlines()) >= 2, 300)
    subprocess.run(["scancel", "--signal=USR2", points[0]["job_id"]], check=True, timeout=30)
    first, second = kit.wait_final(run_dirs, timeout=600)

    assert first["state"] == second["state"] == "completed", (first.get("reason"), second.get("reason"))
    assert [a["ended_by"] for a in first["attempts"]] == ["preempted", "completed"], first["attempts"]
    seen = marks(mark) - {("new", "live", "0")}
    assert {code for code, _, _ in seen} == {"old"}, f"a job imported the edited code: {sorted(seen)}"
    tasks = {(p["job_id"].split("_")[1], r) for p, r in ((points[0], "0"), (points[0], "1"), (points[1], "0"))}
    assert tasks <= {(task, restart) for _, task, restart in seen}, sorted(seen)
