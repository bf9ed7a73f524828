#!/usr/bin/env bash
# Written for grpokit's tests (not a copy): the form of verl's
# examples/tuning/lora/run_qwen3_8b_from_adapter_fsdp.sh at verl-project/verl 1dda039b9c63 --
# ${VAR:?message} for a required knob, "$VAR" quoted inside an array, lower-case copies of knobs.
set -xeuo pipefail

ADAPTER=${ADAPTER:?set ADAPTER to a saved LoRA adapter}
rank=${RANK_:-16}
lr=${LR:-5e-6}

MODEL=(
    actor_rollout_ref.model.path="${POLICY:-Qwen/Qwen2.5-0.5B-Instruct}"
    actor_rollout_ref.model.lora_adapter_path="$ADAPTER"
    actor_rollout_ref.model.lora_rank=${rank}
)

python3 -m verl.trainer.main_ppo \
    "${MODEL[@]}" \
    actor_rollout_ref.actor.optim.lr=${lr} \
    actor_rollout_ref.rollout.load_format=safetensors \
    "$@"
