#!/bin/bash
# Suspend to disk and resume on demand (issue 15.3, 15.4): a suspended
# session has no VMM (no RAM, no CPU) and is the same session when an exec
# wakes it: ID, files, a background exec still running, exec records;
# --no-resume refuses with 4; sbx-snapshot resume; the idle policy suspends
# an idle session; a monitor killed -9 at three points of a suspend leaves
# a crashed session sbx-gc reclaims whole, never half of one; a full disk
# leaves the session running and says why; a session with a NIC is
# suspended with its namespace and proxy ended and reaches a test host
# through new ones after the resume, and is idle when its proxy has no
# connection open (and says so); a resume needs room on the host.
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
A=$L/audit.log
rec() { jq -r "$2" "$L/sessions/$1/session.json"; }
state() { sbx-ps --json "$1" | jq -r '.[0].state'; }
# wait_state ID STATE [SECONDS]: until sbx-ps says so, at most that long.
wait_state() {
	local i
	for i in $(seq $((${3:-60} * 10))); do
		[ "$(state "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
count() { sbx-exec "$1" -- sh -c 'wc -l </tmp/count'; }

# --- suspend, and an exec that wakes it --------------------------------------
id=$(sbx-create -q); ok $? "a session is created"
e=$(sbx-exec -d "$id" -- sh -c 'while :; do echo x >>/tmp/count; sleep 0.2; done')
ok $? "with a background exec ($e)"
sbx-exec "$id" -- sh -c 'echo kept >/home/user/file'; ok $? "and a file on its disk"
n1=$(count "$id")
vmm=$(rec "$id" .vmm_process.pid)
kill -0 "$vmm" 2>/dev/null; ok $? "its VMM runs (pid $vmm)"
out=$(sbx-snapshot suspend --json "$id"); ok $? "sbx-snapshot suspend exits 0"
is "$(jq -r .state <<<"$out")" suspended "and says suspended (--json)"
is "$(state "$id")" suspended "sbx-ps shows it suspended"
like "$(sbx-ps --no-headers "$id")" "^$id	suspended	" "in the text listing too"
! kill -0 "$vmm" 2>/dev/null; ok $? "its VMM is gone: no guest RAM, no CPU"
is "$(rec "$id" .vmm_process.pid)" 0 "the record has no VMM"
img=$L/sessions/$id/suspend/memory.zst
[ -s "$img" ]; ok $? "the memory image is in the session's directory"
is "$(stat -c %a "$L/sessions/$id/suspend") $(stat -c %a "$img")" "700 600" "directory 0700, image 0600"
mon=$(rec "$id" .monitor.pid)
diag "per suspended session: memory image $(du -k "$img" | cut -f1) KiB on disk, disk $(du -k "$L/sessions/$id/scratch.img" | cut -f1) KiB, monitor RSS $(ps -o rss= -p "$mon") KiB"
sbx-snapshot suspend "$id"; ok $? "suspending it again is a no-op"
grep -q '"type":"session.suspend".*"ok":true' "$A"; ok $? "the suspend is audited"

sbx-exec --no-resume "$id" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 4 "sbx-exec --no-resume on a suspended session exits 4"
like "$(cat "$TEST_TMP/err")" "is suspended and --no-resume" "saying why"
sbx-cp --no-resume "$id:/home/user/file" - >/dev/null 2>&1; is "$?" 4 "so does sbx-cp --no-resume"
is "$(state "$id")" suspended "and the session stays suspended"
sbx-exec --resume --no-resume "$id" -- true 2>/dev/null; is "$?" 2 "--resume with --no-resume is a usage error"

is "$(sbx-exec "$id" -- cat /home/user/file)" kept "a plain sbx-exec resumes it: the file is there"
is "$(state "$id")" running "it runs again"
is "$(sbx-ps --json | jq -r '.[].id' | grep -c "^$id\$")" 1 "under the same ID"
n2=$(count "$id")
[ "$n2" -ge "$n1" ]; ok $? "the background exec's output survived ($n1 -> $n2 lines)"
for i in $(seq 100); do [ "$(count "$id")" -gt "$n2" ] && break; sleep 0.1; done
[ "$(count "$id")" -gt "$n2" ]; ok $? "and it still runs after the resume"
is "$(sbx-ps --execs "$id" --json | jq -r ".[] | select(.exec == \"$e\") | .state")" running \
	"sbx-ps --execs still lists it running"
[ ! -e "$L/sessions/$id/suspend" ]; ok $? "the image is gone once resumed"
grep -q '"type":"session.resume".*"from":"disk"' "$A"; ok $? "the resume is audited"
j=$(sbx-ps --json "$id")
is "$(jq -r '.[0].suspends' <<<"$j")" 1 "sbx-ps --json counts one suspend"
awk "BEGIN{exit !($(jq '.[0].suspended_s' <<<"$j") > 0 && $(jq '.[0].running_s' <<<"$j") > 0)}"
ok $? "and splits running and suspended seconds ($(jq -c '.[0] | [.running_s, .paused_s, .suspended_s]' <<<"$j"))"
sbx-ps --prometheus "$id" | grep -q "^sbx_session_suspended_seconds_total{session=\"$id\""
ok $? "the Prometheus output has suspended seconds"
sbx-kill --exec "$e" "$id"
sbx-exec --wait "$e" --timeout 30 --json "$id" >"$TEST_TMP/res"
is "$(jq -r '.suspends' "$TEST_TMP/res")" 1 "the background exec's record says it ran across one suspend"
awk "BEGIN{exit !($(jq '.suspended_ms' "$TEST_TMP/res") > 0)}"; ok $? "and for how long ($(jq .suspended_ms "$TEST_TMP/res") ms)"
is "$(jq -r '.suspends' "$L/sessions/$id/execs/e2/result.json")" 0 "an exec that ran before it says none"
top=$(cd "$(dirname "$0")/.." && pwd)
schema() { python3 "$top/tests/tools/json-schema-check.py" validate --strict ${2:-} "$top/docs/schema" "$1"; }
schema exec-result.json <"$TEST_TMP/res"; ok $? "the exec's record is valid against exec-result.json"
sbx-ps --json "$id" | schema ps.json; ok $? "sbx-ps --json is valid against ps.json"
sbx-snapshot suspend --json "$id" | schema snapshot-state.json; ok $? "sbx-snapshot suspend --json against snapshot-state.json"
sbx-exec "$id" -- true

# --- sbx-snapshot resume, from paused and from suspended ------------------------
sbx-snapshot pause "$id" && sbx-snapshot suspend "$id"; ok $? "a paused session can be suspended"
is "$(sbx-snapshot resume --json "$id" | jq -r .state)" running "sbx-snapshot resume wakes it"
is "$(sbx-exec "$id" -- cat /home/user/file)" kept "with its files"
is "$(rec "$id" .lifecycle.suspends)" 3 "the record counts three suspends"
sbx-snapshot save "$id" nope >/dev/null 2>&1; ok $? "a resumed session can be saved as a snapshot"
sbx-snapshot suspend "$id" >/dev/null
sbx-snapshot save "$id" nope2 2>"$TEST_TMP/err"; is "$?" 5 "a suspended one cannot (5)"
like "$(cat "$TEST_TMP/err")" "is suspended: resume it first" "saying so"
sbx-snapshot suspend nosuch 2>/dev/null; is "$?" 4 "suspending a session that does not exist is 4"
sbx-snapshot suspend 2>/dev/null; is "$?" 2 "suspend without a session is a usage error"
sbx-snapshot suspend "../$id" 2>/dev/null; is "$?" 3 "a malformed ID is 3"
# --attach follows an exec's files: it wakes a suspended session first, so
# the exec it follows runs on; --no-resume is 4 there too.
ea=$(sbx-exec -d "$id" -- sh -c 'sleep 1; echo attached-done')
sbx-snapshot suspend "$id" >/dev/null
sbx-exec --attach "$ea" --no-resume "$id" >/dev/null 2>&1; is "$?" 4 "sbx-exec --attach --no-resume on a suspended session exits 4"
out=$(timeout 120 sbx-exec --attach "$ea" "$id"); rc=$?
is "$rc $out" "0 attached-done" "sbx-exec --attach resumes it and follows the exec to its end"
# The client killed while its suspend runs: the monitor carries on, and
# the session is either suspended or running, whole, and answers.
sbx-snapshot resume "$id" >/dev/null
sbx-snapshot suspend "$id" & sp=$!
sleep 0.1; kill -9 "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
for i in $(seq 100); do s=$(state "$id"); [ "$s" = suspended ] || [ "$s" = running ] && break; sleep 0.1; done
like "$(state "$id")" '^(suspended|running)$' "a suspend whose client was killed leaves the session whole ($(state "$id"))"
is "$(sbx-exec "$id" -- cat /home/user/file)" kept "and it answers"
sbx-snapshot suspend "$id" >/dev/null
sbx-kill "$id"; ok $? "sbx-kill ends a suspended session"
[ ! -d "$L/sessions/$id" ]; ok $? "and removes everything, its image too"

# --- the idle policy ---------------------------------------------------------------
cat >"$TEST_TMP/idle.yaml" <<'EOF'
lifecycle: {idle_pause: 1s, idle_suspend: 3s, ttl_counts: running}
EOF
id=$(sbx-create -q -p "$TEST_TMP/idle.yaml"); ok $? "a session with lifecycle: {idle_pause: 1s, idle_suspend: 3s}"
sbx-exec "$id" -- sh -c 'echo idle >/tmp/i'
wait_state "$id" suspended 60; ok $? "left idle, the policy suspends it (paused first: $(rec "$id" .lifecycle.paused_ns) ns)"
grep -q "\"type\":\"session.suspend\".*\"reason\":\"idle\"" "$A"; ok $? "audited as an idle suspend"
grep -q "\"type\":\"session.pause\".*\"$id\"" "$A"; ok $? "after an idle pause"
is "$(sbx-exec "$id" -- cat /tmp/i)" idle "an exec resumes it transparently"
j=$(sbx-ps --json "$id")
ttl=$(jq '.[0].ttl_left_s' <<<"$j") run=$(jq '.[0].running_s' <<<"$j") idle=$(jq '.[0].paused_s + .[0].suspended_s' <<<"$j")
awk "BEGIN{exit !($idle > 0 && $ttl + $run >= 3598 && $ttl + $run <= 3601)}"
ok $? "ttl_counts: running: only running time is taken from the TTL ($ttl s left, $run s run, $idle s idle)"
long=$(sbx-exec -d "$id" -- sleep 8)
sleep 5
is "$(state "$id")" running "a running exec keeps it from being idle"
sbx-exec --wait "$long" --timeout 30 "$id" >/dev/null
sbx-kill "$id" >/dev/null

# --- a session with a NIC: suspended, its network rebuilt at resume ------------
test_web_host susp 1 "hello from the test host"
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {cidr: $WEB/32, ports: [80]}
EOF
# On a failure, what the proxy logged and the host's 198.51.100 links (a
# subnet on a link is on the proxy's deny list) go to stderr.
fetch() {
	local o
	o=$(sbx-exec --timeout 60s "$1" -- wget -q -O- "http://$WEB/" 2>&1)
	[ "$o" = "hello from the test host" ] || net_diag "$L/sessions/$1"
	echo "$o"
}
id=$(sbx-create -q -p "$TEST_TMP/net.yaml"); ok $? "a session with a network device"
is "$(fetch "$id")" "hello from the test host" "it reaches the test host through its proxy"
proxy=$(rec "$id" .proxy_process.pid) vmm=$(rec "$id" .vmm_process.pid)
netns=$(readlink "/proc/$vmm/ns/net")
# Held open, so the kernel cannot give its inode number to the new one
# (nsfs numbers are reused once a namespace is freed, which now happens as
# soon as the proxy has stopped).
exec {oldns}<"/proc/$vmm/ns/net"
sbx-snapshot suspend "$id"; ok $? "sbx-snapshot suspend suspends it"
is "$(state "$id")" suspended "it is suspended"
! kill -0 "$proxy" 2>/dev/null; ok $? "its proxy is gone (pid $proxy)"
! kill -0 "$vmm" 2>/dev/null; ok $? "and its VMM, and with them its network namespace"
is "$(rec "$id" .proxy_process.pid)" 0 "the record names no proxy"
is "$(fetch "$id")" "hello from the test host" "an exec wakes it and it reaches the test host again"
proxy2=$(rec "$id" .proxy_process.pid) vmm2=$(rec "$id" .vmm_process.pid)
kill -0 "$proxy2" 2>/dev/null && [ "$proxy2" != "$proxy" ]; ok $? "through a new proxy (pid $proxy2)"
[ "$(readlink "/proc/$vmm2/ns/net")" != "$netns" ]; ok $? "in a new network namespace"
exec {oldns}<&-
is "$(sbx-exec "$id" -- cat /sys/class/net/eth0/address)" "$(rec "$id" .net.mac)" "with the same NIC and MAC"
is "$(grep -c "\"address\":\"$WEB\".*\"verdict\":\"allow\"" "$L/sessions/$id/net.log")" 2 \
   "net.log has both connections, before and after"
sbx-snapshot suspend "$id" && sbx-snapshot resume "$id" >/dev/null; ok $? "suspend and sbx-snapshot resume again"
is "$(fetch "$id")" "hello from the test host" "the network works after that resume too"
proxy3=$(rec "$id" .proxy_process.pid)
sbx-kill "$id" >/dev/null
! kill -0 "$proxy3" 2>/dev/null; ok $? "sbx-kill ends the proxy"
# A resume whose network cannot be rebuilt (here: no sbx-proxy where the
# session's monitor looks) fails saying why and leaves it suspended, image
# and all; once it can, the resume works.
X=$TEST_TMP/libexec-susp
mkdir -p "$X" && cp "$SBX_BUILD/libexec/sbx/sbx-monitor" "$SBX_BUILD/libexec/sbx/sbx-proxy" "$X/"
id=$(SBX_LIBEXEC=$X sbx-create -q -p "$TEST_TMP/net.yaml"); ok $? "a session with a NIC whose monitor runs from a copy"
sbx-snapshot suspend "$id"; ok $? "suspended"
mv "$X/sbx-proxy" "$X/sbx-proxy.away"
sbx-exec "$id" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 125 "an exec whose resume cannot start the proxy fails (125)"
like "$(cat "$TEST_TMP/err")" "cannot resume session $id: .*cannot find sbx-proxy" "saying why"
is "$(state "$id")" suspended "the session stays suspended"
[ -s "$L/sessions/$id/suspend/memory.zst" ]; ok $? "with its image"
is "$(rec "$id" .proxy_process.pid)" 0 "and no proxy in its record"
mv "$X/sbx-proxy.away" "$X/sbx-proxy"
is "$(fetch "$id")" "hello from the test host" "with the proxy back, an exec resumes it and reaches the test host"
sbx-kill "$id" >/dev/null

# --- the idle policy and a session with a NIC: busy while its proxy has a connection
# A server on the test host that says hi and, once the guest's side of the
# connection has ended (the proxy passes its FIN on), holds it open until
# told: a connection open through the proxy with no exec running.
cat >"$TEST_TMP/hold.py" <<'EOF'
import os, socket, sys, time
ip, d = sys.argv[1], sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, 81))
s.listen(4)
open(d + "/listening", "w").close()
while True:
    c, _ = s.accept()
    c.sendall(b"hi\n")
    while c.recv(4096):
        pass
    open(d + "/halfclosed", "w").close()
    while not os.path.exists(d + "/release"):
        time.sleep(0.05)
    c.close()
EOF
ip netns exec "$NET_NS" python3 "$TEST_TMP/hold.py" "$WEB" "$TEST_TMP" >"$TEST_TMP/hold.log" 2>&1 &
HOLDPID=$!
trap 'kill "$WEBPID" "$HOLDPID" 2>/dev/null; _cleanup' EXIT
for i in $(seq 100); do [ -e "$TEST_TMP/listening" ] && break; sleep 0.1; done
cat >"$TEST_TMP/netidle.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {cidr: $WEB/32, ports: [80, 81]}
lifecycle: {idle_pause: 1s}
EOF
pauses() { jq -c 'select(.type == "session.pause" and .session == "'"$1"'")' "$A" | wc -l; }
id=$(sbx-create -q -p "$TEST_TMP/netidle.yaml"); ok $? "a session with a NIC and idle_pause: 1s"
is "$(fetch "$id")" "hello from the test host" "it reaches the test host"
wait_state "$id" paused 60; ok $? "with no connection open through its proxy, the idle policy pauses it"
is "$(sbx-exec "$id" -- sh -c "timeout 3 nc $WEB 81")" hi "an exec opens a connection and ends, its side closed"
for i in $(seq 300); do [ -e "$TEST_TMP/halfclosed" ] && break; sleep 0.1; done
[ -e "$TEST_TMP/halfclosed" ]; ok $? "the server holds the connection open (the proxy passed the guest's end on)"
n=$(pauses "$id")
sleep 3
is "$(state "$id") $(pauses "$id")" "running $n" "a connection open through the proxy keeps the session from being idle"
touch "$TEST_TMP/release"
wait_state "$id" paused 60; ok $? "once the server closes it, the session is idle and paused"
# The proxy parses the guest's bytes: what it says is not trusted further
# than the session's own idleness.  Its pipe, written as a taken-over
# network half would (root reaches the pipe through /proc).
proxy=$(rec "$id" .proxy_process.pid)
printf N >"/proc/$proxy/fd/7"; ok $? "the proxy says it has a connection open"
sbx-exec "$id" -- true
n=$(pauses "$id")
sleep 3
is "$(state "$id") $(pauses "$id")" "running $n" "the session is busy while it says so"
head -c 1000000 /dev/zero | tr '\0' N >"/proc/$proxy/fd/7"
is "$(sbx-exec "$id" -- echo answers)" answers "a flood of a million bytes on the pipe: the session still answers"
printf n >"/proc/$proxy/fd/7"
wait_state "$id" paused 60; ok $? "and idle once it says none"
# The two halves' words are apart: the package cache's connection (P)
# keeps the session busy after the network half's last one closed (n).
printf NP >"/proc/$proxy/fd/7"
sbx-exec "$id" -- true
printf n >"/proc/$proxy/fd/7"
n=$(pauses "$id")
sleep 3
is "$(state "$id") $(pauses "$id")" "running $n" "the package cache's open connection keeps it busy when the network's closed"
printf p >"/proc/$proxy/fd/7"
wait_state "$id" paused 60; ok $? "and idle once the package cache says none too"
printf 'Z' >"/proc/$proxy/fd/7"
sbx-exec "$id" -- true
n=$(pauses "$id")
sleep 3
is "$(state "$id") $(pauses "$id")" "running $n" "a byte it has no meaning for: busy (the policy fails towards running)"
sbx-snapshot suspend "$id" && sbx-snapshot resume "$id" >/dev/null; ok $? "suspended and resumed: a new proxy"
wait_state "$id" paused 60; ok $? "whose word counts afresh: idle, it is paused"
sbx-kill "$id" >/dev/null
kill "$WEBPID" "$HOLDPID" 2>/dev/null
trap _cleanup EXIT

# --- a session with a workspace: it stays attached while suspended ------------
id=$(sbx-create -q --workspace susp-ws); ok $? "a session with a workspace"
sbx-exec "$id" -- sh -c 'echo kept >/workspace/f'
sbx-snapshot suspend "$id"; ok $? "is suspended"
sbx-create -q --workspace susp-ws 2>/dev/null; is "$?" 5 "its workspace stays its own meanwhile (5)"
is "$(sbx-exec "$id" -- cat /workspace/f)" kept "resumed, it has its workspace, file and all"
sbx-kill "$id" >/dev/null

# --- a session with secrets, or with a forward: refused; idle, it is paused ------
printf 'tok3n' >"$TEST_TMP/tok"
printf 'secrets:\n  - {name: TOK, from_file: %s}\nlifecycle: {idle_suspend: 1s}\n' "$TEST_TMP/tok" >"$TEST_TMP/sec.yaml"
id=$(sbx-create -q -p "$TEST_TMP/sec.yaml"); ok $? "a session with a secret (and idle_suspend: 1s)"
sbx-snapshot suspend "$id" 2>"$TEST_TMP/err"; is "$?" 5 "suspending it is refused (5)"
like "$(cat "$TEST_TMP/err")" "has secrets: it cannot be suspended" "saying why: its image would hold them on the host's disk"
for i in $(seq 100); do [ "$(state "$id")" = paused ] && break; sleep 0.1; done
is "$(state "$id")" paused "the idle policy pauses it instead"
[ ! -e "$SBX_ROOT/var/lib/sbx/sessions/$id/suspend" ]; ok $? "and writes no memory image"
# (output holding a secret's value is scrubbed: compare hashes)
is "$(sbx-exec "$id" -- sh -c 'sha256sum </run/secrets/TOK' | cut -d' ' -f1)" "$(printf tok3n | sha256sum | cut -d' ' -f1)" \
	"the next command resumes it, its secret in place"
sbx-kill "$id" >/dev/null

# --- a forward: suspended with it, and a connection to it resumes the session ---
id=$(sbx-create -q); ok $? "a session"
sbx-exec "$id" -- sh -c 'mkdir -p /tmp/www && echo woken >/tmp/www/index.html'
sbx-exec -d "$id" -- busybox httpd -f -p 127.0.0.1:8080 -h /tmp/www >/dev/null
for i in $(seq 100); do sbx-exec "$id" -- sh -c 'netstat -ltn 2>/dev/null | grep -q ":8080 "' && break; sleep 0.1; done
addr=$(sbx-port "$id" 8080); ok $? "with a server in it, forwarded ($addr)"
is "$(curl -s --max-time 20 "http://$addr/")" woken "reached through the forward"
# curl's connection counts until both its ends are closed (the guest's
# CLOSE comes back over the channel a moment after curl exits): bounded.
for i in $(seq 100); do sbx-snapshot suspend "$id" 2>"$TEST_TMP/err" && break; sleep 0.1; done
is "$(state "$id")" suspended "a session with a forward and no connection open suspends ($(head -c 100 "$TEST_TMP/err"))"
[ -d "$L/sessions/$id/suspend" ]; ok $? "... its memory image written, its server's exec in it"
is "$(curl -s --max-time 30 "http://$addr/")" woken "a connection to the forwarded port resumes it and reaches the server"
is "$(state "$id")" running "... and it runs again"
is "$(jq -c 'select(.type == "session.resume" and .session == "'"$id"'") | .reason' "$A" | tail -n 1)" '"on demand"' \
	"the trail says it was resumed on demand"
# A connection held open: the guest end of it would not survive the VMM.
python3 -c 'import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished: httpd waits
time.sleep(60)' "${addr%:*}" "${addr##*:}" &
holder=$!
# Open once the guest's server has it (the monitor accepted and forwarded it).
for i in $(seq 100); do sbx-exec "$id" -- sh -c 'netstat -tn 2>/dev/null | grep -q ":8080 .*ESTABLISHED"' && break; sleep 0.1; done
sbx-snapshot suspend "$id" 2>"$TEST_TMP/err"; is "$?" 5 "suspending it while a forwarded connection is open is refused (5)"
like "$(cat "$TEST_TMP/err")" "forwarded connection" "saying why ($(head -c 120 "$TEST_TMP/err"))"
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
for i in $(seq 100); do sbx-snapshot suspend "$id" 2>/dev/null && break; sleep 0.1; done
is "$(state "$id")" suspended "once it closes, the session suspends"
sbx-kill "$id" >/dev/null

# --- the idle policy's pause, undone by a connection to a forward ---------------
printf 'lifecycle: {idle_pause: 1s}\n' >"$TEST_TMP/ipause.yaml"
id=$(sbx-create -q -p "$TEST_TMP/ipause.yaml"); ok $? "a session with idle_pause: 1s"
addr=$(sbx-port "$id" 8081); ok $? "with a forward to a port nobody listens on ($addr)"
for i in $(seq 100); do [ "$(state "$id")" = paused ] && break; sleep 0.1; done
is "$(state "$id")" paused "idle, the policy pauses it"
curl -s --max-time 15 "http://$addr/" >/dev/null; rc=$?
[ "$rc" != 28 ]; ok $? "a connection to the forward is answered (the guest refuses it), not left hanging (curl $rc)"
# (not its state: idle again, it is paused again a second later)
is "$(jq -c 'select(.type == "session.resume" and .session == "'"$id"'")' "$A" | wc -l)" 1 \
	"... the pause undone by it (session.resume in the trail)"
sbx-kill "$id" >/dev/null

# --- a resume takes room on the host, as a create does ---------------------------
# SBX_MAX_SESSIONS=1 for the creates and so for their monitors, which
# admit the resumes.
a=$(SBX_MAX_SESSIONS=1 sbx-create -q); ok $? "with room for one session, one is created"
sbx-exec "$a" -- sh -c 'echo a >/tmp/a'
sbx-snapshot suspend "$a"
b=$(SBX_MAX_SESSIONS=1 sbx-create -q); ok $? "and with it suspended, a second: a suspended session holds no room"
sbx-snapshot resume "$a" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "resuming the first does not fit: 75"
like "$(cat "$TEST_TMP/err")" "cannot resume session $a" "saying why ($(head -c 160 "$TEST_TMP/err"))"
is "$(state "$a")" suspended "it stays suspended"
sbx-exec "$a" -- true 2>/dev/null; is "$?" 125 "an exec that would resume it fails before running (125)"
sbx-kill "$b" >/dev/null
is "$(sbx-exec "$a" -- cat /tmp/a)" a "with room again, an exec resumes it"
sbx-kill "$a" >/dev/null

# --- the monitor killed -9 during a suspend: crashed, reclaimed, never half ----------
for point in save saved recorded; do
	id=$(SBX_FAULT_SUSPEND=$point sbx-create -q); ok $? "[$point] a session whose monitor dies at '$point'"
	vmm=$(rec "$id" .vmm_process.pid)
	sbx-snapshot suspend "$id" 2>"$TEST_TMP/err"; rc=$?
	[ "$rc" -ne 0 ]; ok $? "[$point] the suspend fails ($rc: $(head -c 100 "$TEST_TMP/err"))"
	is "$(state "$id")" crashed "[$point] the session is crashed, not half suspended"
	for i in $(seq 100); do kill -0 "$vmm" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$vmm" 2>/dev/null; ok $? "[$point] its VMM went with the monitor"
	sbx-exec "$id" -- true 2>/dev/null; is "$?" 4 "[$point] an exec finds it not running (4)"
	sbx-gc --grace 0 >"$TEST_TMP/gc" 2>&1
	[ ! -e "$L/sessions/$id" ]; ok $? "[$point] sbx-gc reclaims it, image and all"
done
# With a NIC, killed once the record says suspended and before the proxy
# is stopped: the proxy goes with the monitor too (PR_SET_PDEATHSIG).
id=$(SBX_FAULT_SUSPEND=recorded sbx-create -q -p "$TEST_TMP/net.yaml"); ok $? "[recorded, NIC] a session with a NIC"
proxy=$(rec "$id" .proxy_process.pid)
sbx-snapshot suspend "$id" 2>/dev/null; [ "$?" -ne 0 ]; ok $? "[recorded, NIC] the suspend fails"
for i in $(seq 100); do kill -0 "$proxy" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$proxy" 2>/dev/null; ok $? "[recorded, NIC] its proxy went with the monitor"
is "$(state "$id")" crashed "[recorded, NIC] the session is crashed"
sbx-gc --grace 0 >"$TEST_TMP/gc" 2>&1
[ ! -e "$L/sessions/$id" ]; ok $? "[recorded, NIC] sbx-gc reclaims it"

# --- a full disk during a suspend -------------------------------------------------
# A LIB of its own on a small tmpfs, filled up to 2 MiB: the memory image
# cannot fit.
F=$TEST_TMP/full
mkdir -p "$F/var/lib/sbx"
mount -t tmpfs -o size=96m sbx-t1920 "$F/var/lib/sbx"; ok $? "a 96 MiB tmpfs for LIB"
full_cleanup() {
	ls "$F/var/lib/sbx/sessions" 2>/dev/null | SBX_ROOT=$F sbx-kill >/dev/null 2>&1
	umount -l "$F/var/lib/sbx" 2>/dev/null
	SBX_ROOT=$F root_cgroups_remove
}
trap 'full_cleanup; _cleanup' EXIT
# The disk reserve (sbx.yaml's audit.reserve, t0535) would refuse the
# create on a LIB this small: this part is about a full disk, not the
# reserve.
mkdir -p "$F/etc/sbx"
printf 'audit:\n  reserve: 0\n' >"$F/etc/sbx/sbx.yaml"
id=$(SBX_ROOT=$F sbx-create -q); ok $? "a session there"
SBX_ROOT=$F sbx-exec "$id" -- sh -c 'echo before >/home/user/f'
avail=$(df -B1 --output=avail "$F/var/lib/sbx" | tail -1)
fallocate -l $((avail - (2 << 20))) "$F/var/lib/sbx/filler"; ok $? "filled to 2 MiB free"
SBX_ROOT=$F sbx-snapshot suspend "$id" 2>"$TEST_TMP/err"; rc=$?
is "$rc" 75 "the suspend fails with 75 (temporary)"
like "$(cat "$TEST_TMP/err")" "no space for the memory image.*No space left on device.*the session runs on" "saying why"
is "$(SBX_ROOT=$F sbx-ps --json "$id" | jq -r '.[0].state')" running "the session keeps running"
is "$(SBX_ROOT=$F sbx-exec "$id" -- cat /home/user/f)" before "and answers"
is "$(ls -A "$F/var/lib/sbx/sessions/$id" | grep -c suspend)" 0 "nothing half-written is left"
rm -f "$F/var/lib/sbx/filler"
SBX_ROOT=$F sbx-snapshot suspend "$id"; ok $? "with room again, the suspend works"
is "$(SBX_ROOT=$F sbx-exec "$id" -- cat /home/user/f)" before "and so does the resume"
SBX_ROOT=$F sbx-audit --jsonl | schema 'audit.json#/$defs/record' --lines
ok $? "its audit records are valid against audit.json"
like "$(SBX_ROOT=$F sbx-audit --json --type session.suspend | jq -r '.[0] | [.ok, .error] | map(tostring) | join(" ")')" \
	"^false no space for the memory image" "the failed suspend is audited with ok false and why"
full_cleanup

sbx-audit --jsonl | schema 'audit.json#/$defs/record' --lines
ok $? "every audit record (session.suspend, session.resume, ok or not) is valid against audit.json"
is "$(sbx-audit --json --type session.suspend | jq -r '[.[] | .reason + ":" + (.ok|tostring)] | unique | join(",")')" \
	"idle:true,sbx-snapshot:true" "suspends by hand and by the idle policy"

done_testing
