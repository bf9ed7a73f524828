#!/usr/bin/env bash
# The reference GSM8K run (batch 8, n 8, prompt 512, response 1024) at full Qwen3.5-0.8B shape
# through launch/sweep.py, under hardware=h200 and hardware=consumer_24gb, side by side
# (docs/performance.md has the figures).
#
#   bash bench/bench_h200.sh run   [WORK_DIR]           # in the foreground; prints the table
#   bash bench/bench_h200.sh start [WORK_DIR]           # detached (setsid): outlives the shell
#   bash bench/bench_h200.sh wait  [WORK_DIR] [SECONDS] # 0 done, 3 still running after SECONDS
#   bash bench/bench_h200.sh table [WORK_DIR]           # per-step parts, ratio, floor, start-up
#   bash bench/bench_h200.sh pack  [WORK_DIR] OUT.tgz   # logs, status, metrics (no weights)
# WORK_DIR defaults to /tmp/grpokit-bench.
#
# Env: BENCH_PROFILES (default "h200 consumer_24gb"), BENCH_STEPS (default 3: at least 2 after
# the first), BENCH_MODEL (an existing full-shape model folder; default: built into WORK_DIR by
# launch/make_tiny_model.py --like qwen3.5-0.8b), GRPOKIT_SHARED_DATA (gsm8k/ for the data and
# the tokenizer), BENCH_EXTRA (more overrides for every run, e.g. enforce_eager=true).
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
export PYTHONPATH=$PWD/launch${PYTHONPATH:+:$PYTHONPATH}
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
    limit=${3:-540} t0=$SECONDS
    until [[ -e $W/done ]]; do
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
        \( -name '*.log' -o -name '*.json' -o -name '*.jsonl' -o -name '*.md' -o -name '*.sh' -o -name '*.txt' \) \
        -size -20M -print | tar czf "$out" -T -
    ls -la "$out"
    exit 0
    ;;
run) ;;
*)
    echo "usage: bench_h200.sh run|start|wait|table|pack [WORK_DIR] ..." >&2
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

bench_one() { # bench_one PROFILE GPU: one point of the reference config; records job start
    local profile=$1
    if ((NGPU >= 2)); then export CUDA_VISIBLE_DEVICES=$2; fi
    rm -rf "$W/logs/bench_$profile"
    date +%s.%N >"$W/start_$profile.txt"
    say "START $profile (GPU ${CUDA_VISIBLE_DEVICES:-all})"
    # The reference config: gsm8k_grpo's own batch 8, n 8, prompt 512, response 1024.
    "$PY" launch/sweep.py -m cluster=local cluster.gpus_per_node=1 experiment=gsm8k_grpo model=qwen3_5_0_8b \
        "model.path=$MODEL" "hardware=$profile" "experiment.data_dir=$W/data/gsm8k" "logs_root=$W/logs" \
        "sweep_name=bench_$profile" "verl.trainer.total_training_steps=$STEPS" \
        +runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0 ${BENCH_EXTRA:-} >"$W/run_$profile.log" 2>&1 &&
        say "END $profile rc 0" || say "END $profile rc $?"
}
# The first-step watcher: when the first metrics line appears (polling every 2 s).
watch_first_step() { # watch_first_step PROFILE
    local f
    for _ in $(seq 1 3000); do
        f=$(ls "$W"/logs/bench_"$1"/*/attempts/1/metrics.jsonl 2>/dev/null | head -n 1 || true)
        if [[ -n $f && -s $f ]]; then
            date +%s.%N >"$W/first_step_$1.txt"
            return 0
        fi
        [[ -e $W/ended_$1 ]] && return 0
        sleep 2
    done
}
gpu=0
pids=()
for profile in $PROFILES; do
    (watch_first_step "$profile") &
    if ((NGPU >= 2)); then
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
wait || true
touch "$W/done"
table | tee "$W/table.md"
