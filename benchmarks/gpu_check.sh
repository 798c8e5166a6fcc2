#!/usr/bin/env bash
# bertkit proven on a bare GPU machine in one call: install, build the models, `pytest -m gpu`, benchmarks/gpu.py.
#
#   bash benchmarks/gpu_check.sh --fetch         here, with network: fill gpu_carry/ (wheels, model in fp16, SST-2)
#   bash benchmarks/gpu_check.sh OUT             on the GPU machine, gpu_carry/ carried: 8 minutes at most
#   bash benchmarks/gpu_check.sh --dry-run OUT   on a CPU: the same steps at tiny sizes, under a minute (CI runs it)
#
# OUT gets gpu_check.log (everything), gpu_check.json (PASS/FAIL/SKIP of every check with its figures, the device,
# versions and models), pytest.xml and bench.json. Exit status 0 when nothing failed, 1 when something did, 2 for a
# usage error. PYTHON picks the interpreter (default .venv/bin/python where there is one, else python3),
# GPU_CHECK_SECONDS the deadline (default 470 on a GPU, 120 in a dry run), BERTKIT_GPU_CARRY the carried folder
# (default gpu_carry/). docs/how-to/gpu.md says what it proves.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BERTKIT_GPU_CARRY=${BERTKIT_GPU_CARRY:-$ROOT/gpu_carry}
CARRY=$BERTKIT_GPU_CARRY
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
MODE=gpu
case ${1:-} in
    --fetch) exec "$PYTHON" "$ROOT/benchmarks/gpu_models.py" fetch ;;
    --dry-run) MODE=dry-run && shift ;;
    -h | --help) sed -n '2,12p' "$0" && exit 0 ;;
esac
if [[ $# -ne 1 || $1 == -* ]]; then
    echo "usage: bash benchmarks/gpu_check.sh [--dry-run] OUT | --fetch" >&2
    exit 2
fi
mkdir -p "$1" && OUT=$(cd "$1" && pwd) || exit 2
rm -f "$OUT/gpu_check.log" "$OUT/gpu_check.json" "$OUT/pytest.xml" "$OUT/bench.json"

START=$(date +%s)
ALLOWED=${GPU_CHECK_SECONDS:-470}
[[ $MODE == gpu ]] || ALLOWED=${GPU_CHECK_SECONDS:-120}
DEADLINE=$((START + ALLOWED))
RESERVE=15 # seconds kept for the summary
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bertkit-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TQDM_DISABLE=1
export TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
if [[ -f $CARRY/data/sst2/train.tsv ]]; then export BERTKIT_DATA=$CARRY/data; fi

# step NAME LIMIT COMMAND...: COMMAND within LIMIT seconds and the deadline; its line goes to WORK/steps.tsv
step() {
    local name=$1 limit=$2 code began left
    shift 2
    left=$((DEADLINE - RESERVE - $(date +%s)))
    if ((left < 5)); then
        printf '%s\t124\t0\t0\tnot started: the deadline came first\n' "$name" >>"$WORK/steps.tsv"
        return 124
    fi
    ((limit > left)) && limit=$left
    echo
    echo "==== $name (at most ${limit}s; $(($(date +%s) - START))s since the start)"
    began=$(date +%s.%N)
    timeout --kill-after=10 "$limit" "$@"
    code=$?
    printf '%s\t%s\t%s\t%s\t\n' "$name" "$code" "$(awk "BEGIN {print $(date +%s.%N) - $began}")" "$limit" \
        >>"$WORK/steps.tsv"
    return $code
}

# missing NAME WHY: a step that cannot run; a failure on the GPU, a skip in a dry run
missing() {
    echo "$1: $2"
    printf '%s\t%s\t0\t0\t%s\n' "$1" "$([[ $MODE == gpu ]] && echo 1 || echo 100)" "$2" >>"$WORK/steps.tsv"
}

checks() {
    echo "bertkit GPU check ($MODE), $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -srm), python: $PYTHON"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    fi
    local platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64)
    platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
    local install=(-m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check)
    if ! compgen -G "$CARRY/wheels/*.whl" >/dev/null; then
        missing install "no wheels in gpu_carry/wheels: fill it here with bash benchmarks/gpu_check.sh --fetch"
    elif [[ $MODE == gpu ]]; then
        step install 120 "$PYTHON" "${install[@]}" --target "$WORK/site" "$CARRY"/wheels/*.whl &&
            export PYTHONPATH=$WORK/site:$PYTHONPATH
    else # the wheels are for the GPU image's Python 3.12: installed for it, beside this interpreter
        step install 60 "$PYTHON" "${install[@]}" --only-binary=:all: --python-version 3.12 --implementation cp \
            "${platforms[@]}" --target "$WORK/site-3.12" "$CARRY"/wheels/*.whl
    fi

    local need=(--need-cuda)
    [[ $MODE == gpu ]] || need=()
    step environment 120 "$PYTHON" benchmarks/gpu_models.py environment "$WORK" --site "$WORK/site" "${need[@]}" ||
        return
    local sizes=(--base-layers 12 --minilm-layers 6)
    [[ $MODE == gpu ]] || sizes=(--base-layers 1 --minilm-layers 1 --random-default)
    step models 120 "$PYTHON" benchmarks/gpu_models.py models "$WORK" "${sizes[@]}" || return
    export PYTHONPATH=$WORK/shim:$PYTHONPATH

    local limit=210
    [[ $MODE == gpu ]] || limit=45
    step pytest $limit "$PYTHON" -m pytest -m gpu tests/test_gpu.py -v -rA -p no:cacheprovider \
        -o junit_family=xunit1 --junitxml="$OUT/pytest.xml"

    local left=$((DEADLINE - RESERVE - $(date +%s)))
    if [[ $MODE == gpu ]]; then # no table starts in the last 80 s: the largest takes about a minute
        sizes=(--device cuda --rows 20000 --synthetic 4000 --finetune-rows 8000 --repeats 3 --serve-seconds 8)
        sizes+=(--budget-s $((left > 100 ? left - 80 : 20)))
    else
        sizes=(--device cpu --rows 16 --synthetic 8 --finetune-rows 16 --dev-rows 16 --repeats 1 --serve-seconds 1 --serve-warm-up 1)
    fi
    # the Rust tokenizer on its own threads, as everyone's is by default (false above keeps pytest's forks quiet)
    step benchmark "$left" env TOKENIZERS_PARALLELISM=true "$PYTHON" benchmarks/gpu.py "${sizes[@]}" \
        --models "$WORK/models.json" \
        --json "$OUT/bench.json"
}

{
    checks
    timeout 60 "$PYTHON" benchmarks/gpu_models.py summary "$OUT" "$WORK" --mode "$MODE" --started "$START"
} 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
