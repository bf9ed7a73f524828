"""The backbone end to end: sweeps composed, validated and submitted to the real Slurm test cluster.

Training itself is the TEST DOUBLE tests/doubles/fake_verl_trainer.py (verl needs a GPU); everything
else is real: Hydra, verl's schema and validate_config, submitit, Slurm, Ray, the run folders.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

RUN_FOLDER_FILES = [
    "point.json",
    "env.json",
    "endpoints.json",
    "gpu_plan.json",
    "status.json",
    "verl_cmd.sh",
    "metrics.jsonl",
]


def check_run_folder(run_dir: Path, steps: int) -> None:
    for name in RUN_FOLDER_FILES:
        assert (run_dir / name).is_file(), f"{run_dir} lacks {name}"
    attempt = run_dir / "attempts" / "1"
    for name in ["driver.log", "trainer.log", "metrics.jsonl", "ray/ray_head.log"]:
        assert (attempt / name).is_file(), f"{attempt} lacks {name}"
    assert list((attempt / "tensorboard").glob("events.out.tfevents.*")), "no TensorBoard events"
    merged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in merged] == list(range(1, steps + 1))
    ckpt = run_dir / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(steps)
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    assert endpoints["ray"]["address"].startswith("127.0.0.1:")
    cmd = (run_dir / "verl_cmd.sh").read_text()
    assert "trainer.default_local_dir=" in cmd and "worker_process_setup_hook" in cmd


def test_2x2x2_sweep_runs_every_point_through_one_array(kit, slurm, kit_overrides, tmp_path):
    axes = [
        "verl.data.train_batch_size=8,16",
        "verl.actor_rollout_ref.rollout.n=2,4",
        "verl.data.max_response_length=512,1024",
    ]
    out = kit.run("sweep.py", ["-m", *kit_overrides, *kit.slurm_cluster, "sweep_name=s222", *axes])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "submitted 8 point(s)" in out.stdout
    sweep = tmp_path / "logs" / "s222"
    points = kit.manifest(sweep)["points"]
    assert len(points) == 8
    assert len({p["array_job_id"] for p in points}) == 1, "all points go to one job array"
    assert sorted(p["array_task_id"] for p in points) == list(range(8))
    assert {tuple(sorted(p["swept"].items())) for p in points} == {
        (
            ("verl.actor_rollout_ref.rollout.n", n),
            ("verl.data.max_response_length", r),
            ("verl.data.train_batch_size", b),
        )
        for b in ("8", "16")
        for n in ("2", "4")
        for r in ("512", "1024")
    }
    statuses = kit.wait_final([Path(p["run_dir"]) for p in points], timeout=900)
    assert [s["state"] for s in statuses] == ["completed"] * 8, [s.get("reason") for s in statuses]
    for p in points:
        run_dir = Path(p["run_dir"])
        check_run_folder(run_dir, steps=4)
        # derived settings follow the swept ones: max_num_seqs = batch x n, max_model_len = prompt + response + margin
        b, n, r = (
            int(p["swept"][k])
            for k in ("verl.data.train_batch_size", "verl.actor_rollout_ref.rollout.n", "verl.data.max_response_length")
        )
        cmd = (run_dir / "verl_cmd.sh").read_text()
        assert f"actor_rollout_ref.rollout.max_num_seqs={b * n}" in cmd
        assert f"actor_rollout_ref.rollout.max_model_len={512 + r + 256}" in cmd
        status = json.loads((run_dir / "status.json").read_text())
        assert status["slurm"]["array_job_id"] == p["array_job_id"]


def test_same_point_through_sbatch_gives_the_same_run_folder_layout(kit, slurm, kit_overrides, tmp_path):
    job = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--wait",
            "--time=15",
            "--cpus-per-task=1",
            "--mem=1G",
            "--signal=B:USR2@60",
            f"--output={tmp_path}/sbatch_%j.out",
            str(kit.repo / "slurm" / "train.sbatch"),
            *kit_overrides,
            "cluster.signal_delay_s=60",
            "cluster.timeout_min=15",
        ],
        capture_output=True,
        text=True,
        cwd=kit.repo,
        timeout=600,
        env={"GRPOKIT_PYTHON": kit.python, **kit.env()},
    )
    job_id = job.stdout.strip().split(";")[0]
    assert job.returncode == 0, (
        job.stderr,
        list(tmp_path.glob("sbatch_*.out")) and next(tmp_path.glob("sbatch_*.out")).read_text()[-3000:],
    )
    run_dir = tmp_path / "logs" / f"gsm8k_grpo_job{job_id}" / "000"
    status = kit.read_status(run_dir)
    assert status["state"] == "completed", status.get("reason")
    assert status["slurm"]["job_id"] == job_id
    check_run_folder(run_dir, steps=4)


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("verl.data.train_bach_size=16", "verl.data.train_bach_size", "did you mean verl.data.train_batch_size"),
        (
            "verl.actor_rollout_ref.rollout.max_model_len=1000",
            "verl.actor_rollout_ref.rollout.max_model_len",
            "less than max_prompt_length + max_response_length",
        ),
        ("verl.data.val_files=/nonexistent/test.parquet", "verl.data.val_files", "does not exist"),
        ("+verl.data.train_bach_size=16", "verl.data.train_bach_size", "did you mean verl.data.train_batch_size"),
    ],
)
def test_bad_points_stop_the_sweep_before_submission(kit, slurm, kit_overrides, tmp_path, override, key, words):
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "sweep_name=bad",
            "verl.data.max_response_length=512,1024",
            override,
        ],
    )
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert key in text and words in text, text[-3000:]
    assert "nothing was submitted" in text
    # a key typed on the command line is wrong for every point; other problems are named per point
    assert "[all points]" in text or ("000_max_response_length-512" in text and "001_max_response_length-1024" in text)
    # other test files share the cluster (make test runs two at once): look for this sweep's own job name
    queued = subprocess.run(["squeue", "-h", "--states=all", "-n", "bad", "-o", "%i"], capture_output=True, text=True)
    assert not queued.stdout.strip(), "a job was submitted"
    manifest = tmp_path / "logs" / "bad" / "manifest.json"
    assert not manifest.exists() or all(p["job_id"] is None for p in json.loads(manifest.read_text())["points"])


def test_dry_run_writes_commands_and_the_slurm_request_and_submits_nothing(kit, slurm, kit_overrides, tmp_path):
    out = kit.run(
        "sweep.py",
        [
            "-m",
            *kit_overrides,
            *kit.slurm_cluster,
            "sweep_name=dry",
            "dry_run=true",
            "verl.actor_rollout_ref.rollout.n=2,4",
        ],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = (tmp_path / "logs" / "dry" / "dry_run.md").read_text()
    assert "#SBATCH --array=0-1%2" in text and "#SBATCH --signal=B:USR2@60" in text and "#SBATCH --requeue" in text
    assert "actor_rollout_ref.rollout.n=2" in text and "actor_rollout_ref.rollout.n=4" in text
    assert all(p["job_id"] is None for p in kit.manifest(tmp_path / "logs" / "dry")["points"])
