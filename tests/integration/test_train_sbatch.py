"""``sbatch slurm/train.sbatch`` from a plain shell on the local Slurm cluster.

The script as shipped (its #SBATCH lines unchanged) is submitted with an environment that has no
activated virtualenv and no GRPOKIT_PYTHON: it must find the repository's .venv itself, log every
line once to ``logs/grpokit_<id>.out``, append (not truncate) that file when Slurm runs the job
again, and leave a sweep folder of one point that status.py and report.py read, with the job's own
state (``skipped_no_gpu`` on this GPU-less machine; Slurm says COMPLETED) and no GPU hours billed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def plain_env(**extra: str) -> dict[str, str]:
    """A login shell's environment: no virtualenv on PATH, no VIRTUAL_ENV, no GRPOKIT_PYTHON."""
    return {"HOME": os.environ.get("HOME", "/root"), "PATH": PLAIN_PATH, "LANG": "C.UTF-8", **extra}


def sbatch(args: list[str], env: dict[str, str]) -> str:
    res = subprocess.run(
        ["sbatch", "--parsable", "slurm/train.sbatch", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def job_fields(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def wait_job(job_id: str, timeout: float, restarts: int = 0) -> dict[str, str]:
    """Slurm's record of the job once it ended (after ``restarts`` requeues)."""
    deadline = time.monotonic() + timeout
    while True:
        fields = job_fields(job_id)
        state = fields.get("JobState", "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") and int(fields.get("Restarts", 0)) >= restarts:
            return fields
        if time.monotonic() > deadline:
            squeue = subprocess.run(["squeue"], capture_output=True, text=True).stdout
            pytest.fail(f"job {job_id} not finished after {timeout:.0f} s: {state} {fields.get('Reason')}\n{squeue}")
        time.sleep(2.0)


@pytest.fixture
def out_files():
    made: list[Path] = []
    yield made
    for path in made:
        path.unlink(missing_ok=True)


def test_sbatch_from_a_plain_shell_runs_logs_once_appends_and_is_a_sweep(
    slurm, kit, tiny_model_dir, gsm8k_dir, tmp_path, out_files
):
    # The model through its documented variable (configs/model/tiny.yaml), the data through the
    # experiment's data_dir; the run folders go to tmp_path instead of the repository's logs/.
    env = plain_env(GRPOKIT_TINY_MODEL=str(tiny_model_dir))
    logs = tmp_path / "logs"
    job = sbatch(["model=tiny", f"experiment.data_dir={gsm8k_dir}", f"logs_root={logs}"], env)
    out = REPO / "logs" / f"grpokit_{job}.out"
    out_files.append(out)
    fields = wait_job(job, 420)
    text = out.read_text()
    assert fields["JobState"] == "COMPLETED", text
    run = logs / f"gsm8k_grpo_job{job}" / "000"
    status = kit.read_status(run)
    assert status["state"] == "skipped_no_gpu", text
    # The job found the repository's .venv by itself.
    assert json.loads((run / "env.json").read_text())["executable"] == str(REPO / ".venv" / "bin" / "python")
    # Every line once: the driver's stderr handler is the only console handler.
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), text
    assert sum("point 000, attempt 1, run folder" in line for line in lines) == 1
    assert not any(line.startswith(("INFO:", "WARNING:")) for line in lines), "verl's root handler still prints"

    # A sweep of one point: status.py and report.py read the folder; the job's own state wins over
    # Slurm's COMPLETED and no GPU hours are billed for a run that did not train.
    res = kit.run("status.py", [str(run.parent), "--json"])
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    assert (row["state"], row["job_id"]) == ("skipped_no_gpu", job)
    assert row["reason"].startswith("no CUDA GPU on this node")
    res = kit.run("report.py", [str(run.parent), "--no-plots", "--out", str(tmp_path / "report")])
    assert res.returncode == 0, res.stderr
    report = (tmp_path / "report" / "report.csv").read_text().splitlines()
    header, values = report[0].split(","), report[1].split(",")
    assert values[header.index("state")] == "skipped_no_gpu"
    assert float(values[header.index("gpu_hours")]) == 0.0

    # Slurm runs the job again (a requeue): the output is appended, the run folder is the same.
    subprocess.run(["scontrol", "requeue", job], check=True)
    wait_job(job, 300, restarts=1)
    again = out.read_text()
    assert again.startswith(text), "the first attempt's output was truncated"
    assert f"point 000 is already skipped_no_gpu ({run / 'status.json'})" in again[len(text) :]
    assert kit.read_status(run)["state"] == "skipped_no_gpu"


def test_sbatch_names_a_python_that_cannot_run_the_kit(slurm, tmp_path, out_files):
    system_python = shutil.which("python3", path=PLAIN_PATH)
    probe = subprocess.run([system_python, "-c", "import omegaconf"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{system_python} has omegaconf: it is not a Python without the kit")
    job = sbatch(["model=tiny"], plain_env(GRPOKIT_PYTHON=system_python))
    out = REPO / "logs" / f"grpokit_{job}.out"
    out_files.append(out)
    assert wait_job(job, 300)["JobState"] == "FAILED"
    assert out.read_text().strip() == (
        f"train.sbatch: {system_python} cannot import the kit (omegaconf, grpokit); run 'make install' in "
        f"{REPO} or set GRPOKIT_PYTHON to the Python of the environment the kit is installed in"
    )
