#!/bin/sh
# Install cacheagent: the binaries (cacheagent, and cacheagent-bench with
# the demo and the benchmarks, which `cacheagent demo` and `cacheagent
# bench` run), the systemd units (the service and the huge-page tmpfs of
# its shm tier), the commented default config and the operations guide.
# Safe to run again (upgrades): it replaces the binaries, the unit and the
# docs, but never an existing config, beside which it puts the new default
# as cacheagent.yaml.default.
#
#   scripts/install.sh                 # build ./cmd/cacheagent and ./bench/cmd/cacheagent-bench with go, install them
#   scripts/install.sh path/to/cacheagent [path/to/cacheagent-bench]
#   DESTDIR=/tmp/pkg scripts/install.sh   # stage into a directory (packaging)
#   PREFIX=/opt/cacheagent scripts/install.sh
#
# Without DESTDIR, as root, it also creates the group cacheagent (whose
# members may use the control socket) and reloads systemd. It does not
# enable or start the service: systemctl enable --now cacheagent.
set -eu
cd "$(dirname "$0")/.."

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
bindir=$PREFIX/bin
unitdir=$PREFIX/lib/systemd/system
docdir=$PREFIX/share/doc/cacheagent
confdir=/etc/cacheagent

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bin=${1:-}
bench=${2:-}
if [ -z "$bin" ]; then
	echo "== building cacheagent and cacheagent-bench"
	CGO_ENABLED=0 go build -trimpath -o "$tmp/cacheagent" ./cmd/cacheagent
	CGO_ENABLED=0 go build -trimpath -o "$tmp/cacheagent-bench" ./bench/cmd/cacheagent-bench
	bin=$tmp/cacheagent
	bench=$tmp/cacheagent-bench
fi
for b in "$bin" ${bench:+"$bench"}; do
	[ -x "$b" ] || { echo "install.sh: $b is not an executable" >&2; exit 1; }
done

echo "== installing into ${DESTDIR:-/}"
install -d "$DESTDIR$bindir" "$DESTDIR$unitdir" "$DESTDIR$docdir" "$DESTDIR$confdir"
# Replace a binary atomically: a running daemon keeps its old inode.
install_bin() {
	install -m 0755 "$1" "$DESTDIR$bindir/.$2.new"
	mv -f "$DESTDIR$bindir/.$2.new" "$DESTDIR$bindir/$2"
}
install_bin "$bin" cacheagent
if [ -n "$bench" ]; then
	install_bin "$bench" cacheagent-bench
else
	echo "   no cacheagent-bench given: cacheagent demo and cacheagent bench will say how to get it"
fi

sed "s|/usr/local/bin/cacheagent|$bindir/cacheagent|" scripts/cacheagent.service >"$tmp/cacheagent.service"
install -m 0644 "$tmp/cacheagent.service" "$DESTDIR$unitdir/cacheagent.service"
install -m 0644 scripts/dev-shm-cacheagent.mount "$DESTDIR$unitdir/dev-shm-cacheagent.mount"
install -m 0644 docs/operations.md "$DESTDIR$docdir/operations.md"

conf=$DESTDIR$confdir/cacheagent.yaml
if [ -e "$conf" ]; then
	if cmp -s scripts/cacheagent.yaml "$conf"; then
		rm -f "$conf.default"
	else
		install -m 0644 scripts/cacheagent.yaml "$conf.default"
		echo "   kept your $confdir/cacheagent.yaml; the new default is cacheagent.yaml.default"
	fi
else
	install -m 0644 scripts/cacheagent.yaml "$conf"
fi

if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ]; then
	if ! getent group cacheagent >/dev/null; then
		groupadd --system cacheagent
		echo "   created group cacheagent: add the users who run training jobs to it"
	fi
	# The shm tier moves onto its own tmpfs at the next start; copies left
	# in a plain /dev/shm/cacheagent would be hidden under it, still using
	# memory. (The daemon drops its index entries for them; the disk
	# copies stay.)
	shm=/dev/shm/cacheagent
	if [ -d "$shm" ] && ! mountpoint -q "$shm" && [ -n "$(ls -A "$shm" 2>/dev/null)" ]; then
		echo "   $shm holds an shm tier outside its tmpfs: run systemctl stop cacheagent,"
		echo "   rm -rf $shm/*, then start it again (or mask dev-shm-cacheagent.mount to keep it)"
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload
		if systemctl is-active --quiet cacheagent; then
			echo "   cacheagent is running the old binary: systemctl restart cacheagent"
		fi
	fi
fi
echo "== done: edit $confdir/cacheagent.yaml, then systemctl enable --now cacheagent"
