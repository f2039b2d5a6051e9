#!/bin/sh
# The decision-log loop on one machine: policy A live behind `serve --decision-log`, policy B
# live, and both replayed from A's log (`replay --from-log`); prints the live and the
# predicted change from A to B in TTFT p50 and hit ratio.
#
# Usage: examples/decision-log-loop.sh A B [TRACE] [ENGINES]
#   (run from the repository, routerlab on PATH; python3 reads the reports)
# Defaults: the first 400 requests of traces/mooncake-sessions.jsonl, sent at twice their
# pace to 2 `routerlab engine`s running the engine model in real time.
set -eu
A=$1 B=$2
TRACE=${3:-}
ENGINES=${4:-2}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$WORK"' EXIT
if [ -z "$TRACE" ]; then
    TRACE=$WORK/trace.jsonl
    head -400 traces/mooncake-sessions.jsonl > "$TRACE"
fi
listening() {
    until grep -qs 'listening on' "$1"; do
        kill -0 "$2" 2> /dev/null || { cat "$1" >&2; return 1; }
        sleep 0.1
    done
    sed -n 's|.*listening on http://||p' "$1"
}
# live POLICY: engines, `serve` logging to $WORK/POLICY.log, `drive` -> $WORK/POLICY.live.json
live() {
    PIDS=""
    LIST=""
    for i in $(seq 1 "$ENGINES"); do
        routerlab engine --listen 127.0.0.1:0 2> "$WORK/$1-engine-$i.log" &
        E=$!
        PIDS="$PIDS $E"
        ADDR=$(listening "$WORK/$1-engine-$i.log" "$E")
        LIST="$LIST${LIST:+,}$ADDR"
    done
    routerlab serve --listen 127.0.0.1:0 --endpoints "$LIST" --matcher "$1" --block-size 2048 \
        --decision-log "$WORK/$1.log" 2> "$WORK/$1-router.log" &
    R=$!
    ROUTER=$(listening "$WORK/$1-router.log" "$R")
    routerlab drive --url "http://$ROUTER" --trace "$TRACE" --speedup 2 --format json \
        > "$WORK/$1.live.json"
    kill $PIDS $R
    wait $PIDS $R 2> /dev/null || true
}
live "$A"
live "$B"
for P in "$A" "$B"; do
    routerlab replay --from-log "$WORK/$A.log" --matcher "$P" --format json --quiet \
        > "$WORK/$P.replayed.json"
done
python3 - "$WORK" "$A" "$B" <<'PY'
import json, sys
work, a, b = sys.argv[1:]
def figures(name):
    timed = json.load(open(f"{work}/{name}.json"))["timed"]
    return timed["ttft"]["p50"], timed["hit_ratio"]
live = figures(f"{a}.live"), figures(f"{b}.live")
sim = figures(f"{a}.replayed"), figures(f"{b}.replayed")
for i, name in enumerate(["TTFT p50 (ms)", "hit ratio"]):
    l, s = live[1][i] / live[0][i], sim[1][i] / sim[0][i]
    print(f"{name}: live {live[0][i]:.4g} -> {live[1][i]:.4g} (x{l:.3f}); "
          f"predicted {sim[0][i]:.4g} -> {sim[1][i]:.4g} (x{s:.3f}); "
          f"predicted change off the live one by {s / l - 1:+.1%}")
PY
