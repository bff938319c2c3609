#!/bin/bash
# The proxy's audit records have a per-session byte budget (security
# review r3 N5, issue 35 item 4): a guest that floods refused names,
# refused connections and admitted ones makes the trail grow by at most
# audit.session_max plus one record, then one net.suppressed record; what
# is left out is counted, and the counts are in a net.totals record when
# the proxy ends.  The count outlives a proxy (suspend and resume).  The
# session goes on working, connections included.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null && command -v jq >/dev/null ||
	skip_all "needs ip, python3 and jq"
A=$SBX_ROOT/var/lib/sbx/audit.log
test_web_host bud 1 budget-ok
trap 'kill "$WEBPID" 2>/dev/null; _cleanup' EXIT
export SBX_HOSTS_FILE=$TEST_TMP/hosts
echo "$WEB web.example.test" >"$SBX_HOSTS_FILE"
printf 'network:\n  egress: allowlist\n  allow:\n    - {domain: web.example.test, ports: [80]}\n' \
	>"$TEST_TMP/net.yaml"
BUDGET=65536
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'audit:\n  session_max: 64K\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with a NIC, audit.session_max 64K"
# Bytes of the session's proxy records in the trail, as written.
pbytes() {
	grep -F "\"session\":\"$id\"" "$A" | grep -E '"type":"(net\.(connect|close|refused)|dns\.query)"' | wc -c
}
before=$(pbytes)
# Long refused names (as N5's repro), refused connects and admitted ones,
# for 25 s.
long=$(printf 'a%.0s' $(seq 80))
flood='end=$(($(date +%s) + 25))
for j in 1 2 3 4; do
	( i=0; while [ $(date +%s) -lt $end ]; do
		nslookup -type=a n$j-$i-'"$long"'.flood.test 10.0.2.2 >/dev/null 2>&1
		nc '"$WEB"' 81 </dev/null >/dev/null 2>&1
		i=$((i + 1)); done ) &
done
( while [ $(date +%s) -lt $end ]; do wget -q -O /dev/null http://web.example.test/ 2>/dev/null; done ) &
wait'
sbx-exec --timeout 5m -u root "$id" -- sh -c "$flood" >/dev/null 2>&1
ok $? "the flood ran"
sleep 2 # the last second's records
grown=$(($(pbytes) - before))
diag "the session's proxy records: $grown bytes after the flood (budget $BUDGET)"
[ "$grown" -le $((BUDGET + 65536)) ]
ok $? "the trail grew by at most the budget plus one record ($grown bytes)"
[ "$grown" -ge $((BUDGET / 2)) ]
ok $? "and the flood did reach the budget"
is "$(jq -s "[.[] | select(.type==\"net.suppressed\" and .session==\"$id\")] | length" "$A")" 1 \
	"one net.suppressed record"
is "$(sbx-exec --timeout 60s "$id" -- wget -q -O- http://web.example.test/ 2>/dev/null)" budget-ok \
	"an allowed connection still works past the budget"
size1=$(pbytes)
sbx-exec --timeout 2m -u root "$id" -- \
	sh -c 'for i in $(seq 50); do nslookup -type=a more-$i.flood.test 10.0.2.2 >/dev/null 2>&1; done' >/dev/null 2>&1
sleep 2
is "$(pbytes)" "$size1" "further records are only counted"
# A suspend ends the proxy; the one the resume starts goes on from the
# session's count.
sbx-snapshot suspend "$id" >/dev/null && sbx-snapshot resume "$id" >/dev/null
ok $? "suspended and resumed (a new proxy)"
sbx-exec --timeout 2m -u root "$id" -- \
	sh -c 'for i in $(seq 50); do nslookup -type=a again-$i.flood.test 10.0.2.2 >/dev/null 2>&1; done' >/dev/null 2>&1
sleep 2
is "$(pbytes)" "$size1" "the new proxy only counts too"
is "$(jq -s "[.[] | select(.type==\"net.suppressed\" and .session==\"$id\")] | length" "$A")" 1 \
	"and writes no second net.suppressed"
sbx-kill "$id" >/dev/null
ok $? "the session ends"
tot=$(jq -c -s "[.[] | select(.type==\"net.totals\" and .session==\"$id\")] | last" "$A")
like "$tot" '"suppressed_records":[1-9]' "a net.totals record at the end counts the records left out"
like "$(printf '%s' "$tot" | jq -r '.suppressed | keys | join(" ")')" "net.refused" "by type"
is "$(jq -s "[.[] | select(.type==\"net.totals\" and .session==\"$id\")] | length" "$A")" 2 \
	"one for each proxy (the suspend ended the first)"
is "$(printf '%s' "$tot" | jq -r .budget_bytes)" "$BUDGET" "naming the budget"
done_testing
