#!/usr/bin/env bash
# Make this checkout ready to send to a lent GPU machine for one job (docs/f5_base.md, docs/penalty.md):
#   bash train_f5/device_prepare.sh pretrain   # train_f5/device_pretrain.sh: pretrain the Hindi-base F5 (the default)
#   bash train_f5/device_prepare.sh penalty    # benchmarks/penalty_cuda.sh: the penalty's share of an F5 v1 Base step
#   1. the packages the device image lacks, as Python 3.12 x86-64 wheels, into .whl/ (ignored);
#   2. pretrain: the shared Nepali prompts into .device_shared/ (ignored; ../shared does not travel, and is never
#      committed);
#   3. the tracked files the job does not need out of the working tree, so that what travels fits in 64 MiB (checked:
#      the script fails when it would not).
# Then call the device tool with the carry and the command printed at the end; afterwards the printed
# `git checkout -- ...` puts step 3 back.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
JOB=${1:-pretrain}
case "$JOB" in
  pretrain|penalty) ;;
  *) echo "error: the job must be pretrain or penalty, got '$JOB'" >&2; exit 2 ;;
esac
LIMIT_BYTES=$((64 * 1024 * 1024))
PLATFORMS=""
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS="$PLATFORMS --platform ${p}_x86_64"
done
# what the jobs import beyond the device image's packages (found by diffing the distributions imported by a smoke
# run against the image's list, .library/device/KINDS.md); wandb is replaced by a stand-in there (device_env.sh),
# rjieba and pypinyin too (f5_tts.model.utils imports them for Chinese text, never used here). vocos: every
# vocoder (the embedded one too) is built from its classes, and it imports encodec.
WHEELS="cffi==2.1.1 pycparser==3.12 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 einx==0.4.3 ema-pytorch==0.8.3
espeakng-loader==0.2.4 f5-tts==1.1.22 frozendict==2.5.1 hydra-core==1.3.8 omegaconf==2.3.1 librosa==0.11.0 pooch==1.9.0
decorator==5.3.1 platformdirs==4.14.9 loguru==0.7.3 soundfile==0.14.0 torch-einops-utils==0.2.0 x-transformers==2.31.10
soxr==1.1.0 audioread==3.1.0 vocos==0.1.0"
SDISTS="antlr4-python3-runtime==4.9.3 encodec==0.1.1"  # sdists only: built here, pure Python
# tracked paths neither job reads (other recognizers' heads, the text frontend's learned model), and per job the
# models the other job needs
UNUSED="checkpoints/w_labels2 checkpoints/wb_aug checkpoints/wb_real checkpoints/wb_text leakloss/assets/frontend
leakloss/assets/recognizers/w notebooks"
if [ "$JOB" = pretrain ]; then
  UNUSED="$UNUSED leakloss/assets/recognizers/wb leakloss/assets/bridge leakloss/assets/heads_espeak"
  CARRY='[".whl", ".device_shared"]'
  COMMAND='export LEAKLOSS_PROMPTS=$PWD/.device_shared/prompts.tsv; OUT=$OUT BUDGET_S=535 bash train_f5/device_pretrain.sh'
else
  UNUSED="$UNUSED checkpoints/f5_hindi_base leakloss/assets/recognizers/a leakloss/assets/recognizers/b
leakloss/assets/heads_espeak leakloss/assets/vocoder"
  CARRY='[".whl"]'
  COMMAND='OUT=$OUT bash benchmarks/penalty_cuda.sh'
fi
# the removal below would lose uncommitted edits there, which the printed `git checkout` cannot bring back
# shellcheck disable=SC2086
if [ -n "$(git status --porcelain -- $UNUSED)" ]; then
  echo "error: uncommitted changes under the paths this job removes ($(echo $UNUSED)): commit or stash them" >&2
  exit 2
fi
rm -rf .whl  # an older wheel of the same package beside a new one would stop the install on the device
mkdir -p .whl
for wheel in $WHEELS; do
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d .whl "$wheel"
done
for sdist in $SDISTS; do
  "$PY" -m pip wheel -q --no-deps -w .whl "$sdist"
done
if [ "$JOB" = pretrain ]; then
  mkdir -p .device_shared
  cp ../shared/data/nepali-prompts/prompts.tsv .device_shared/
fi
# shellcheck disable=SC2086
rm -rf $UNUSED
# what travels: the files git does not ignore (tracked and untracked) plus the carried folders
# (git still lists the removed files: stat says so on stderr, and they count 0)
travels=$( { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true
             find .whl -type f -printf '%s\n';
             if [ "$JOB" = pretrain ]; then find .device_shared -type f -printf '%s\n'; fi; } \
           | awk '{s += $1} END {print s + 0}')
echo "travels: $((travels / 1024 / 1024)) MiB of at most 64 (job $JOB)"
echo "restore afterwards: git checkout -- $(echo $UNUSED)"
if [ "$travels" -gt "$LIMIT_BYTES" ]; then
  echo "error: $travels bytes would travel, over the device's 64 MiB working tree" >&2
  exit 1
fi
echo "device call: carry $CARRY, command: $COMMAND"
