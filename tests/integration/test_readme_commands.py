"""The README's commands are tests: every command of README.md's (and docs/*.md's) ```bash blocks runs
here as written, in order, from the repository root, against the local Slurm cluster.

Only what the README itself documents is set: the kit's environment active (``.venv/bin`` first on
PATH, as ``source .venv/bin/activate`` does), ``GSM8K_SOURCE`` pointing at the local GSM8K folder,
``MEMALPHA_SOURCE`` at the local NLU folder (``nlu:<folder>``) and ``MODEL=tiny`` (the random-weight
smoke model, built here) instead of the hub. The placeholders
``<sweep>`` and ``<point>`` are filled in from what the commands printed (the sweep folder a sweep
reports, its first point). A command whose comment carries ``[needs GPU]``, ``[needs hub]`` or ``[needs internet]`` (or
a block whose first line is a comment carrying it) is skipped with that reason, and ``make test``
(``[is the test suite]``) does not run itself. A command that submits to Slurm is followed until
its jobs are final (a chained job of ``after=[...]`` too), and a point that ends ``failed``/``cancelled``
(or a chain that does not end ``completed``/``skipped``) fails the test like a non-zero exit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("GRPOKIT_SHARED", REPO.parent / "shared"))
MARKER = re.compile(r"\[(needs GPU|needs hub|needs internet|is the test suite)\]")
FENCE = re.compile(r"^```(bash|sh|shell)\s*$")
SWEEP_PRINTED = re.compile(r"sweep folder (\S+)")
SBATCH_PRINTED = re.compile(r"Submitted batch job (\d+)")
PLACEHOLDER = re.compile(r"<[a-z_]+>")
COMMAND_TIMEOUT_S = 900
JOB_TIMEOUT_S = 900
GOOD_STATES = {"completed", "skipped_no_gpu"}


@dataclass(frozen=True)
class Command:
    """One logical command line of a ```bash block (``\\`` continuations joined)."""

    source: str  # "README.md:37"
    text: str
    skip: str | None  # the marker's reason, None when the command runs


def shell_commands(path: Path) -> list[Command]:
    """The commands of every ```bash block of a Markdown file, in order."""
    lines = path.read_text().splitlines()
    out: list[Command] = []
    in_block, block_skip, pending, start, first = False, None, "", 0, False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not in_block:
            if FENCE.match(stripped):
                in_block, block_skip, first = True, None, True
            continue
        if stripped.startswith("```"):
            in_block = False
            continue
        if not pending and (not stripped or stripped.startswith("#")):
            marker = MARKER.search(stripped)
            if first and marker:  # a block whose first line is a marked comment: every command skipped
                block_skip = marker.group(1)
            first = first and not stripped.startswith("#") and not stripped
            continue
        first = False
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        marker = MARKER.search(text)
        out.append(
            Command(f"{path.relative_to(REPO)}:{start}", text, block_skip or (marker.group(1) if marker else None))
        )
    return out


def documented_env() -> dict[str, str]:
    """The environment a README reader has: the kit's venv active, data and model chosen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTEST_"))}
    venv = REPO / ".venv"
    env.update(
        VIRTUAL_ENV=str(venv),
        PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        GSM8K_SOURCE=str(SHARED / "data" / "gsm8k"),
        MEMALPHA_SOURCE=f"nlu:{SHARED / 'data' / 'nlu'}",
        MODEL="tiny",
    )
    env.pop("GRPOKIT_TINY_MODEL", None)  # the README's commands build and use models/tiny themselves
    return env


def wait_sweep(sweep: Path, env: dict[str, str]) -> list[dict]:
    """status.py --json of the sweep once every point and chained job is final (fails the test at the deadline)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        res = subprocess.run(
            [str(REPO / ".venv" / "bin" / "python"), "launch/status.py", str(sweep), "--json"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        live = ("queued", "running", "unknown")
        if all(r["state"] not in live and r.get("chain") not in ("queued", "running") for r in rows):
            return rows
        if time.monotonic() > deadline:
            pytest.fail(f"{sweep}: not final after {JOB_TIMEOUT_S} s: {[(r['name'], r['state']) for r in rows]}")
        time.sleep(3)


def wait_batch_job(job: str) -> str:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        state = dict(t.split("=", 1) for t in out.split() if "=" in t).get("JobState", "UNKNOWN")
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED"):
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"batch job {job} not finished after {JOB_TIMEOUT_S} s: {state}")
        time.sleep(3)


def settle_sweeps(pending: list[tuple[str, Path]], env: dict[str, str], failures: list[str]) -> None:
    """Await the sweeps ``(command, sweep folder)`` started before; a point not completed/skipped fails."""
    for text, sweep_dir in pending:
        rows = wait_sweep(sweep_dir, env)
        bad = [(r["name"], r["state"], r["reason"]) for r in rows if r["state"] not in GOOD_STATES]
        if bad:
            failures.append(f"{text}: points not completed/skipped_no_gpu: {bad}")
        chains = [(r["name"], r["chain"], r["chain_reason"]) for r in rows if "chain" in r]
        bad_chains = [c for c in chains if c[1] not in ("completed", "skipped")]
        if bad_chains:
            failures.append(f"{text}: chained jobs not completed/skipped: {bad_chains}")
    pending.clear()


def settle_jobs(jobs: list[tuple[str, str]], made: set[Path], failures: list[str]) -> None:
    """Await the batch jobs ``(command, job id)`` submitted before; a job not COMPLETED fails."""
    for text, job in jobs:
        state = wait_batch_job(job)
        made.update(REPO.glob(f"logs/*_job{job}"))
        made.add(REPO / "logs" / f"grpokit_{job}.out")
        if state != "COMPLETED":
            log = REPO / "logs" / f"grpokit_{job}.out"
            tail = log.read_text()[-2000:] if log.exists() else ""
            failures.append(f"{text}: batch job {job} ended {state}\n{tail}")
    jobs.clear()


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_documented_command_is_recognised():
    """The parser sees the README's blocks: a change in the README's form does not silently skip them."""
    commands = [c for doc in documents() for c in shell_commands(doc)]
    texts = [c.text for c in commands]
    assert any(t.startswith("make run") for t in texts)
    assert any("launch/sweep.py -m" in t and "verl." in t for t in texts), "continuation lines joined"
    assert any(t.startswith("sbatch slurm/train.sbatch") for t in texts)
    assert {c.skip for c in commands} <= {None, "needs GPU", "needs hub", "needs internet", "is the test suite"}


def test_readme_and_docs_commands_run_as_written(slurm):
    """Every command of the README's and docs' bash blocks, as written, in order; every job they
    submit is followed to its final state.

    A reader does not wait for a submitted sweep before typing the next command: a sweep's (or a
    batch job's) jobs are followed while the commands after it run, and awaited before a command
    that works on that sweep (it names ``<sweep>``/``<point>`` or the sweep's name, as a resume
    does) and at the end of each document. Each submitted job still has to end well.
    """
    env = documented_env()
    ran, skipped, failures = [], [], []
    made: set[Path] = set()  # sweep folders and batch-job outputs the commands wrote under logs/
    for doc in documents():
        placeholders: dict[str, str] = {}
        pending: list[tuple[str, Path]] = []  # (the command as run, a sweep it started)
        jobs: list[tuple[str, str]] = []  # (the command as run, a batch job it submitted)

        for cmd in shell_commands(doc):
            if cmd.skip:
                skipped.append(f"{cmd.source}: {cmd.text}  <- {cmd.skip}")
                continue
            if PLACEHOLDER.search(cmd.text.split("#")[0]) or any(
                re.search(rf"\bsweep_name={re.escape(d.name)}\b", cmd.text) for _, d in pending
            ):
                settle_sweeps(pending, env, failures)  # the command works on a sweep started before: its jobs end first
            text = cmd.text
            for name, value in placeholders.items():
                text = text.replace(name, value)
            if PLACEHOLDER.search(text.split("#")[0]):
                failures.append(f"{cmd.source}: placeholder with no value yet: {cmd.text}")
                continue
            t0 = time.monotonic()
            res = subprocess.run(
                ["bash", "-c", text], cwd=REPO, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
            )
            output = res.stdout + res.stderr
            ran.append(f"{cmd.source}: {text}  ({time.monotonic() - t0:.0f} s, exit {res.returncode})")
            if res.returncode != 0:
                failures.append(f"{cmd.source}: exit {res.returncode}: {text}\n{output[-3000:]}")
                continue
            # Follow what the command started: a sweep it printed, or (status, report, resubmit) the
            # sweep the block works on, which a resubmission may have restarted.
            sweeps = [Path(p) for p in SWEEP_PRINTED.findall(output)]
            if not sweeps and "<sweep>" in cmd.text:
                sweeps = [REPO / "logs" / placeholders["<sweep>"]]
            for sweep_dir in sweeps:
                made.add(sweep_dir)
                placeholders["<sweep>"] = sweep_dir.name
                points = json.loads((sweep_dir / "manifest.json").read_text())["points"]
                placeholders["<point>"] = Path(points[0]["run_dir"]).name
                pending.append((f"{cmd.source}: {text}", sweep_dir))
            jobs.extend((f"{cmd.source}: {text}", job) for job in SBATCH_PRINTED.findall(output))
        settle_sweeps(pending, env, failures)
        settle_jobs(jobs, made, failures)
    print("ran:\n  " + "\n  ".join(ran) + "\nskipped:\n  " + "\n  ".join(skipped))
    assert not failures, "\n\n".join(failures)
    for path in made:  # kept for inspection when a command failed
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
