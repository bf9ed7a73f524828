"""The per-job runtime on the real Slurm test cluster: ports, Ray on one and two nodes, sidecars, auth.

Training is the TEST DOUBLE tests/doubles/fake_verl_trainer.py and the servers are test doubles of
vLLM (tests/doubles/openai_answer_double.py, tests/doubles/misbehaving_sidecar.py); Slurm, submitit,
Ray (with token auth), the driver, the port registry and the supervisor are real.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

# Marked cluster_exclusive (`make test` runs them after the parallel part, alone on the cluster):
# the four jobs that must share node2 at once, the worker node set down, and the two users' jobs
# pinned together on node3; the others need only their own jobs.
pytestmark = [pytest.mark.slurm]

QUICK = ["verl.trainer.total_training_steps=2", "verl.trainer.save_freq=-1", "verl.trainer.test_freq=-1"]
QUICK_ENV = {"FAKE_TRAINER_STEP_S": "0.2"}


def answer_double(kit, name: str = "answer_llm") -> str:
    """Override declaring the vLLM stand-in as a sidecar (kind vllm: its key comes in VLLM_API_KEY)."""
    script = kit.repo / "tests" / "doubles" / "openai_answer_double.py"
    return (
        f"+sidecars.{name}={{kind:vllm,command:[python,{script},--host,'{{host}}',--port,'{{port}}'],"
        "served_model_name:answer-double,start_timeout_s:120}"
    )


def misbehaving(kit, name: str, *flags: str, timeout_s: int = 60) -> str:
    script = kit.repo / "tests" / "doubles" / "misbehaving_sidecar.py"
    args = ",".join([str(script), "--host", "'{host}'", "--port", "'{port}'", *flags])
    return f"+sidecars.{name}={{command:[python,{args}],start_timeout_s:{timeout_s}}}"


def sweep(kit, tmp_path: Path, name: str, overrides: list[str], env: dict | None = None) -> list[Path]:
    """Submit a sweep to the test cluster; returns its run folders."""
    out = kit.run(
        "sweep.py",
        ["-m", *kit.slurm_cluster, *overrides, f"sweep_name={name}"],
        env={**QUICK_ENV, **(env or {})},
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [Path(p["run_dir"]) for p in kit.manifest(tmp_path / "logs" / name)["points"]]


def held_port_groups(run_dir: Path, endpoints: dict) -> list[tuple[float, float, set[int]]]:
    """``(reserved at, released by, ports)`` for a job's sidecar ports and for its Ray ports, from
    its driver.log: each group is reserved just before the line that starts it (``sidecar ...:`` /
    ``ray head:``) and released at the job's clean-up, before its last line (the outcome). Ray
    starts one at a time per node (grpokit.runtime.processes.ray_cluster.start_slot), so a job may reserve
    its Ray ports after another job ended and released the same ports: that is reuse, not sharing."""
    import datetime as dt

    def at(line: str) -> float:
        return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # logging's local time

    log = [line for line in (run_dir / "attempts" / "1" / "driver.log").read_text().splitlines() if line[:2] == "20"]
    released = at(log[-1])
    sidecar_at = min(at(line) for line in log if "grpokit.runtime.processes.sidecars: sidecar " in line)
    ray_at = min(at(line) for line in log if "grpokit.runtime.processes.ray_cluster: ray head: " in line)
    ray = endpoints["ray"]
    ray_ports = {p for p in ray["ports"].values() if p} | set(range(ray["worker_ports"][0], ray["worker_ports"][1] + 1))
    return [(sidecar_at, released, job_ports(endpoints) - ray_ports), (ray_at, released, ray_ports)]


def job_ports(endpoints: dict) -> set[int]:
    """Every port a job's endpoints.json names (Ray's singles and worker range, sidecars and blocks)."""
    ray = endpoints["ray"]
    out = {p for p in ray["ports"].values() if p}
    lo, hi = ray["worker_ports"]
    out |= set(range(lo, hi + 1))
    for sc in endpoints["sidecars"].values():
        out.add(sc["port"])
        if sc.get("internal_port_base"):
            out |= set(range(sc["internal_port_base"], sc["internal_port_base"] + 16))
    return out


def job_processes(run_dir: Path) -> list[str]:
    """Processes on this machine that carry the run folder in their command line or environment."""
    marker = str(run_dir)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            text = " ".join(proc.info["cmdline"] or [])
            if marker in text or any(marker in v for v in proc.environ().values()):
                found.append(f"{proc.pid} {text[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def tagged_processes(tag: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        text = " ".join(proc.info["cmdline"] or [])
        if tag in text and proc.pid != os.getpid() and "pytest" not in text:
            found.append(f"{proc.pid} {text[:200]}")
    return found


def listening(ports: set[int]) -> list[tuple[int, int | None]]:
    return [
        (c.laddr.port, c.pid)
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port in ports
    ]


def assert_nothing_left(run_dir: Path, ports: set[int] = frozenset(), tags: tuple[str, ...] = ()) -> None:
    deadline = time.monotonic() + 15  # Slurm's step cleanup runs just after the driver exits
    while True:
        left = job_processes(run_dir) + [p for t in tags for p in tagged_processes(t)]
        held = listening(set(ports))
        if not left and not held:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"processes of the job remain: {left}; ports still listening: {held}")
        time.sleep(0.5)


@pytest.mark.cluster_exclusive
@pytest.mark.timeout(420)
def test_four_jobs_on_one_node_at_once_get_disjoint_ports(kit, slurm, kit_overrides, tmp_path):
    run_dirs = sweep(
        kit,
        tmp_path,
        "same_node",
        [
            *kit_overrides,
            *QUICK,
            "+cluster.additional_parameters.nodelist=node2",
            answer_double(kit),
            "verl.data.train_batch_size=8,16,24,32",
        ],
    )
    assert len(run_dirs) == 4
    statuses = kit.wait_final(run_dirs, timeout=360)
    assert [s["state"] for s in statuses] == ["completed"] * 4, [s.get("reason") for s in statuses]
    assert {s["slurm"]["nodelist"] for s in statuses} == {"node2"}
    # they really ran at the same time: every attempt overlaps every other
    spans = [(s["attempts"][-1]["start"], s["attempts"][-1]["end"]) for s in statuses]
    assert max(a for a, _ in spans) < min(b for _, b in spans), spans
    ports, groups = [], []
    for run_dir in run_dirs:
        endpoints = json.loads((run_dir / "endpoints.json").read_text())
        assert endpoints["ray"]["address"].startswith("127.0.0.1:")
        assert endpoints["sidecars"]["answer_llm"]["url"].startswith("http://127.0.0.1:")
        assert "key" not in json.dumps(endpoints).lower()
        ports.append(job_ports(endpoints))
        groups.append(held_port_groups(run_dir, endpoints))
        assert "Ray ready" in (run_dir / "attempts" / "1" / "driver.log").read_text()
    plan = json.loads((run_dirs[0] / "gpu_plan.json").read_text())
    assert plan["trainer"]["gpus"] == [0] and plan["gpus_per_node"] == 1
    # no two jobs hold one port at the same time (a port released when its job ended may be reused)
    compared = 0
    for (i, gi), (j, gj) in itertools.combinations(enumerate(groups), 2):
        for (a0, a1, a), (b0, b1, b) in itertools.product(gi, gj):
            if a0 < b1 and b0 < a1:
                compared += 1
                assert not a & b, f"jobs {i} and {j} hold ports {sorted(a & b)[:10]} at the same time"
    assert compared >= 6, "the four jobs' sidecar ports, at least, are held at the same time"
    for run_dir, p in zip(run_dirs, ports, strict=True):
        assert_nothing_left(run_dir, p)


def node_state(node: str) -> str:
    """The node's state word (``sinfo -N`` prints one line per partition the node is in)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return (out.stdout.split() or [""])[0]


def set_node(node: str, *state: str) -> None:
    out = subprocess.run(["scontrol", "update", f"nodename={node}", *state], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


def resume_node(node: str) -> None:
    """``state=resume`` when the node is still down (``ReturnToService=2`` may have returned it)."""
    if "down" in node_state(node) or "drain" in node_state(node):
        set_node(node, "state=resume")


def restarts(task: str) -> int:
    """``Restarts`` of ``scontrol show job -o <task>`` (0 when scontrol does not say)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", task], capture_output=True, text=True, timeout=30)
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    return int(fields.get("Restarts", "0") or 0)


def hostnames(nodelist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.cluster_exclusive
@pytest.mark.timeout(420)
def test_two_node_job_starts_one_head_and_one_worker_and_survives_its_worker_node_going_down(
    kit, slurm, kit_overrides, tmp_path
):
    """Attempt 1 starts one Ray head and one worker that the trainer sees; then its worker node is set
    DOWN (``scontrol update state=down``: slurmctld kills the job on every node and requeues it, as
    on a node failure). The attempt's reason names the node; attempt 2 resumes from the checkpoint."""
    report = tmp_path / "ray_report.json"
    steps = ["verl.trainer.total_training_steps=6", "verl.trainer.save_freq=2", "verl.trainer.test_freq=-1"]
    (run_dir,) = sweep(
        kit,
        tmp_path,
        "two_nodes",
        [*kit_overrides, *steps, "cluster.nodes=2", "cluster.gpus_per_node=2", "cluster.cpus_per_task=2"],
        env={"FAKE_TRAINER_RAY_REPORT": str(report), "FAKE_TRAINER_STEP_S": "1.0"},
    )
    metrics = run_dir / "attempts" / "1" / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, 300, "step 3 of attempt 1")
    first = kit.read_status(run_dir)
    nodes = hostnames(first["slurm"]["nodelist"])
    assert len(nodes) == 2
    job = first["slurm"]["job_id"]  # one point: a plain job, no array
    try:
        set_node(nodes[1], "state=down", "reason=grpokit-test-node-failure")
        wait_for(lambda: restarts(job) >= 1, 60, "Slurm to requeue the job")
    finally:
        resume_node(nodes[1])
    (status,) = kit.wait_final([run_dir], timeout=240)
    assert status["state"] == "completed", status.get("reason")
    one = status["attempts"][0]
    assert one["ended_by"] == "node_failed", status["attempts"]
    assert one["reason"].startswith(f"node {nodes[1]} failed; Slurm requeues the job"), status["attempts"]
    assert "retry" not in one, "Slurm requeued it: no retry of the kit's spent"
    assert status["attempts"][1].get("resume_step") in (2, 4), status["attempts"]  # from its checkpoint
    second = [json.loads(x)["step"] for x in (run_dir / "attempts" / "2" / "metrics.jsonl").read_text().splitlines()]
    assert second[0] == status["attempts"][1]["resume_step"] + 1 and second[-1] == 6, second
    wait_for(lambda: node_state(nodes[1]) in ("idle", "mixed", "allocated"), 60, f"{nodes[1]} back up")
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    assert endpoints["ray"]["nodes"] == hostnames(status["slurm"]["nodelist"])  # attempt 2's
    ray_logs = run_dir / "attempts" / "1" / "ray"
    assert sorted(p.name for p in ray_logs.glob("*.log")) == ["ray_head.log", f"ray_worker_{nodes[1]}.log"]
    seen = json.loads(report.read_text())
    alive = [n for n in seen["nodes"] if n["alive"]]
    assert len(alive) == 2, seen
    assert [n["resources"].get("GPU") for n in alive] == [2.0, 2.0]
    assert [n["resources"].get("CPU") for n in alive] == [2.0, 2.0]
    assert seen["cluster_resources"]["GPU"] == 4.0
    driver_log = (run_dir / "attempts" / "1" / "driver.log").read_text()
    assert driver_log.count(" start --head") == 1, "exactly one head (ray script or python -m)"
    assert driver_log.count("grpokit.runtime.processes.ray_worker") == 1, "exactly one worker"
    assert f"srun --overlap --nodes=1 --ntasks=1 --nodelist={nodes[1]}" in driver_log
    assert "'nodes': 2" in driver_log
    assert_nothing_left(run_dir, job_ports(endpoints))


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def trainer_running(run_dir: Path) -> bool:
    log = run_dir / "attempts" / "1" / "trainer.log"
    return log.exists() and "step:1 " in log.read_text()


@pytest.mark.timeout(420)
def test_a_sidecar_that_dies_or_ignores_sigterm_ends_the_job_promptly_and_leaves_nothing(
    kit, slurm, kit_overrides, tmp_path
):
    tag = f"stubborn-{tmp_path.name}"
    trigger = tmp_path / "die_now"
    long_run = ["verl.trainer.total_training_steps=100", "verl.trainer.save_freq=-1", "verl.trainer.test_freq=-1"]
    # submitted together so that the three jobs run side by side
    early = sweep(
        kit,
        tmp_path,
        "dies_early",
        [*kit_overrides, *QUICK, misbehaving(kit, "flaky", "--exit-after", "1", "--ready-after", "600")],
    )
    mid = sweep(
        kit,
        tmp_path,
        "dies_mid_run",
        [*kit_overrides, *long_run, misbehaving(kit, "crashy", "--exit-when", str(trigger))],
        env={"FAKE_TRAINER_STEP_S": "1"},
    )
    stubborn = sweep(
        kit,
        tmp_path,
        "ignores_term",
        [*kit_overrides, *QUICK, misbehaving(kit, "stubborn", "--ignore-sigterm", "--spawn-child", "--tag", tag)],
    )

    wait_for(lambda: trainer_running(mid[0]), 300, "the trainer of dies_mid_run")
    trigger.touch()
    died_at = time.monotonic()
    (s_mid,) = kit.wait_final(mid, timeout=120)
    assert time.monotonic() - died_at < 60, "the job did not end promptly after its sidecar died"
    assert s_mid["state"] == "failed" and s_mid["attempts"][-1]["ended_by"] == "sidecar_failed"
    assert "sidecar crashy died (exit 4)" in s_mid["reason"] and "--exit-when" in s_mid["reason"]
    assert s_mid["last_step"] < 100

    (s_early,) = kit.wait_final(early, timeout=300)
    assert s_early["state"] == "failed" and s_early["attempts"][-1]["ended_by"] == "sidecar_failed"
    assert "sidecar flaky exited with 3 during start-up" in s_early["reason"]
    # it died 1 s in, while Ray was still starting: the attempt ended then, not after Ray's wait
    assert "while Ray was starting" in s_early["reason"], s_early["reason"][:300]
    assert "ray ready" not in (early[0] / "attempts" / "1" / "driver.log").read_text()
    assert "exiting with 3 after 1.0 s" in s_early["reason"], "the reason quotes the sidecar's log"
    assert not (early[0] / "attempts" / "1" / "trainer.log").exists(), "the trainer must not start"

    (s_stub,) = kit.wait_final(stubborn, timeout=300)
    assert s_stub["state"] == "completed", s_stub.get("reason")
    driver_log = (stubborn[0] / "attempts" / "1" / "driver.log").read_text()
    assert "sidecar stubborn: " in driver_log and "SIGKILLed" in driver_log
    for run_dir in (*early, *mid, *stubborn):
        endpoints = (
            json.loads((run_dir / "endpoints.json").read_text()) if (run_dir / "endpoints.json").exists() else None
        )
        assert_nothing_left(run_dir, job_ports(endpoints) if endpoints else set(), tags=(tag,))


def ray_connect(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``ray.init(address=...)`` from a fresh process with exactly ``env`` (plus PATH/HOME)."""
    code = f"import ray; ray.init(address={address!r}, logging_level='ERROR'); print('JOINED', len(ray.nodes()))"
    base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    return subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def process_env(pid: int) -> dict[str, str]:
    return psutil.Process(pid).environ()


@pytest.mark.timeout(420)
def test_clients_without_the_job_token_or_key_are_refused(kit, slurm, kit_overrides, tmp_path):
    # 200 steps of 8 prompts (the servers stay up while the test probes them): GSM8K's 1024-prompt cap
    # would end the point at step 128, which the sweep refuses, so the cap is raised to what 200 take
    long_run = [
        "verl.trainer.total_training_steps=200",
        "verl.data.train_max_samples=1600",
        "verl.trainer.save_freq=-1",
        "verl.trainer.test_freq=-1",
    ]
    (run_dir,) = sweep(
        kit, tmp_path, "auth", [*kit_overrides, *long_run, answer_double(kit)], env={"FAKE_TRAINER_STEP_S": "2"}
    )
    try:
        wait_for(lambda: trainer_running(run_dir), 300, "the trainer")
        endpoints = json.loads((run_dir / "endpoints.json").read_text())
        address, sidecar = endpoints["ray"]["address"], endpoints["sidecars"]["answer_llm"]
        # a one-node job's Ray is on loopback: a joiner takes endpoints.json's client_env, as the trainer does
        joiner = endpoints["ray"]["client_env"]
        assert joiner == {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

        refused = ray_connect(address, joiner)
        assert refused.returncode != 0 and "JOINED" not in refused.stdout
        assert "Authentication token is missing or incorrect" in refused.stderr, refused.stderr[-2000:]
        wrong = tmp_path / "wrong_token"
        wrong.write_text("0" * 64)
        refused = ray_connect(address, {**joiner, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(wrong)})
        assert refused.returncode != 0 and "JOINED" not in refused.stdout
        token = run_dir / ".secrets" / "ray_token"
        assert (token.stat().st_mode & 0o077) == 0 and (token.parent.stat().st_mode & 0o077) == 0
        joined = ray_connect(address, {**joiner, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
        assert "JOINED 1" in joined.stdout, joined.stderr[-2000:]  # the refusals were the token's doing

        url = sidecar["url"] + "/v1/models"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
        key = process_env(sidecar["pid"])["VLLM_API_KEY"]
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
        # the key is in no file of the run folder, and the Ray token only in its private file
        secret = token.read_text().strip()
        for path in run_dir.rglob("*"):
            if path.is_file() and path != token:
                text = path.read_bytes()
                assert key.encode() not in text and secret.encode() not in text, f"a secret leaked into {path}"
    finally:
        job = kit.read_status(run_dir).get("slurm", {}).get("job_id")
        if job:
            subprocess.run(["scancel", job], check=False)
    # scancel sends SIGTERM, which the driver treats as a preemption (state requeued; Slurm drops the job)
    kit.wait_final([run_dir], timeout=120, states=kit.final | {"requeued"})
    assert_nothing_left(run_dir, job_ports(endpoints))


@pytest.mark.timeout(300)
def test_a_job_whose_tmpdir_is_150_characters_long_starts_ray(kit, slurm, kit_overrides, tmp_path):
    tmpdir = tmp_path / "t"
    tmpdir = Path(str(tmpdir) + "_" + "x" * (150 - len(str(tmpdir)) - 1))
    assert len(str(tmpdir)) == 150
    tmpdir.mkdir()
    (run_dir,) = sweep(
        kit,
        tmp_path,
        "long_tmp",
        [*kit_overrides, *QUICK],
        env={"TMPDIR": str(tmpdir), "FAKE_TRAINER_RAY_REPORT": str(tmp_path / "ray.json")},
    )
    (status,) = kit.wait_final([run_dir], timeout=240)
    assert status["state"] == "completed", status.get("reason")
    env = json.loads((run_dir / "env.json").read_text())
    assert env["tmpdir"] == str(tmpdir), "the job did not run under the long TMPDIR"
    temp = json.loads((run_dir / "endpoints.json").read_text())["ray"]["temp_dir"]
    assert len(temp) < 40 and not Path(temp).exists(), "Ray's short temp dir is used, then removed"
    assert json.loads((tmp_path / "ray.json").read_text())["nodes"][0]["alive"], "the trainer joined Ray"


@pytest.mark.timeout(120)
def test_a_plan_that_over_subscribes_a_gpu_is_refused_before_submission(kit, slurm, kit_overrides, tmp_path):
    shared = (
        f"+sidecars.answer_llm={{kind:vllm,model:{tmp_path},served_model_name:a,gpus:1,placement:shared,"
        "gpu_memory_utilization:0.6}"
    )
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit.slurm_cluster,
            *kit_overrides,
            "sweep_name=oversub",
            shared,
            "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        ],
    )
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "sum to 1.1" in text and "gpu_memory_utilization<=0.35" in text, text[-3000:]
    assert not (tmp_path / "logs" / "oversub" / "submitit").exists(), "something was submitted"


# -- two real Unix users on one node (issue 24 item 5) ---------------------------------------------

OTHER_USER = "grpokit-test2"  # the same user tests/unit/test_node_state.py creates
OLD_SHARED = ("/tmp/grpokit-ports.json", "/tmp/grpokit-ports.lock", "/tmp/grpokit-ray-start.lock")


def other_user() -> tuple[int, int]:
    """``grpokit-test2``'s uid and gid, created when absent (a system user, no home, no login shell)."""
    import pwd

    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER], check=True
        )
        entry = pwd.getpwnam(OTHER_USER)
    return entry.pw_uid, entry.pw_gid


def grant_traverse(paths: list[Path], changed: dict[Path, int]) -> None:
    """``o+x`` on each folder above (and at) ``paths`` that lacks it, so that another user reaches
    them (a root-owned clone, /root's Python, pytest's 0700 /tmp/pytest-of-root); each folder's old
    mode goes into ``changed`` as it is changed, for :func:`restore_modes`. Nothing is made readable
    that was not."""
    for path in paths:
        for folder in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
            mode = folder.stat().st_mode
            if folder.is_dir() and not mode & 0o001 and folder not in changed:
                changed[folder] = mode & 0o7777
                folder.chmod((mode & 0o7777) | 0o001)


def restore_modes(changed: dict[Path, int]) -> None:
    for folder, mode in changed.items():
        folder.chmod(mode)


@pytest.mark.cluster_exclusive
@pytest.mark.timeout(420)
def test_two_users_run_sweeps_on_one_node_at_once_with_each_others_files_present(
    kit, slurm, kit_overrides, tiny_model_dir, gsm8k_dir, tmp_path
):
    """Root and ``grpokit-test2`` each submit a 1-point sweep (trainer test double) to the same node
    at the same time, through ``launch/sweep.py`` and Slurm. The old scheme's shared files
    (``/tmp/grpokit-ports.json`` + ``.lock``, ``/tmp/grpokit-ray-start.lock``) are the other user's,
    mode 0644 (what ``fs.protected_regular`` refuses to open with ``O_CREAT``), and each user's
    private state folder is there while the other's job runs. No kernel setting is changed; the
    second user reaches the checkout, the venv's Python and the test's model and data through
    ``o+x`` on the folders above them that lacked it (restored after)."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        pytest.skip("needs root and runuser (a second real user)")
    uid, gid = other_user()
    theirs_root = tmp_path / "theirs"
    home = theirs_root / "home"
    home.mkdir(parents=True)
    for p in (theirs_root, home):
        os.chown(p, uid, gid)
    saved = {p: (os.stat(p), Path(p).read_bytes()) for p in OLD_SHARED if os.path.exists(p)}
    python = Path(sys.executable)
    changed: dict[Path, int] = {}
    env = {k: v for k, v in os.environ.items() if k != "GRPOKIT_STATE_DIR"}
    steps = [
        "verl.trainer.total_training_steps=3",
        "verl.trainer.save_freq=-1",
        "verl.trainer.test_freq=-1",
        "+cluster.additional_parameters.nodelist=node3",
    ]
    common = ["-m", *kit.slurm_cluster, *[o for o in kit_overrides if not o.startswith("logs_root=")], *steps]
    try:
        grant_traverse(
            [kit.repo, python.parent, python.resolve().parent, tiny_model_dir, gsm8k_dir, theirs_root], changed
        )
        for p in OLD_SHARED:  # the other user's files, 0644
            Path(p).write_text("{}" if p.endswith(".json") else "")
            os.chown(p, uid, gid)
            os.chmod(p, 0o644)
        t0 = time.monotonic()
        launch = [sys.executable, str(kit.repo / "launch" / "sweep.py"), *common]
        procs = {
            "root": subprocess.Popen(
                [*launch, f"logs_root={tmp_path / 'logs'}", "sweep_name=root_side"],
                cwd=kit.repo,
                env={**env, **QUICK_ENV},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            OTHER_USER: subprocess.Popen(
                ["runuser", "-u", OTHER_USER, "--", "env", f"HOME={home}", f"USER={OTHER_USER}", *launch]
                + [f"logs_root={theirs_root / 'logs'}", "sweep_name=other_side"],
                cwd=kit.repo,
                env={**env, **QUICK_ENV},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        }
        for who, proc in procs.items():
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, f"{who}: {err[-3000:]}"
        run_dirs = [
            Path(kit.manifest(root / "logs" / name)["points"][0]["run_dir"])
            for root, name in ((tmp_path, "root_side"), (theirs_root, "other_side"))
        ]
        statuses = kit.wait_final(run_dirs, timeout=300)
        elapsed = time.monotonic() - t0
    finally:
        restore_modes(changed)
        for p in OLD_SHARED:
            if p in saved:
                st, data = saved[p]
                Path(p).write_bytes(data)
                os.chown(p, st.st_uid, st.st_gid)
                os.chmod(p, st.st_mode & 0o7777)
            else:
                Path(p).unlink(missing_ok=True)
    assert [s["state"] for s in statuses] == ["completed", "completed"], [s.get("reason") for s in statuses]
    assert [s["slurm"]["nodelist"] for s in statuses] == ["node3", "node3"]
    spans = [(s["attempts"][-1]["start"], s["attempts"][-1]["end"]) for s in statuses]
    assert max(a for a, _ in spans) < min(b for _, b in spans), f"the two jobs did not overlap: {spans}"
    assert run_dirs[1].stat().st_uid == uid, "the other user's job wrote its own run folder"
    for who in (0, uid):
        state = Path(f"/tmp/grpokit-{who}")
        st = state.lstat()
        assert (st.st_uid, st.st_mode & 0o777) == (who, 0o700), (state, st.st_uid, oct(st.st_mode))
    for run_dir in run_dirs:
        assert "Permission denied" not in (run_dir / "attempts" / "1" / "driver.log").read_text()
    print(f"two users' sweeps: {elapsed:.0f} s from submission to both completed")
