"""Ray's object store and worker port range are sized from the job's allocation, not the node."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray._private import ray_constants

from grpokit.runtime.processes import ray_cluster, ray_resources
from grpokit.runtime.processes.ray_resources import (
    MIB,
    cgroup_memory_limit,
    job_memory_bytes,
    object_store_bytes,
    slurm_memory_bytes,
    worker_port_count,
)

GB = 1024**3


def test_the_kit_uses_rays_own_limits():
    assert ray_resources.RAY_MIN_OBJECT_STORE_BYTES == ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES
    assert ray_resources.RAY_REQUIRE_SHM_BYTES == ray_constants.REQUIRE_SHM_SIZE_THRESHOLD
    assert ray_resources.DEFAULT_OBJECT_STORE_FRACTION == ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"SLURM_MEM_PER_NODE": "65536"}, 64 * GB),  # --mem=64G
        ({"SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_ON_NODE": "8"}, 16000 * MIB),  # --mem-per-cpu / DefMemPerCPU
        ({"SLURM_MEM_PER_NODE": "1024", "SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_ON_NODE": "8"}, GB),
        ({"SLURM_MEM_PER_NODE": "0"}, None),  # --mem=0: the whole node, Ray decides
        ({"SLURM_MEM_PER_CPU": "2000"}, None),  # no CPU count: unknown
        ({}, None),
        ({"SLURM_MEM_PER_NODE": "lots"}, None),
    ],
)
def test_slurm_memory_comes_from_mem_or_mem_per_cpu(env, expected):
    assert slurm_memory_bytes(env) == expected


def test_job_memory_is_the_lower_of_slurm_and_cgroup():
    assert job_memory_bytes({"SLURM_MEM_PER_NODE": "65536"}, cgroup_limit=32 * GB) == 32 * GB
    assert job_memory_bytes({"SLURM_MEM_PER_NODE": "1024"}, cgroup_limit=32 * GB) == GB
    assert job_memory_bytes({}, cgroup_limit=8 * GB) == 8 * GB
    assert job_memory_bytes({}, cgroup_limit=None) is None


def test_cgroup_v2_limit_is_the_lowest_on_the_path(tmp_path: Path):
    root = tmp_path / "cg"
    job = root / "system.slice" / "slurmstepd.scope" / "job_42"
    step = job / "step_batch"
    step.mkdir(parents=True)
    (root / "memory.max").write_text("max\n")
    (job / "memory.max").write_text(f"{4 * GB}\n")
    (step / "memory.max").write_text("max\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/slurmstepd.scope/job_42/step_batch\n")
    assert cgroup_memory_limit(proc, root) == 4 * GB


def test_cgroup_v1_memory_controller_and_unlimited(tmp_path: Path):
    root = tmp_path / "cg"
    job = root / "memory" / "slurm" / "uid_0" / "job_7"
    job.mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (job / "memory.limit_in_bytes").write_text(f"{2 * GB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/slurm/uid_0/job_7\n4:memory:/slurm/uid_0/job_7\n")
    assert cgroup_memory_limit(proc, root) == 2 * GB
    (job / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_memory_limit(proc, root) is None
    assert cgroup_memory_limit(tmp_path / "absent", root) is None


def test_object_store_is_a_fraction_of_the_job_memory_within_rays_bounds():
    assert object_store_bytes(64 * GB, 0.3, shm_available=500 * GB) == int(64 * GB * 0.3)
    # Ray's minimum
    assert object_store_bytes(100 * MIB, 0.3) == ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES
    # Ray's cap on its default (200 GB) on a fat allocation
    assert object_store_bytes(2000 * GB, 0.3, shm_available=4000 * GB) == 200 * 10**9
    # a small /dev/shm: 95 % of it, but not below the size Ray accepts on slow storage (10 GB)
    assert object_store_bytes(256 * GB, 0.3, shm_available=40 * GB) == int(40 * GB * 0.95)
    assert object_store_bytes(256 * GB, 0.3, shm_available=GB) == 10**10
    assert object_store_bytes(None) is None
    with pytest.raises(ValueError, match="ray_object_store_fraction"):
        object_store_bytes(64 * GB, 1.5)


def test_worker_ports_grow_with_the_cpus():
    assert worker_port_count(8) == 200  # never fewer than the kit always had
    assert worker_port_count(192) == 576  # a verl-scale node: 3 per CPU
    assert worker_port_count(100_000) == ray_resources.MAX_WORKER_PORTS
    assert worker_port_count(192, override=1000) == 1000
    with pytest.raises(ValueError, match="ray_worker_ports"):
        worker_port_count(8, override=2)


def test_ray_start_flags_use_the_sized_block():
    p = dict.fromkeys(ray_cluster._PORT_NAMES, 1)
    args = ray_cluster.port_args(p, 20000, 576)
    assert "--min-worker-port=20000" in args and "--max-worker-port=20575" in args


def test_cluster_sizes_reads_the_allocation(monkeypatch):
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "10240")
    monkeypatch.setattr(ray_resources, "cgroup_memory_limit", lambda: None)
    monkeypatch.setattr(ray_resources, "shm_available_bytes", lambda: 100 * GB)
    sizes = ray_resources.cluster_sizes({"ray_object_store_fraction": 0.5}, num_cpus=192)
    assert sizes == {"object_store_bytes": 5 * GB, "worker_ports": 576}
    assert ray_resources.cluster_sizes({}, num_cpus=2)["object_store_bytes"] == 3 * GB
