"""One Slurm seam: every ``SLURM_*``/``SBATCH_*`` variable through :mod:`grpokit.slurm` (mostly
:class:`grpokit.slurm.task.JobEnv`), every Slurm command line, ``srun`` and ``nvidia-smi`` call built
in :mod:`grpokit.slurm` (read from the source; the rule is :func:`seam_breaks`' docstring)."""

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
#: A Slurm environment variable's name, or a prefix of such names (``"SLURM_"``, ``"SBATCH_"``).
SLURM_VAR = re.compile(r"^(?:SLURMD?|SBATCH|SALLOC|SRUN)_[A-Z0-9_]*$")
#: Slurm's programs (the clients of slurm(1) the kit runs or could run).
SLURM_PROGRAMS = ("sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "scancel", "srun", "salloc", "sinfo")
#: Calls that run, look up or split a command: a Slurm program's name in their arguments is a command.
EXECUTING_CALLS = {
    "run",
    "Popen",
    "call",
    "check_call",
    "check_output",
    "system",
    "popen",
    "split",
    "which",
    "run_slurm",
    "start",
}
#: Words only Slurm's own output lines hold (slurmstepd's, srun's, sbatch's): a literal with one is a parser of them.
SLURM_OUTPUT_MARKERS = (
    "CANCELLED AT",
    "srun: error",
    "sbatch: error",
    "slurmstepd",
    "Node failure on",
    "Exited with exit code",
)

#: Modules outside grpokit/slurm/ allowed one finding: (the finding's words, why).
KNOWN: dict[str, tuple[str, str]] = {
    # layer 0 (below slurm/): the rehearsal trainer, run in verl's place, names its node as Slurm does
    "grpokit/rehearsal/rehearsal_trainer.py": ("names SLURMD_NODENAME", "layer 0 cannot import slurm/"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the module's, classes' and functions' docstring constants (prose: naming a program is fine)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _leading_text(node: ast.expr) -> str | None:
    """The text a string expression starts with: a constant's value, an f-string's first literal part."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return None


def seam_breaks(source: str) -> list[str]:
    """What in ``source`` (a module outside ``grpokit/slurm/``) goes around the seam.

    The rule, read from the syntax tree (comments are not in it; docstrings are skipped):

    1. A Slurm environment variable: any string literal that is a ``SLURM_*``, ``SLURMD_*``,
       ``SBATCH_*``, ``SALLOC_*`` or ``SRUN_*`` name or prefix (``os.environ.get("SLURM_JOB_ID")``,
       ``name.startswith(("SLURM_", "SBATCH_"))``): read, set or cleaned, the variable belongs to
       :class:`grpokit.slurm.task.JobEnv` or another module of ``slurm/``.
    2. A Slurm program as a command: a string literal that is exactly a program's name (an argv
       element, ``shutil.which("sbatch")``, ``argv[0] == "srun"``), or a literal or f-string that
       starts with ``"<program> "`` and is an argv element or an argument of a call that runs,
       looks up or splits a command (:data:`EXECUTING_CALLS`: ``subprocess.run``, ``os.system``,
       ``shlex.split``, ``run_slurm``, ...). Text for people that names a command inside a
       sentence or a label (``f"Check squeue --name {name}"``, ``"squeue (time left)"``) is fine:
       it is not executed.
    3. A command line (list or tuple literal) of one of :data:`grpokit.slurm.runner.COMMANDS`
       (``nvidia-smi`` too), unless passed straight to the runner.
    4. A parser of Slurm's output lines: a string literal (a pattern, a needle) holding one of
       :data:`SLURM_OUTPUT_MARKERS` (``r"srun: error: (\\S+)"``, ``"CANCELLED AT"``); they are read by
       :mod:`grpokit.slurm.log_lines`.
    5. Slurm parameters mapped outside :mod:`grpokit.slurm.executor`: the name ``SlurmExecutor``
       (submitit's) used in code.
    """
    found = []
    tree = ast.parse(source)
    prose = _docstrings(tree)
    through_runner = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and node.args
        and (getattr(node.func, "id", None) == "run_slurm" or _is_runner_run(node.func))
    }
    executed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            executed.update(id(e) for e in node.elts)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in EXECUTING_CALLS:
                executed.update(id(a) for a in [*node.args, *(k.value for k in node.keywords)])
    for node in ast.walk(tree):
        text = _leading_text(node) if id(node) not in prose else None
        if text is not None and isinstance(node, ast.Constant) and SLURM_VAR.match(text):
            found.append(f"line {node.lineno}: names {text} (use grpokit.slurm.task.JobEnv or grpokit.slurm)")
        if text is not None and (
            (isinstance(node, ast.Constant) and text.strip() in SLURM_PROGRAMS)
            or (id(node) in executed and text.split(" ", 1)[0] in SLURM_PROGRAMS and " " in text)
        ):
            found.append(f"line {node.lineno}: runs {text.split()[0]} (ask a module of grpokit.slurm)")
        if text is not None and isinstance(node, ast.Constant) and any(m in text for m in SLURM_OUTPUT_MARKERS):
            found.append(f"line {node.lineno}: parses Slurm's output {text[:40]!r} (use grpokit.slurm.log_lines)")
        if (isinstance(node, ast.Name) and node.id == "SlurmExecutor") or (
            isinstance(node, ast.Attribute) and node.attr == "SlurmExecutor"
        ):
            found.append(f"line {node.lineno}: builds a SlurmExecutor (use grpokit.slurm.executor)")
        first = node.elts[0] if isinstance(node, ast.List | ast.Tuple) and node.elts else None
        if isinstance(first, ast.Constant) and first.value in runner.COMMANDS and id(node) not in through_runner:
            found.append(f"line {node.lineno}: runs {first.value} (use grpokit.slurm.runner)")
    return found


def _is_runner_run(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "run" and getattr(func.value, "id", None) == "runner"


def test_the_seam_check_finds_each_kind():
    """Each kind of break is found once per line; prose and labels naming a command are not."""
    sample = '''
"""Module docstring: sbatch, squeue and SLURM_JOB_ID named in prose."""
import os, shutil, subprocess
a = os.environ.get("SLURM_JOB_ID")
b = os.environ["SLURMD_NODENAME"]
c = "SLURM_PROCID" in os.environ
d = os.getenv("SBATCH_PARTITION")
subprocess.run(["squeue", "-h"])
cmd = ("nvidia-smi", "-L")
dropped = name.startswith(("SLURM_", "SBATCH_"))
out = run_slurm(["squeue", "-h", "--me"])
found = shutil.which("sbatch")
os.system(f"scancel {job}")
args = shlex.split("scontrol show config")
if argv[0] == "srun":
    pass
print(f"Check squeue --name {name}; then scancel it")  # a sentence for people
label = "scontrol show config (KillWait)"  # a log label, not run
def f():
    """sacct is named here (a docstring), and srun: error lines."""
END = re.compile(r"JOB (\\S+) ON (\\S+) CANCELLED AT (\\S+)")
executor = submitit.SlurmExecutor(folder="x")
'''
    lines = sorted({int(f.split(":")[0].split()[1]) for f in seam_breaks(sample)})
    assert lines == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 21, 22]


def test_no_module_outside_slurm_goes_around_the_seam():
    breaks = {}
    for path in sorted([*(SRC / "grpokit").rglob("*.py"), *(SRC / "hydra_plugins").rglob("*.py")]):
        if SLURM_PACKAGE in path.parents:
            continue
        rel = path.relative_to(SRC).as_posix()
        found = seam_breaks(path.read_text())
        words = KNOWN.get(rel, (None, ""))[0]
        found = [f for f in found if words is None or words not in f]
        if found:
            breaks[rel] = found
    assert breaks == {}, "Slurm outside grpokit/slurm/ (move the code that builds or reads it there):\n" + "\n".join(
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
