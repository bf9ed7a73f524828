"""A verl script's own config on the local Slurm cluster (issue 34, items 4 and 5).

- A recipe script (the kit's toy recipe in verl-recipe's layout, ``tests/data/toy_recipe``: its own entry
  module and config folder) rehearsed through ``verl_script=`` with ``rehearse=true``: one Slurm job, the kit's
  stand-in trainer given the recipe's ``--config-path``/``--config-name`` and the recipe checkout on
  ``PYTHONPATH``; the kit's metrics, checkpoints and status as for ``main_ppo`` (the stand-in's signal
  and save-request handling is the one ``main_ppo``'s rehearsals use: tests/integration/test_rehearsal_*).
- A Megatron script (``--config-name=ppo_megatron_trainer``) dry-run for the local cluster: refused, naming
  megatron-core, in this environment (which lacks it); with Megatron's packages' metadata on ``PYTHONPATH``
  (a stand-in: Megatron itself needs a GPU), verl's Megatron config composed and validated, its parallel
  sizes against the script's 2 GPUs, and the Slurm request ``sbatch --test-only`` accepts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

RECIPE = Path(__file__).parents[1] / "data" / "toy_recipe"
TOY_SCRIPT = RECIPE / "recipe" / "toy" / "run_toy_tiny.sh"


def test_a_recipe_script_is_rehearsed_on_slurm_with_the_kits_metrics_and_checkpoints(
    kit, slurm, tmp_path, tiny_model_dir, gsm8k_dir
):
    env = {
        **kit.env(),
        "MODEL_PATH": str(tiny_model_dir),
        "TRAIN_FILE": str(gsm8k_dir / "train.parquet"),
        "TEST_FILE": str(gsm8k_dir / "test.parquet"),
    }
    out = kit.run(
        "sweep.py",
        [
            f"verl_script={TOY_SCRIPT}",
            *kit.slurm_cluster,
            "cluster.gpus_per_node=1",
            f"logs_root={tmp_path / 'logs'}",
            "sweep_name=toy",
            "rehearse=true",
            "wait=true",
            "verl.trainer.total_training_steps=2",
            "verl.trainer.save_freq=1",
        ],
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "1 completed" in out.stdout
    (point,) = kit.manifest(tmp_path / "logs" / "toy")["points"]
    run = Path(point["run_dir"])
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["rehearsal"] is True
    cmd = (run / "verl_cmd.sh").read_text()
    config = str((RECIPE / "recipe" / "toy" / "config").resolve())
    assert "grpokit.rehearsal.rehearsal_trainer" in cmd and f"--config-path \\\n  {config} \\\n" in cmd
    assert "--config-name \\\n  toy_trainer \\\n" in cmd and "data.gen_batch_size=8" in cmd
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    (env_json,) = [p for p in run.rglob("env.json") if "trainer_env" in p.read_text()]
    trainer_env = json.loads(env_json.read_text())["trainer_env"]
    assert str(RECIPE.resolve()) in str(trainer_env.get("PYTHONPATH", "")), trainer_env.get("PYTHONPATH")


def test_a_megatron_script_dry_runs_for_the_cluster(kit, slurm, tmp_path, tiny_model_dir, gsm8k_dir):
    script = tmp_path / "run_megatron.sh"
    script.write_text(
        "set -x\n"
        "python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_megatron_trainer.yaml' \\\n"
        "    algorithm.adv_estimator=grpo \\\n"
        f"    data.train_files={gsm8k_dir}/train.parquet \\\n"
        f"    data.val_files={gsm8k_dir}/test.parquet \\\n"
        "    data.train_batch_size=16 \\\n"
        "    data.max_response_length=256 \\\n"
        f"    actor_rollout_ref.model.path={tiny_model_dir} \\\n"
        "    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\\n"
        "    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\\n"
        "    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \\\n"
        "    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \\\n"
        "    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \\\n"
        "    actor_rollout_ref.rollout.name=vllm \\\n"
        "    actor_rollout_ref.rollout.n=4 \\\n"
        "    trainer.logger=['console'] \\\n"
        "    trainer.n_gpus_per_node=2 \\\n"
        "    trainer.nnodes=1 \\\n"
        "    trainer.total_epochs=1 $@\n"
    )
    args = [f"verl_script={script}", *kit.slurm_cluster, f"logs_root={tmp_path / 'logs'}", "dry_run=true"]
    lacking = kit.run("sweep.py", [*args, "sweep_name=megatron0"])
    assert lacking.returncode == 2 and "Traceback" not in lacking.stderr
    assert "strategy megatron needs megatron-core, which the job's Python" in lacking.stderr
    standin = tmp_path / "megatron_packages"  # the packages' metadata, as the job's Python would list them
    for name, version in (("megatron_core", "0.16.0"), ("megatron_bridge", "0.2.0")):
        (standin / f"{name}-{version}.dist-info").mkdir(parents=True)
        (standin / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
        )
    env = {**kit.env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(standin), os.environ.get("PYTHONPATH")]))}
    out = kit.run("sweep.py", [*args, "sweep_name=megatron"], env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    dry = (tmp_path / "logs" / "megatron" / "dry_run.md").read_text()
    assert "verl.trainer.main_ppo \\\n  --config-name \\\n  ppo_megatron_trainer \\\n" in dry
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2" in dry
    assert "--gres=gpu:2" in dry or "gpus_per_node=2" in dry or "gpu:2" in dry
    refused = kit.run(
        "sweep.py",
        [
            f"verl_script={script}",
            *kit.slurm_cluster,
            f"logs_root={tmp_path / 'logs'}",
            "sweep_name=megatron3",
            "dry_run=true",
            "verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4",
        ],
        env=env,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (
        "verl.actor_rollout_ref.actor.megatron.tensor_model_parallel_size: Megatron's tp 4 x pp 1 x cp 1 = 4 does "
        "not divide the point's 2 GPU(s)" in refused.stderr
    )
