#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl's examples/ppo_trainer/run_qwen3_8b_megatron.sh
# at verl-project/verl 1dda039b9c63 -- a knob defaulting to another knob (${B:-$A}), arrays of
# actor/critic settings, `model_engine=megatron` in an array, an `if [ ] && [ ]` picking uv.
set -xeuo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=1

POLICY=${POLICY:-Qwen/Qwen2.5-0.5B-Instruct}
VALUE_MODEL=${VALUE_MODEL:-$POLICY}
tp=${TP:-2}
pp=${PP:-1}

ACTOR=(
    actor_rollout_ref.model.path=${POLICY}
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=${tp}
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=${pp}
)

VALUE=(
    critic.model.path=${VALUE_MODEL}
    critic.megatron.tensor_model_parallel_size=${tp}
)

EXTRA=(
    model_engine=megatron
)

LAUNCH=(python3)
if [ "${USE_UV:-1}" != 0 ] && [ "${DEVICE:-gpu}" = gpu ]; then
    LAUNCH=(uv run --frozen --extra megatron python3)
fi
"${LAUNCH[@]}" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    "${ACTOR[@]}" \
    "${VALUE[@]}" \
    trainer.n_gpus_per_node=8 \
    "${EXTRA[@]}" \
    "$@"
