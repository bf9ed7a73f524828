#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl-recipe's
# partial_rollout/run/run_qwen3-0.6b_gsm8k_grpo.sh at verl-project/verl-recipe 48ea0a797fa2 (and of
# verl's examples/ascend_extras/ppo_trainer/run_qwen3_8b_fsdp.sh at 1dda039b9c63) -- SCRIPT_DIR from
# $(cd "$(dirname ...)" && pwd), exported empty variables, a `+` key, the command's output `| tee`d.
set -xeo pipefail

export PYTHONUNBUFFERED=1
export HTTP_PROXY=

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python3 -m verl.trainer.main_ppo \
    trainer.logger=[console] \
    trainer.n_gpus_per_node=2 \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    +actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16 \
    actor_rollout_ref.rollout.top_k=-1 \
    algorithm.rollout_correction.rollout_is_threshold="2.0" \
    2>&1 | tee "$SCRIPT_DIR/run.log"
