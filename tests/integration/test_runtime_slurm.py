"""The per-job runtime on the real Slurm test cluster: ports, Ray on one and two nodes, sidecars, auth.

Training is the TEST DOUBLE tests/doubles/fake_verl_trainer.py and the servers are test doubles of
vLLM (tests/doubles/openai_answer_double.py, tests/doubles/misbehaving_sidecar.py); Slurm, submitit,
Ray (with token auth), the driver, the port registry and the supervisor are real.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slurm

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
        ["-m", *overrides, *kit.slurm_cluster, f"sweep_name={name}"],
        env={**QUICK_ENV, **(env or {})},
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [Path(p["run_dir"]) for p in kit.manifest(tmp_path / "logs" / name)["points"]]


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


@pytest.mark.timeout(420)
def test_four_jobs_on_one_node_at_once_get_disjoint_ports(kit, slurm, kit_overrides, tmp_path):
    run_dirs = sweep(
        kit,
        tmp_path,
        "same_node",
        [
            *kit_overrides,
            *QUICK,
            "+cluster.additional_sbatch.nodelist=node2",
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
    ports = []
    for run_dir in run_dirs:
        endpoints = json.loads((run_dir / "endpoints.json").read_text())
        assert endpoints["ray"]["address"].startswith("127.0.0.1:")
        assert endpoints["sidecars"]["answer_llm"]["url"].startswith("http://127.0.0.1:")
        assert "key" not in json.dumps(endpoints).lower()
        ports.append(job_ports(endpoints))
        assert "Ray ready" in (run_dir / "attempts" / "1" / "driver.log").read_text()
    for (i, a), (j, b) in itertools.combinations(enumerate(ports), 2):
        assert not a & b, f"jobs {i} and {j} share ports {sorted(a & b)[:10]}"
    for run_dir, p in zip(run_dirs, ports, strict=True):
        assert_nothing_left(run_dir, p)
