#!/usr/bin/env bash
# The kit's toy recipe, launched the way a verl-recipe script is (python3 -m recipe.<name>.main_<name>).
set -xeuo pipefail

prompts=8
responses=4
skip_uniform=false

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/tiny-model"}
TRAIN_FILE=${TRAIN_FILE:-"${HOME}/data/toy/train.parquet"}
TEST_FILE=${TEST_FILE:-"${HOME}/data/toy/test.parquet"}

python3 -m recipe.toy.main_toy --config-path=config --config-name=toy_trainer \
    algorithm.adv_estimator=grpo \
    data.train_files="${TRAIN_FILE}" \
    data.val_files="${TEST_FILE}" \
    data.max_prompt_length=512 \
    data.max_response_length=256 \
    data.train_batch_size=${prompts} \
    data.gen_batch_size=${prompts} \
    toy.skip_uniform_groups=${skip_uniform} \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.n=${responses} \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    trainer.logger=['console'] \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 $@
