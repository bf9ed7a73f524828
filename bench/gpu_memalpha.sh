#!/usr/bin/env bash
# GPU smoke of Memory-RL (experiment=memalpha_grpo) alone on one CUDA GPU: the job starts a real
# `vllm serve` answer server and the kit's memory server as sidecars next to the trainer; the
# reward calls the memory server, which calls the answer server; the check is that the run
# completes and the reward's memalpha_* keys reach verl's metrics. The same phase runs inside
# bench/gpu_smoke.sh next to the others; this runs only it (and what it needs).
#
#   GRPOKIT_SHARED_DATA=<folder with gsm8k/ and nlu/> bash bench/gpu_memalpha.sh [WORK_DIR]
#
# Needs what bench/gpu_smoke.sh needs (rank_bm25 for the memory server included).
set -euo pipefail
SMOKE_PHASES="model data memalpha" exec bash "$(dirname "$0")/gpu_smoke.sh" run "${1:-/tmp/grpokit-memalpha}"
