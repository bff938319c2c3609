#!/bin/bash
# The guest is an ordinary Linux machine to the programs in it (issue 17),
# on both templates, after a boot, a warm-pool claim and a snapshot
# restore: readdir and stat agree on inode numbers in every writable place
# (the root overlay has xino), /etc/services and /etc/protocols exist, the
# hostname resolves, the default locale is C.UTF-8; and on the host:
# sbx-ps --execs keeps one row per exec whatever the command, labels sbx's
# own copies, and durations in messages read as a user writes them; the
# guest's clock keeps the host's time.
. "$(dirname "$0")/lib.sh"
require_vm
command -v gcc >/dev/null || skip_all "needs gcc (a static checker for the guest)"
S=$SBX_ROOT/var/lib/sbx/sessions
top=$(cd "$(dirname "$0")/.." && pwd)
gcc -static -O2 -o "$TEST_TMP/guest-check" "$top/tests/tools/guest-check.c" 2>/dev/null
ok $? "the checker builds (static, so it runs on every template)"

# ---- the guest's clock follows the host's -------------------------------
# Under TCG the guest's TSC follows the host's, and the kernel is told to
# trust it when the host's is invariant; the monitor's pings carry the
# host's time and guest-init sets (no exec running) or slews the clock.
# The guest's reading must fall between the host's before and after the
# exec, give or take TOL ms (the channel's latency; a jiffies clock or an
# RTC-only start is off by far more).
TOL=250
clock_ok() { # clock_ok SESSION WHAT
	local b a g
	b=$(date +%s%3N); g=$(sbx-exec "$1" -- /tmp/guest-check now); a=$(date +%s%3N)
	[ -n "$g" ] && [ "$g" -ge $((b - TOL)) ] && [ "$g" -le $((a + TOL)) ]
	ok $? "$2 (host $b..$a, guest $g)"
}
# check SESSION WHAT: the guest-side checks, in one session
check() {
	local id=$1 what=$2 out
	sbx-cp "$TEST_TMP/guest-check" "$id":/tmp/ >/dev/null 2>"$TEST_TMP/err"
	ok $? "$what: the checker is copied in"
	clock_ok "$id" "$what: the guest's clock is the host's"
	sbx-exec "$id" -- sh -c 'mkdir -p /workspace/d /tmp/d && touch /workspace/d/f /tmp/d/f'
	out=$(sbx-exec "$id" -- /tmp/guest-check dino / /tmp /tmp/d /workspace /workspace/d /home/user 2>&1)
	ok $? "$what: getdents64's d_ino is stat's st_ino in /, /tmp, /workspace and /home/user"
	printf '%s\n' "$out" | grep -v ' entries$' | head -5 | sed 's/^/#   /'
	sbx-exec "$id" -- sh -c 'test -s /etc/services && test -s /etc/protocols'
	ok $? "$what: /etc/services and /etc/protocols are there"
	out=$(sbx-exec "$id" -- /tmp/guest-check services 2>&1)
	is "$out" "http 80 tcp 6" "$what: getservbyname and getprotobyname answer"
	out=$(sbx-exec "$id" -- /tmp/guest-check hostname 2>&1)
	is "$out" "$(sbx-exec "$id" -- hostname) 127.0.1.1" "$what: the hostname resolves, to 127.0.1.1"
	is "$(sbx-exec "$id" -- sh -c 'echo $LANG')" C.UTF-8 "$what: LANG is C.UTF-8 by default"
	is "$(sbx-exec -e LANG=C "$id" -- sh -c 'echo $LANG')" C "$what: and -e LANG=... overrides it"
}

for t in default python; do
	if [ $t = python ] && ! ls -d "$SBX_TEMPLATES"/python@* >/dev/null 2>&1; then
		[ -z "${SBX_REQUIRE_PYTHON:-}" ] || { ok 1 "the python template is built"; continue; }
		diag "no python template: its checks are skipped"
		continue
	fi
	a=$(sbx-create -q -t $t); ok $? "$t: a session boots"
	check "$a" "$t, booted"
	if [ $t = python ]; then
		out=$(sbx-exec "$a" -- python3 -c 'import locale, socket; print(locale.setlocale(locale.LC_ALL, ""), socket.getservbyname("https"), socket.gethostbyname(socket.gethostname()))')
		is "$out" "C.UTF-8 443 127.0.1.1" "python: the locale exists, services and the hostname resolve"
	fi
	sbx-snapshot save "$a" "conf-$t" >/dev/null 2>"$TEST_TMP/err"; ok $? "$t: saved as a snapshot"
	b=$(sbx-create -q -s "conf-$t"); ok $? "$t: restored from it"
	like "$(sbx-exec "$b" -- hostname)" "^$b\$" "$t, restored: its hostname is its own ID"
	check "$b" "$t, restored"
	sbx-kill "$a" "$b" >/dev/null
done

# A warm-pool member, claimed: renamed, and its name resolves.
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'pool:\n  templates:\n    default: {size: 1, vcpus: 1, memory: 256M}\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-gc >/dev/null; ok $? "sbx-gc fills a pool of one"
c=$(sbx-create -q); ok $? "a create claims it"
is "$(jq -r '.from_pool // false' "$S/$c/session.json")" true "it came from the pool"
check "$c" "default, claimed"
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"

# ---- on the host: the exec table --------------------------------------
sbx-exec "$c" -- sh -c 'echo one
echo two	tab' >/dev/null
printf 'x\n' >"$TEST_TMP/up.txt"
sbx-cp "$TEST_TMP/up.txt" "$c":/tmp/ >/dev/null
out=$(sbx-ps --no-headers --execs "$c")
is "$(printf '%s\n' "$out" | awk -F'\t' 'NF != 8' | wc -l)" 0 "sbx-ps --execs: every row has its 8 columns"
is "$(printf '%s\n' "$out" | wc -l)" "$(sbx-ps --execs "$c" --json | jq length)" "and one row per exec"
like "$(printf '%s\n' "$out" | grep 'echo one' | cut -f7)" '^sh -c echo one\\necho two\\ttab$' \
	"a newline and a tab in a command are shown as \\n and \\t"
is "$(printf '%s\n' "$out" | grep 'echo one' | cut -f8)" command "a user's exec is KIND command"
like "$(printf '%s\n' "$out" | tail -1 | cut -f8)" '^copy$' "sbx-cp's own exec is KIND copy"
is "$(sbx-ps --execs "$c" --json | jq -r '.[-1].request.kind')" copy "and so says --json"

# ---- durations as a user writes them --------------------------------
printf 'resources:\n  exec_timeout: {default: 1m, max: 1h}\n' >"$TEST_TMP/t.yaml"
d=$(sbx-create -q -p "$TEST_TMP/t.yaml"); ok $? "a session whose execs may run 1h at most"
sbx-exec --timeout 3h "$d" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 3 "--timeout 3h is refused (3)"
like "$(cat "$TEST_TMP/err")" "timeout 3h exceeds the policy's maximum of 1h" "in the units the user wrote"
sbx-kill "$c" "$d" >/dev/null

k=$(sbx-create -q); ok $? "a session for the clock"
sbx-cp "$TEST_TMP/guest-check" "$k":/tmp/ >/dev/null
if grep -m1 '^flags' /proc/cpuinfo | grep -q ' constant_tsc.* nonstop_tsc\| nonstop_tsc.* constant_tsc'; then
	# tsc-early until the kernel's delayed recalibration (a second or so
	# after boot, later on a loaded host) switches it to tsc: both are the TSC.
	like "$(sbx-exec "$k" -- cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" '^tsc(-early)?$' \
		"the host's TSC is invariant: the guest keeps the TSC as its clocksource"
fi
clock_ok "$k" "after boot the guest's clock is the host's"
sbx-snapshot pause "$k" >/dev/null && sleep 3 && sbx-snapshot resume "$k" >/dev/null
ok $? "paused for 3 s and resumed"
clock_ok "$k" "after a resume the guest's clock caught up"
sbx-exec -d "$k" -- sleep 30 >/dev/null
sbx-exec "$k" -- sh -c 'date -s @$(( $(date +%s) - 5 )) >/dev/null'
ok $? "with a command running, the guest's clock is set 5 s back"
sleep 11 # one stale-sync interval (MON_TIME_SYNC_NS), so the next exec carries the time
clock_ok "$k" "a command running, the clock is stepped forward again before the next exec"
sbx-kill "$k" >/dev/null
done_testing
