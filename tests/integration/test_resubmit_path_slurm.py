"""``resume=true`` and ``grpokit resubmit`` submit through one function (grpokit.submit.resubmit_points.submit_again),
which submits as the sweep does (submit_slurm). Here it is called on a sweep folder as the sweep command
leaves it (point.json files, a manifest with the first ids): the points go to the local cluster as
one real array, held (``--hold``: they must never run, there is no trainer here), and the folder
records the submission as docs/run-folder.md says.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from grpokit.config.point import PointSpec
from grpokit.run_folder.claim import open_existing
from grpokit.run_folder.manifest import write_manifest
from grpokit.submit.resubmit_points import submit_again

pytestmark = pytest.mark.slurm


def sweep_folder(tmp_path: Path, name: str, kind: str, bare_point) -> tuple[Path, list[PointSpec]]:
    sweep = tmp_path / name
    cluster = {"kind": kind, "partition": "gpu", "nodes": 1, "gpus_per_node": 1, "cpus_per_task": 1, "mem_gb": 1}
    if kind == "slurm":
        cluster.update(array_parallelism=2, additional_parameters={"hold": True})  # queued, never run
    specs = [bare_point(sweep, i, cluster, name) for i in range(2)]
    for spec in specs:
        Path(spec.run_dir).mkdir(parents=True)
        (Path(spec.run_dir) / "point.json").write_text(spec.to_json())
    write_manifest(sweep, specs, ["5_0", "5_1"], experiment="e", cluster=kind, swept_keys=[])
    return sweep, specs


@pytest.mark.parametrize("kind", ["slurm", "local"])
def test_submit_again_submits_like_the_sweep_and_records_it(slurm, tmp_path, kind, bare_point):
    name = f"again{uuid.uuid4().hex[:6]}"
    sweep, specs = sweep_folder(tmp_path, name, kind, bare_point)
    with open_existing(sweep) as claim:
        job_ids, changed = submit_again(claim, specs, {0: "failed", 1: "timeout"}, how="resubmit")
    try:
        manifest = json.loads((sweep / "manifest.json").read_text())
        assert [e["job_id"] for e in manifest["points"]] == job_ids == [e.job_id for e in changed]
        assert [e["history"][-1]["job_id"] for e in manifest["points"]] == ["5_0", "5_1"]  # never lost
        assert [e["history"][-1]["state"] for e in manifest["points"]] == ["failed", "timeout"]
        (line,) = [json.loads(x) for x in (sweep / "submissions.jsonl").read_text().splitlines()]
        assert (line["kind"], line["points"], line["job_ids"]) == ("resubmit", ["000", "001"], job_ids)
        assert line["replaced"] == {"000": "failed", "001": "timeout"}
        assert all((Path(s.run_dir) / "resubmit.json").exists() for s in specs)  # the permission to run again
        if kind == "local":
            assert job_ids == [None, None]  # the caller runs the points here (run_local)
            return
        array = job_ids[0].split("_")[0]
        assert job_ids == [f"{array}_0", f"{array}_1"]
        queued = subprocess.run(
            ["squeue", "-h", "-r", "-j", array, "-o", "%i %j %T"], capture_output=True, text=True, timeout=30
        ).stdout.split("\n")
        assert sorted(q for q in queued if q) == [f"{array}_0 {name} PENDING", f"{array}_1 {name} PENDING"]
        assert list((sweep / "submitit").glob(f"{array}*_submission.sh")), "submitted as the sweep submits"
    finally:
        arrays = {j.split("_")[0] for j in job_ids if j}
        if arrays:
            subprocess.run(["scancel", *arrays], capture_output=True, timeout=30, check=False)
