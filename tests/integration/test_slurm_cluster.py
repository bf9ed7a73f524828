"""Checks that the local Slurm test cluster (``bash slurm/local_cluster.sh up``) behaves like a real one.

Every Slurm call has a timeout and every wait has a deadline, so no test can hang; jobs a test
submitted are cancelled when it ends, whatever the outcome.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Alone on the cluster (`make test` runs this file after the parallel part): it preempts a whole node.
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.cluster_exclusive,
    pytest.mark.skipif(
        shutil.which("sinfo") is None,
        reason="Slurm is not installed (no `sinfo` on PATH); start the test cluster: bash slurm/local_cluster.sh up",
    ),
]

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "slurm" / "local_cluster.sh"
READY_STATES = {"idle", "mixed"}
CMD_TIMEOUT = 30  # seconds for one Slurm client command


def slurm(*args: str, timeout: float = CMD_TIMEOUT) -> str:
    """Run a Slurm client command and return its stdout; raise with stderr on failure."""
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def wait_until(what: str, check: Callable[[], object], timeout: float, interval: float = 0.5) -> object:
    """Poll ``check`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def node_states() -> dict[str, str]:
    out = slurm("sinfo", "-h", "-N", "-o", "%N %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def job_field(job_id: str, field: str) -> str | None:
    """A field of ``scontrol show job`` (e.g. JobState, NodeList, Restarts); None if unknown."""
    proc = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=CMD_TIMEOUT)
    match = re.search(rf"(?:^|\s){field}=(\S+)", proc.stdout)
    return match.group(1) if match else None


def gpus_per_node() -> int:
    """GPUs each node advertises (from ``Gres=gpu:N``), 0 when there are none."""
    out = slurm("sinfo", "-h", "-N", "-o", "%G")
    counts = [int(m.group(1)) for m in re.finditer(r"gpu(?::[^:(,\s]+)?:(\d+)", out)]
    return min(counts) if counts else 0


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    """The controller answers and every node is usable; returns node name -> state."""
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("`scontrol ping` timed out")
    if "is UP" not in ping.stdout:
        pytest.fail(
            f"slurmctld is not answering ({ping.stdout.strip()} {ping.stderr.strip()}); "
            f"run `bash {CLUSTER_SCRIPT.relative_to(REPO)} up`"
        )
    return wait_until(
        "all nodes idle or mixed",
        lambda: (states := node_states()) and set(states.values()) <= READY_STATES and states,
        timeout=60,
    )


class Jobs:
    """Submits batch jobs whose scripts and outputs live under tmp_path; cancels them all at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.ids: list[str] = []
        self.tag = f"itest-{uuid.uuid4().hex[:8]}"

    def script(self, name: str, body: str) -> Path:
        path = self.dir / f"{name}.sh"
        path.write_text("#!/bin/bash\nset -u\n" + body)
        path.chmod(0o755)
        return path

    def submit(self, name: str, body: str, *sbatch_args: str, wait: float | None = None) -> str:
        """sbatch the script; with ``wait`` use ``sbatch --wait`` bounded by that many seconds."""
        args = [
            "sbatch",
            "--parsable",
            f"--job-name={self.tag}-{name}",
            "--time=5",
            f"--output={self.dir / name}.out",
            f"--chdir={self.dir}",
            *sbatch_args,
        ]
        script = str(self.script(name, body))
        if wait is None:
            job_id = slurm(*args, script).strip().split(";")[0]
            self.ids.append(job_id)
            return job_id
        proc = subprocess.Popen([*args, "--wait", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.ids.extend(re.findall(r"^(\d+)", out or "", re.M))
            pytest.fail(f"sbatch --wait {name} did not finish within {wait:.0f}s")
        job_id = out.strip().split(";")[0]
        self.ids.append(job_id)
        assert proc.returncode == 0, f"job {name} ({job_id}) failed: rc={proc.returncode} {err.strip()}"
        return job_id

    def cancel_all(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True, timeout=CMD_TIMEOUT)


@pytest.fixture
def jobs(tmp_path: Path, cluster: dict[str, str]) -> Iterator[Jobs]:
    tracker = Jobs(tmp_path)
    yield tracker
    tracker.cancel_all()


def wait_running(job_id: str, timeout: float = 60) -> str:
    """Wait until the job runs; return its node list."""
    wait_until(f"job {job_id} to run", lambda: job_field(job_id, "JobState") == "RUNNING", timeout)
    return job_field(job_id, "NodeList") or ""


@pytest.mark.timeout(90)
def test_all_nodes_idle_or_mixed(cluster: dict[str, str]) -> None:
    expected = int(os.environ.get("SLURM_LOCAL_NODES", "3"))
    assert sorted(cluster) == [f"node{k}" for k in range(1, expected + 1)]
    assert set(cluster.values()) <= READY_STATES


@pytest.mark.timeout(150)
def test_two_node_job_runs_one_task_per_node(jobs: Jobs, tmp_path: Path) -> None:
    out = tmp_path / "tasks.txt"
    body = f"srun --label bash -c 'echo \"$SLURMD_NODENAME $SLURM_PROCID\"' > {out}\n"
    jobs.submit("twonode", body, "--nodes=2", "--ntasks-per-node=1", wait=120)
    lines = [line.split(":", 1)[1].split() for line in out.read_text().splitlines() if ":" in line]
    nodes = sorted(node for node, _ in lines)
    ranks = sorted(rank for _, rank in lines)
    assert ranks == ["0", "1"], out.read_text()
    assert len(set(nodes)) == 2, f"two tasks should run on two different nodes, got {nodes}"


@pytest.mark.timeout(150)
def test_gpu_jobs_on_one_node_get_different_devices(jobs: Jobs, tmp_path: Path) -> None:
    if gpus_per_node() < 4:
        pytest.skip("needs nodes with at least 4 GPUs (SLURM_LOCAL_GPUS_PER_NODE)")
    release = tmp_path / "release"
    # Each job reports its devices, then holds them until the test releases it (at most 60 s).
    body = (
        'echo "$CUDA_VISIBLE_DEVICES" > {out}.tmp && mv {out}.tmp {out}\n'
        f"for _ in $(seq 600); do [ -e {release} ] && exit 0; sleep 0.1; done\n"
    )
    first_out, second_out = tmp_path / "gpus_a.txt", tmp_path / "gpus_b.txt"
    first = jobs.submit("gpus_a", body.format(out=first_out), "--gpus-per-node=2")
    node = wait_running(first)
    second = jobs.submit("gpus_b", body.format(out=second_out), "--gpus-per-node=2", f"--nodelist={node}")
    assert wait_running(second) == node
    wait_until("both jobs to report CUDA_VISIBLE_DEVICES", lambda: first_out.exists() and second_out.exists(), 30)
    devices_a = first_out.read_text().strip().split(",")
    devices_b = second_out.read_text().strip().split(",")
    release.touch()

    assert len(devices_a) == 2 and len(devices_b) == 2, (devices_a, devices_b)
    assert not set(devices_a) & set(devices_b), f"jobs on {node} share GPUs: {devices_a} vs {devices_b}"
    for job_id in (first, second):
        wait_until(f"job {job_id} to finish", lambda j=job_id: job_field(j, "JobState") == "COMPLETED", 60)


@pytest.mark.timeout(240)
def test_urgent_job_requeues_gpu_job(jobs: Jobs, tmp_path: Path) -> None:
    gpus = gpus_per_node()
    if gpus < 1:
        pytest.skip("needs nodes with GPUs (SLURM_LOCAL_GPUS_PER_NODE)")
    starts = tmp_path / "victim_starts.txt"
    urgent_out = tmp_path / "urgent_ran.txt"
    # The victim holds every GPU of its node, logs each start with its restart count, and ignores
    # SIGTERM the way a training job that checkpoints would (Slurm then kills it after KillWait).
    victim = jobs.submit(
        "victim",
        f'echo "restart=${{SLURM_RESTART_COUNT:-0}}" >> {starts}\n'
        f"trap 'echo got-TERM >> {starts}' TERM\n"
        "for _ in $(seq 600); do sleep 0.5; done\n",
        "--partition=gpu",
        f"--gpus-per-node={gpus}",
        "--requeue",
    )
    node = wait_running(victim)
    wait_until("victim to log its first start", lambda: starts.exists(), 30)

    urgent = jobs.submit(
        "urgent",
        f"echo ran > {urgent_out}\n",
        "--partition=urgent",
        f"--gpus-per-node={gpus}",
        f"--nodelist={node}",
    )
    # Preemption: the victim is signalled, killed after KillWait, and requeued; then the urgent job runs.
    wait_until("urgent job to complete", lambda: job_field(urgent, "JobState") == "COMPLETED", 120)
    assert urgent_out.read_text().strip() == "ran"
    assert int(job_field(victim, "Restarts") or 0) >= 1, "victim was not requeued"
    assert "got-TERM" in starts.read_text(), "victim did not get SIGTERM at preemption"
    # The requeued victim starts again (after the cred_expire delay) and sees SLURM_RESTART_COUNT=1.
    wait_until("victim to start again", lambda: "restart=1" in starts.read_text(), 90)
    assert starts.read_text().splitlines()[0] == "restart=0"


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    os.environ.get("SLURM_LOCAL_TEST_RECONFIGURE") != "1" or os.geteuid() != 0,
    reason="reconfigures the shared cluster; opt in with SLURM_LOCAL_TEST_RECONFIGURE=1 (as root)",
)
def test_preempt_send_user_signal(jobs: Jobs, tmp_path: Path) -> None:
    gpus = gpus_per_node()
    log = tmp_path / "signals.txt"

    def toggle(mode: str) -> None:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "reconfigure-preempt-signal", mode], check=True, timeout=150)

    toggle("on")
    try:
        victim = jobs.submit(
            "sigvictim",
            f"trap 'echo USR2 >> {log}' USR2\ntrap 'echo TERM >> {log}' TERM\n"
            "for _ in $(seq 600); do sleep 0.5; done\n",
            "--partition=gpu",
            f"--gpus-per-node={gpus}",
            "--signal=B:USR2@300",
        )
        node = wait_running(victim)
        jobs.submit("sigurgent", "true\n", "--partition=urgent", f"--gpus-per-node={gpus}", f"--nodelist={node}")
        wait_until("USR2 at preemption", lambda: log.exists() and "USR2" in log.read_text(), 30)
        assert "TERM" not in log.read_text(), "SIGTERM came before the grace time was over"
    finally:
        jobs.cancel_all()
        toggle("off")
