#!/usr/bin/env bash
# Make this checkout ready to send to a lent GPU machine for train_f5/device_pretrain.sh (docs/f5_base.md):
#   1. the packages the device image lacks, as Python 3.12 x86-64 wheels, into .whl/ (ignored);
#   2. the shared Nepali prompts into .device_shared/ (ignored; ../shared does not travel, and is never committed);
#   3. the tracked files pretraining does not need out of the working tree, so that what travels fits in 64 MiB.
# Then call the device tool with carry [".whl", ".device_shared"] and the command printed at the end, and afterwards
# `git checkout -- checkpoints/w_labels2 leakloss/assets/frontend leakloss/assets/recognizers/w` puts step 3 back.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PLATFORMS=""
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS="$PLATFORMS --platform ${p}_x86_64"
done
# what `python -m train_f5` imports beyond the device image's packages (found by diffing imported distributions
# against the image's list); wandb is replaced by an empty module there (device_pretrain.sh), rjieba and pypinyin
# too (f5_tts.model.utils imports them for Chinese text, never used here)
WHEELS="cffi==2.1.1 pycparser==3.12 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 einx==0.4.3 ema-pytorch==0.8.3
espeakng-loader==0.2.4 f5-tts==1.1.22 frozendict==2.5.1 hydra-core==1.3.8 omegaconf==2.3.1 librosa==0.11.0 pooch==1.9.0
decorator==5.3.1 platformdirs==4.14.9 loguru==0.7.3 soundfile==0.14.0 torch-einops-utils==0.2.0 x-transformers==2.31.10
soxr==1.1.0 audioread==3.1.0"
mkdir -p .whl
for wheel in $WHEELS; do
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d .whl "$wheel"
done
"$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # an sdist only: built here, pure Python
mkdir -p .device_shared
cp ../shared/data/nepali-prompts/prompts.tsv .device_shared/
rm -rf checkpoints/w_labels2 leakloss/assets/frontend leakloss/assets/recognizers/w
du -sh --exclude=.git --exclude=.venv --exclude=.cache . | sed 's/^/travels: /'
echo 'device command: export LEAKLOSS_PROMPTS=$PWD/.device_shared/prompts.tsv; OUT=$OUT BUDGET_S=535 bash train_f5/device_pretrain.sh'
