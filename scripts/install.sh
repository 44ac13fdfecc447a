#!/bin/sh
# Install cacheagent: the binary, the systemd units (the service and the
# huge-page tmpfs of its shm tier), the commented default config and the
# operations guide. Safe to run again (upgrades): it replaces
# the binary, the unit and the docs, but never an existing config, beside
# which it puts the new default as cacheagent.yaml.default.
#
#   scripts/install.sh                 # build ./cmd/cacheagent with go, install it
#   scripts/install.sh path/to/cacheagent
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
if [ -z "$bin" ]; then
	echo "== building cacheagent"
	CGO_ENABLED=0 go build -trimpath -o "$tmp/cacheagent" ./cmd/cacheagent
	bin=$tmp/cacheagent
fi
[ -x "$bin" ] || { echo "install.sh: $bin is not an executable" >&2; exit 1; }

echo "== installing into ${DESTDIR:-/}"
install -d "$DESTDIR$bindir" "$DESTDIR$unitdir" "$DESTDIR$docdir" "$DESTDIR$confdir"
# Replace the binary atomically: a running daemon keeps its old inode.
install -m 0755 "$bin" "$DESTDIR$bindir/.cacheagent.new"
mv -f "$DESTDIR$bindir/.cacheagent.new" "$DESTDIR$bindir/cacheagent"

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
