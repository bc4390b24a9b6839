# Sourced (not run) by the scripts that run on a lent GPU machine (train_f5/device_pretrain.sh,
# benchmarks/penalty_cuda.sh), from the repository root: installs the wheels train_f5/device_prepare.sh carried in
# .whl/ (the packages the device image lacks) and puts stand-ins for the modules that cannot travel on PYTHONPATH.
# WORK: a scratch folder; LEAKLOSS_DEVICE_SMOKE=1: a CPU smoke run here, which installs nothing.
WORK=${WORK:-${TMPDIR:-/tmp}/leakloss_device_work}
if [ -d .whl ] && [ -z "${LEAKLOSS_DEVICE_SMOKE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
# f5_tts.model's package imports its trainer, which imports wandb at the top, and its utils import rjieba and
# pypinyin (Chinese text); nothing run on the device calls them, and wandb with its dependencies does not fit in the
# device's 64 MiB working tree: modules that raise when used stand in for them (here too, so a smoke run tests this).
for module in wandb rjieba pypinyin; do
  mkdir -p "$WORK/stub/$module"
  cat > "$WORK/stub/$module/__init__.py" <<'STUB'
def __getattr__(name):
    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{__name__}.{name}: a stand-in of train_f5/device_env.sh, not the package")
    return unavailable
STUB
done
export PYTHONPATH="$WORK/stub${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
