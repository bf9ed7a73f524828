"""grpokit.slurm's queries of the partition and the update after a requeue, against the local cluster."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from grpokit.slurm.nodes import partition_node_count
from grpokit.slurm.requeue import delay_and_exclude

pytestmark = pytest.mark.slurm


def test_partition_node_count_is_sinfos(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu")
    assert partition_node_count() == 3  # slurm/local_cluster.sh: node1..node3 in gpu
    assert partition_node_count("nosuchpartition") is None
    monkeypatch.delenv("SLURM_JOB_PARTITION")
    assert partition_node_count() is None


def test_delay_and_exclude_updates_the_queued_task(slurm):
    # a held job stands for a task just requeued: it waits in the queue, never runs
    name = f"delay{uuid.uuid4().hex[:6]}"
    job = subprocess.run(
        ["sbatch", "--parsable", "--hold", f"--job-name={name}", "-p", "gpu", "--mem=100M", "--wrap", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    try:
        assert delay_and_exclude(job, start_in_s=600, exclude=["node1"])
        fields = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        assert "ExcNodeList=node1" in fields and "StartTime=Unknown" not in fields
        assert not delay_and_exclude("999999999", start_in_s=1)  # Slurm refuses: logged, False
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
