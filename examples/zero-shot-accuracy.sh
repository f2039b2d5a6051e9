#!/bin/sh
# How close the engine model comes on a GPU and a model nobody measured: each measured run
# in traces/ predicted from its GPU's published figures and its model's config.json alone
# (`validate --gpu --model-config`, no fit), with the flags its engine ran with. Prints each
# run's signed error (simulated − measured, over measured) of TTFT p50 and of E2E mean, and
# the median of the absolute errors over all runs.
#
# Usage: examples/zero-shot-accuracy.sh   (from the repository, routerlab on PATH)
set -eu
M=traces/models
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# row LABEL VALIDATE-ARGS...: one line, LABEL and the two signed errors.
row() {
    label=$1
    shift
    routerlab validate --format csv "$@" > "$OUT/run.csv" 2> "$OUT/stderr" || {
        cat "$OUT/stderr" >&2
        exit 1
    }
    awk -F, -v label="$label" '
        $3 == "ttft_p50_ms" { t = ($5 - $4) / $4 * 100 }
        $3 == "e2e_mean_ms" { e = ($5 - $4) / $4 * 100 }
        END { printf "%-44s %+8.1f%% %+9.1f%%\n", label, t, e }' "$OUT/run.csv" |
        tee -a "$OUT/rows"
}
printf '%-44s %9s %10s\n' "run" "TTFT p50" "E2E mean"
L=traces/llmservingsim
row "Llama-3.1-8B, RTX 4090" --gpu RTX-4090 \
    --model-config $M/Llama-3.1-8B.json $L/RTX4090-Llama-3.1-8B-vllm
row "Llama-3.1-8B, RTX PRO 6000" --gpu RTX-PRO-6000 \
    --model-config $M/Llama-3.1-8B.json $L/RTXPRO6000-Llama-3.1-8B-vllm
row "Qwen3-32B, 2 x RTX PRO 6000, TP 2" --gpu RTX-PRO-6000 \
    --model-config $M/Qwen3-32B.json $L/RTXPRO6000-Qwen3-32B-vllm
row "Qwen3-30B-A3B, 2 x RTX PRO 6000, EP" --gpu RTX-PRO-6000 \
    --model-config $M/Qwen3-30B-A3B-Instruct-2507.json $L/RTXPRO6000-Qwen3-30B-A3B-vllm
# DistServe's vLLM (v0.2.3, V0 scheduler), its flags from DistServe's repository.
# A file's name is vllm-REQUESTS-RATE.exp.
for run in traces/distserve/vllm-*.exp; do
    row "OPT-13B, A100-80GB, $(basename "$run")" --gpu A100-80GB \
        --model-config $M/OPT-13B.json --scheduler v0 --max-paddings 256 \
        --max-num-seqs 1024 --max-num-batched-tokens 16384 \
        --gpu-memory-utilization 0.95 "$run"
done
# llm-d-benchmark's exp-2 behind the plain Service: two engines, TP 2 each.
for rate in 0.5 1 2 8 10; do
    row "Llama-3.1-70B, 2 x (2 x A100-80GB), $rate/s" --gpu A100-80GB \
        --model-config $M/Llama-3.1-70B.json --tensor-parallel-size 2 \
        --data-parallel-size 2 --router random --gpu-memory-utilization 0.95 \
        --max-num-seqs 256 --max-num-batched-tokens 8192 \
        traces/llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_$rate.csv
done
median() {
    awk -v k="$1" '{ v = $(NF - 2 + k); sub(/%/, "", v); v += 0; print (v < 0 ? -v : v) }' "$OUT/rows" |
        sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}
printf '%-44s %8.1f%% %9.1f%%\n' "median |error| over $(wc -l < "$OUT/rows" | tr -d ' ') runs" \
    "$(median 1)" "$(median 2)"
