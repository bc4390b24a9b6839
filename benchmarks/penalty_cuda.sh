#!/usr/bin/env bash
# Issue 40's GPU check on a lent device machine: benchmarks/penalty_cuda.py (the leak penalty's share of a real-size
# F5 v1 Base training step), its output also in $OUT/penalty_cuda.log. Prepare the checkout first with
# `bash train_f5/device_prepare.sh penalty` (wheels, and what fits in 64 MiB), then run this there:
#
#   OUT=$OUT bash benchmarks/penalty_cuda.sh                           # on the device machine
#   LEAKLOSS_DEVICE_SMOKE=1 bash benchmarks/penalty_cuda.sh            # here, on CPU: a tiny F5, seconds
#
# Extra arguments go to penalty_cuda.py (e.g. --steps 20).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-${TMPDIR:-/tmp}/leakloss_device_out}
mkdir -p "$OUT"
# shellcheck source=train_f5/device_env.sh
source train_f5/device_env.sh  # wheels, stand-in modules, PYTHONPATH, PY
SMOKE=()
if [ -n "${LEAKLOSS_DEVICE_SMOKE:-}" ]; then SMOKE=(--smoke); fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $PY benchmarks/penalty_cuda.py ${SMOKE[@]+"${SMOKE[@]}"} "$@"; } 2>&1 | tee "$OUT/penalty_cuda.log"
