"""One Slurm seam: every ``SLURM_*`` variable through :class:`grpokit.slurm.task.JobEnv`, every Slurm
client, ``srun`` and ``nvidia-smi`` call through :mod:`grpokit.slurm` (read from the source)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from grpokit.slurm import runner
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


# -- the seam, read from the source -------------------------------------------------------------------
SRC = Path(__file__).resolve().parents[2] / "src"
SLURM_PACKAGE = SRC / "grpokit" / "slurm"
SLURM_VAR = re.compile(r"^SLURMD?_[A-Z0-9_]+$")

#: Modules outside grpokit/slurm/ allowed one finding: (the finding's words, why).
KNOWN: dict[str, tuple[str, str]] = {
    # layer 0 (below slurm/): the rehearsal trainer, run in verl's place, names its node as Slurm does
    "grpokit/rehearsal/rehearsal_trainer.py": ("reads SLURMD_NODENAME", "layer 0 cannot import slurm/"),
}


def seam_breaks(source: str) -> list[str]:
    """What in ``source`` goes around the seam: a ``SLURM_*``/``SLURMD_*`` variable read from an
    environment mapping (``.get``/``getenv``/``pop``/``setdefault``, ``[...]``, ``in``), or a command
    line (list or tuple literal) of one of :data:`grpokit.slurm.runner.COMMANDS` that is not passed
    straight to the runner (``run_slurm([...])``, ``runner.run([...])``)."""
    found = []
    tree = ast.parse(source)
    through_runner = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and node.args
        and (getattr(node.func, "id", None) == "run_slurm" or _is_runner_run(node.func))
    }
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("get", "getenv", "pop", "setdefault"):
                name = node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            name = node.slice.value
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        ):
            name = node.left.value
        if isinstance(name, str) and SLURM_VAR.match(name):
            found.append(f"line {node.lineno}: reads {name} (use grpokit.slurm.task.JobEnv)")
        first = node.elts[0] if isinstance(node, ast.List | ast.Tuple) and node.elts else None
        if isinstance(first, ast.Constant) and first.value in runner.COMMANDS and id(node) not in through_runner:
            found.append(f"line {node.lineno}: runs {first.value} (use grpokit.slurm.runner)")
    return found


def _is_runner_run(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "run" and getattr(func.value, "id", None) == "runner"


def test_the_seam_check_finds_each_kind():
    sample = """
import os, subprocess
a = os.environ.get("SLURM_JOB_ID")
b = os.environ["SLURMD_NODENAME"]
c = "SLURM_PROCID" in os.environ
d = os.getenv("SLURM_MEM_PER_CPU")
subprocess.run(["squeue", "-h"])
cmd = ("nvidia-smi", "-L")
fine = name.startswith(("SLURM_", "SBATCH_")) and name != "SLURM_CONF"
out = run_slurm(["squeue", "-h", "--me"])
out = runner.run(["scontrol", "show", "config"], timeout_s=20)
"""
    assert sorted(f.split(":")[0] for f in seam_breaks(sample)) == [f"line {n}" for n in (3, 4, 5, 6, 7, 8)]


def test_no_module_outside_slurm_goes_around_the_seam():
    breaks = {}
    for path in sorted((SRC / "grpokit").rglob("*.py")):
        if SLURM_PACKAGE in path.parents:
            continue
        rel = path.relative_to(SRC).as_posix()
        found = seam_breaks(path.read_text())
        words = KNOWN.get(rel, (None, ""))[0]
        found = [f for f in found if words is None or words not in f]
        if found:
            breaks[rel] = found
    assert breaks == {}, "Slurm outside grpokit/slurm/ (JobEnv for SLURM_*, runner.run for commands):\n" + "\n".join(
        f"{m}: {line}" for m, lines in breaks.items() for line in lines
    )


def test_inside_slurm_only_the_runner_starts_processes():
    """A fake of :mod:`grpokit.slurm.runner` answers for every module of grpokit/slurm/: none of them
    starts a process by itself."""
    starters = {"run", "Popen", "call", "check_call", "check_output"}
    direct = [
        f"{path.name}: line {node.lineno}"
        for path in sorted(SLURM_PACKAGE.glob("*.py"))
        if path.name != "runner.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in starters
        and getattr(node.func.value, "id", None) == "subprocess"
    ]
    assert direct == []
