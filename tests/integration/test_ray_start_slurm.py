"""A Ray that does not start, on the real Slurm test cluster: tried again in the job, then on another node.

Real: Slurm (the array task, its requeue, ``ExcNodeList``), ``ray start --head`` and the probe, the
driver. The point's ``runtime.ray_start_timeout_s=1`` is a setting a user could make (too short for
any node: Ray's head alone takes seconds to register): every start fails for real, the way a start
fails on an overloaded node, so each step of the handling shows: the second try in the job with
fresh ports, the attempt ended ``ray_failed`` with a true reason, the retry on another node, and
the stop after the same failure on two nodes. The trainer is never reached.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(600)  # two attempts, each two Ray starts that give up after 1 s (plus Ray's own stop)
def test_a_ray_that_does_not_start_is_tried_again_then_retried_on_another_node(kit, slurm, kit_overrides, tmp_path):
    name = "ray_start"
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "runtime.ray_start_timeout_s=1",  # too short for any node: see the module docstring
            "runtime.retry_backoff_s=5",  # 5 s instead of 60 s before the retry: the test's time
            f"sweep_name={name}",
        ],
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (point,) = kit.manifest(tmp_path / "logs" / name)["points"]
    run_dir = Path(point["run_dir"])
    (status,) = kit.wait_final([run_dir], timeout=480)

    assert status["state"] == "failed", status
    first, second = status["attempts"]
    assert first["ended_by"] == second["ended_by"] == "ray_failed", status["attempts"]
    assert first["crash"] == second["crash"] == "ray_failed"
    (n1,), (n2,) = first["nodes"], second["nodes"]
    assert n1 != n2, "the retry ran on the node where Ray did not start"
    assert first["reason"].startswith(f"Ray head did not start on {n1} within 1 s: "), first["reason"]
    assert first["retry"] == f"retry 1 of runtime.max_retries=1 in 5 s, excluding {n1}"
    assert second["retry"] == f"same crash twice on {n1}, {n2} (ray_failed): not retried"
    assert status["reason"].startswith(second["retry"] + f"; Ray head did not start on {n2} within 1 s: ")
    for k, node in ((1, n1), (2, n2)):
        driver_log = (run_dir / "attempts" / str(k) / "driver.log").read_text()
        assert f"ray start failed (try 1 of 2): Ray head did not start on {node} within 1 s: " in driver_log
        assert "its processes were stopped, trying again with fresh ports" in driver_log
        assert driver_log.count(" start --head") == 2, "one head per try"
        assert not (run_dir / "attempts" / str(k) / "trainer.log").exists(), "the trainer must not start"
    # nothing of either try is left on the nodes: no Ray process of this run's temp dirs
    left = subprocess.run(["pgrep", "-af", "raylet|gcs_server"], capture_output=True, text=True).stdout
    heads = [
        line for line in (run_dir / "attempts" / "1" / "driver.log").read_text().splitlines() if "--temp-dir=" in line
    ]
    temp_dirs = {part.split("=", 1)[1] for line in heads for part in line.split() if part.startswith("--temp-dir=")}
    assert temp_dirs and not [line for line in left.splitlines() if any(t in line for t in temp_dirs)], left
