#!/usr/bin/env bash
# The reference GSM8K run (batch 8, n 8, prompt 512, response 1024) at full Qwen3.5-0.8B shape
# through launch/sweep.py, under hardware=h200 and hardware=consumer_24gb, side by side
# (docs/performance.md has the figures).
#
#   bash bench/bench_h200.sh run   [WORK_DIR]           # in the foreground; prints the table
#   bash bench/bench_h200.sh start [WORK_DIR]           # detached (setsid): outlives the shell
#   bash bench/bench_h200.sh wait  [WORK_DIR] [SECONDS] [resume_done]  # 0 done, 3 still running
#   bash bench/bench_h200.sh table [WORK_DIR]           # per-step parts, ratio, floor, start-up
#   bash bench/bench_h200.sh pack  [WORK_DIR] OUT.tgz   # logs, status, metrics (no weights)
#   bash bench/bench_h200.sh resume [WORK_DIR]          # detached: the h200 point once more from its
#                                                       # last checkpoint (one more step), reusing its
#                                                       # compile caches: a resumed attempt's start-up
# WORK_DIR defaults to /tmp/grpokit-bench.
#
# Env: BENCH_PROFILES (default "h200 consumer_24gb"), BENCH_STEPS (default 3: at least 2 after
# the first), BENCH_CONCURRENT=1 (one GPU: the profiles run at the same time on it, each with a
# fixed KV cache so vLLM's start-up memory profiling does not see the other run), BENCH_MODEL (an existing full-shape model folder; default: built into WORK_DIR by
# launch/make_tiny_model.py --like qwen3.5-0.8b), GRPOKIT_SHARED_DATA (gsm8k/ for the data and
# the tokenizer), BENCH_EXTRA (more overrides for every run, e.g. enforce_eager=true),
# BENCH_EXTRA_<profile> (more overrides for that profile's run only).
# With 2 or more GPUs each profile runs on its own GPU at the same time; with one, one after
# the other. Needs: a CUDA GPU, the training stack importable by $PYTHON. Run from the repo root.
set -euo pipefail

CMD=${1:-run}
W=${2:-/tmp/grpokit-bench}
PY=${PYTHON:-python3}
SHARED=${GRPOKIT_SHARED_DATA:-../shared/data}
PROFILES=${BENCH_PROFILES:-h200 consumer_24gb}
STEPS=${BENCH_STEPS:-3}
mkdir -p "$W"
W=$(cd "$W" && pwd)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} # the kit (src layout) without installing it
say() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" | tee -a "$W/events.log"; }
table() { "$PY" bench/bench_table.py "$W" --profiles $PROFILES; }

case $CMD in
start)
    rm -f "$W/done" "$W/events.log"
    setsid nohup bash "$0" run "$W" >"$W/bench.log" 2>&1 </dev/null &
    echo "started (pid $!), log $W/bench.log"
    exit 0
    ;;
wait)
    limit=${3:-540} t0=$SECONDS marker=${4:-done} # marker: done (start) or resume_done (resume)
    until [[ -e $W/$marker ]]; do
        if ((SECONDS - t0 >= limit)); then
            cat "$W/events.log" 2>/dev/null || true
            table || true
            nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader || true
            exit 3
        fi
        sleep 5
    done
    cat "$W/events.log"
    table
    exit 0
    ;;
table)
    table
    exit $?
    ;;
pack)
    out=${3:?usage: bench_h200.sh pack WORK_DIR OUT.tgz}
    cd "$W"
    find . \( -name checkpoints -o -name models -o -name data -o -name tensorboard \) -prune -o -type f \
        \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.md' -o -name '*.sh' -o -name '*.txt' -o -name '*.csv' -o -name '*.arrivals' \) \
        -size -20M -print | tar czf "$out" -T -
    ls -la "$out"
    exit 0
    ;;
resume)
    rm -f "$W/resume_done"
    setsid nohup bash "$0" resume-run "$W" >"$W/bench_resume.log" 2>&1 </dev/null &
    echo "started (pid $!), log $W/bench_resume.log"
    exit 0
    ;;
run | resume-run) ;;
*)
    echo "usage: bench_h200.sh run|start|wait|table|pack|resume [WORK_DIR] ..." >&2
    exit 2
    ;;
esac

# The offline GPU host's settings (docs/gpu-smoke.md): no FlashInfer sampler, no hub, no JAX/TF.
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 USE_TF=0 USE_JAX=0 GRPOKIT_SHARED_DATA=$SHARED
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
MODEL=${BENCH_MODEL:-$W/models/qwen3.5-0.8b}
if [[ ! -e $MODEL/config.json ]]; then
    say "building the full-shape model in $MODEL"
    t0=$SECONDS
    "$PY" launch/make_tiny_model.py --like qwen3.5-0.8b --out "$MODEL" >"$W/model.log" 2>&1
    say "model built in $((SECONDS - t0)) s ($(du -sh "$MODEL" | cut -f1))"
fi
if [[ ! -e $W/data/gsm8k/train.parquet ]]; then
    "$PY" launch/prepare_data.py gsm8k --source "$SHARED/gsm8k" --out "$W/data/gsm8k" >"$W/data.log" 2>&1
fi

bench_one() { # bench_one PROFILE GPU [SWEEP_NAME OVERRIDES...]: one point of the reference config
    local profile=$1 gpu=$2 name=${3:-bench_$1} extra_var=BENCH_EXTRA_$1 key
    shift 3 || shift $#
    if ((NGPU >= 2)); then export CUDA_VISIBLE_DEVICES=$gpu; fi
    local shared=()
    # Runs sharing one GPU: a fixed KV cache (vLLM then skips the memory profiling that fails when
    # another process frees memory meanwhile) and a memory share that leaves room for the other.
    if [[ ${BENCH_CONCURRENT:-0} == 1 ]]; then
        shared=(+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=4294967296)
        # consumer_24gb's 0.9 is 0.9 of a 24 GB card: the same GB on this one
        [[ $profile == consumer_24gb ]] && shared+=(verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.155)
    fi
    key=${name#bench_}
    rm -rf "$W/logs/$name"
    date +%s.%N >"$W/start_$key.txt"
    say "START $name (GPU ${CUDA_VISIBLE_DEVICES:-all})"
    # The reference config: gsm8k_grpo's own batch 8, n 8, prompt 512, response 1024.
    "$PY" -m grpokit.cli.sweep -m cluster=local cluster.gpus_per_node=1 experiment=gsm8k_grpo model=qwen3_5_0_8b \
        "model.path=$MODEL" "hardware=$profile" "experiment.data_dir=$W/data/gsm8k" "logs_root=$W/logs" \
        "sweep_name=$name" "verl.trainer.total_training_steps=$STEPS" \
        +runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0 "${shared[@]}" ${BENCH_EXTRA:-} ${!extra_var:-} "$@" \
        >"$W/run_$key.log" 2>&1 && say "END $name rc 0" || say "END $name rc $?"
}
# GPU memory in use (all processes), every 2 s, while the benchmark runs: the peak goes in the table.
DONE=$W/done
[[ $CMD == resume-run ]] && DONE=$W/resume_done
(while [[ ! -e $DONE ]]; do
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>/dev/null |
        sed "s/^/$(date +%s),/" >>"$W/gpu_mem.csv"
    sleep 2
done) &
# The first-step watcher: when the first metrics line appears (polling every 2 s).
watch_first_step() { # watch_first_step PROFILE
    local f
    for _ in $(seq 1 3000); do
        f=$(ls "$W"/logs/bench_"$1"/*/attempts/*/metrics.jsonl 2>/dev/null | head -n 1 || true)
        if [[ -n $f && -s $f ]]; then
            date +%s.%N >"$W/first_step_$1.txt"
            return 0
        fi
        [[ -e $W/ended_$1 ]] && return 0
        sleep 2
    done
}
if [[ $CMD == resume-run ]]; then # the h200 point again from its last checkpoint: one more step
    ckpt=$(ls -d "$W"/logs/bench_h200/*/checkpoints 2>/dev/null | head -n 1)
    [[ -n $ckpt ]] || { say "no h200 checkpoint folder to resume from"; touch "$DONE"; exit 1; }
    last=$(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0)
    say "resuming $ckpt from step $last"
    (watch_first_step h200_resume) &
    STEPS=$((last + 1)) bench_one h200 0 bench_h200_resume "verl.trainer.default_local_dir=$(readlink -f "$ckpt")"
    touch "$W/ended_h200_resume" "$DONE"
    "$PY" bench/bench_table.py "$W" --profiles h200 h200_resume | tee "$W/table_resume.md"
    exit 0
fi
gpu=0
pids=()
for profile in $PROFILES; do
    (watch_first_step "$profile") &
    if ((NGPU >= 2)) || [[ ${BENCH_CONCURRENT:-0} == 1 ]]; then
        (bench_one "$profile" "$gpu"; touch "$W/ended_$profile") &
        pids+=($!)
        gpu=$((gpu + 1))
        sleep 5
    else
        bench_one "$profile" 0
        touch "$W/ended_$profile"
    fi
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
# (no bare `wait`: the GPU memory sampler above runs until $W/done exists)
touch "$W/done"
table | tee "$W/table.md"
