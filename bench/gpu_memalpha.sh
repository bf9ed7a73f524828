#!/usr/bin/env bash
# GPU smoke of Memory-RL (experiment=memalpha_grpo) on one CUDA GPU: the job starts a real
# `vllm serve` answer server and the kit's memory server as sidecars next to the trainer; the
# reward calls the memory server, which calls the answer server; the check is that the run
# completes and the reward's memalpha_* keys reach verl's metrics.
#
#   GRPOKIT_SHARED_DATA=<folder with gsm8k/ and nlu/> bash bench/gpu_memalpha.sh [WORK_DIR]
#
# Needs what bench/gpu_smoke.sh needs, plus rank_bm25 (the memory server's retriever).
set -euo pipefail
W=${1:-/tmp/grpokit-memalpha}
PY=${PYTHON:-python3}
SHARED=${GRPOKIT_SHARED_DATA:-../shared/data}
mkdir -p "$W"
W=$(cd "$W" && pwd)
export GRPOKIT_SHARED_DATA=$SHARED GRPOKIT_TINY_MODEL=$W/models/tiny
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
say() { printf '[memalpha %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

"$PY" -c 'import rank_bm25, verl, vllm, grpokit' || { say "FAIL: stack import"; exit 1; }
# tokenizer learnt on GSM8K + the NLU sentences (the default data of make_tiny_model.py)
[[ -e $W/models/tiny/config.json ]] || "$PY" launch/make_tiny_model.py --out "$W/models/tiny"
"$PY" launch/prepare_data.py memalpha --source "nlu:$SHARED/nlu" --out "$W/data/memalpha"
rm -rf "$W/logs/memalpha_smoke"
t0=$SECONDS
set +e
"$PY" launch/run.py experiment=memalpha_grpo model=tiny cluster=local \
    "experiment.data_dir=$W/data/memalpha" "logs_root=$W/logs" sweep_name=memalpha_smoke \
    verl.actor_rollout_ref.rollout.enforce_eager=true \
    ++verl.actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    +runtime.env.VLLM_USE_FLASHINFER_SAMPLER=0
rc=$?
set -e
say "run.py exit $rc after $((SECONDS - t0)) s"
RUN=$W/logs/memalpha_smoke/000
"$PY" - "$RUN" <<'EOF'
import json, sys
from pathlib import Path
from grpokit.runtime.metrics import read_jsonl
run = Path(sys.argv[1])
status = json.loads((run / "status.json").read_text())
print("status:", status["state"], status.get("reason", "")[:2000])
rows = read_jsonl(run / "metrics.jsonl") if (run / "metrics.jsonl").exists() else []
keys = sorted({k for r in rows for k in r["data"] if "memalpha" in k})
print("steps:", [r["step"] for r in rows])
for r in rows:
    print(r["step"], {k: round(v, 4) for k, v in r["data"].items() if "memalpha" in k or k.startswith(("critic/score", "timing_s/"))})
ok = status["state"] == "completed" and keys
print("memalpha keys:", keys)
sys.exit(0 if ok else 1)
EOF
say PASS
