#!/usr/bin/env bash
# The fault storm of issue 28 through the agent as its own process:
# `cacheagent prefetch` of small objects from an emulator (gcsemu) behind a
# shaping proxy (gcsproxy) that answers 10% of the downloads with 503,
# resets 10%, closes 10% cleanly mid-body and flips the middle byte of 10%
# of the bodies. Each run starts with an empty cache; it prints each run's
# outcome and the count of failed runs (exit status 1 if any failed).
#
#   bench/faultstorm.sh [RUNS [OBJECTS]]     # default 20 runs of 40 objects of 100 KiB
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
objects=${2:-40}
work=$(mktemp -d)
emu_pid= proxy_pid=
cleanup() {
	[ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
	[ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/" ./cmd/cacheagent ./bench/cmd/gcsemu ./bench/cmd/gcsproxy

# first_line FILE: waits for FILE's first line and prints it.
first_line() {
	for _ in $(seq 100); do [ -s "$1" ] && break; sleep 0.1; done
	head -1 "$1"
}

"$work/gcsemu" -objects "$objects" -size 100KiB -rate 0 -first-byte 0 >"$work/emu" &
emu_pid=$!
upstream=$(first_line "$work/emu")
upstream=${upstream%/storage/v1/}
failed=0
for run in $(seq "$runs"); do
	rm -f "$work/proxy"
	"$work/gcsproxy" -upstream "$upstream" -first-byte 20ms -rate 100MB -seed "$run" \
		-error-rate 0.1 -reset-rate 0.1 -close-rate 0.1 -reset-within 100KiB -corrupt-rate 0.1 -corrupt-middle \
		>"$work/proxy" &
	proxy_pid=$!
	endpoint=$(first_line "$work/proxy")
	rm -rf "$work/cache"
	if out=$("$work/cacheagent" --endpoint "$endpoint" --cache-dir "$work/cache" --shm-dir none \
		prefetch --wait gs://bench/data/ 2>&1); then
		echo "run $run: ok: $(tail -1 <<<"$out")"
	else
		failed=$((failed + 1))
		echo "run $run: FAILED: $(tail -1 <<<"$out")"
	fi
	kill "$proxy_pid"
	wait "$proxy_pid" 2>/dev/null || true
	proxy_pid=
done
echo "failed runs: $failed of $runs"
[ "$failed" = 0 ]
