#!/bin/bash
# The proxy's halves, seen from the host (security review r3, N4): what
# each runs as and what it can reach, on a live session with egress and
# the package cache, beside a second session whose monitor.sock is the
# prize.
#  - Neither half has a capability; the network half is not uid 0.
#  - Neither sees /run (every session's monitor.sock): their mount table
#    has none, and no path into RUN resolves in their root.
#  - Neither holds a RUN directory or LIB/sessions open; the network half
#    holds nothing of LIB but its net.log.
#  - Neither has a /proc (the host's shows every process's command line):
#    the package cache names its downloads by rename.
#  - Known gaps, as TODO tests until they are fixed: the privileged half
#    is still uid 0 and still holds the LIB directory (the audit trail,
#    which lives in LIB itself, and the shared package cache need it).
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
command -v nsenter >/dev/null || skip_all "needs nsenter"
S=$SBX_ROOT/var/lib/sbx/sessions
L=$SBX_ROOT/var/lib/sbx
R=$SBX_ROOT/run/sbx
todo() { # todo COND-EXIT-STATUS DESCRIPTION REASON: a known gap, reported, not failed
	_n=$((_n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $_n - $2 # TODO $3"; else echo "not ok $_n - $2 # TODO $3"; fi
}
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
packages:
  mode: allowlist
  registries:
    - {type: pypi, url: "https://pypi.example.test/simple/"}
EOF
other=$(sbx-create -q)
ok $? "a session without network, whose monitor.sock is the prize"
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with egress and the package cache"
priv=$(jq -r .proxy_process.pid "$S/$id/session.json")
net=$(cat /proc/"$priv"/task/*/children | tr -d ' ')
[ -n "$priv" ] && [ -n "$net" ]
ok $? "its proxy's privileged half ($priv) and network half ($net)"
[ -S "$R/sessions/$other/monitor.sock" ]
ok $? "the other session's monitor.sock is there on the host"

field() { awk -v k="$2:" '$1 == k { print $2 }' /proc/"$1"/status; }
for half in priv net; do
	p=${!half}
	is "$(field "$p" CapEff) $(field "$p" CapPrm) $(field "$p" CapBnd) $(field "$p" CapAmb)" \
		"0000000000000000 0000000000000000 0000000000000000 0000000000000000" "$half: no capabilities"
	is "$(field "$p" NoNewPrivs)" 1 "$half: no_new_privs"
	is "$(awk '$5 == "/run" || $5 ~ "^/run/sbx" { print $5 }' /proc/"$p"/mountinfo)" "" \
		"$half: no /run in its mount table"
	[ ! -e /proc/"$p"/root/run/sbx ] && [ ! -e /proc/"$p"/root"$R" ]
	ok $? "$half: neither /run/sbx nor $R resolves in its root"
	[ -z "$(nsenter -t "$p" -m -- /bin/ls -A /run 2>/dev/null)" ]
	ok $? "$half: a process in its mount namespace finds nothing in /run"
	[ -z "$(awk '$5 == "/proc" || $9 == "proc" { print $5 }' /proc/"$p"/mountinfo)" ]
	ok $? "$half: no /proc in its mount table"
	fds=$(for f in /proc/"$p"/fd/*; do readlink "$f"; done)
	is "$(printf '%s\n' "$fds" | grep -c -e "^$SBX_ROOT/run" -e "^$S\$")" 0 \
		"$half: no RUN directory, nor LIB/sessions, among its fds"
done
[ "$(awk '/^Uid:/ { print $2 }' /proc/"$net"/status)" -gt 65535 ]
ok $? "net: not root, an unprivileged uid of its own"
is "$(for f in /proc/"$net"/fd/*; do readlink "$f"; done | grep "^$L" | grep -v "/net.log\$")" "" \
	"net: of LIB, only its net.log"
[ "$(awk '/^Uid:/ { print $2 }' /proc/"$priv"/status)" -ne 0 ]
todo $? "priv: not uid 0" "the audit trail lives in LIB itself; a third, root-only writer is the next step"
for f in /proc/"$priv"/fd/*; do readlink "$f"; done | grep -qx "$L"
todo $((! $?)) "priv: holds no LIB-wide directory" "the audit trail and the shared package cache"

# The proxy still works behind all that: a DNS answer through it.
echo "198.51.100.250 web.example.test" >"$TEST_TMP/hosts"
sbx-kill "$id" >/dev/null
id=$(SBX_HOSTS_FILE=$TEST_TMP/hosts sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with the test hosts file"
out=$(sbx-exec "$id" -- nslookup -type=a web.example.test 10.0.2.2 2>&1)
like "$out" "198\.51\.100\.250" "its proxy resolves an allowed name"
done_testing
