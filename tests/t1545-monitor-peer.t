#!/bin/bash
# Who may drive a session (security review r3, N4): monitor.sock answers
# sbx's own root only, a process of the monitor's uid (0) in its user
# namespace holding CAP_SYS_ADMIN there.  /run/sbx is root's (0700) and
# the socket 0755, so a host user cannot reach it; but uid 0 without
# capabilities can (DAC ownership), such as the proxy's privileged half,
# and with a user namespace of its own it can even have every capability
# there.  Each of them must be closed on without a HELLO, and the session
# go on for its real clients.  Both monitors are checked: one split in
# two (the unprivileged half accepts, the privileged half judges) and
# one that is not (SBX_JAIL=off).
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
command -v setpriv >/dev/null && command -v unshare >/dev/null && [ -x /usr/bin/python3 ] ||
	skip_all "needs setpriv, unshare and /usr/bin/python3"

# peek.py SOCKET: what the monitor says first: HELLO; "refused: MSG" (an
# ERROR frame, then the end); closed (EOF with nothing said); or an
# error connecting.
cat >"$TEST_TMP/peek.py" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect: " + (e.strerror or str(e)))
    sys.exit(0)
buf = b""
try:
    while len(buf) < 12:
        b = s.recv(4096)
        if not b:
            break
        buf += b
except socket.timeout:
    print("timeout")
    sys.exit(0)
except OSError as e:
    print("closed" if e.errno == 104 else "recv: " + e.strerror)  # ECONNRESET: closed too
    sys.exit(0)
n, t = struct.unpack_from("<IB", buf) if len(buf) >= 12 else (0, 0)
try:  # the rest of the first frame, and whether the monitor then closes
    while len(buf) < 12 + n:
        b = s.recv(4096)
        if not b:
            break
        buf += b
    more = s.recv(4096)
except OSError:
    more = b""
if t == 1:
    print("HELLO")
elif t == 13 and not more:  # ERROR, then the end: its MSG
    p, msg, i = buf[12:12 + n], "", 0
    while i + 6 <= len(p):
        tag, ln = struct.unpack_from("<HI", p, i)
        if tag == 24:  # SBX_T_MSG
            msg = p[i + 6:i + 6 + ln].decode(errors="replace")
        i += 6 + ln
    print("refused: " + msg)
elif not buf:
    print("closed")
else:
    print("frame %d" % t)
PY
peek() { timeout 30 "$@" /usr/bin/python3 - "$sock" <"$TEST_TMP/peek.py"; }
skip_one() { _n=$((_n + 1)); echo "ok $_n # SKIP $*"; }
nocaps=(setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=-all --)

check_session() { # check_session ID WHAT
	local id=$1 what=$2
	sock=$SBX_ROOT/run/sbx/sessions/$id/monitor.sock
	is "$(peek)" HELLO "$what: root with its capabilities is greeted"
	like "$(peek "${nocaps[@]}")" "^refused: only sbx's own root may drive a session \\(process [0-9]+ does not hold CAP_SYS_ADMIN\\)$" \
		"$what: uid 0 without capabilities is refused and closed on, no HELLO"
	is "$("${nocaps[@]}" grep '^CapEff' /proc/self/status | awk '{ print $2 }')" 0000000000000000 \
		"$what: (that process has no effective capability)"
	if "${nocaps[@]}" unshare -U true 2>/dev/null; then
		like "$(peek "${nocaps[@]}" unshare -U)" "^refused: .*process [0-9]+ is in another user namespace" \
			"$what: nor uid 0 in a user namespace of its own, with every capability there"
	else
		skip_one "no user namespaces for a capless root here"
	fi
	# A host user who got past the directory's mode (CAP_DAC_OVERRIDE):
	# its uid is not the monitor's.
	like "$(peek setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=+dac_override \
		--ambient-caps=+dac_override --)" "^refused: .*peer uid 65534 is not 0" \
		"$what: uid 65534 that can reach the socket is refused"
	like "$(peek setpriv --reuid=65534 --regid=65534 --clear-groups --)" "^connect: Permission denied" \
		"$what: and without CAP_DAC_OVERRIDE it cannot connect at all"
	# sbx's own client, run capless: refused, promptly, not a hang.
	out=$(timeout 60 "${nocaps[@]}" sbx-exec "$id" -- echo should-not-run 2>&1); rc=$?
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q should-not-run <<<"$out"
	ok $? "$what: a capless sbx-exec is refused (status $rc: $out)"
	is "$(sbx-exec "$id" -- echo still)" still "$what: the session goes on for root"
	is "$(sbx-ps --json "$id" | jq -r '.[0].state')" running "$what: and is running"
}

a=$(sbx-create -q); ok $? "create a session"
check_session "$a" split
sbx-kill "$a" >/dev/null; ok $? "the session is destroyed"

b=$(SBX_JAIL=off sbx-create -q); ok $? "create a session whose monitor is not split (SBX_JAIL=off)"
check_session "$b" "not split"
sbx-kill "$b" >/dev/null; ok $? "the session is destroyed"
done_testing
