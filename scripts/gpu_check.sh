#!/usr/bin/env bash
# The checks that need a GPU, in one go, within a lent device's budget: the CUDA tests (the GPU env against the CPU
# kernels bit for bit, no host sync in a rollout step or a PPO minibatch by CUDA's own count, same seed → same run,
# a tiny run's time split with its GPU block),
# one real training run timed end to end (SciFact's config with BM25 feedback documents, on the GPU: its wall time,
# where it went — collect, PPO update, dev evaluation, checkpointing, the rest, each timed on the host side with a
# synchronize at the phase boundaries — and how busy the GPU was over training and while collecting), then, as the
# budget allows, the GPU benchmarks on the BEIR folder and the quick start trained on the GPU.
#
#   bash scripts/gpu_check.sh [BEIR folder, default ../shared/datasets/scifact] [output folder, default $OUT or gpu-check]
#
# The output folder gets tests.log, log.txt (every other step's output), training_<device>.json (the training run's
# result: run.json's "result" with its "training_time" split, plus the settings), and per benchmark its JSON and
# plot; the run folders go to a temporary folder. One summary line per training run is printed ("TRAINING ...").
# A failing step does not stop the others; the exit status is that of the CUDA tests.
#
# Time: the whole script stops starting steps once BUDGET seconds (default 450) are spent, and no step runs past
# the budget (by more than a 30 s grace to exit) or its own limit (env STEP_LIMIT, default 150; the training run TRAIN_LIMIT, default 200; its length
# TRAIN_EPOCHS, default 4: 11 updates of 256 episodes, dev evaluated 3 times; at its limit the run is sent SIGINT,
# finishes its update and still records its split). Steps in order of importance: tests,
# training, rollout, PPO update and search benchmarks, quick start. TRAIN_CPU=1 also trains the same run on the
# CPU (for the comparison; skipped when the budget is short); TRAIN_ARGS: more arguments for the training runs
# (e.g. "--set embeddings.cache_dir=DIR" to reuse embeddings, "--set embeddings.path=DIR" for a model folder);
# TRAIN_VARIANTS: more training runs on the GPU right after the first, "label=arguments;label=arguments" (e.g.
# "eager=--set training.cuda_graph=false"), each with its TRAINING line and training_<label>.json; BENCH_ARGS: more
# arguments for the benchmarks; ROLLOUT_BATCHES: the rollout benchmark's batch sizes (default 1,32,128,512,1024);
# SKIP: steps left out, among "rollout ppo_update search quickstart". QUICK=1 runs the benchmarks on their tiny budget and
# DEVICE=cpu everything on the CPU (both to check this script). Without a GPU (DEVICE=cuda) only the tests run.
set -uo pipefail
data=${1:-../shared/datasets/scifact}
out=${2:-${OUT:-gpu-check}}
mkdir -p "$out"
quick=${QUICK:+--quick}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
limit=${STEP_LIMIT:-150}
budget=${BUDGET:-450}
train_limit=${TRAIN_LIMIT:-200}
train_epochs=${TRAIN_EPOCHS:-4}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export PYTHONUNBUFFERED=1
log="$out/log.txt"
: >"$log"
start=$SECONDS

left() { echo $((budget - (SECONDS - start))); }

"$py" - >"$out/tests.log" 2>&1 <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
EOF
timeout "$(( $(left) < limit ? $(left) : limit ))" "$py" -m pytest -q -s -p no:cacheprovider tests/test_cuda.py \
    tests/test_telemetry.py::test_training_time_on_cuda \
    >>"$out/tests.log" 2>&1
status=$?
tail -n 5 "$out/tests.log"

gpu_ok=1
if [[ $device == cuda* ]] && ! "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    gpu_ok=0
    echo "no CUDA device: the training run, benchmarks and quick start are skipped (DEVICE=cpu runs them on the CPU)"
fi

step() {  # title, step limit, then the command (sent $sig, default TERM, at the limit); skipped when the budget
          # is (nearly) spent
    local title=$1 cap=$2; shift 2
    local rem; rem=$(left)
    if (( rem < 20 )); then
        echo "=== $title: skipped ($rem s of the $budget s budget left)" | tee -a "$log"
        return 1
    fi
    (( cap > rem )) && cap=$rem
    echo "=== $title (limit $cap s)" >>"$log"
    local t0=$SECONDS rc=0
    timeout -s "${sig:-TERM}" -k 30 "$cap" "$@" >>"$log" 2>&1 || { rc=$?; echo "$title: failed or timed out (status $rc): see $log"; }
    echo "=== $title: $((SECONDS - t0)) s" | tee -a "$log"
    return "$rc"
}
skipped() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
bench() {  # name, then the script's arguments
    local name=$1; shift
    skipped "$name" && return 0
    step "benchmarks/$name.py" "$limit" "$py" "benchmarks/$name.py" --device "$device" --data-dir "$data" $quick \
        --json "$out/${name}_$device.json" --plot "$out/${name}_$device.png" ${BENCH_ARGS:-} "$@"
}
train_measure() {  # device [label, more arguments]: SciFact's config, BM25 feedback, TRAIN_EPOCHS epochs; prints
                   # one TRAINING line
    local dev=$1 label=${2:-$1} more=${3:-}
    local run="$scratch/train-$label" t0=$SECONDS
    # at the limit, SIGINT: the trainer finishes its update, checkpoints, and run.json still gets the split
    sig=INT step "training $label on $dev (scifact, BM25 feedback, $train_epochs epochs)" "$train_limit" \
        "$py" train_optimized.py --config scifact --data-dir "$data" --device "$dev" --epochs "$train_epochs" \
        --set candidate_mining.feedback=bm25 --no-progress --output-dir "$run" ${TRAIN_ARGS:-} $more
    "$py" - "$run/run.json" "$out/training_$label.json" "$label" "$((SECONDS - t0))" <<'EOF' | tee -a "$log"
import json, sys
from pathlib import Path

src, dst, dev, process_s = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:
    record = json.loads(Path(src).read_text())
except (OSError, ValueError):
    record = {}
result = record.get("result") or {}
spent = result.get("training_time")
out = {"device": dev, "status": record.get("status"), "process_s": process_s, "device_info": record.get("device"),
       "updates": result.get("updates"), "phases_s": result.get("phases_s"), "training_time": spent,
       "best_dev": result.get("best_dev")}
dst.write_text(json.dumps(out, indent=2) + "\n")
if not spent:
    print(f"TRAINING {dev}: no result (status {record.get('status')}; see the log)")
    sys.exit(0)
order = ["collect", "update", "dev_evaluation", "checkpointing", "warm_start"]
names = order + sorted(set(spent["parts_s"]) - set(order) - {"other"}) + ["other"]
parts = " ".join(f"{k}={spent['parts_s'][k]:.1f}s/{100 * (spent['shares'][k] or 0):.0f}%" for k in names
                 if spent["parts_s"].get(k, 0) > 0)
stopped = " (stopped at the time limit)" if result.get("interrupted") else ""
line = (f"TRAINING {dev}: {spent['updates']} updates{stopped} in {spent['wall_s']:.1f} s "
        f"({process_s} s with the precompute): {parts}")
gpu = spent.get("gpu")
for g in (gpu or {}).get("gpus", []):
    w = {k: g.get(k) or {} for k in ("training", "collect", "update")}
    fmt = lambda x: "n/a" if x is None else f"{x:.0f}%"  # noqa: E731
    line += (f"; gpu{g['gpu']} busy mean/median {fmt(w['training'].get('util_mean'))}/"
             f"{fmt(w['training'].get('util_median'))} (collect {fmt(w['collect'].get('util_mean'))}/"
             f"{fmt(w['collect'].get('util_median'))}, update {fmt(w['update'].get('util_mean'))}/"
             f"{fmt(w['update'].get('util_median'))}; {w['training'].get('samples', 0)} samples), "
             f"peak {g.get('mem_peak_mib') or 0:.0f} MiB")
if gpu and gpu.get("torch_peak_allocated_mib") is not None:
    line += f"; torch peak {gpu['torch_peak_allocated_mib']:.0f} MiB"
print(line)
EOF
}

if (( gpu_ok )); then
    train_measure "$device"
    IFS=';' read -ra variants <<<"${TRAIN_VARIANTS:-}"
    for variant in "${variants[@]}"; do
        [[ -n $variant ]] && train_measure "$device" "${variant%%=*}" "${variant#*=}"
    done
    bench rollout --config scifact --set candidate_mining.feedback=bm25 --batch-sizes "${ROLLOUT_BATCHES:-1,32,128,512,1024}"
    bench ppo_update --config scifact --set candidate_mining.feedback=bm25
    bench search
    if [[ ${TRAIN_CPU:-} == 1 && $device != cpu ]]; then
        train_measure cpu
    fi
    skipped quickstart || step "quick start on $device" "$limit" "$py" train_optimized.py --config quickstart --device "$device" --test \
        --no-progress --output-dir "$scratch/quickstart"
fi
echo "=== total $((SECONDS - start)) s of the $budget s budget"
exit "$status"
