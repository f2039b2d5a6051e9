#!/bin/sh
# How close the engine model comes on a GPU and a model nobody measured: each measured run
# in traces/ predicted from its GPU's published figures and its model's config.json alone
# (`validate --gpu --model-config`, no fit), with the flags its engine ran with. Prints each
# run's signed error (simulated − measured, over measured) of TTFT p50 and of E2E mean, and
# the median of the absolute errors over each engine release's runs and over all. Then the
# same errors with a profile: the GPU's efficiencies fitted on one run of it, predicting
# other models on that GPU.
#
# Usage: examples/engine-accuracy.sh   (from the repository, routerlab on PATH)
set -eu
M=traces/models
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# row RELEASE LABEL VALIDATE-ARGS...: one line, LABEL and the two signed errors.
row() {
    release=$1 label=$2
    shift 2
    routerlab validate --format csv "$@" > "$OUT/run.csv" 2> "$OUT/stderr" || {
        cat "$OUT/stderr" >&2
        exit 1
    }
    awk -F, -v label="$label" '
        $3 == "ttft_p50_ms" { t = ($5 - $4) / $4 * 100 }
        $3 == "e2e_mean_ms" { e = ($5 - $4) / $4 * 100 }
        END { printf "%-44s %+8.1f%% %+9.1f%%\n", label, t, e }' "$OUT/run.csv" |
        tee -a "$OUT/rows" >> "$OUT/$release"
    tail -n 1 "$OUT/$release"
}
printf '%-44s %9s %10s\n' "run" "TTFT p50" "E2E mean"
L=traces/llmservingsim
row v1 "Llama-3.1-8B, RTX 4090" --gpu RTX-4090 \
    --model-config $M/Llama-3.1-8B.json $L/RTX4090-Llama-3.1-8B-vllm
row v1 "Llama-3.1-8B, RTX PRO 6000" --gpu RTX-PRO-6000 \
    --model-config $M/Llama-3.1-8B.json $L/RTXPRO6000-Llama-3.1-8B-vllm
row v1 "Qwen3-32B, 2 x RTX PRO 6000, TP 2" --gpu RTX-PRO-6000 \
    --model-config $M/Qwen3-32B.json $L/RTXPRO6000-Qwen3-32B-vllm
row v1 "Qwen3-30B-A3B, 2 x RTX PRO 6000, EP" --gpu RTX-PRO-6000 \
    --model-config $M/Qwen3-30B-A3B-Instruct-2507.json $L/RTXPRO6000-Qwen3-30B-A3B-vllm
# DistServe's vLLM (v0.2.3: the V0 scheduler, no CUDA graphs), its flags from DistServe's
# repository.
# A file's name is vllm-REQUESTS-RATE.exp.
for run in traces/distserve/vllm-*.exp; do
    row v0.2 "OPT-13B, A100-80GB, $(basename "$run")" --gpu A100-80GB \
        --model-config $M/OPT-13B.json --scheduler v0 --max-paddings 256 \
        --max-num-seqs 1024 --max-num-batched-tokens 16384 \
        --gpu-memory-utilization 0.95 "$run"
done
# llm-d-benchmark's exp-2 behind the plain Service: two engines, TP 2 each. Its prompts are
# conversations, each round the previous one's prompt with an answer and a new question: the
# workload file LMBench sent says which request continues which. The Service spreads them at
# random, so each latency is the median over nine seeds of that draw.
for rate in 0.5 1 2 8 10; do
    row v1 "Llama-3.1-70B, 2 x (2 x A100-80GB), $rate/s" --gpu A100-80GB \
        --model-config $M/Llama-3.1-70B.json --tensor-parallel-size 2 \
        --data-parallel-size 2 --router random --router-seeds 9 --gpu-memory-utilization 0.95 \
        --max-num-seqs 256 --max-num-batched-tokens 8192 \
        --lmbench-workload traces/lmbench/sharegpt/run.json \
        traces/llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_$rate.csv
done
# median FILE K: the median absolute value of column K (1: TTFT p50, 2: E2E mean) of FILE.
median() {
    awk -v k="$2" '{ v = $(NF - 2 + k); sub(/%/, "", v); v += 0; print (v < 0 ? -v : v) }' "$1" |
        sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'
}
# summary LABEL FILE: the medians of FILE's runs.
summary() {
    printf '%-44s %8.1f%% %9.1f%%\n' "median |error|, $1 ($(wc -l < "$2" | tr -d ' ') runs)" \
        "$(median "$2" 1)" "$(median "$2" 2)"
}
echo
summary "vLLM 0.8.5/0.19" "$OUT/v1"
summary "vLLM 0.2.3" "$OUT/v0.2"
summary "all" "$OUT/rows"
# With a profile: what one run of a GPU says about the others (`--gpu-profile-out`, then the
# profile given to --gpu).
# profile FILE VALIDATE-ARGS...: fits the GPU's efficiencies on a run and writes FILE.
profile() {
    file=$1
    shift
    routerlab validate --gpu-profile-out "$file" "$@" > /dev/null 2> "$OUT/stderr" || {
        cat "$OUT/stderr" >&2
        exit 1
    }
}
echo
printf '%-44s %9s %10s\n' "with a profile" "TTFT p50" "E2E mean"
profile "$OUT/pro6000.yaml" --gpu RTX-PRO-6000 --model-config $M/Llama-3.1-8B.json \
    --fit $L/RTXPRO6000-Llama-3.1-8B-vllm
row profiled "Qwen3-32B, TP 2 (Llama-3.1-8B's profile)" --gpu "$OUT/pro6000.yaml" \
    --model-config $M/Qwen3-32B.json $L/RTXPRO6000-Qwen3-32B-vllm
row profiled "Qwen3-30B-A3B, EP (Llama-3.1-8B's profile)" --gpu "$OUT/pro6000.yaml" \
    --model-config $M/Qwen3-30B-A3B-Instruct-2507.json $L/RTXPRO6000-Qwen3-30B-A3B-vllm
profile "$OUT/a100.yaml" --gpu A100-80GB --model-config $M/OPT-13B.json --scheduler v0 \
    --max-paddings 256 --max-num-seqs 1024 --max-num-batched-tokens 16384 \
    --gpu-memory-utilization 0.95 --fit traces/distserve/vllm-100-1.exp \
    --fit traces/distserve/vllm-400-4.exp
for rate in 0.5 1 2 8 10; do
    row profiled "Llama-3.1-70B, $rate/s (DistServe's profile)" --gpu "$OUT/a100.yaml" \
        --model-config $M/Llama-3.1-70B.json --tensor-parallel-size 2 \
        --data-parallel-size 2 --router random --router-seeds 9 --gpu-memory-utilization 0.95 \
        --max-num-seqs 256 --max-num-batched-tokens 8192 \
        --lmbench-workload traces/lmbench/sharegpt/run.json \
        traces/llm-d-benchmark/vllm-70b-2replicas-sharegpt/LMBench_sharegpt_output_$rate.csv
done
