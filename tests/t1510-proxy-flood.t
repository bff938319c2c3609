#!/bin/bash
# A session floods its proxy with refused connections and DNS queries
# (security review finding 3): the proxy's threads stay under
# max_connections plus its slack, refusals are counted (net.refused, one
# audit record a second) rather than recorded one by one, net.log stops at
# its cap with a truncation line, and another session still runs commands.
# The only host the guest aims at is an address in a network namespace
# this test makes, and the proxy refuses every connection to it anyway.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null || skip_all "needs ip and python3"
S=$SBX_ROOT/var/lib/sbx/sessions
A=$SBX_ROOT/var/lib/sbx/audit.log

test_net_hosts fld 1
NS=$NET_NS HOSTIP=$NET_HOSTIP WEB=${NET_IP[0]}
net_cleanup() {
	[ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
}
trap 'net_cleanup; _cleanup' EXIT

export SBX_HOSTS_FILE=$TEST_TMP/hosts
echo "$WEB web.example.test" >"$SBX_HOSTS_FILE"
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
  max_connections: 4
EOF
CAP=4 SLACK=8 # SLACK: CONN_SLACK in proxy/proxy.c
LOGMAX=65536
flood=$(SBX_NETLOG_MAX=$LOGMAX sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with max_connections: 4 is created (net.log capped at $LOGMAX bytes)"
other=$(sbx-create -q)
ok $? "and a second session beside it"
priv=$(jq -r .proxy_process.pid "$S/$flood/session.json")
# The network half (the proxy's child that is not root; the other is the
# writer) is where connections get threads; the recorded process, the
# package cache, gets none from them.
ppid=
for k in $(cat /proc/"$priv"/task/"$priv"/children); do
	[ "$(awk '/^Uid:/ { print $2 }' /proc/"$k"/status)" != 0 ] && ppid=$k
done
fixed=$(ls /proc/"$ppid"/task | wc -l)
pfixed=$(ls /proc/"$priv"/task | wc -l)
diag "the proxy's network half has $fixed threads at rest, its cache half $pfixed"
# The proxy's thread counts, sampled while the flood runs.
(while [ -d /proc/"$ppid" ]; do
	echo "$(ls /proc/"$ppid"/task 2>/dev/null | wc -l) $(ls /proc/"$priv"/task 2>/dev/null | wc -l)"
	sleep 0.02
done) >"$TEST_TMP/tasks" &
SAMPLER=$!

# 32 connections held open without a byte (each holds a thread until the
# proxy gives up on it), 4 x 1000 connections as fast as busybox makes
# them, and 2 x 500 DNS queries for names no one allowed.
cat >"$TEST_TMP/flood.sh" <<EOF
for i in \$(seq 32); do sleep 8 | nc $WEB 81 >/dev/null 2>&1 & done
for j in 1 2 3 4; do
	( i=0; while [ \$i -lt 1000 ]; do nc $WEB 81 </dev/null >/dev/null 2>&1; i=\$((i + 1)); done ) &
done
for j in 1 2; do
	( i=0; while [ \$i -lt 500 ]; do nslookup -type=a x\$j-\$i.flood.test 10.0.2.2 >/dev/null 2>&1; i=\$((i + 1)); done ) &
done
wait
touch /tmp/flood.done
EOF
t0=$(date +%s)
sbx-exec -d -u root "$flood" -- sh -c "$(cat "$TEST_TMP/flood.sh")" >/dev/null
ok $? "the flood starts"
# Once refusals come in, the audit trail is held busy for a while (as a
# slow disk or another tenant would): a proxy that records refusals one
# by one stacks up a blocked thread for each.  Then the other session
# runs a command.
for _ in $(seq 300); do [ -s "$S/$flood/net.log" ] && break; sleep 0.1; done
flock "$SBX_ROOT/var/lib/sbx/audit.lock" sleep 10
sbx-exec --timeout 10m "$other" -- true
ok $? "another session's sbx-exec true completes during the flood"
sbx-exec --timeout 30m "$flood" -- sh -c 'while [ ! -e /tmp/flood.done ]; do sleep 1; done'
ok $? "the flood ends"
t1=$(date +%s)
elapsed=$((t1 - t0))
# The last second's counts are written within a second or so.
refused() { jq -s "[.[] | select(.type==\"net.refused\" and .session==\"$flood\") | .refusals[] | select($1) | .count] | add // 0" "$A"; }
for _ in $(seq 100); do [ "$(refused '.proto=="tcp"')" -ge 4032 ] && break; sleep 0.1; done
kill "$SAMPLER" 2>/dev/null
SAMPLER=
ntcp=$(refused '.proto=="tcp"')
ndns=$(refused '.proto=="dns"')
naccept=$(refused '.reason | test("too many connections at once")')
ncap=$(refused '.reason | test("max_connections")')
maxtasks=$(cut -d' ' -f1 "$TEST_TMP/tasks" | sort -n | tail -1)
maxpriv=$(cut -d' ' -f2 "$TEST_TMP/tasks" | sort -n | tail -1)
diag "flood: $elapsed s, $ntcp connections and $ndns queries refused ($naccept at accept), at most $maxtasks threads"
[ "$ntcp" -ge 4000 ]
ok $? "every refused connection is counted ($ntcp of 4032)"
[ "$ndns" -ge 1000 ]
ok $? "every refused query is counted ($ndns of 1000)"
# Connections past max_connections are refused by a thread that exits at
# once, or, when even those pile up (max_connections + the slack), where
# they are accepted, with none.
[ "$ncap" -ge 1 ]
ok $? "the held connections fill max_connections, and the rest are refused ($ncap)"
[ "$maxtasks" -le $((fixed + CAP + SLACK)) ]
ok $? "the proxy's threads stay at or under $fixed + $CAP + $SLACK (at most $maxtasks)"
is "$maxpriv" "$pfixed" "and its cache half gains none"
nrec=$(jq -s "[.[] | select(.session==\"$flood\" and (.type==\"net.refused\" or .type==\"dns.query\" or .type==\"net.connect\"))] | length" "$A")
[ "$nrec" -le $((2 * (elapsed + 3))) ]
ok $? "the audit trail holds at most two of the session's net records a second ($nrec in $elapsed s)"
nkeys=$(jq -s "[.[] | select(.session==\"$flood\" and .type==\"net.refused\") | .refusals | length] | max" "$A")
[ "$nkeys" -le 64 ]
ok $? "a second's record lists at most 64 destinations and reasons ($nkeys)"
size=$(stat -c %s "$S/$flood/net.log")
[ "$size" -le $LOGMAX ]
ok $? "net.log stays under its cap ($size of $LOGMAX bytes)"
is "$(tail -1 "$S/$flood/net.log" | jq -c '{proto, truncated, max_bytes}')" \
   "{\"proto\":\"log\",\"truncated\":true,\"max_bytes\":$LOGMAX}" "and ends with the truncation line"
like "$(jq -r 'select(.count) | .count' "$S/$flood/net.log" | sort -n | tail -1)" '^[1-9][0-9]*$' \
   "refusals past a second's first are summarised in net.log with a count"
top=$(cd "$(dirname "$0")/.." && pwd)
sbx-ps --net "$flood" --json >"$TEST_TMP/net.json"
out=$(python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" ps-net.json <"$TEST_TMP/net.json" 2>&1)
ok $? "sbx-ps --net --json, summaries and truncation included, matches docs/schema/ps-net.json"
[ -z "$out" ] || printf '%s\n' "$out" | head -5 | sed 's/^/#   /'
sbx-audit --json >"$TEST_TMP/audit.json"
out=$(python3 "$top/tests/tools/json-schema-check.py" validate --strict "$top/docs/schema" audit.json <"$TEST_TMP/audit.json" 2>&1)
ok $? "net.refused records match docs/schema/audit.json"
[ -z "$out" ] || printf '%s\n' "$out" | head -5 | sed 's/^/#   /'
is "$(sbx-exec "$other" -- echo still-fine)" still-fine "the other session is unharmed"
sbx-kill "$flood" "$other"
done_testing
