#!/bin/bash
# The attack on the monitor (issue 11, item 12): every agent frame the
# guest sends is parsed by the host process holding the session's agent
# socket.  After a bug in that parsing, the attacker holds that process:
# it must be no uid 0, no capability, no_new_privs, not dumpable, seccomp,
# in namespaces of its own (an empty root), its uid unable to read root's
# files on the host.
#
# The process is found from the VMM's side, not from anything the monitor
# records about itself: the VMM's end of the agent connection (a unix
# stream socket) has a peer, whose local address is agent.sock; whoever
# holds that peer socket is the process the guest talks to.
. "$(dirname "$0")/lib.sh"
require_vm
[ "${SBX_JAIL:-on}" = on ] || skip_all "SBX_JAIL=$SBX_JAIL"
[ "$(id -u)" = 0 ] || skip_all "needs root (nsenter)"
command -v ss >/dev/null && command -v nsenter >/dev/null && command -v setpriv >/dev/null ||
	skip_all "needs ss, nsenter and setpriv"
L=$SBX_ROOT/var/lib/sbx/sessions

# agent_holder VMM-PID: the pid holding the host end of its agent socket
agent_holder() {
	local vmm=$1 inodes peer pid fd
	inodes=$(for fd in /proc/"$vmm"/fd/*; do readlink "$fd"; done 2>/dev/null |
		 sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p')
	# u_str ESTAB 0 0 LOCAL LINODE PEER PINODE: the accepted end has the
	# listener's address, the VMM's end (its peer) none.  Unix sockets
	# are listed per network namespace: look in the VMM's and the host's.
	peer=$({ nsenter -t "$vmm" -n ss -xan; ss -xan; } 2>/dev/null | awk -v want=" $(echo $inodes) " '
		$5 == "agent.sock" && index(want, " " $8 " ") { print $6; exit }')
	[ -n "$peer" ] || return 1
	for fd in /proc/[0-9]*/fd/*; do
		[ "$(readlink "$fd" 2>/dev/null)" = "socket:[$peer]" ] || continue
		pid=${fd#/proc/}; echo "${pid%%/*}"; return 0
	done
	return 1
}

a=$(sbx-create -q); ok $? "create a session"
is "$(sbx-exec "$a" -- echo hi)" hi "it runs commands"
vmm=$(jq -r .vmm_process.pid "$L/$a/session.json")
h=$(agent_holder "$vmm")
ok $? "the process holding the host end of the agent socket is found (${h:-none})"
[ -n "$h" ] || { sbx-kill "$a" >/dev/null; done_testing; }
diag "the VMM is $vmm, the agent socket's holder $h ($(cat /proc/"$h"/comm))"
st=/proc/$h/status
diag "$(grep -E '^(Name|Uid|Gid|Groups|CapEff|CapPrm|CapBnd|CapInh|CapAmb|NoNewPrivs|Seccomp):' "$st" | tr '\t' ' ' | tr '\n' ';')"
read -r _ ru eu su fu < <(grep '^Uid:' "$st")
[ "${ru:-0}" != 0 ] && [ "${eu:-0}" != 0 ] && [ "${su:-0}" != 0 ] && [ "${fu:-0}" != 0 ]
ok $? "its uids (real, effective, saved, fs: ${ru:-} ${eu:-} ${su:-} ${fu:-}) are not root"
read -r _ rg eg sg fg < <(grep '^Gid:' "$st")
[ "${rg:-0}" != 0 ] && [ "${eg:-0}" != 0 ] && [ "${sg:-0}" != 0 ] && [ "${fg:-0}" != 0 ]
ok $? "nor its gids"
is "$(awk '/^Groups:/ { $1 = ""; print $0 }' "$st" | tr -d ' ')" "" "it has no supplementary groups"
for c in CapEff CapPrm CapInh CapBnd CapAmb; do
	is "$(awk -v c="$c:" '$1 == c { print $2 }' "$st")" 0000000000000000 "$c is empty"
done
is "$(awk '/^NoNewPrivs:/ { print $2 }' "$st")" 1 "no_new_privs is set"
is "$(awk '/^Seccomp:/ { print $2 }' "$st")" 2 "it runs under a seccomp filter"
# It holds the session's secrets in memory: no core dump may write them
# out.  Not dumpable: its /proc files belong to root, not to its uid, so
# another session's process of the same kind could not ptrace it or read
# its memory (seen only once its uid is not root).
is "$(awk '/^Max core file size/ { print $5 " " $6 }' /proc/"$h"/limits)" "0 0" "it makes no core dumps"
[ "$(stat -c %u /proc/"$h"/environ)" = 0 ] && [ "${eu:-0}" != 0 ]
ok $? "it is not dumpable (its /proc files are root's, not its uid's)"
for ns in mnt net ipc uts; do
	[ "$(readlink /proc/"$h"/ns/$ns)" != "$(readlink /proc/self/ns/$ns)" ]
	ok $? "its $ns namespace is not the host's"
done
is "$(nsenter -t "$h" -n ip -o link 2>/dev/null | awk -F': ' '{ print $2 }' | tr '\n' ' ')" "lo " \
   "its network namespace has only loopback"
# Its mount namespace holds no host path (an empty read-only root, the
# host's detached) and keeps no host mount alive (another test's paths
# would show in its mountinfo, and their mounts stay busy).
is "$(ls -A /proc/"$h"/root/ 2>&1)" "" "its root is empty"
grep -q ' / / ro,' /proc/"$h"/mountinfo; ok $? "and read-only"
is "$(wc -l </proc/"$h"/mountinfo)" 1 "it holds no other mount"
# The audit trail: root's, 0600.  Even in the host's namespaces, its uid
# can neither read nor append to it, nor write the session's record.
audit=$SBX_ROOT/var/lib/sbx/audit.log
[ -s "$audit" ]; ok $? "the audit trail exists on the host"
as_it() { setpriv --reuid="${eu:-0}" --regid="${eg:-0}" --clear-groups "$@"; }
as_it cat "$audit" >/dev/null 2>&1
[ $? -ne 0 ]; ok $? "its uid cannot read the audit trail"
as_it sh -c "echo x >>'$audit'" 2>/dev/null
[ $? -ne 0 ]; ok $? "nor append to it"
as_it sh -c "echo x >'$L/$a/session.json'" 2>/dev/null
[ $? -ne 0 ]; ok $? "nor write the session's record"
as_it cat /etc/shadow >/dev/null 2>&1
[ $? -ne 0 ]; ok $? "nor read /etc/shadow"

sbx-kill "$a" >/dev/null; ok $? "the session is destroyed"

# ---- a session with a NIC: split too, across a suspend and resume ----
# Its network is rebuilt at a resume by the privileged half (a new
# namespace, TAP and proxy, from its own record and policy.json); the
# unprivileged half only gets the proxy's log pipe and pidfd.  The test
# host is a network namespace of 198.51.100.0/24 (tests/lib.sh) that
# SBX_HOSTS_FILE names web.example.test; nothing is sent anywhere else.
command -v ip >/dev/null && command -v python3 >/dev/null || { skip "needs ip and python3" 1; done_testing; }
test_web_host psep 1 "hello from the test host"
export SBX_HOSTS_FILE=$TEST_TMP/hosts
echo "$WEB web.example.test" >"$SBX_HOSTS_FILE"
printf 'network:\n  egress: allowlist\n  allow:\n    - {domain: web.example.test, ports: [80]}\n' >"$TEST_TMP/net.yaml"
fetch() { sbx-exec --timeout 60s "$1" -- wget -q -O- http://web.example.test/ 2>&1; }
uids() { awk '/^Uid:/ { print $2, $3, $4, $5 }' /proc/"$1"/status 2>/dev/null; }
ppid_of() { awk '/^PPid:/ { print $2 }' /proc/"$1"/status 2>/dev/null; }
# unpriv PID WHAT: the checks above, in short, for the half the guest talks to
unpriv() {
	local st=/proc/$1/status
	[ -n "$1" ] && [ -n "$(uids "$1")" ] && ! uids "$1" | grep -qw 0 &&
		[ "$(awk '$1 == "CapEff:" { print $2 }' "$st")" = 0000000000000000 ] &&
		[ "$(awk '$1 == "CapPrm:" { print $2 }' "$st")" = 0000000000000000 ] &&
		[ "$(awk '/^NoNewPrivs:/ { print $2 }' "$st")" = 1 ] && [ "$(awk '/^Seccomp:/ { print $2 }' "$st")" = 2 ] &&
		[ "$(readlink /proc/"$1"/ns/net)" != "$(readlink /proc/self/ns/net)" ]
	ok $? "$2 (pid ${1:-none}, uids $(uids "${1:-0}"))"
}
n=$(sbx-create -q -p "$TEST_TMP/net.yaml"); ok $? "a session with network.egress: allowlist"
is "$(fetch "$n")" "hello from the test host" "it reaches the test host through its proxy"
vmm=$(jq -r .vmm_process.pid "$L/$n/session.json")
mon=$(jq -r .monitor.pid "$L/$n/session.json")
h=$(agent_holder "$vmm")
unpriv "$h" "the half of its monitor holding the agent socket is unprivileged"
[ "$h" != "$mon" ] && [ "$(ppid_of "$h")" = "$mon" ]
ok $? "it is the child of the monitor the record names ($mon)"
p1=$(jq -r .proxy_process.pid "$L/$n/session.json")
is "$(ppid_of "$p1")" "$mon" "the proxy is the privileged half's child"
sbx-snapshot suspend "$n"; ok $? "the session is suspended"
is "$(sbx-ps --json "$n" | jq -r '.[0].state')" suspended "it says so"
! kill -0 "$p1" 2>/dev/null; ok $? "its proxy is gone"
is "$(jq -r '.proxy_process.pid // 0' "$L/$n/session.json")" 0 "and its record forgets it"
kill -0 "$h" 2>/dev/null; ok $? "the unprivileged half stays"
is "$(fetch "$n")" "hello from the test host" "an exec resumes it and it reaches the test host again"
diag "QEMU/TCG, split, with egress: suspend_ms $(grep '"session.suspend"' "$audit" | grep "\"$n\"" | tail -1 | jq .suspend_ms)," \
	"resume_ms $(jq -r .lifecycle.resume_ms "$L/$n/session.json")"
p2=$(jq -r .proxy_process.pid "$L/$n/session.json")
[ "$p2" != "$p1" ] && [ "$(tr '\0' ' ' </proc/"$p2"/cmdline 2>/dev/null | cut -d' ' -f1-3)" = "sbx-proxy --id $n" ]
ok $? "through a new proxy, which its record names ($p2)"
is "$(ppid_of "$p2")" "$mon" "started by the privileged half"
h2=$(agent_holder "$(jq -r .vmm_process.pid "$L/$n/session.json")")
is "$h2" "$h" "the resumed VMM's agent socket is held by the same unprivileged half"
unpriv "$h2" "which is unprivileged still"
ls -l /proc/"$h"/fd 2>/dev/null | grep -q '/proxy\.log$'
ok $? "it holds proxy.log, kept across the resume"
is "$(jq -r 'select(.proto == "tcp" and .domain == "web.example.test" and .verdict == "allow") | .verdict' "$L/$n/net.log" | wc -l)" 2 \
   "both connections are in net.log"
# The new proxy's pidfd is the unprivileged half's to watch: its end is
# seen (the privileged half reaps it and says so).
kill -9 "$p2"
for _ in $(seq 100); do [ -n "$(jq -r '.net.lost // empty' "$L/$n/session.json")" ] && break; sleep 0.1; done
like "$(jq -r '.net.lost // empty' "$L/$n/session.json")" "^proxy killed by signal 9$" \
   "the new proxy's end is seen through the pidfd handed over (net.lost)"
sbx-kill "$n" >/dev/null; ok $? "the session is destroyed"
[ ! -e "$L/$n" ]; ok $? "and nothing of it is left"
done_testing
