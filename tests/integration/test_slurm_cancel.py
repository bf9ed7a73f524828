"""grpokit.slurm.scancel: the kit's one caller of ``scancel``, against the local Slurm cluster."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from grpokit.slurm.scancel import scancel

pytestmark = [pytest.mark.slurm]  # it submits a (held) job


def _squeue(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def test_scancel_ends_a_held_job_and_names_what_slurm_refuses(slurm, tmp_path):
    name = f"grpokit-test-cancel-{uuid.uuid4().hex[:8]}"
    # --hold: the job stays pending and never runs (this test only cancels it)
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "-J", name, "-o", str(tmp_path / "out"), "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip().split(";")[0]
    try:
        assert _squeue(job) == "PENDING"
        assert scancel([job]) is None
        deadline = time.monotonic() + 30
        while _squeue(job) not in ("", "CANCELLED") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _squeue(job) in ("", "CANCELLED")
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
    assert scancel([]) is None  # nothing to cancel: scancel is not run
    assert scancel(["999999999"]) is None  # an id Slurm no longer knows (Slurm 22.05: exit 0)
    said = scancel(["notajob"])  # what scancel refuses: its own words, one line
    assert said == "scancel: error: Invalid job id notajob"
