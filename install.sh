#!/bin/bash
# Install sbx on a Debian 12 host: packages, build, commands under PREFIX
# (default /usr/local), the default template, then one real session end to
# end.  Idempotent; honours SBX_ROOT (state and templates go under it).
#   ./install.sh [--no-smoke]
set -euo pipefail
cd "$(dirname "$0")"
PREFIX=${PREFIX:-/usr/local}
smoke=1
for a in "$@"; do
	case $a in
	--no-smoke) smoke=0 ;;
	*) echo "usage: install.sh [--no-smoke]" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root (it installs packages)" >&2; exit 1; }

scripts/deps.sh
make -j"$(nproc)" all
make install PREFIX="$PREFIX"
templates="${SBX_ROOT:-}/var/lib/sbx/templates"
mkdir -p "$templates"
tmpl=$(scripts/build-image.sh --out "$templates" --guest-init build/guest-init --mkcpio build/tools/sbx-mkcpio)
echo "install.sh: template $tmpl" >&2

if [ "$smoke" = 1 ]; then
	export PATH="$PREFIX/bin:$PATH"
	echo "install.sh: booting a session end to end" >&2
	id=$(sbx-create)
	trap 'sbx-kill "$id"' EXIT
	echo "session:      $id"
	echo "guest kernel: $(sbx-exec "$id" -- uname -r)"
	echo "host kernel:  $(uname -r)"
	sbx-ps
	sbx-kill "$id"
	trap - EXIT
	echo "install.sh: ok: created, ran a command in, and destroyed session $id"
fi
