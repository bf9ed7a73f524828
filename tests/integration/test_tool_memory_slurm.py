"""Issue 6 part 5 end to end: ``experiment=tool_memory_grpo`` validates before submission and runs
through the local Slurm test cluster to its final state, like the GSM8K experiment.

Real: Hydra, verl's schema and checks, submitit, Slurm (2 fake GPUs of one node), Ray, the driver,
the run folder, the task's data command and reward module. TEST DOUBLE: the trainer
(tests/doubles/fake_verl_trainer.py; verl's ToolAgentLoop needs vLLM on a GPU), which calls the
experiment's custom reward once on the first validation row.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

# The reference run's verl overrides that differ from verl's defaults (rollout.mode=async and
# custom_reward_function.name=compute_score are verl's defaults, so the kit emits no override).
REFERENCE = [
    "data.train_batch_size=4",
    "data.max_prompt_length=1024",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.rollout.multi_turn.enable=true",
    "actor_rollout_ref.rollout.multi_turn.format=qwen3_coder",
    "actor_rollout_ref.rollout.multi_turn.max_user_turns=2",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
    "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    "trainer.total_training_steps=2",
    "trainer.n_gpus_per_node=2",
    "trainer.nnodes=1",
]


@pytest.fixture(scope="module")
def tool_memory_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The task's rows, built by the kit's own command."""
    REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout: its launch/ shims
    out = tmp_path_factory.mktemp("tool_memory")
    cmd = [
        sys.executable,
        str(REPO_ROOT / "launch" / "prepare_data.py"),
        "tool_memory",
        "--out",
        str(out),
        "--num-train",
        "16",
        "--num-test",
        "4",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def tool_overrides(kit, model: Path, data: Path, tmp_path: Path) -> list[str]:
    return [
        "experiment=tool_memory_grpo",
        "model=tiny",
        f"model.path={model}",
        f"experiment.data_dir={data}",
        f"logs_root={tmp_path / 'logs'}",
        f"runtime.trainer_cmd=[python,{kit.fake_trainer}]",
        "runtime.needs_gpu=false",
        "runtime.kill_grace_s=5",
        *kit.slurm_cluster,
    ]


@pytest.mark.timeout(600)
def test_tool_memory_point_runs_through_slurm_to_completed(kit, slurm, tiny_model_dir, tool_memory_data, tmp_path):
    overrides = tool_overrides(kit, tiny_model_dir, tool_memory_data, tmp_path)
    out = kit.run("sweep.py", ["-m", *overrides, "sweep_name=tool"], env={"FAKE_TRAINER_STEP_S": "0.2"}, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "submitted 1 point(s)" in out.stdout
    points = kit.manifest(tmp_path / "logs" / "tool")["points"]
    run_dir = Path(points[0]["run_dir"])
    [status] = kit.wait_final([run_dir], timeout=420)
    attempt = run_dir / "attempts" / "1"
    assert status["state"] == "completed", (
        status.get("reason"),
        (attempt / "driver.log").read_text()[-3000:] if (attempt / "driver.log").exists() else "",
    )
    assert (status["last_step"], status["target_step"]) == (2, 2)
    assert status["slurm"]["gpus"] == 2, status["slurm"]

    # the run folder of the GSM8K experiment, and the reference overrides in the trainer's command
    for name in ["point.json", "env.json", "endpoints.json", "gpu_plan.json", "verl_cmd.sh", "metrics.jsonl"]:
        assert (run_dir / name).is_file(), f"{run_dir} lacks {name}"
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    cmd = (run_dir / "verl_cmd.sh").read_text().split()
    missing = [o for o in REFERENCE if o not in cmd]
    assert missing == [], missing
    assert any(
        o.startswith("actor_rollout_ref.rollout.multi_turn.tool_config_path=")
        and o.endswith("tasks/tool_memory/tool_config.yaml")
        for o in cmd
    )
    assert any(
        o.startswith("reward.custom_reward_function.path=") and o.endswith("tasks/tool_memory/reward.py") for o in cmd
    )
    plan = json.loads((run_dir / "gpu_plan.json").read_text())
    assert plan["trainer"]["gpus"] == [0, 1] and plan["sidecars"] == {}
    assert json.loads((run_dir / "endpoints.json").read_text())["sidecars"] == {}

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    # the task's reward module ran (through the experiment's path and name) and its keys were logged
    assert {"reward/score", "reward/tool_reward", "reward/answer_reward", "reward/format_reward"} <= set(
        rows[0]["data"]
    )


@pytest.mark.timeout(300)
def test_tool_memory_dry_run_asks_slurm_for_two_gpus_and_submits_nothing(
    kit, slurm, tiny_model_dir, tool_memory_data, tmp_path
):
    overrides = tool_overrides(kit, tiny_model_dir, tool_memory_data, tmp_path)
    out = kit.run("sweep.py", ["-m", *overrides, "sweep_name=tool_dry", "dry_run=true"], timeout=240)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    text = (tmp_path / "logs" / "tool_dry" / "dry_run.md").read_text()
    assert "#SBATCH --gpus-per-node=2" in text and "#SBATCH --nodes=1" in text, text[:2000]
    assert "actor_rollout_ref.rollout.multi_turn.format=qwen3_coder" in text
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent" in text
    assert all(p["job_id"] is None for p in kit.manifest(tmp_path / "logs" / "tool_dry")["points"])


@pytest.mark.timeout(300)
def test_tool_memory_point_with_a_short_context_is_refused_before_submission(
    kit, slurm, tiny_model_dir, tool_memory_data, tmp_path
):
    overrides = [
        *tool_overrides(kit, tiny_model_dir, tool_memory_data, tmp_path),
        "verl.actor_rollout_ref.rollout.max_model_len=1200",
    ]
    out = kit.run("sweep.py", ["-m", *overrides, "sweep_name=tool_refused"], timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "verl.actor_rollout_ref.rollout.max_model_len" in text and "less than max_prompt_length" in text
    assert "nothing was submitted" in text
    queued = subprocess.run(
        ["squeue", "-h", "-n", "tool_refused", "-o", "%i"], capture_output=True, text=True, timeout=20
    )
    assert queued.stdout.split() == [], "a job was submitted"
