"""A Ray that does not start, on the real Slurm test cluster: tried again in the job, then on another node.

Real: Slurm (the array task, its requeue, ``ExcNodeList``), the node's port registry, the driver.
The nodes are crowded the way many jobs on one host leave them: the port registry the job reads
(``GRPOKIT_PORT_REGISTRY``, a file of this test's, handed to the job through Slurm's exported
environment) holds every 100th port for a live process (this test), so single ports are free but
no block of Ray's 200 worker ports is. (A too-short ``runtime.ray_start_timeout_s`` fails only on a
loaded machine: Ray can be ready at the probe's first look.) Each step of the handling shows: the
second try in the job, the attempt ended ``ray_failed`` with a true reason, the retry on another
node, and the stop after the same failure on two nodes. The trainer is never reached.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpokit.runtime.processes import ports

pytestmark = pytest.mark.slurm


@pytest.mark.timeout(600)  # two attempts that fail at the port reservation, and a 5 s backoff
def test_a_ray_that_does_not_start_is_tried_again_then_retried_on_another_node(kit, slurm, kit_overrides, tmp_path):
    name = "ray_start"
    registry = tmp_path / "ports.json"
    crowded = {"other-jobs": {"pid": os.getpid(), "ports": list(range(ports.LOW, ports.HIGH, 100))}}
    registry.write_text(json.dumps(crowded))
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "runtime.retry_backoff_s=5",  # 5 s instead of 60 s before the retry: the test's time
            f"sweep_name={name}",
        ],
        env={"GRPOKIT_PORT_REGISTRY": str(registry)},
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
    why = f"no block of 200 free ports in [{ports.LOW}, {ports.HIGH}) on 127.0.0.1: the largest free gap has 99"
    assert first["reason"].startswith(f"Ray head did not start on {n1}: {why}"), first["reason"]
    assert first["retry"] == f"retry 1 of runtime.max_retries=1 in 5 s, excluding {n1}"
    assert second["retry"] == f"same crash twice on {n1}, {n2} (ray_failed): not retried"
    assert status["reason"].startswith(f"{second['retry']}; Ray head did not start on {n2}: {why}"), status["reason"]
    for k, node in ((1, n1), (2, n2)):
        driver_log = (run_dir / "attempts" / str(k) / "driver.log").read_text()
        assert f"ray start failed (try 1 of 2): Ray head did not start on {node}: {why}" in driver_log
        assert "trying again with fresh ports in" in driver_log
        assert not (run_dir / "attempts" / str(k) / "trainer.log").exists(), "the trainer must not start"
    assert json.loads(registry.read_text()) == crowded, "a failed start left a reservation behind"
