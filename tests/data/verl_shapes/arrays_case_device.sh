#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl's examples/grpo_trainer/run_qwen3_4b_fsdp.sh
# at verl-project/verl 1dda039b9c63 -- ${VAR:-default} knobs, a DEVICE default probed by a command,
# case "${DEVICE}", bash arrays, an `if [ ... ] && { [ ... ] || [ ... ]; }` choosing the launcher.
set -xeuo pipefail

DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
ENGINE=${ENGINE:-vllm}
POLICY=${POLICY:-Qwen/Qwen2.5-0.5B-Instruct}
GPUS=${GPUS:-4}
MEM=${MEM:-0.5}
RUN_NAME=${RUN_NAME:-shape_$(date +%s)}

case "${DEVICE}" in
    gpu)
        ;;
    npu)
        export ASCEND_KNOB=1
        GPUS=16
        MEM=0.8
        ;;
    *)
        echo "DEVICE=${DEVICE}?" >&2
        exit 1
        ;;
esac

ALGO=(
    algorithm.adv_estimator=grpo
    data.train_files=$HOME/data/gsm8k/train.parquet
    data.val_files=$HOME/data/gsm8k/test.parquet
    data.train_batch_size=64
    data.truncation='error'
)

POLICY_ARGS=(
    actor_rollout_ref.model.path=${POLICY}
    actor_rollout_ref.actor.optim.lr=2e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=32
    actor_rollout_ref.rollout.name=${ENGINE}
    actor_rollout_ref.rollout.gpu_memory_utilization=${MEM}
    actor_rollout_ref.rollout.n=4
)

RUN=(
    trainer.logger='["console","wandb"]'
    trainer.experiment_name=${RUN_NAME}
    trainer.n_gpus_per_node=${GPUS}
    trainer.nnodes=1
)

EMPTY=(
)

LAUNCH=(python3)
RAY=(ray_kwargs.ray_init.runtime_env.py_executable=null)
if [ "${USE_UV:-1}" != 0 ] && [ "${DEVICE:-gpu}" = gpu ] && { [ "${ENGINE}" = vllm ] || [ "${ENGINE}" = sglang ]; }; then
    LAUNCH=(uv run --frozen --extra "${ENGINE}" python3)
    RAY=(ray_kwargs.ray_init.runtime_env.py_executable="uv run --frozen --extra ${ENGINE}")
fi
"${LAUNCH[@]}" -m verl.trainer.main_ppo \
    "${ALGO[@]}" \
    "${POLICY_ARGS[@]}" \
    "${RUN[@]}" \
    "${EMPTY[@]}" \
    "${RAY[@]}" \
    "$@"
