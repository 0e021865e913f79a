#!/usr/bin/env bash
# The checks that need a GPU, in one go: the CUDA tests (the GPU env against the CPU kernels bit for bit, no host
# sync in a rollout step or a PPO minibatch by CUDA's own count, same seed → same run), the GPU benchmarks on a
# BEIR folder (BM25 feedback documents: no embedding model to load), and the quick start trained on the GPU.
#
#   bash scripts/gpu_check.sh [BEIR folder, default ../shared/datasets/scifact] [output folder, default gpu-check]
#
# The output folder gets eight files: tests.log, log.txt (every other step's output), and per benchmark its JSON
# and plot; the quick start's run folder goes to a temporary folder. A failing step does not stop the others; the
# exit status is that of the CUDA tests. Each step has a time limit (seconds, env STEP_LIMIT, default 150).
# QUICK=1 runs the benchmarks on their tiny budget and DEVICE=cpu on the CPU (both to check this script).
set -uo pipefail
data=${1:-../shared/datasets/scifact}
out=${2:-gpu-check}
mkdir -p "$out"
quick=${QUICK:+--quick}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
limit=${STEP_LIMIT:-150}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PYTHONUNBUFFERED=1
log="$out/log.txt"

"$py" - >"$out/tests.log" 2>&1 <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
EOF
timeout "$limit" "$py" -m pytest -q -s -p no:cacheprovider tests/test_cuda.py >>"$out/tests.log" 2>&1
status=$?
tail -n 5 "$out/tests.log"

step() {  # title, then the command
    local title=$1; shift
    echo "=== $title" >>"$log"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$log" 2>&1 || echo "$title: failed or timed out (status $?): see $log"
    echo "=== $title: $((SECONDS - t0)) s" | tee -a "$log"
}
bench() {  # name, then the script's arguments
    local name=$1; shift
    step "benchmarks/$name.py" "$py" "benchmarks/$name.py" --device "$device" --data-dir "$data" $quick \
        --json "$out/${name}_$device.json" --plot "$out/${name}_$device.png" "$@"
}
bench rollout --config scifact --set candidate_mining.feedback=bm25
bench search
bench ppo_update --config scifact --set candidate_mining.feedback=bm25
step "quick start on $device" "$py" train_optimized.py --config quickstart --device "$device" --test --no-progress \
    --output-dir "$scratch/quickstart"
tail -n 12 "$log"
exit "$status"
