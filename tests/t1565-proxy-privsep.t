#!/bin/bash
# The proxy's processes, seen from the host (security review r3, N4): what
# each runs as and what it can reach, on a live session with egress and
# the package cache, beside a second session whose monitor.sock is the
# prize.  Three: the cache half (the recorded pid, "priv": it was the
# privileged half), the network half and the audit writer.
#  - None has a capability; neither half is uid 0: the cache half is
#    SBX_PKGCACHE_UID, the network half a uid of its own.
#  - Neither sees /run (every session's monitor.sock): their mount table
#    has none, and no path into RUN resolves in their root.
#  - Neither holds a RUN directory or LIB/sessions open; the network half
#    holds nothing of LIB but its net.log.
#  - Neither has a /proc (the host's shows every process's command line):
#    the package cache names its downloads by rename.
#  - Only the writer, root without capabilities, holds LIB (the audit
#    trail lives in LIB itself) and the session's directory, and nothing
#    of the network; the cache half holds its cache scope, packages.log
#    and net.log of LIB, and the scope is its uid's, LIB/pkgcache root's.
#  - The writer's channels (proxy/wmsg.h), driven as a compromised half
#    would: a record lands only as this session's, of the types that half
#    may send; malformed, unknown, oversized and too many messages are
#    refused, counted in net.totals, and the writer goes on.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
command -v nsenter >/dev/null || skip_all "needs nsenter"
S=$SBX_ROOT/var/lib/sbx/sessions
L=$SBX_ROOT/var/lib/sbx
R=$SBX_ROOT/run/sbx
CACHE_UID=$((0x5b000000 + 3 * (1 << 22)))
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
# A cache scope an older sbx made, root's: handed to the cache uid at its
# first use, without following a planted link or taking over a file
# hard-linked elsewhere.
mkdir -p "$L/pkgcache/shared/meta"
echo entry >"$L/pkgcache/shared/sha256-$(printf 'a%.0s' $(seq 64))"
echo meta >"$L/pkgcache/shared/meta/x"
echo victim >"$TEST_TMP/victim"
ln -s "$TEST_TMP/victim" "$L/pkgcache/shared/link"
ln "$TEST_TMP/victim" "$L/pkgcache/shared/hard"
chmod 0755 "$L/pkgcache"
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with egress and the package cache"
is "$(stat -c %u "$L/pkgcache/shared" "$L/pkgcache/shared/meta" "$L/pkgcache/shared/meta/x" \
	"$L/pkgcache/shared/sha256-$(printf 'a%.0s' $(seq 64))" | sort -u)" "$CACHE_UID" \
	"an older, root-owned scope is handed to the cache uid at its first use"
is "$(stat -c %u "$TEST_TMP/victim")" 0 "not through a symlink or a hard link planted in it"
priv=$(jq -r .proxy_process.pid "$S/$id/session.json")
net= writer=
for k in $(cat /proc/"$priv"/task/*/children); do
	if [ "$(awk '/^Uid:/ { print $2 }' /proc/"$k"/status)" = 0 ]; then writer=$k; else net=$k; fi
done
[ -n "$priv" ] && [ -n "$net" ] && [ -n "$writer" ]
ok $? "its proxy's cache half ($priv), network half ($net) and writer ($writer)"
[ -S "$R/sessions/$other/monitor.sock" ]
ok $? "the other session's monitor.sock is there on the host"

field() { awk -v k="$2:" '$1 == k { print $2 }' /proc/"$1"/status; }
for half in priv net writer; do
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
is "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' /proc/"$priv"/status)" "$CACHE_UID $CACHE_UID $CACHE_UID $CACHE_UID" \
	"priv: not uid 0, the package cache's uid"
for f in /proc/"$priv"/fd/*; do readlink "$f"; done | grep -qx "$L"
ok $((! $?)) "priv: holds no LIB-wide directory"
is "$(for f in /proc/"$priv"/fd/*; do readlink "$f"; done | grep "^$L" |
	grep -v -e "^$L/pkgcache/shared\$" -e "^$S/$id/packages.log\$" -e "^$S/$id/net.log\$")" "" \
	"priv: of LIB, only its cache scope, packages.log and net.log"
is "$(stat -c '%u %a' "$L/pkgcache") $(stat -c '%u %a' "$L/pkgcache/shared")" "0 700 $CACHE_UID 700" \
	"LIB/pkgcache is root's, the scope the cache uid's, both 0700"
is "$(for f in /proc/"$writer"/fd/*; do readlink "$f"; done | grep "^$L" | sort | tr '\n' ' ')" "$L $S/$id " \
	"writer: of LIB, LIB itself (the trail) and the session's directory"
is "$(for f in /proc/"$writer"/fd/*; do readlink "$f"; done | grep -c '^socket:')" 2 \
	"writer: two sockets, its channels (no listener, nothing upstream)"

# ---- the writer's channels, as a compromised half drives them ----
# inject PID: take the process's channel (its one AF_UNIX SEQPACKET
# socket) with pidfd_getfd, send each argument (hex) as a message and
# print each answer (hex), one a line.
inject() {
	python3 - "$@" <<'PY'
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
pfd = os.pidfd_open(pid)
ch = None
for name in os.listdir(f"/proc/{pid}/fd"):
    if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
        continue
    fd = libc.syscall(438, pfd, int(name), 0)  # pidfd_getfd
    if fd < 0:
        continue
    s = socket.socket(fileno=fd)
    if s.family == socket.AF_UNIX and s.type == socket.SOCK_SEQPACKET:
        ch = s
        break
    s.detach(); os.close(fd)
if ch is None:
    sys.exit("no channel in %d" % pid)
ch.settimeout(10)
for arg in sys.argv[2:]:
    if arg.startswith("budget-flood:"):
        # Until the first refusal (at most n): however slow the host,
        # a second's worth comes before n runs out.
        n, refused = int(arg.split(":")[1]), 0
        for i in range(n):
            ch.send(b"\x01" + bytes(16))
            refused += ch.recv(64)[0] != 0
            if refused:
                break
        print("refused %d" % refused)
        continue
    if arg.startswith("zeros:"):
        ch.send(bytes(int(arg.split(":")[1])))
    else:
        ch.send(bytes.fromhex(arg))
    print(ch.recv(64).hex())
PY
}
hex() { printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n'; }
A=$L/audit.log
forged=$(hex "package.fetch")00$(hex '{"session":"someone-else","tenant":"mallory","package":"forged-'"$id"'"}')
is "$(inject "$priv" "$forged")" 00 "cache channel: a package.fetch record is taken"
is "$(jq -c "select(.package == \"forged-$id\") | [.type, .session, .tenant]" "$A")" \
	"[\"package.fetch\",\"$id\",null]" "and lands as this session's, its session and tenant forced"
out=$(inject "$priv" "$(hex net.connect)00$(hex '{}')" "$(hex session.create)00$(hex '{}')" fffe \
	"$(hex package.fetch)00$(hex '[1,2]')" "$(hex package.fetch)00$(hex '{"a":')" zeros:70000 \
	01ffffffffffffff7f0000000000000000 | tr '\n' ' ')
is "$(cut -d' ' -f1-6 <<<"$out")" "01 01 01 01 01 01" \
	"cache channel: another half's type, an unknown type, garbage, a non-object, broken JSON and 70000 bytes are refused"
like "$(cut -d' ' -f7 <<<"$out")" "^01" "cache channel: a budget of 2^63 bytes is refused"
is "$(jq -r .bytes "$S/$id/pkgbudget.json" 2>/dev/null || echo 0)" 0 "and nothing was charged"
is "$(inject "$net" "$(hex package.fetch)00$(hex '{}')" 01"$(printf '%032d' 0)" | tr '\n' ' ')" "01 01 " \
	"network channel: a package.fetch record and a budget operation are refused"
like "$(inject "$priv" budget-flood:200000)" "^refused [1-9]" "cache channel: a flood of budget operations is cut at the rate"
kill -0 "$writer" && kill -0 "$priv" && kill -0 "$net"
ok $? "the writer, and the halves, still run"
like "$(sbx-exec "$id" -- nslookup -type=a web.example.test 10.0.2.2 2>&1)" "REFUSED|NXDOMAIN|can't find" \
	"and the proxy still answers (a name not in the hosts file)"

# The proxy still works behind all that: a DNS answer through it.
echo "198.51.100.250 web.example.test" >"$TEST_TMP/hosts"
sbx-kill "$id" >/dev/null
refused=$(jq -c "select(.type == \"net.totals\" and .session == \"$id\") | .refused_messages" "$A")
is "$(jq -c 'del(.over_rate)' <<<"$refused")" '{"malformed":3,"not_allowed":4,"too_large":1}' \
	"at its end, net.totals counts the refused messages by why"
[ "$(jq .over_rate <<<"$refused")" -gt 0 ]
ok $? "and those over the rate"
id=$(SBX_HOSTS_FILE=$TEST_TMP/hosts sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with the test hosts file"
out=$(sbx-exec "$id" -- nslookup -type=a web.example.test 10.0.2.2 2>&1)
like "$out" "198\.51\.100\.250" "its proxy resolves an allowed name"
done_testing
