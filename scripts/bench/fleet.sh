#!/usr/bin/env bash
# Fleet-mode benchmark (issue 18 "Performance"): N agents in network
# namespaces on this machine, GCS bytes counted at one shaping proxy per
# node, peer links capped with tc. Needs root, iproute2 and curl; touches
# only namespaces it creates (named cas<runid>…, removed on exit).
#
#   sudo scripts/bench/fleet.sh [flags of scripts/bench/fleet, e.g. -nodes 3 -objects 48 -size 2MiB -gcs-mbit 40 -peer-mbit 160]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" != 0 ]; then
  echo "fleet.sh: needs root (network namespaces)" >&2
  exit 1
fi
bin=$(mktemp -d /tmp/fleetbench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/cacheagent ./scripts/bench/gcsemu ./scripts/bench/gcsproxy ./scripts/bench/fleet
"$bin/fleet" -bin "$bin" "$@"
