#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl-recipe's fapo/run_fapo_7b.sh at
# verl-project/verl-recipe 48ea0a797fa2 -- knobs with quoted ${...:-"..."} defaults, nested
# $(((a + b) * 2)), and the verl command launched by `ray job submit ... -- python3 -m ...`.
set -xeuo pipefail

RAY_ADDRESS=${RAY_ADDRESS:-"http://localhost:8265"}
WORKING_DIR=${WORKING_DIR:-"${PWD}"}
RUNTIME_ENV=${RUNTIME_ENV:-"${WORKING_DIR}/runtime_env.yaml"}
prompt_len=1024
answer_len=3072
max_tokens=$(((prompt_len + answer_len) * 2))

ray job submit --no-wait --runtime-env="${RUNTIME_ENV}" \
    --address "${RAY_ADDRESS}" \
    --working-dir "${WORKING_DIR}" \
    -- python3 -m verl.trainer.main_ppo \
    data.max_prompt_length=${prompt_len} \
    data.max_response_length=${answer_len} \
    data.truncation='left' \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${max_tokens} \
    trainer.nnodes="${NNODES:-2}"
