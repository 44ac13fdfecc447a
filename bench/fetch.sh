#!/usr/bin/env bash
# Fetch and disk-tier benchmarks for issue 2: ratios measured in one run.
#
#   bench/fetch.sh            # prints a markdown report to stdout
#
# 1. go test benchmarks of fetch (shaped link 8 x 64 MiB vs the link-limited
#    ideal; 1000 x 256 KiB vs one sequential reader; transfermanager vs ours)
#    and tier (re-adopting 100k entries vs a raw scan of the files).
# 2. The agent as its own process: `cacheagent prefetch` of 8 x 64 MiB from a
#    shaped emulator (gcsemu) in another process, with its peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
emu_pid=
cleanup() { [ -n "$emu_pid" ] && kill "$emu_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "## fetch and disk tier ($(date -u +%F), $(nproc) cores, $(go version | cut -d' ' -f3))"
echo
echo '```'
go test -run '^$' -bench . -benchtime 1x ./fetch/ | grep -E '^(Benchmark|ok)'
go test -run '^$' -bench Reopen100k -benchtime 3x ./tier/ | grep -E '^(Benchmark|ok)'
echo '```'

go build -o "$work/cacheagent" ./cmd/cacheagent
go build -o "$work/gcsemu" ./bench/cmd/gcsemu
"$work/gcsemu" -objects 8 -size 64MiB -first-byte 20ms -rate 100MB >"$work/endpoint" &
emu_pid=$!
for _ in $(seq 100); do [ -s "$work/endpoint" ] && break; sleep 0.1; done
endpoint=$(head -1 "$work/endpoint")
# Baseline for the disk: what a plain sequential write with fsync reaches.
dd if=/dev/zero of="$work/dd" bs=4M count=128 conv=fsync 2>"$work/dd.err" && rm -f "$work/dd"
echo "disk baseline (dd 512 MiB, conv=fsync): $(tail -1 "$work/dd.err" | awk -F, '{print $NF}' | sed 's/^ //')"
shm=/dev/shm/cacheagent-bench-$$
for dir in "$work/cache" "$shm"; do
	for conns in 8 64; do
		rm -rf "$dir"
		start=$(date +%s.%N)
		/usr/bin/time -o "$work/rss" -f '%M' "$work/cacheagent" --endpoint "$endpoint" --cache-dir "$dir" \
			--connections "$conns" prefetch gs://bench/data/ >"$work/out" 2>"$work/err" || { cat "$work/err"; exit 1; }
		end=$(date +%s.%N)
		rss=$(tail -1 "$work/rss")
		rm -rf "$dir"
		case "$dir" in /dev/shm/*) where=tmpfs ;; *) where=disk ;; esac
		awk -v s="$start" -v e="$end" -v rss="$rss" -v c="$conns" -v w="$where" 'BEGIN {
			mb = 8 * 64 * 1048576 / 1e6; t = e - s
			printf "cacheagent prefetch 8 x 64 MiB to %s, %d connections: process wall %.2f s (%.0f MB/s = %.2f x the %d MB/s link), peak RSS %.0f MB\n", w, c, t, mb / t, mb / t / (c * 100), c * 100, rss / 1024 }'
		sed 's/^/    its report: /' "$work/err"
	done
done
