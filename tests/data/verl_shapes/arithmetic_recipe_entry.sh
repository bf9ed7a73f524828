#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl-recipe's entropy/7b_kl_cov.sh at
# verl-project/verl-recipe 48ea0a797fa2 -- $((arithmetic)) on literals and on variables, a default
# holding another ${...} in quotes, a VAR=value prefix on the command, a recipe's own entry module.
set -xeuo pipefail

prompt_len=$((512 * 2))
answer_len=$((512 * 4))
batch=32
gen_batch=$((batch * 3))
DATA_HOME=${DATA_HOME:-"${HOME}/verl"}
CKPTS=${CKPTS:-"${DATA_HOME}/ckpts"}

HYDRA_FULL_ERROR=1 python -m recipe.entropy.main_entropy \
    data.max_prompt_length=${prompt_len} \
    data.max_response_length=${answer_len} \
    data.gen_batch_size=${gen_batch} \
    data.train_batch_size=${batch} \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(((prompt_len + answer_len) * 2)) \
    trainer.default_local_dir="${CKPTS}" \
    trainer.nnodes="${NNODES:-1}"
