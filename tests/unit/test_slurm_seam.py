"""One Slurm seam: every ``SLURM_*`` variable through :class:`grpokit.slurm.task.JobEnv`, every Slurm
client, ``srun`` and ``nvidia-smi`` call through :mod:`grpokit.slurm` (read from the source)."""

from __future__ import annotations

import pytest

from grpokit.slurm.task import JobEnv

ARRAY_TASK = {
    "SLURM_JOB_ID": "4412",
    "SLURM_ARRAY_JOB_ID": "4400",
    "SLURM_ARRAY_TASK_ID": "12",
    "SLURM_PROCID": "0",
    "SLURM_RESTART_COUNT": "2",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_CPUS_ON_NODE": "8",
    "SLURM_MEM_PER_CPU": "2000",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURMD_NODENAME": "node1",
}


def test_job_env_of_an_array_task():
    job = JobEnv.from_env(ARRAY_TASK)
    assert job == JobEnv(
        job_id="4412",
        array_job_id="4400",
        array_task_id=12,
        procid=0,
        restart_count=2,
        nodelist="node[1-2]",
        num_nodes=2,
        cpus_on_node=8,
        mem_per_cpu_mb=2000,
        partition="gpu",
        nodename="node1",
    )
    assert job.in_slurm and job.task_id == "4400_12", "an array task's own id, never the array's"
    assert job.memory_mb == 16000


@pytest.mark.parametrize(
    ("env", "in_slurm", "task_id", "procid", "restarts", "memory_mb"),
    [
        ({}, False, None, 0, 0, None),  # outside Slurm
        ({"SLURM_JOB_ID": "7"}, True, "7", 0, 0, None),  # a plain job
        ({"SLURM_JOB_ID": "", "SLURM_PROCID": "3"}, False, None, 3, 0, None),  # set but empty
        ({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "x", "SLURM_MEM_PER_NODE": "lots"}, True, "7", 0, 0, None),
        ({"SLURM_JOB_ID": "7", "SLURM_MEM_PER_NODE": "0", "SLURM_MEM_PER_CPU": "100"}, True, "7", 0, 0, None),
        (
            {"SLURM_JOB_ID": "7", "SLURM_MEM_PER_NODE": "1024", "SLURM_MEM_PER_CPU": "9", "SLURM_CPUS_ON_NODE": "2"},
            True,
            "7",
            0,
            0,
            1024,
        ),
    ],
    ids=["outside", "plain-job", "empty", "unparseable", "mem-0-no-cpus", "mem-wins"],
)
def test_job_env_fields(env, in_slurm, task_id, procid, restarts, memory_mb):
    job = JobEnv.from_env(env)
    assert (job.in_slurm, job.task_id, job.procid, job.restart_count, job.memory_mb) == (
        in_slurm,
        task_id,
        procid,
        restarts,
        memory_mb,
    )


def test_job_env_reads_os_environ_by_default(monkeypatch):
    for key in ARRAY_TASK:
        monkeypatch.setenv(key, ARRAY_TASK[key])
    assert JobEnv.from_env() == JobEnv.from_env(ARRAY_TASK)
