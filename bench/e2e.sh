#!/usr/bin/env bash
# End-to-end benchmark of cacheagent against the alternatives (issue 8).
#
#   bench/e2e.sh [--shards N] [--rows N] [--row-bytes N] [--connections N]
#                        [--first-byte 20ms] [--rate 100MB] [--error-rate F] [--reset-rate F]
#                        [--batch N] [--doc FILE]
#
# Every flag also reads an environment variable: E2E_SHARDS, E2E_ROWS, E2E_ROW_BYTES,
# E2E_CONNECTIONS, E2E_FIRST_BYTE, E2E_RATE, E2E_ERROR_RATE, E2E_RESET_RATE, E2E_BATCH, E2E_DOC;
# E2E_DISK_DIR places the daemon's disk tier (default: a temporary directory under /tmp).
#
# It builds cacheagent, bench/cmd/gcsproxy, bench/cmd/e2e and a standalone
# fake-gcs-server (all from this module), installs python3-torch, python3-numpy and fuse3
# with apt-get when they are missing (as root), and then:
#
#  1. writes a synthetic .npy dataset and serves it from fake-gcs-server (memory backend);
#  2. puts gcsproxy in front of it: every object download waits --first-byte and is paced at
#     --rate per connection, like GCS (optionally failing a share of downloads);
#  3. starts the daemon (cacheagent serve) on that endpoint with fetch.connections =
#     --connections (default 4: at 8 × 100 MB/s the link would be faster than a 2-core machine
#     can move bytes through the emulator and the proxy at all), a disk and a shm tier and
#     its FUSE mount;
#  4. copies the dataset once over the same path unshaped (the machine's ceiling), then reads
#     it for 3 epochs with the Go loader, once per reader: direct GCS, download-then-read, the
#     agent through the daemon (epoch 1 cold, then warm), with the loader's defaults and with
#     --connections shards staged ahead;
#  5. runs PyTorch's DataLoader (torch_peer.py) for 3 warm epochs through the FUSE mount and
#     over a copy of the same files on tmpfs, twice each in alternating order (the best counts);
#  6. writes the table, with ratios and the issue's targets, into docs/benchmarks.md
#     between <!-- e2e:begin --> and <!-- e2e:end --> (appended if absent).
#
# Everything it starts, mounts or writes is removed on exit, on failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

shards=${E2E_SHARDS:-32}
rows=${E2E_ROWS:-2000}
row_bytes=${E2E_ROW_BYTES:-16384}
conns=${E2E_CONNECTIONS:-4}
first_byte=${E2E_FIRST_BYTE:-20ms}
rate=${E2E_RATE:-100MB}
error_rate=${E2E_ERROR_RATE:-0}
reset_rate=${E2E_RESET_RATE:-0}
batch=${E2E_BATCH:-256}
doc=${E2E_DOC:-docs/benchmarks.md}
disk_parent=${E2E_DISK_DIR:-}
cmdline="bench/e2e.sh${*:+ $*}"

usage() {
	sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}
while [ $# -gt 0 ]; do
	case $1 in -h | --help) usage 0 ;; esac
	[ $# -ge 2 ] || { echo "e2e.sh: $1 needs a value" >&2 && usage; }
	case $1 in
	--shards) shards=$2 ;;
	--rows) rows=$2 ;;
	--row-bytes) row_bytes=$2 ;;
	--connections) conns=$2 ;;
	--first-byte) first_byte=$2 ;;
	--rate) rate=$2 ;;
	--error-rate) error_rate=$2 ;;
	--reset-rate) reset_rate=$2 ;;
	--batch) batch=$2 ;;
	--doc) doc=$2 ;;
	*) echo "e2e.sh: unknown flag $1" >&2 && usage ;;
	esac
	shift 2
done

py=/usr/bin/python3 # Debian's, with python3-torch; not a pyenv one on PATH
log() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# install_missing installs the system packages the run needs.
install_missing() {
	local pkgs=()
	"$py" -c 'import numpy' 2>/dev/null || pkgs+=(python3-numpy)
	"$py" -c 'import torch' 2>/dev/null || pkgs+=(python3-torch)
	command -v fusermount3 >/dev/null || pkgs+=(fuse3)
	[ ${#pkgs[@]} -eq 0 ] && return
	[ "$(id -u)" -eq 0 ] || die "missing ${pkgs[*]}: install them (apt-get install ${pkgs[*]}) or run as root"
	log "installing ${pkgs[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
[ -x "$py" ] || die "$py not found"
install_missing
[ -e /dev/fuse ] || die "/dev/fuse is missing: the FUSE mount cannot work here"

work=$(mktemp -d /tmp/cacheagent-e2e-XXXXXX)
shm=$(mktemp -d /dev/shm/cacheagent-e2e-XXXXXX)
disk=$work/disk
if [ -n "$disk_parent" ]; then
	disk=$(mktemp -d "$disk_parent/cacheagent-e2e-disk-XXXXXX")
fi
mnt=$work/mnt
sock=$work/control.sock
daemon_pid='' proxy_pid='' open_pid='' fake_pid=''

# stop PID: SIGTERM, then SIGKILL after 15 s; waits for it.
stop() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 150); do
		kill -0 "$pid" 2>/dev/null || break
		[ "$i" -lt 150 ] || kill -KILL "$pid" 2>/dev/null || true
		sleep 0.1
	done
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop "$daemon_pid" # unmounts
	if mountpoint -q "$mnt" 2>/dev/null; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || log "could not unmount $mnt"
	fi
	stop "$proxy_pid"
	stop "$open_pid"
	stop "$fake_pid"
	rm -rf "$work" "$shm"
	[ "$disk" = "$work/disk" ] || rm -rf "$disk"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for NAME PID LOG COMMAND...: polls COMMAND for up to 120 s while PID lives; on
# failure shows the end of LOG.
wait_for() {
	local what=$1 pid=$2 logfile=$3 i
	shift 3
	for i in $(seq 1200); do
		"$@" >/dev/null 2>&1 && return 0
		if ! kill -0 "$pid" 2>/dev/null || [ "$i" -eq 1200 ]; then
			tail -n 20 "$logfile" >&2 || true
			die "$what did not become ready"
		fi
		sleep 0.1
	done
}

log "building (go $(go env GOVERSION))"
mkdir -p "$work/bin"
go build -o "$work/bin/cacheagent" ./cmd/cacheagent
go build -o "$work/bin/gcsproxy" ./bench/cmd/gcsproxy
go build -o "$work/bin/e2e" ./bench/cmd/e2e
go build -o "$work/bin/fake-gcs-server" github.com/fsouza/fake-gcs-server

log "writing the dataset: $shards shards x $rows rows x $row_bytes bytes"
"$work/bin/e2e" gen -dir "$work/seed" -bucket bench -prefix train/ -shards "$shards" -rows "$rows" -row-bytes "$row_bytes"

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log "starting fake-gcs-server on 127.0.0.1:$port"
"$work/bin/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$port" -backend memory -data "$work/seed" \
	-public-host 127.0.0.1 -log-level warn >"$work/fake.log" 2>&1 &
fake_pid=$!
wait_for fake-gcs-server "$fake_pid" "$work/fake.log" curl -sf "http://127.0.0.1:$port/_internal/healthcheck"
rm -rf "$work/seed" # the server holds it in memory

log "starting gcsproxy: $first_byte to first byte, $rate/s per connection, error rate $error_rate, reset rate $reset_rate"
"$work/bin/gcsproxy" -upstream "http://127.0.0.1:$port" -first-byte "$first_byte" -rate "$rate" \
	-error-rate "$error_rate" -reset-rate "$reset_rate" >"$work/proxy.out" 2>"$work/proxy.log" &
proxy_pid=$!
wait_for gcsproxy "$proxy_pid" "$work/proxy.log" test -s "$work/proxy.out"
endpoint=$(head -n1 "$work/proxy.out")
# The same path unshaped, to measure what this machine can move at all.
"$work/bin/gcsproxy" -upstream "http://127.0.0.1:$port" -first-byte 0 -rate 0 >"$work/open.out" 2>"$work/open.log" &
open_pid=$!
wait_for "unshaped gcsproxy" "$open_pid" "$work/open.log" test -s "$work/open.out"

mkdir -p "$disk" "$mnt"
cat >"$work/cacheagent.yaml" <<EOF
sources: [{uri: gs://bench/train/}]
tiers:
  disk: {dir: $disk}
  shm: {dir: $shm/tier}
fetch: {endpoint: "$endpoint", connections: $conns}
mount: {path: $mnt}
control: {socket: $sock}
metrics: {listen: none}
gpu: none
EOF
log "starting the daemon: fetch.connections $conns, disk tier $disk, shm tier $shm/tier, mount $mnt"
"$work/bin/cacheagent" serve --config "$work/cacheagent.yaml" --log-level info >"$work/daemon.log" 2>&1 &
daemon_pid=$!
ready() { [ -S "$sock" ] && mountpoint -q "$mnt"; }
wait_for daemon "$daemon_pid" "$work/daemon.log" ready

log "Go readers, 3 epochs each: direct GCS, download-then-read, agent, agent with lookahead = connections"
"$work/bin/e2e" run -endpoint "$endpoint" -ceiling-endpoint "$(head -n1 "$work/open.out")" -socket "$sock" \
	-download-dir "$work/download" -connections "$conns" -batch "$batch" -epochs 3 >"$work/results.jsonl"
rm -rf "$work/download"
stop "$open_pid"
open_pid=''

cp -r "$mnt/bench/train" "$shm/train"
torch_args=()
# run_torch NAME DIR: one torch_peer.py run, 3 measured epochs after its warm-up epoch.
run_torch() {
	log "PyTorch DataLoader over $2"
	"$py" bench/torch_peer.py --dir "$2" --batch "$batch" --epochs 3 --json >"$work/torch-$1.json"
}
# Twice each, in alternating order, so neither side always runs first.
run_torch mount-1 "$mnt/bench/train"
run_torch tmpfs-1 "$shm/train"
run_torch tmpfs-2 "$shm/train"
run_torch mount-2 "$mnt/bench/train"
for i in 1 2; do
	torch_args+=(-torch-mount "$work/torch-mount-$i.json" -torch-tmpfs "$work/torch-tmpfs-$i.json")
done

passthrough=$(grep -o 'passthrough=[a-z]*' "$work/daemon.log" | head -n1 || true)
fake_version=$(go list -m -f '{{.Version}}' github.com/fsouza/fake-gcs-server)
disk_fs=$(df --output=fstype "$disk" | tail -n1)
"$work/bin/e2e" report -results "$work/results.jsonl" "${torch_args[@]}" \
	-doc "$doc" -command "$cmdline" -load-start "$load_start" \
	-note "Processes: fake-gcs-server $fake_version (standalone, memory backend) behind \`bench/cmd/gcsproxy\` \
(error rate $error_rate, reset rate $reset_rate), the daemon (\`cacheagent serve\`: disk tier \
on $disk_fs, shm tier on /dev/shm, FUSE mount${passthrough:+ with $passthrough}), and each reader in its own process." \
	-note "Readers: direct GCS reads each shard whole with one stream, \`connections\` shards ahead; \
download-then-read copies every object with \`connections\` streams (one per object, like \`gcloud storage cp -r\`), \
then maps the local files; the agent is a client of the daemon's socket (leases, plans, staging), first with the \
loader's defaults (4 shards staged ahead, the daemon's planner prefetching the rest), then staging \`connections\` \
shards ahead, each from an evicted (cold) cache. MB from GCS counts the object bytes the shaped link carried during \
the epoch; a loader prefetching across an epoch boundary moves some into the next."
log "wrote the e2e section of $doc"
