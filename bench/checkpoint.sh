#!/usr/bin/env bash
# Checkpoint benchmarks (issue 27 "Performance"): ratios measured in one run.
#
#   bench/checkpoint.sh [flags of `cacheagent-bench checkpoint`]
#
# 1. One agent (`cacheagent-bench checkpoint`, a cacheagent daemon over a
#    shaped in-process emulator): the save's stall against writing the same
#    files with fsync and against uploading them straight to GCS; the upload
#    behind it against the link-bound ideal; a cold read epoch while a save
#    uploads against the same epoch alone.
# 2. As root, a fleet of three in network namespaces (bench/cmd/fleet phase
#    8): `save --wait peers` against C over the peer link, restores on every
#    node at once against each node restoring from GCS alone, and the saver
#    SIGKILLed after its replica is held. CKPT_FLEET=0 skips it; FLEET_FLAGS
#    passes flags to it (default: -ckpt-size 1GiB -gcs-mbit 200 -peer-mbit 800).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d /tmp/checkpointbench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" ./cmd/cacheagent ./bench/cmd/cacheagent-bench ./bench/cmd/gcsemu ./bench/cmd/gcsproxy ./bench/cmd/fleet

echo "## checkpoints ($(date -u +%F), $(nproc) cores, $(go version | cut -d' ' -f3))"
echo
echo '```'
"$bin/cacheagent-bench" checkpoint --rounds 2 --direct-once --rate 4MB --read-objects 16 "$@"
echo '```'
if [ "${CKPT_FLEET:-1}" != 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "checkpoint.sh: the fleet part needs root (network namespaces); CKPT_FLEET=0 skips it" >&2
		exit 1
	fi
	echo
	echo '```'
	# shellcheck disable=SC2086
	"$bin/fleet" -bin "$bin" -phases 8 ${FLEET_FLAGS:--ckpt-size 1GiB -gcs-mbit 200 -peer-mbit 800}
	echo '```'
fi
