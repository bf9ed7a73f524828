#!/usr/bin/env bash
# A verl launch script in the form of verl's published ones (examples/grpo_trainer/run_qwen2-7b.sh):
# GRPO on GSM8K at the reference run's settings. Run it as it is with verl, or sweep it with the kit,
# which reads it without running it (README, "Your own verl script"):
#   python launch/sweep.py -m verl_script=examples/grpo_gsm8k.sh verl.actor_rollout_ref.actor.optim.lr=1e-6,2e-6
set -x

DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen3.5-0.8B}

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$DATA_DIR/train.parquet \
    data.val_files=$DATA_DIR/test.parquet \
    data.train_batch_size=8 \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path=$MODEL_PATH \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger=['console','tensorboard'] \
    trainer.project_name='verl_grpo_gsm8k' \
    trainer.experiment_name='qwen3_5_0_8b' \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=24 \
    trainer.test_freq=12 \
    trainer.total_epochs=1 $@
