#!/usr/bin/env bash
# Wait for a background bench/gpu_smoke.sh on a lent device machine, then pack its small files.
#
#   bash bench/device_collect.sh WORK_DIR MAX_WAIT_S OUT_DIR
#
# The smoke runs detached (setsid) because it outlasts one device command; it writes
# WORK_DIR/EXIT when done. This waits up to MAX_WAIT_S for that, then writes OUT_DIR/runs.tgz:
# every run folder's status.json, metrics.jsonl, point.json, verl_cmd.sh, endpoints.json,
# gpu_plan.json, env.json, control/*, attempts/*/{driver.log,trainer.log,metrics.jsonl}, eval/*.json*
# and the smoke's own logs (no checkpoints, no models).
set -uo pipefail
W=${1:?work dir} MAX=${2:?max wait s} OUT=${3:?out dir}
t0=$SECONDS
while [[ ! -e $W/EXIT ]] && ((SECONDS - t0 < MAX)); do sleep 5; done
if [[ -e $W/EXIT ]]; then echo "smoke exit code $(cat "$W/EXIT") after waiting $((SECONDS - t0)) s"; else echo "smoke still running"; fi
mkdir -p "$OUT"
(
    cd "$W" || exit
    find . -maxdepth 1 -type f \( -name '*.log' -o -name '*.tsv' -o -name EXIT -o -name '*.json' \) -print
    find logs \( -path '*/checkpoints' -o -path '*/hf' -o -path '*/ray' -o -path '*/tensorboard' -o -path '*/submitit' \) -prune \
        -o -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.sh' -o -name '*.log' -o -name '*.md' \) -print 2>/dev/null
    find logs -path '*/tensorboard/*' -type f -print 2>/dev/null
    find logs -maxdepth 5 -path '*/checkpoints/*' -print 2>/dev/null | head -200 >checkpoint_listing.txt
    echo checkpoint_listing.txt
) | tar czf "$OUT/runs.tgz" -C "$W" -T - 2>/dev/null
ls -la "$OUT"
