"""Guards around a run on the real Slurm test cluster: a checkpoint folder that the job's nodes do
not share, a resume at another GPU count, a hung trainer, and Ray sized from the allocation.

Training is the TEST DOUBLE tests/doubles/fake_verl_trainer.py (no GPU here); Slurm, sbatch,
submitit, srun, Ray, py-spy and the driver are real.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

QUICK = ["verl.trainer.total_training_steps=2", "verl.trainer.save_freq=-1", "verl.trainer.test_freq=-1"]


def sbatch(kit, tmp_path: Path, script: Path, sbatch_args: list[str], args: list[str], env: dict | None = None) -> str:
    """Submit ``script`` (slurm/train.sbatch or a wrapper of it) as a user would; returns the job id."""
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--time=15",
            "--cpus-per-task=1",
            "--mem=1G",
            "--signal=B:USR2@60",
            f"--output={tmp_path}/sbatch_%j.out",
            *sbatch_args,
            str(script),
            *args,
            "cluster.signal_delay_s=60",
            "cluster.timeout_min=15",
        ],
        capture_output=True,
        text=True,
        cwd=kit.repo,
        timeout=60,
        env={**kit.env(), "GRPOKIT_PYTHON": kit.python, "FAKE_TRAINER_STEP_S": "0.2", **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def job_output(tmp_path: Path, job_id: str) -> str:
    path = tmp_path / f"sbatch_{job_id}.out"
    return path.read_text()[-3000:] if path.exists() else "(no output file)"


def slurm_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def sweep(kit, tmp_path: Path, name: str, overrides: list[str], env: dict | None = None) -> list[Path]:
    out = kit.run(
        "sweep.py",
        ["-m", *kit.slurm_cluster, *overrides, f"sweep_name={name}"],
        env={"FAKE_TRAINER_STEP_S": "0.2", **(env or {})},
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [Path(p["run_dir"]) for p in kit.manifest(tmp_path / "logs" / name)["points"]]


@pytest.mark.timeout(600)
def test_a_checkpoint_root_on_a_node_local_disk_stops_a_two_node_job_before_training(
    kit, slurm, kit_overrides, tmp_path
):
    """Left: a 2-node point whose checkpoint_root is shared (the sweep path): it passes the check and
    trains, and Ray's object store on each node is 30 % of the job's --mem (cluster.mem_gb=1).
    Right: the same job with checkpoint_root on a node-local disk (the sbatch path): refused."""
    shared_report = tmp_path / "ray_report.json"
    (shared,) = sweep(
        kit,
        tmp_path,
        "shared_root",
        [
            *kit_overrides,
            *QUICK,
            "cluster.nodes=2",
            "cluster.gpus_per_node=1",
            "cluster.cpus_per_task=2",
            "cluster.mem_gb=1",
            f"checkpoint_root={tmp_path / 'ckpt_shared'}",
        ],
        env={"FAKE_TRAINER_RAY_REPORT": str(shared_report)},
    )

    # All nodes of the local cluster are slurmd daemons on one machine, so every path is shared. A
    # node-local disk is made real for the head node only: the batch script (and with it the driver)
    # runs in its own mount namespace where checkpoint_root is a private tmpfs, as /tmp or a local
    # NVMe is on a real node; what Slurm starts on the other node (srun) sees this machine's folder
    # at that path, empty. Files written there on the head are invisible on the other node.
    local_root = tmp_path / "ckpt_node_local"
    local_root.mkdir()
    wrapper = tmp_path / "node_local_root.sbatch"
    wrapper.write_text(
        "#!/bin/bash\n"
        'exec unshare --mount --propagation private bash -c \'mount -t tmpfs -o size=64m nodelocal "$0" '
        '&& exec bash "$@"\' ' + f"{local_root} {kit.repo / 'slurm' / 'train.sbatch'} " + '"$@"\n'
    )
    job = sbatch(
        kit,
        tmp_path,
        wrapper,
        ["--nodes=2", "--gpus-per-node=1"],
        [*kit_overrides, *QUICK, f"checkpoint_root={local_root}", "sweep_name=node_local"],
    )
    run_dir = tmp_path / "logs" / "node_local" / "000"
    started = time.monotonic()
    (status,) = kit.wait_final([run_dir], timeout=400)
    assert status["state"] == "failed", (status.get("reason"), job_output(tmp_path, job))
    assert status["attempts"][-1]["ended_by"] == "invalid"
    reason = status["reason"]
    ckpt = local_root / "node_local" / "000"
    nodes = subprocess.run(
        ["scontrol", "show", "hostnames", status["slurm"]["nodelist"]], capture_output=True, text=True, check=True
    ).stdout.split()
    assert f"checkpoint folder {ckpt} is not shared between the job's nodes" in reason
    assert f"written there on {nodes[0]} is not visible on {nodes[1]}" in reason
    assert "does not exist there" in reason, "the other node's own view is reported"
    assert "Fix: set checkpoint_root" in reason
    attempt = run_dir / "attempts" / "1"
    assert not (attempt / "trainer.log").exists(), "the trainer must not start"
    assert not (attempt / "ray").exists(), "Ray must not start"
    assert time.monotonic() - started < 300

    (s_shared,) = kit.wait_final([shared], timeout=400)
    assert s_shared["state"] == "completed", s_shared.get("reason")
    driver_log = (shared / "attempts" / "1" / "driver.log").read_text()
    assert "is visible from every node" in driver_log
    # Ray's object store: 30 % of the job's 1 GB on each node (not 30 % of this machine's memory)
    expected = int(1024**3 * 0.3)
    endpoints = json.loads((shared / "endpoints.json").read_text())
    assert endpoints["ray"]["object_store_bytes"] == expected
    lo, hi = endpoints["ray"]["worker_ports"]
    assert hi - lo + 1 == 200  # 2 CPUs: the minimum block
    seen = json.loads(shared_report.read_text())
    alive = [n for n in seen["nodes"] if n["alive"]]
    assert len(alive) == 2
    assert [n["resources"]["object_store_memory"] for n in alive] == [expected, expected], seen
    assert f"--object-store-memory={expected}" in driver_log


@pytest.mark.timeout(600)
def test_a_job_requeued_with_another_gpu_count_is_refused_and_the_checkpoint_is_kept(
    kit, slurm, kit_overrides, tmp_path
):
    """A point trains on 2 GPUs and checkpoints; its job is requeued held, its request changed to 1
    GPU (``scontrol update TresPerNode``) and released: the same job id comes back into the same run
    folder with another world size. Refused before training, with the fix; the checkpoint is kept."""
    job = sbatch(
        kit,
        tmp_path,
        kit.repo / "slurm" / "train.sbatch",
        ["--gpus-per-node=2", "--job-name=h4-world-size"],
        [*kit_overrides, "verl.trainer.total_training_steps=40", "verl.trainer.save_freq=2"],
        {"FAKE_TRAINER_STEP_S": "1"},
    )
    run_dir = tmp_path / "logs" / f"gsm8k_grpo_job{job}" / "000"
    try:
        metrics = run_dir / "attempts" / "1" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not metrics.exists() or len(metrics.read_text().splitlines()) < 3:
            assert time.monotonic() < deadline, job_output(tmp_path, job)
            time.sleep(0.5)
        subprocess.run(["scontrol", "requeuehold", job], check=True, timeout=30)
        deadline = time.monotonic() + 120
        while slurm_state(job) != "PENDING":  # Slurm stops the job (SIGTERM, then SIGKILL) and holds it
            assert time.monotonic() < deadline, slurm_state(job)
            time.sleep(0.5)
        ckpt = run_dir / "checkpoints"
        assert (ckpt / "global_step_2" / "actor" / "model_world_size_2_rank_1.pt").exists()
        subprocess.run(["scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:1"], check=True, timeout=30)
        time.sleep(2)  # let the stopped attempt's last writes land before the listing below
        before = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*"))
        subprocess.run(["scontrol", "release", job], check=True, timeout=30)
        deadline = time.monotonic() + 300
        while len(kit.read_status(run_dir)["attempts"]) < 2 or kit.read_status(run_dir)["state"] == "running":
            assert time.monotonic() < deadline, job_output(tmp_path, job)
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], timeout=30)
    status = kit.read_status(run_dir)
    assert status["slurm"]["job_id"] == job and status["slurm"]["restart_count"] >= 1
    assert status["state"] == "failed" and status["attempts"][-1]["ended_by"] == "invalid", status.get("reason")
    reason = status["reason"]
    assert "was saved by 2 GPU ranks (model_world_size_2_rank_*.pt)" in reason
    assert "trains on 1 (trainer.nnodes=1 x trainer.n_gpus_per_node=1)" in reason
    assert "resume with the same GPU count (2 GPUs in all)" in reason and "start a fresh point" in reason
    assert not (run_dir / "attempts" / "2" / "trainer.log").exists(), "the trainer must not start"
    assert sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*")) == before, "nothing set aside or pruned"


@pytest.mark.timeout(600)
def test_a_hung_trainer_is_found_its_stacks_dumped_requeued_once_then_failed_as_hung(
    kit, slurm, kit_overrides, tmp_path
):
    floor = 20
    (run_dir,) = sweep(
        kit,
        tmp_path,
        "hangs",
        [
            *kit_overrides,
            "verl.trainer.total_training_steps=6",
            "verl.trainer.save_freq=2",
            "verl.trainer.test_freq=-1",
            # A user keeps the defaults (floor 1800 s, start-up 3600 s); these keep the test short.
            f"runtime.hang_floor_s={floor}",
            "runtime.hang_startup_s=120",
            "runtime.max_timeout_requeues=1",
        ],
        # steps 1-3 (a save at 2), then the double hangs: alive, no new step (verl#4709)
        env={"FAKE_TRAINER_HANG_AFTER": "3", "FAKE_TRAINER_STEP_S": "0.5"},
    )
    (status,) = kit.wait_final([run_dir], timeout=540)
    assert status["state"] == "failed", status.get("reason")
    attempts = status["attempts"]
    assert [a["ended_by"] for a in attempts] == ["hung", "hung"], attempts
    assert attempts[0].get("slurm_state") == "REQUEUED"
    second = (run_dir / "attempts" / "2" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in second] == [3], "the requeued attempt resumed from the step-2 checkpoint"
    reason = status["reason"]
    assert "trainer hung: no new step for" in reason and "after step 3" in reason
    assert "runtime.max_timeout_requeues=1 spent" in reason
    for k in (1, 2):
        driver_log = (run_dir / "attempts" / str(k) / "driver.log").read_text()
        hung = re.search(r"trainer hung: no new step for (\d+) s after step 3 \(limit (\d+) s", driver_log)
        assert hung, driver_log[-3000:]
        idle, limit = int(hung.group(1)), int(hung.group(2))
        assert limit == floor and floor <= idle < floor + 15, (idle, limit)
        stacks = (run_dir / "attempts" / str(k) / "hang_stacks.txt").read_text()
        assert stacks.startswith(f"# no new step for {idle} s after step 3")
        assert "=== trainer pid" in stacks and "hang_forever" in stacks, stacks[:3000]
        assert "fake_verl_trainer.py" in stacks
    assert "requeued (1 of runtime.max_timeout_requeues=1" in (run_dir / "attempts" / "1" / "driver.log").read_text()
