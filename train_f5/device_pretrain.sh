#!/usr/bin/env bash
# Pretrain the Hindi-base F5 on a lent GPU for a fixed wall-clock budget, in arms that differ only in the recipe
# option under test, and write what fits back under $OUT (at most 8 files of 16 MiB: each arm's EMA weights and
# card, one log). Run from the repository root:
#
#   bash train_f5/device_pretrain.sh                # on the device machine, with the wheels in .whl (docs/f5_base.md)
#   LEAKLOSS_DEVICE_SMOKE=1 bash train_f5/device_pretrain.sh   # here, on CPU: tiny model, a few phrases, seconds
#
# Each arm starts from START_DIR when it holds a model (the committed base: checkpoints/f5_hindi_base), else from
# scratch. ARMS is "name:overrides" lines; BUDGET_S the seconds the whole script may take (training gets what
# the corpus leaves). The corpus is synthesised once, on every core, before the arms start.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-${TMPDIR:-/tmp}/leakloss_device_out}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
WORK=${WORK:-${TMPDIR:-/tmp}/leakloss_device_work}
START_DIR=${START_DIR:-checkpoints/f5_hindi_base}

# shellcheck source=train_f5/device_env.sh
source train_f5/device_env.sh  # wheels, stand-in modules, PYTHONPATH, PY

if [ -n "${LEAKLOSS_DEVICE_SMOKE:-}" ]; then
  COMMON="model.dim=32 model.depth=1 model.heads=2 model.dim_head=16 model.text_dim=16 model.conv_layers=1
    data.max_texts=16 data.max_frames=600 data.workers=2 device=cpu bf16=false num_threads=1 probe.texts=2
    checkpoint_minutes=0.2 log_every=1 warmup_steps=2"
  BUDGET_S=${BUDGET_S_SMOKE:-120}
  START_DIR=${SMOKE_START_DIR:-/nonexistent}  # the tiny model cannot start from the shipped one
else
  COMMON="data.workers=16 device=cuda bf16=true num_threads=4 data.max_frames=40000 lr=7.5e-4 warmup_steps=300
    probe.texts=16 checkpoint_minutes=1.5 log_every=100"
fi
ARMS=${ARMS:-"plain:content.weight=0
ctc02:content.weight=0.2
ctc1:content.weight=1.0"}

# the corpus, once, before the arms (they share its cache). With -c, not a script on stdin: the corpus workers
# start by spawn, and a spawned worker re-reads its parent's main script (stdin has none to give it)
# shellcheck disable=SC2086
$PY -c '
import sys, time
from leakloss.config import compose_config
from train_f5.__main__ import corpus_for
t = time.time()
corpus = corpus_for(compose_config("train_f5", sys.argv[1:]))
print(f"corpus: {len(corpus)} readings in {time.time() - t:.0f} s", flush=True)
' $COMMON cache_dir="$WORK/cache" out_dir="$WORK/corpus_only"

NOW=$(date +%s)
MINUTES=$(python3 -c "print(max(0.1, ($BUDGET_S - ($NOW - $START) - 60) / 60))")  # 60 s for the final probes
echo "training each arm for $MINUTES min"
pids=()
while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  name=${arm%%:*}; overrides=${arm#*:}
  mkdir -p "$WORK/$name"
  if [ -f "$START_DIR/model.safetensors" ] && [ ! -f "$WORK/$name/model.safetensors" ]; then
    cp "$START_DIR/model.safetensors" "$START_DIR/model.json" "$WORK/$name/"  # resumed from (train_f5.load_checkpoint)
  fi
  # shellcheck disable=SC2086
  $PY -m train_f5 $COMMON $overrides max_minutes="$MINUTES" cache_dir="$WORK/cache" out_dir="$WORK/$name" \
    > "$WORK/$name.log" 2>&1 &
  pids+=($!)
done <<< "$ARMS"
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done

# back: each arm's EMA model and card (10 MB + a few kB for the shipped size), all logs in one file
: > "$OUT/logs.txt"
while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  name=${arm%%:*}
  { echo "=== $name: ${arm#*:}"; cat "$WORK/$name.log"; } >> "$OUT/logs.txt"
  for f in model.safetensors model.json; do
    [ -f "$WORK/$name/$f" ] && cp "$WORK/$name/$f" "$OUT/${name}_$f"
  done
done <<< "$ARMS"
echo "done in $(( $(date +%s) - START )) s, status $status"
exit $status
