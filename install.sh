#!/bin/bash
# Install sbx on a Debian 12 host: packages (Cloud Hypervisor too where the
# archive has it), build, commands under PREFIX
# (default /usr/local), the default, python and base templates (base:
# E2B's default, for sbx-serve), then one real
# session end to end.  Idempotent; honours SBX_ROOT (state and templates go
# under it).
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
# Cloud Hypervisor, the VMM sessions use where the KVM probe passes, from
# the host's own archive where it has it (Debian 13 does); QEMU otherwise.
if apt-cache policy cloud-hypervisor 2>/dev/null | grep -q 'Candidate: [^(]'; then
	dpkg-query -W -f='${Status}' cloud-hypervisor 2>/dev/null | grep -q 'install ok installed' ||
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cloud-hypervisor >&2
	echo "install.sh: cloud-hypervisor $(dpkg-query -W -f='${Version}' cloud-hypervisor) installed:" \
		"sessions use it where KVM works, QEMU elsewhere" >&2
else
	echo "install.sh: no cloud-hypervisor package in this host's archive (Debian 12 has none):" \
		"sessions run on QEMU" >&2
fi
make -j"$(nproc)" all
make install PREFIX="$PREFIX"
# make install puts the bash completion (completions/sbx.bash) where
# bash-completion loads it from in new shells.
echo "install.sh: commands in $PREFIX/bin, bash completion for them in new shells" >&2
# The templates, built by the installed sbx-template from their specs
# (under SBX_ROOT's templates directory; the build is audited there).
# python: debootstrap and apt, a few minutes the first time, seconds once
# cached under /var/cache/sbx; base (over python: Node.js, npm, git, curl
# for code written for E2B, sbx-serve(8)): a few minutes more.
for t in default python base; do
	tmpl=$("$PREFIX/bin/sbx-template" build "$t" -f "templates/$t.yaml")
	echo "install.sh: template $tmpl" >&2
done
# The host configuration: a warm pool of one default session (unless there
# is an sbx.yaml already), filled now, so the first sbx-create is a claim.
scripts/default-sbx-yaml.sh
"$PREFIX/bin/sbx-gc" --pool-only >/dev/null ||
	echo "install.sh: warning: the warm pool could not be filled now (sbx-gc will retry)" >&2

if [ "$smoke" = 1 ]; then
	export PATH="$PREFIX/bin:$PATH"
	echo "install.sh: booting a session end to end" >&2
	j=$(sbx-create --json)
	id=$(jq -r .session <<<"$j")
	trap 'sbx-kill "$id"' EXIT
	echo "session:      $id ($(jq -r 'if .from_pool then "claimed from the warm pool in \(.claim_ms) ms" else "booted" end' <<<"$j"))"
	echo "guest kernel: $(sbx-exec "$id" -- uname -r)"
	echo "host kernel:  $(uname -r)"
	sbx-ps
	sbx-kill "$id"
	trap - EXIT
	echo "install.sh: ok: created, ran a command in, and destroyed session $id"
fi
