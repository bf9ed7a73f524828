"""Issue 5 part 5 end to end: a memalpha sweep point through the local Slurm test cluster.

Real: Hydra, verl's schema and checks, submitit, Slurm, Ray, the driver, the kit's memory server,
the Mem-α reward (called by the trainer double through its reward_kwargs), the run folder. TEST
DOUBLES: the trainer (tests/doubles/fake_verl_trainer.py, verl needs a GPU) and the answer LLM
(tests/doubles/openai_answer_double.py stands in for ``vllm serve`` on a CPU, given as the
answer_llm sidecar's ``command``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slurm

ANSWER_DOUBLE = Path(__file__).resolve().parents[1] / "doubles" / "openai_answer_double.py"
SERVED_NAME = "memalpha-answer-double"


@pytest.fixture(scope="module")
def memalpha_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real NLU rows (../shared/data/nlu) built into memalpha parquet by the kit's own command."""
    REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: its launch/ shims
    shared = Path(os.environ.get("GRPOKIT_SHARED", REPO_ROOT.parent / "shared"))
    out = tmp_path_factory.mktemp("memalpha")
    cmd = [
        sys.executable,
        str(REPO_ROOT / "launch" / "prepare_data.py"),
        "memalpha",
        "--source",
        f"nlu:{shared / 'data' / 'nlu'}",
        "--out",
        str(out),
        "--num-train",
        "4",
        "--num-test",
        "2",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def memalpha_overrides(kit, model: Path, data: Path, tmp_path: Path) -> list[str]:
    answer_cmd = ",".join(
        [
            "'{python}'",
            str(ANSWER_DOUBLE),
            "--host",
            "'{host}'",
            "--port",
            "'{port}'",
            "--served-model-name",
            SERVED_NAME,
        ]
    )
    return [
        "experiment=memalpha_grpo",
        "model=tiny",
        f"model.path={model}",
        f"experiment.data_dir={data}",
        f"logs_root={tmp_path / 'logs'}",
        f"runtime.trainer_cmd=[python,{kit.fake_trainer}]",
        "runtime.needs_gpu=false",
        "runtime.kill_grace_s=5",
        # the CPU stand-in for `vllm serve`, under the name the memory server asks for
        f"+sidecars.answer_llm.command=[{answer_cmd}]",
        f"experiment.answer_served_model_name={SERVED_NAME}",
        "sidecars.answer_llm.start_timeout_s=120",
        # while configs/config.yaml composes the hardware profile after the experiment, its 0.9
        # wins over the experiment's 0.35 (tests/unit/test_experiment_configs.py, order_dependent)
        "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.35",
        *kit.slurm_cluster,
    ]


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def job_processes(pids: list[int], ports: list[int], run_dir: Path) -> list[str]:
    """Processes of the finished job still alive: its sidecar pids, anything serving its ports or
    naming its run folder on the command line."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.info["pid"] in pids or str(run_dir) in cmdline:
                left.append(f"{proc.info['pid']}: {cmdline[:200]}")
        except psutil.Error:
            continue
    left += [f"port {p} still open" for p in ports if port_open("127.0.0.1", p)]
    return left


def wait_gone(pids: list[int], ports: list[int], run_dir: Path, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = job_processes(pids, ports, run_dir)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def wait_job_left_queue(job_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=20).stdout.split()
        if job_id not in out:
            return
        time.sleep(1.0)
    pytest.fail(f"job {job_id} still in squeue {timeout:.0f} s after its point finished")


@pytest.mark.timeout(600)
def test_memalpha_point_runs_with_both_sidecars_started_gated_and_stopped(
    kit, slurm, tiny_model_dir, memalpha_data, tmp_path
):
    overrides = memalpha_overrides(kit, tiny_model_dir, memalpha_data, tmp_path)
    out = kit.run("sweep.py", ["-m", *overrides, "sweep_name=mem"], env={"FAKE_TRAINER_STEP_S": "0.2"}, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    points = kit.manifest(tmp_path / "logs" / "mem")["points"]
    assert len(points) == 1
    run_dir = Path(points[0]["run_dir"])
    [status] = kit.wait_final([run_dir], timeout=420)
    attempt = run_dir / "attempts" / "1"
    assert status["state"] == "completed", (
        status.get("reason"),
        (attempt / "driver.log").read_text()[-3000:] if (attempt / "driver.log").exists() else "",
    )
    assert status["last_step"] == 2 and status["target_step"] == 2

    # both sidecars were started, gated on /health before the trainer, and recorded
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    side = endpoints["sidecars"]
    assert set(side) == {"answer_llm", "memory_server"}
    assert side["answer_llm"]["kind"] == "vllm" and side["memory_server"]["kind"] == "memory_server"
    for ep in side.values():
        assert ep["url"] == f"http://127.0.0.1:{ep['port']}" and isinstance(ep["pid"], int)
    assert not [k for ep in side.values() for k in ep if "key" in k.lower()], "endpoints.json holds no keys"
    driver_log = (attempt / "driver.log").read_text()
    assert driver_log.index("sidecar memory_server:") < driver_log.index("trainer launched"), driver_log[-3000:]

    # the GPU plan shares GPU 0 between the rollout and the answer LLM within the 0.95 budget
    plan = json.loads((run_dir / "gpu_plan.json").read_text())
    assert plan["sidecars"]["answer_llm"] == {"gpus": [0], "placement": "shared", "gpu_memory_utilization": 0.55}
    assert plan["gpu0_vllm_fraction_sum"] == 0.9

    # the reward was pointed at the job's memory server and scored through it and the answer LLM
    mem_url = side["memory_server"]["url"]
    cmd = (run_dir / "verl_cmd.sh").read_text()
    assert f"+reward.custom_reward_function.reward_kwargs.memory_server_url={mem_url}/batch_process" in cmd
    assert "reward.custom_reward_function.path=" in cmd and "tasks/memalpha/reward.py" in cmd
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        data = row["data"]
        assert {"reward/memalpha_acc", "reward/memalpha_format", "reward/memalpha_compression"} <= set(data)
        # the double's memory holds every label, the stand-in answers from it: all correct
        assert data["reward/memalpha_acc"] == 1.0 and data["reward/memalpha_format"] == 1.0
    memory_log = (attempt / "sidecars" / "memory_server.log").read_text()
    assert "POST /batch_process" in memory_log and '"POST /batch_process HTTP/1.1" 200' in memory_log, memory_log[
        -2000:
    ]
    answer_log = (attempt / "sidecars" / "answer_llm.log").read_text()
    assert "POST /v1/chat/completions" in answer_log, answer_log[-2000:]

    # nothing of the job is left: sidecars, Ray, the driver
    wait_job_left_queue(points[0]["job_id"], timeout=60)
    ray_host, _, ray_port = endpoints["ray"]["address"].rpartition(":")
    pids = [ep["pid"] for ep in side.values()]
    ports = [ep["port"] for ep in side.values()] + [int(ray_port)]
    left = wait_gone(pids, ports, run_dir, timeout=30)
    assert left == [], left


@pytest.mark.timeout(300)
def test_memalpha_on_one_gpu_with_rollout_09_is_refused_before_submission(
    kit, slurm, tiny_model_dir, memalpha_data, tmp_path
):
    overrides = [
        o
        if not o.startswith("verl.actor_rollout_ref.rollout.gpu_memory_utilization=")
        else "verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.9"
        for o in memalpha_overrides(kit, tiny_model_dir, memalpha_data, tmp_path)
    ]
    out = kit.run("sweep.py", ["-m", *overrides, "sweep_name=mem_refused"], timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "verl.actor_rollout_ref.rollout.gpu_memory_utilization" in text
    assert "sum to 1.45 (rollout 0.9 + answer_llm 0.55) > 0.95" in text, text[-3000:]
    assert "gpu_memory_utilization<=0.4" in text and "nothing was submitted" in text
    # other tests may submit meanwhile: look for this sweep's own job name (submitit names it so)
    queued = subprocess.run(
        ["squeue", "-h", "-n", "mem_refused", "-o", "%i"], capture_output=True, text=True, timeout=20
    )
    assert queued.stdout.split() == [], "a job was submitted"
    manifest = tmp_path / "logs" / "mem_refused" / "manifest.json"
    assert not manifest.exists() or all(p["job_id"] is None for p in json.loads(manifest.read_text())["points"])
