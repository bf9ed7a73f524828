#!/usr/bin/env bash
# GPU smoke test of the kit's real path on one CUDA machine: every GPU phase side by side on one
# GPU, then one PASS/FAIL table (docs/gpu-smoke.md has the figures).
#
#   bash bench/gpu_smoke.sh run   [WORK_DIR]    # all phases, in the foreground; prints the table
#   bash bench/gpu_smoke.sh start [WORK_DIR]    # the same, detached (setsid): survives the shell
#   bash bench/gpu_smoke.sh wait  [WORK_DIR] [SECONDS]
#        # follow a detached run: prints phase events; exits 0 when all passed, 1 at the first
#        # failure (with the end of its log) or when done with failures, 3 when SECONDS passed first
#   bash bench/gpu_smoke.sh table [WORK_DIR]    # the PASS/FAIL table so far
#   bash bench/gpu_smoke.sh pack  [WORK_DIR] OUT.tar.gz   # logs, status, metrics (no weights)
# WORK_DIR defaults to /tmp/grpokit-smoke.
#
# Needs: a CUDA GPU, the training stack importable by $PYTHON (verl 0.9.1 + vLLM + Ray; on the
# offline GPU host: PYTHONPATH=<bundle target>:$PWD/src), rank_bm25 for the memory server, and
# $GRPOKIT_SHARED_DATA holding gsm8k/{train,test}.jsonl and nlu/ (default ../shared/data).
# Run from the repository root.
#
# Phases (SMOKE_PHASES picks some; each checks its outcome from the run folders):
#   stack       nvidia-smi and the stack's imports (always; nothing else runs without them)
#   model       the random-weight tiny model (launch/make_tiny_model.py)
#   data        GSM8K, Memory-RL (NLU) and tool_memory parquet (launch/prepare_data.py)
#   --- then side by side on the one GPU (each vLLM at a small fixed memory share) ---
#   sweep       launch/sweep.py -m cluster=local ... rollout.n=2,4: 2 points x 2 steps; each point
#               completed, metrics steps 1..2, TensorBoard events, a complete global_step_2
#   merge       once the sweep's first point completed: launch/merge.py on it -> <run>/hf
#   eval        launch/serve_eval.py: vLLM base (tiny) vs trained (<run>/hf) on 16 GSM8K test rows
#   signal      launch/run.py (4 steps, no periodic save); SIGUSR2 to it once step 1 is logged ->
#               requeued with a checkpoint at the next step boundary; the same command again ->
#               resumes, completes, merged metrics hold steps 1..4 once
#   memalpha    experiment=memalpha_grpo: a `vllm serve` answer sidecar and the memory server
#               sidecar next to the trainer; completed, memalpha_* reward keys in the metrics
#   tool_calls  bench/tool_calls.py check: scripted assistant turns through verl's ToolAgentLoop,
#               the qwen3_coder parser, the task's tools and reward (num_turns 6/4/2, scores)
#   tool_caller bench/tool_calls.py make-model: the tiny model tuned (on the GPU, seconds) to call
#               search_memory, so that the real vLLM rollout executes tools
#   tools       launch/sweep.py -m cluster=local cluster.gpus_per_node=1 experiment=tool_memory_grpo
#               (trainer.n_gpus_per_node=1): completed 2 steps; num_turns in the training metrics;
#               the reward's parts and tool_calls in the validation metrics; with the tool caller,
#               tools ran (num_turns > 2, tool_calls > 0, tool reward > 0)
#   tools2      the same on two GPUs (cluster.gpus_per_node=2, trainer.n_gpus_per_node=2: the
#               reference run's setting); only where 2 GPUs are visible, else SKIPPED
#   learn       the learning proof: launch/sweep.py -m cluster=local model=tiny hardware=h200
#               experiment=length_grpo (GSM8K prompts, the length reward of grpokit.tasks.length,
#               batch 4 x n 8, response 64, lr 1e-3, 20 steps); the reward (critic/score/mean) of
#               steps 16..20 is at least 0.05 above steps 1..5 (smoke_check.py learned), then
#               launch/report.py draws the curve (<sweep>/report/curves.png). hardware=h200: no
#               offload, micro batches by tokens, so a step is short. GPU time alone
#               (SMOKE_PHASES="model data learn"), estimated from the phases docs/gpu-smoke.md and
#               docs/gpu-stack.md measured, not measured itself: stack 19 + model 13 + data 2 +
#               validation 15 + Ray 12 + verl/vLLM start-up ~185 + step 1 (Triton compile) ~35 +
#               19 steps x ~4.5 + 2 validations 4 + save, teardown ~7 + report ~10 = ~390 s (6.5 min).
# With 2 or more GPUs, `tools` is pinned to GPU 0 (CUDA_VISIBLE_DEVICES=0: a true one-GPU run),
# `signal` and `memalpha` to GPU 1; the rest shares GPU 0.
set -euo pipefail

CMD=${1:-run}
W=${2:-/tmp/grpokit-smoke}
PY=${PYTHON:-python3}
SHARED=${GRPOKIT_SHARED_DATA:-../shared/data}
ALL_PHASES="stack model data sweep merge eval signal memalpha tool_calls tool_caller tools tools2 learn"
PHASES=${SMOKE_PHASES:-$ALL_PHASES}
[[ " $PHASES " == *" stack "* ]] || PHASES="stack $PHASES" # always: the GPU and the imports
ROLLOUT_MEM=${SMOKE_ROLLOUT_MEM:-0.1}
mkdir -p "$W"
W=$(cd "$W" && pwd)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} # the kit (src layout) without installing it
P=$W/phases     # NAME.start (epoch s), NAME.end ("rc wall_s"), NAME.note (the check's last "ok" line)
L=$W/phase_logs # NAME.log
EVENTS=$W/events.log

check() { "$PY" bench/smoke_check.py "$@"; }
say() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
has() { [[ " $PHASES " == *" $1 "* ]]; }

case $CMD in
start)
    rm -rf "$P" "$L" "$W/done"
    mkdir -p "$P" "$L"
    : >"$EVENTS"
    setsid nohup bash "$0" run "$W" >"$W/smoke.log" 2>&1 </dev/null &
    echo $! >"$W/smoke.pid"
    say "started in the background (pid $!), log $W/smoke.log; follow: bash $0 wait $W 540"
    exit 0
    ;;
wait)
    limit=${3:-540}
    t0=$SECONDS seen=0
    while :; do
        n=$(wc -l <"$EVENTS" 2>/dev/null || echo 0)
        if ((n > seen)); then
            sed -n "$((seen + 1)),${n}p" "$EVENTS"
            if sed -n "$((seen + 1)),${n}p" "$EVENTS" | grep -q ' FAIL '; then
                for f in $(sed -n "$((seen + 1)),${n}p" "$EVENTS" | awk '$2 == "FAIL" {print $3}'); do
                    echo "--- end of $L/$f.log"
                    tail -n 40 "$L/$f.log"
                done
                check table "$W" --phases "$PHASES" || true
                exit 1
            fi
            seen=$n
        fi
        if [[ -e $W/done ]]; then
            check table "$W" --phases "$PHASES"
            exit $?
        fi
        if ((SECONDS - t0 >= limit)); then
            check table "$W" --phases "$PHASES" || true
            nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null || true
            exit 3
        fi
        sleep 3
    done
    ;;
table)
    check table "$W" --phases "$PHASES"
    exit $?
    ;;
pack)
    out=${3:?usage: gpu_smoke.sh pack WORK_DIR OUT.tar.gz}
    cd "$W"
    find . \( -name checkpoints -o -name hf -o -name models -o -name data -o -name tensorboard -o -name .secrets \) -prune -o \
        -type f \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.md' -o -name '*.sh' \
        -o -name '*.tsv' -o -name '*.png' -o -path './phases/*' \) -size -20M -print |
        tar czf "$out" -T -
    ls -la "$out"
    exit 0
    ;;
run) ;;
*)
    echo "usage: gpu_smoke.sh run|start|wait|table|pack [WORK_DIR] ..." >&2
    exit 2
    ;;
esac

# ---------------------------------------------------------------------------- the run itself
mkdir -p "$P" "$L"
touch "$EVENTS"
rm -f "$W/done"
# Settings the offline GPU host needed (docs/gpu-smoke.md): no FlashInfer sampler, no hub.
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 USE_TF=0 USE_JAX=0
export GRPOKIT_SHARED_DATA=$SHARED GRPOKIT_TINY_MODEL=$W/models/tiny
# NVLink multicast stays off (the GPU host's rule for NCCL users; the two-GPU run uses NCCL).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
on_gpu() { # on_gpu N: pin this phase's runs to GPU N when there are 2 or more GPUs
    if ((NGPU >= 2)); then export CUDA_VISIBLE_DEVICES=$1; fi
}

event() { printf '%s %s %s\n' "$(date +%H:%M:%S)" "$1" "$2" >>"$EVENTS"; }
phase() { # phase NAME FUNCTION: run it, log to $L/NAME.log, record start/end/rc and its last "ok" line
    local name=$1 t0 rc
    shift
    t0=$EPOCHREALTIME
    echo "$t0" >"$P/$name.start"
    event START "$name"
    set +e
    ("$@") >"$L/$name.log" 2>&1
    rc=$?
    set -e
    awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "%s %.1f\n", rc, b - a }' >"$P/$name.end"
    grep -a '^ok ' "$L/$name.log" | tail -n 1 >"$P/$name.note" || true
    if [[ $rc == 0 ]]; then event PASS "$name"; else event FAIL "$name"; fi
    return $rc
}
skip() { # skip NAME WHY: record a phase that could not run
    echo "$EPOCHREALTIME" >"$P/$1.start"
    echo "skip 0" >"$P/$1.end"
    echo "$2" >"$P/$1.note"
    event SKIP "$1"
}

# Everything the GSM8K runs share: tiny model, short responses, small batches, eager vLLM with a
# fixed KV cache (vLLM then skips its free-memory profiling, which another run on the same GPU
# freeing memory at that moment fails: "Error in memory profiling"), sdpa attention (no flash-attn).
VLLM_SHARE=(
    "verl.actor_rollout_ref.rollout.gpu_memory_utilization=$ROLLOUT_MEM"
    verl.actor_rollout_ref.rollout.enforce_eager=true
    +verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=2147483648
    ++verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa
    +runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0
)
COMMON=(
    cluster=local model=tiny
    "experiment.data_dir=$W/data/gsm8k"
    "logs_root=$W/logs"
    verl.data.train_batch_size=4
    verl.data.max_response_length=64
    verl.data.train_max_samples=64
    verl.data.val_max_samples=16
    "${VLLM_SHARE[@]}"
)
SWEEP=$W/logs/smoke_sweep
SIG=$W/logs/smoke_signal/000

# Phase functions run with errexit off (they are called from `phase`): every step that must
# succeed says `|| return 1`.
model_phase() {
    "$PY" launch/make_tiny_model.py --out "$W/models/tiny" || return 1
    echo "ok tiny model: $(du -sh "$W/models/tiny" | cut -f1)"
}

data_phase() {
    "$PY" launch/prepare_data.py gsm8k --source "$SHARED/gsm8k" --out "$W/data/gsm8k" &
    "$PY" launch/prepare_data.py memalpha --source "nlu:$SHARED/nlu" --out "$W/data/memalpha" &
    "$PY" launch/prepare_data.py tool_memory --out "$W/data/tool_memory" --num-train 64 --num-test 8 &
    local rc=0
    for pid in $(jobs -p); do wait "$pid" || rc=1; done
    [[ $rc == 0 ]] && echo "ok data: gsm8k, memalpha, tool_memory parquet"
    return $rc
}

sweep_phase() {
    rm -rf "$SWEEP"
    "$PY" launch/sweep.py -m "${COMMON[@]}" sweep_name=smoke_sweep \
        verl.trainer.total_training_steps=2 verl.trainer.save_freq=2 \
        verl.actor_rollout_ref.rollout.n=2,4 || return 1
    check sweep "$SWEEP" --points 2 --steps 2
}

merge_phase() { # the sweep's first point, as soon as it completed
    check wait-final "$SWEEP/000*" --timeout 1500 || return 1
    local run
    run=$(ls -d "$SWEEP"/000* | head -n 1)
    "$PY" launch/merge.py "$run" --overwrite || return 1
    check merged "$run"
}

eval_phase() {
    local run try
    run=$(ls -d "$SWEEP"/000* | head -n 1)
    for try in 1 2; do
        # vLLM's start-up memory profiling fails when another process on the GPU frees memory
        # meanwhile (the training runs do, between steps): then one more try.
        if "$PY" launch/serve_eval.py --run-dir "$run" --base "$W/models/tiny" --limit 16 --max-tokens 64 \
            --concurrency 8 --gpu-memory-utilization 0.1 --max-model-len 1024; then
            check evaluated "$run"
            return $?
        fi
        grep -rqs "Error in memory profiling" "$run/eval/servers" || return 1
        echo "try $try: vLLM memory profiling was disturbed by another process; once more"
    done
    return 1
}

signal_phase() {
    on_gpu 1
    rm -rf "$W/logs/smoke_signal"
    local cmd=("$PY" launch/run.py "${COMMON[@]}" sweep_name=smoke_signal
        verl.trainer.total_training_steps=4 verl.trainer.save_freq=1000 verl.actor_rollout_ref.rollout.n=2)
    local pid
    "${cmd[@]}" >"$L/signal_attempt1.log" 2>&1 &
    pid=$!
    say "attempt 1: pid $pid, waiting for step 1 in attempts/1/metrics.jsonl"
    check wait-step "$SIG/attempts/1/metrics.jsonl" --step 1 --pid "$pid" --timeout 1200 || {
        wait "$pid" || true
        tail -n 40 "$L/signal_attempt1.log"
        return 1
    }
    say "SIGUSR2 to the run (pid $pid)"
    kill -USR2 "$pid" || return 1
    wait "$pid" || say "attempt 1 exit status $?"
    check requeued "$SIG" || return 1
    say "attempt 2: the same command again (resume)"
    "${cmd[@]}" >"$L/signal_attempt2.log" 2>&1 || {
        tail -n 40 "$L/signal_attempt2.log"
        return 1
    }
    check resumed "$SIG" --steps 4
}

memalpha_phase() {
    on_gpu 1
    rm -rf "$W/logs/smoke_memalpha"
    "$PY" launch/run.py experiment=memalpha_grpo model=tiny cluster=local \
        "experiment.data_dir=$W/data/memalpha" "logs_root=$W/logs" sweep_name=smoke_memalpha \
        "${VLLM_SHARE[@]}" \
        sidecars.answer_llm.gpu_memory_utilization=0.1 \
        '+sidecars.answer_llm.extra_args=["--kv-cache-memory-bytes=1073741824"]' || return 1
    check memalpha "$W/logs/smoke_memalpha/000" --steps 2
}

tool_calls_phase() {
    "$PY" bench/tool_calls.py check --model "$W/models/tiny" --rows 4 --json "$W/tool_calls.json"
}

tool_caller_phase() {
    "$PY" bench/tool_calls.py make-model --base "$W/models/tiny" --out "$W/models/tool_caller" \
        --steps "${SMOKE_TOOL_CALLER_STEPS:-300}" --batch 8 --verify-rows 16
}

tools_phase() { # tools_phase GPUS SWEEP_NAME
    local gpus=$1 name=$2 model=$W/models/tiny expect=()
    if [[ -e $W/models/tool_caller/tool_caller.json ]]; then
        model=$W/models/tool_caller expect=(--expect-tool-calls)
    else
        echo "no tool caller model: the random tiny model runs the tool experiment (it rarely calls a tool)"
    fi
    [[ $gpus == 1 ]] && on_gpu 0
    rm -rf "${W:?}/logs/$name"
    "$PY" launch/sweep.py -m cluster=local "cluster.gpus_per_node=$gpus" experiment=tool_memory_grpo \
        model=tiny "model.path=$model" "experiment.data_dir=$W/data/tool_memory" "logs_root=$W/logs" \
        "sweep_name=$name" verl.data.val_max_samples=8 "${VLLM_SHARE[@]}" || return 1
    check tools "$W/logs/$name" --steps 2 "${expect[@]}"
}

learn_phase() {
    local sweep=$W/logs/smoke_learn
    rm -rf "$sweep"
    "$PY" launch/sweep.py -m cluster=local model=tiny hardware=h200 experiment=length_grpo \
        "experiment.data_dir=$W/data/gsm8k" "logs_root=$W/logs" sweep_name=smoke_learn "${VLLM_SHARE[@]}" || return 1
    "$PY" launch/report.py "$sweep" --no-slurm || return 1
    [[ -s $sweep/report/curves.png ]] || {
        echo "no $sweep/report/curves.png"
        return 1
    }
    check learned "$sweep" --steps 20 --window 5 --margin 0.05
}

say "work dir $W, phases: $PHASES"
stack_phase() {
    nvidia-smi -L || {
        echo "no nvidia-smi: this smoke test needs a CUDA GPU"
        return 1
    }
    "$PY" -c 'import verl, vllm, ray, torch, transformers, hydra, rank_bm25, grpokit
print("ok stack: verl", verl.__version__, "vllm", vllm.__version__, "ray", ray.__version__, "torch", torch.__version__,
      "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'
}
if ! phase stack stack_phase; then
    touch "$W/done"
    cat "$L/stack.log"
    exit 1
fi

if has model; then phase model model_phase || true; fi
if has data; then phase data data_phase || true; fi

pids=()
later() { # later DELAY_S CMD...: start in the background after DELAY_S (staggers the cold starts)
    local delay=$1
    shift
    (
        sleep "$delay"
        "$@"
    ) &
    pids+=($!)
}
merge_then_eval() {
    if phase merge merge_phase; then
        if has eval; then phase eval eval_phase || true; fi
    elif has eval; then
        skip eval "not run: merge failed"
    fi
}
tool_caller_then_tools() {
    if has tool_caller; then phase tool_caller tool_caller_phase || true; fi
    if has tools; then phase tools tools_phase 1 smoke_tools & fi
    if has tools2; then
        if ((NGPU >= 2)); then
            sleep 5
            phase tools2 tools_phase 2 smoke_tools2 || true
        else
            skip tools2 "not run: $NGPU GPU visible, the two-GPU variant needs 2"
        fi
    fi
    wait
}
has sweep && later 0 phase sweep sweep_phase
has signal && later 4 phase signal signal_phase
has memalpha && later 8 phase memalpha memalpha_phase
if has tool_caller || has tools || has tools2; then later 12 tool_caller_then_tools; fi
has tool_calls && later 16 phase tool_calls tool_calls_phase
has learn && later 20 phase learn learn_phase
if has merge; then
    later 0 merge_then_eval
elif has eval; then
    later 0 phase eval eval_phase
fi
for pid in "${pids[@]}"; do wait "$pid" || true; done

"$PY" bench/smoke_check.py report "$W" --json "$W/report.json" >"$W/report.txt" 2>&1 || true
touch "$W/done"
check table "$W" --phases "$PHASES" --out "$W/table.md"
