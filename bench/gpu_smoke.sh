#!/usr/bin/env bash
# GPU smoke test of the kit's real path on one CUDA machine (docs/gpu-smoke.md has the figures).
#
#   bash bench/gpu_smoke.sh [WORK_DIR]          # default WORK_DIR: /tmp/grpokit-smoke
#
# Needs: a CUDA GPU, the training stack importable by $PYTHON (verl 0.9.1 + vLLM + Ray; on the
# offline GPU host: PYTHONPATH=<bundle target>:$PWD/launch), the GSM8K folder $GSM8K_SOURCE
# (train.jsonl, test.jsonl; default ../shared/data/gsm8k). Run from the repository root.
#
# Phases (each checks its outcome from the run folders; the script exits non-zero on the first
# failed check and prints a timing table at the end):
#   model   build the random-weight tiny model (launch/make_tiny_model.py)
#   data    GSM8K -> verl parquet (launch/prepare_data.py)
#   sweep   python launch/sweep.py -m cluster=local model=tiny ... rollout.n=2,4: 2 points x 2 steps,
#           checkpoint at step 2; each point: status completed, metrics steps 1..2, TensorBoard
#           events, a complete global_step_2
#   signal  python launch/run.py ... (4 steps, no periodic save); SIGUSR2 to the driver once step 1
#           is in the attempt's metrics -> status requeued with a checkpoint at the next step
#           boundary (control/saved_for_requeue.json); the same command again -> resumes from that
#           checkpoint, completes, merged metrics hold steps 1..4 once
#   merge   launch/merge.py on the signal run -> <run>/hf
#   eval    launch/serve_eval.py: vLLM base (the tiny model) vs trained (<run>/hf) on GSM8K test rows
# SMOKE_PHASES picks phases (default "model data sweep signal merge eval"); SMOKE_PARALLEL=1 (default)
# runs the sweep next to the signal phase on the same GPU (each vLLM takes a small memory share).
set -euo pipefail

W=${1:-/tmp/grpokit-smoke}
PY=${PYTHON:-python3}
GSM8K_SOURCE=${GSM8K_SOURCE:-../shared/data/gsm8k}
PHASES=${SMOKE_PHASES:-model data sweep signal merge eval}
PARALLEL=${SMOKE_PARALLEL:-1}
ROLLOUT_MEM=${SMOKE_ROLLOUT_MEM:-0.15}
mkdir -p "$W"
W=$(cd "$W" && pwd)
TIMES=$W/phase_times.tsv
: >"$TIMES"

# Settings the offline GPU host needed (../shared/docs/gpu-stack.md): no FlashInfer sampler, no hub.
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
export GRPOKIT_TINY_MODEL=$W/models/tiny

say() { printf '[smoke %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { say "FAIL: $*"; exit 1; }
has() { [[ " $PHASES " == *" $1 "* ]]; }
record() { # record NAME START_EPOCHREALTIME RC: one row of $TIMES
    awk -v n="$1" -v a="$2" -v b="$EPOCHREALTIME" -v rc="$3" 'BEGIN { printf "%s\t%.1f\t%d\n", n, b - a, rc }' >>"$TIMES"
}
timed() { # timed NAME CMD...: run, record wall seconds in $TIMES
    local name=$1 t0 rc
    shift
    t0=$EPOCHREALTIME
    set +e
    "$@"
    rc=$?
    set -e
    record "$name" "$t0" "$rc"
    return $rc
}
check() { "$PY" bench/smoke_check.py "$@"; }

# Everything the runs share: tiny model, short responses, small batches, eager vLLM at a small
# memory share (two runs share the GPU), sdpa attention (flash-attn is not installed).
COMMON=(
    cluster=local model=tiny
    "experiment.data_dir=$W/data/gsm8k"
    "logs_root=$W/logs"
    verl.data.train_batch_size=4
    verl.data.max_response_length=64
    verl.data.train_max_samples=64
    verl.data.val_max_samples=16
    "verl.actor_rollout_ref.rollout.gpu_memory_utilization=$ROLLOUT_MEM"
    verl.actor_rollout_ref.rollout.enforce_eager=true
    ++verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa
    # KV cache size given, so vLLM skips its free-memory profiling, which another run freeing
    # memory on the same GPU at that moment would fail ("Error in memory profiling").
    +verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=2147483648
    +runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0
)

say "work dir $W, python $($PY -c 'import sys; print(sys.executable)')"
nvidia-smi -L || fail "no nvidia-smi: this smoke test needs a CUDA GPU"
"$PY" -c 'import verl, vllm, ray, torch, transformers, hydra, psutil, httpx, pandas, pyarrow, tensorboard, rich, grpokit
print("stack: verl", verl.__version__, "vllm", vllm.__version__, "ray", ray.__version__, "torch", torch.__version__,
      "transformers", transformers.__version__, "cuda", torch.cuda.is_available())' || fail "stack import"

if has model; then
    timed model "$PY" launch/make_tiny_model.py --out "$W/models/tiny" \
        --tokenizer-data "$GSM8K_SOURCE/train.jsonl" || fail "tiny model build"
fi
if has data; then
    timed data "$PY" launch/prepare_data.py gsm8k --source "$GSM8K_SOURCE" --out "$W/data/gsm8k" || fail "data"
fi

SWEEP=$W/logs/smoke_sweep
SIG=$W/logs/smoke_signal/000

sweep_phase() {
    rm -rf "$SWEEP"
    timed sweep "$PY" launch/sweep.py -m "${COMMON[@]}" sweep_name=smoke_sweep \
        verl.trainer.total_training_steps=2 verl.trainer.save_freq=2 \
        verl.actor_rollout_ref.rollout.n=2,4 || return 1
    check sweep "$SWEEP" --points 2 --steps 2
}

signal_phase() {
    rm -rf "$W/logs/smoke_signal"
    local cmd=("$PY" launch/run.py "${COMMON[@]}" sweep_name=smoke_signal
        verl.trainer.total_training_steps=4 verl.trainer.save_freq=1000 verl.actor_rollout_ref.rollout.n=2)
    local t0 pid rc
    t0=$EPOCHREALTIME
    "${cmd[@]}" >"$W/signal_attempt1.log" 2>&1 &
    pid=$!
    say "signal run: driver pid $pid, waiting for step 1 in attempts/1/metrics.jsonl"
    check wait-step "$SIG/attempts/1/metrics.jsonl" --step 1 --pid "$pid" --timeout 900 || {
        wait "$pid" || true
        tail -n 40 "$W/signal_attempt1.log"
        return 1
    }
    say "sending SIGUSR2 to the driver (pid $pid)"
    kill -USR2 "$pid"
    set +e
    wait "$pid"
    rc=$?
    set -e
    record signal_attempt1 "$t0" "$rc"
    check requeued "$SIG" || return 1
    say "signal run: the same command again (resume)"
    timed signal_attempt2 "${cmd[@]}" >"$W/signal_attempt2.log" 2>&1 || {
        tail -n 40 "$W/signal_attempt2.log"
        return 1
    }
    check resumed "$SIG" --steps 4
}

if has sweep && has signal && [[ $PARALLEL == 1 ]]; then
    say "sweep (background, log $W/sweep.log) and signal run side by side"
    (sweep_phase >"$W/sweep.log" 2>&1) &
    sweep_pid=$!
    signal_ok=0
    signal_phase || signal_ok=$?
    sweep_ok=0
    wait "$sweep_pid" || sweep_ok=$?
    tail -n 30 "$W/sweep.log"
    [[ $sweep_ok == 0 ]] || fail "sweep phase (see $W/sweep.log)"
    [[ $signal_ok == 0 ]] || fail "signal phase (see $W/signal_attempt*.log)"
else
    if has sweep; then sweep_phase 2>&1 | tee "$W/sweep.log" || fail "sweep phase"; fi
    if has signal; then signal_phase || fail "signal phase"; fi
fi

if has merge; then
    timed merge "$PY" launch/merge.py "$SIG" --overwrite || fail "merge"
    check merged "$SIG" || fail "merged model"
fi
if has eval; then
    timed eval "$PY" launch/serve_eval.py --run-dir "$SIG" --base "$W/models/tiny" --limit 16 \
        --max-tokens 64 --concurrency 8 --gpu-memory-utilization 0.2 --max-model-len 1024 || fail "serve_eval"
    check evaluated "$SIG" || fail "eval outputs"
fi

"$PY" bench/smoke_check.py report "$W" || true
say "PASS"
