#!/usr/bin/env bash
# Fleet-mode benchmark (issue 18 "Performance"): N agents in network
# namespaces on this machine, GCS bytes counted at one shaping proxy per
# node, peer links capped with tc. Needs root, iproute2 and curl; touches
# only namespaces it creates (named cas<runid>…, removed on exit).
#
#   sudo bench/fleet.sh [flags of bench/cmd/fleet, e.g. -nodes 3 -objects 48 -size 2MiB -gcs-mbit 40 -peer-mbit 160 -phases 1234567]
#
# Phases (bench/cmd/fleet/main.go): 1 one node alone; 2 cold and warm
# epochs of N nodes; 3 capacity (D = 2.5·B); 4 SIGKILL mid-epoch; 5 one node
# with a fleet section vs without (-solo-objects, -solo-rounds, -solo-warm);
# 6 rank-aware loading (-shards, -rows, -row-bytes, -loader-epochs); 7 the hot
# spot (-hot-size, -hot-gcs-mbit); 8 checkpoints (-ckpt-size; not in the default
# phases: run it with -phases 8).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "fleet.sh: needs root (network namespaces)" >&2
  exit 1
fi
bin=$(mktemp -d /tmp/fleetbench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/cacheagent ./bench/cmd/gcsemu ./bench/cmd/gcsproxy ./bench/cmd/fleet
"$bin/fleet" -bin "$bin" "$@"
