#!/bin/bash
# The jailed VMM has namespaces of its own (common/vmm.c, security review
# finding 2): network (loopback only, or the session's netns when it has
# egress), IPC, UTS, PID (it is PID 1 there) and mount; rlimits on core
# dumps, open files and file size.  After a VMM escape nothing on the host's
# network is reachable: listeners on the host's 127.0.0.1 and main address
# are probed from inside the VMM's network namespace.
. "$(dirname "$0")/lib.sh"
require_vm
[ "${SBX_JAIL:-on}" = on ] || skip_all "SBX_JAIL=$SBX_JAIL"
[ "$(id -u)" = 0 ] || skip_all "needs root (nsenter)"
command -v python3 >/dev/null && command -v nsenter >/dev/null || skip_all "needs python3 and nsenter"
L=$SBX_ROOT/var/lib/sbx/sessions

# A listener on the host's loopback and one on its main address (the
# source address of its default route), both on this machine only.
main=$(ip -4 route get 1.0.0.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$main" ] || main=$(ip -4 -o addr show scope global | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
[ -n "$main" ] || skip_all "the host has no global IPv4 address"
python3 - "$TEST_TMP/ports" "$main" <<'PY' &
import socket, sys
socks = []
for addr in ("127.0.0.1", sys.argv[2]):
    s = socket.socket()
    s.bind((addr, 0))
    s.listen(16)
    socks.append(s)
open(sys.argv[1] + ".tmp", "w").write(" ".join(str(s.getsockname()[1]) for s in socks) + "\n")
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    for s in socks:
        s.settimeout(0.2)
        try:
            c, _ = s.accept()
            c.close()
        except OSError:
            pass
PY
LPID=$!
trap 'kill $LPID 2>/dev/null; _cleanup' EXIT
for _ in $(seq 100); do [ -s "$TEST_TMP/ports" ] && break; sleep 0.05; done
read -r lport mport <"$TEST_TMP/ports"
# connect HOST PORT: 0 when a TCP connection is made within 2 s
probe='import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
except OSError as e:
    print(e, file=sys.stderr)
    sys.exit(1)'
python3 -c "$probe" 127.0.0.1 "$lport" 2>/dev/null
ok $? "the host's loopback listener answers from the host (the probe can succeed)"
python3 -c "$probe" "$main" "$mport" 2>/dev/null
ok $? "and so does the one on its main address $main"

check_vmm() { # check_vmm SESSION WHAT
	local vmm st
	vmm=$(jq -r .vmm_process.pid "$L/$1/session.json")
	for ns in net ipc uts pid mnt; do
		[ "$(readlink /proc/"$vmm"/ns/$ns)" != "$(readlink /proc/self/ns/$ns)" ]
		ok $? "$2: the VMM's $ns namespace is not the host's"
	done
	st=$(awk '$1 == "NSpid:" { print $3 }' /proc/"$vmm"/status)
	is "$st" 1 "$2: the VMM is PID 1 of its PID namespace"
	is "$(nsenter -t "$vmm" -u hostname)" sbx-vmm "$2: its hostname is not the host's"
	is "$(awk '/^Max core file size/ { print $5 " " $6 }' /proc/"$vmm"/limits)" "0 0" "$2: no core dumps"
	is "$(awk '/^Max open files/ { print $4 " " $5 }' /proc/"$vmm"/limits)" "1024 1024" "$2: at most 1024 open files"
	fs=$(awk '/^Max file size/ { print $4 }' /proc/"$vmm"/limits)
	[ "$fs" != unlimited ] && [ "$fs" -ge $((64 << 20)) ]
	ok $? "$2: a file size limit ($fs) covering its disks"
	nsenter -t "$vmm" -n python3 -c "$probe" 127.0.0.1 "$lport" 2>/dev/null
	[ $? -ne 0 ]; ok $? "$2: the host's 127.0.0.1 listener is unreachable from the VMM's netns"
	nsenter -t "$vmm" -n python3 -c "$probe" "$main" "$mport" 2>/dev/null
	[ $? -ne 0 ]; ok $? "$2: the host's $main listener is unreachable from the VMM's netns"
	nsenter -t "$vmm" -n python3 -c "$probe" 169.254.169.254 80 2>/dev/null
	[ $? -ne 0 ]; ok $? "$2: and so is 169.254.169.254"
}

a=$(sbx-create -q); ok $? "create a session without network"
vmm=$(jq -r .vmm_process.pid "$L/$a/session.json")
is "$(nsenter -t "$vmm" -n ip -o link | awk -F': ' '{ print $2 }' | tr '\n' ' ')" "lo " \
   "its VMM's network namespace has only loopback"
check_vmm "$a" "no network"
is "$(sbx-exec "$a" -- echo hi)" hi "the session runs commands"

# Snapshot and restore: the restored VMM is jailed the same way.
sbx-snapshot save "$a" snap1 >/dev/null 2>"$TEST_TMP/err"
ok $? "the session is saved as a snapshot"
b=$(sbx-create -q -s snap1 2>"$TEST_TMP/err"); ok $? "a session is restored from it"
check_vmm "$b" "restored"
is "$(sbx-exec "$b" -- echo restored)" restored "the restored session runs commands"

# With egress, the VMM is in the session's own netns instead (its TAP is
# there); the host's listeners stay out of reach.
printf 'network:\n  egress: allowlist\n  allow:\n    - {cidr: 198.51.100.0/29, ports: [80]}\n' >"$TEST_TMP/net.yaml"
c=$(sbx-create -q -p "$TEST_TMP/net.yaml"); ok $? "create a session with egress"
check_vmm "$c" "egress"
is "$(sbx-exec "$c" -- ls /sys/class/net | tr '\n' ' ')" "eth0 lo " "its guest has its NIC"

sbx-kill "$a" "$b" "$c" >/dev/null; ok $? "the sessions are destroyed"
done_testing
