#!/bin/bash
# A session whose proxy did not start is not "ready" (issue: an sbx.yaml
# with an unknown key let sbx-create -p of an egress policy exit 0 with a
# session shown as running, while its proxy had refused the same file and
# exited; every connection in the guest then timed out).
#  - An invalid sbx.yaml stops every command the same way: 3 and the same
#    message, sbx-create with or without network included, nothing left.
#  - A proxy that fails at its start (here: an SBX_HOSTS_FILE it cannot
#    open) fails the create with its own message and status, and leaves
#    no directory, process or cgroup.
#  - When sbx-create returns, the proxy is ready: both halves are running
#    as their own uids.
#  - A proxy killed after the create shows in sbx-ps (NET column, JSON
#    net and net_lost) and in the next exec's record
#    (violations.network_lost).
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root"
S=$SBX_ROOT/var/lib/sbx/sessions
R=$SBX_ROOT/run/sbx/sessions
h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
leftovers() {
	echo "dirs=$(find "$S" "$R" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
	     "procs=$(root_procs | wc -l)" \
	     "cgroups=$(ls -d /sys/fs/cgroup/*/sbx-$h/*/ /sys/fs/cgroup/sbx-$h/*/ 2>/dev/null | wc -l)"
}
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
EOF

# ---- an invalid sbx.yaml ----
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'audit:\n  keep: 3\nbogus_key: 1\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
sbx-create -q -p "$TEST_TMP/net.yaml" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
is "$?" 3 "sbx-create -p (egress) with an unknown key in sbx.yaml exits 3"
want=$(cat "$TEST_TMP/err")
like "$want" "sbx\.yaml:3:[0-9]+: .*bogus_key" "its message names the file, the line and the key"
is "$(cat "$TEST_TMP/out")" "" "and prints no session"
is "$(leftovers)" "dirs=0 procs=0 cgroups=0" "nothing of it is left: no directory, process or cgroup"
for cmd in "sbx-create -q" "sbx-ps" "sbx-ps --capacity" "sbx-template list" "sbx-snapshot list" \
	"sbx-gc -n" "sbx-audit verify" "sbx-kill nosuch" "sbx-exec nosuch -- true"; do
	$cmd >/dev/null 2>"$TEST_TMP/err2"
	rc=$?
	got=$(sed 's/^sbx-[a-z]*: //' "$TEST_TMP/err2")
	is "$rc $got" "3 $(printf '%s' "$want" | sed 's/^sbx-[a-z]*: //')" "$cmd: 3, the same message"
done
sbx-ps --json >/dev/null 2>"$TEST_TMP/err2"
is "$(jq -r '[.code, .error] | join(" ")' "$TEST_TMP/err2")" "3 invalid" "sbx-ps --json: the error as JSON"
is "$(leftovers)" "dirs=0 procs=0 cgroups=0" "still nothing left"
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"

# ---- a proxy that cannot start fails the create ----
SBX_HOSTS_FILE=$TEST_TMP/no-such-hosts sbx-create -q -p "$TEST_TMP/net.yaml" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
is "$?" 3 "a proxy refusing its SBX_HOSTS_FILE fails the create with its status (3)"
like "$(cat "$TEST_TMP/err")" "proxy.*cannot open SBX_HOSTS_FILE" "with the proxy's message"
is "$(cat "$TEST_TMP/out")" "" "and prints no session"
for _ in $(seq 50); do [ "$(leftovers)" = "dirs=0 procs=0 cgroups=0" ] && break; sleep 0.1; done
is "$(leftovers)" "dirs=0 procs=0 cgroups=0" "nothing of it is left"

# ---- ready when the create returns; then the proxy dies ----
echo "198.51.100.250 web.example.test" >"$TEST_TMP/hosts"
export SBX_HOSTS_FILE=$TEST_TMP/hosts
t0=$(date +%s%N)
id=$(sbx-create -q -p "$TEST_TMP/net.yaml")
ok $? "a session with egress is created"
diag "create with egress: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
pid=$(jq -r .proxy_process.pid "$S/$id/session.json")
kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null | wc -w)
ok $((kids < 1)) "when sbx-create returns, the proxy has its network half ($kids children)"
uids=$(for k in $(cat /proc/"$pid"/task/*/children); do awk '/^Uid:/ { print $2 }' /proc/"$k"/status; done)
like "$uids" "^[1-9][0-9]+$" "which already runs as its own uid ($uids)"
is "$(sbx-ps --json "$id" | jq -r '[.[0].net, .[0].net_lost] | join(" ")')" "ok " "sbx-ps --json: net ok"
is "$(sbx-ps --no-headers "$id" | awk -F'\t' '{ print $(NF - 1) }')" ok "sbx-ps: NET ok, before PIDS"
is "$(sbx-ps | head -1 | awk -F'\t' '{ print $(NF - 1) " " $NF }')" "NET PIDS" "whose header is NET, then PIDS last"
kill -9 "$pid"
for _ in $(seq 50); do [ "$(jq -r '.net.lost // ""' "$S/$id/session.json")" != "" ] && break; sleep 0.1; done
is "$(sbx-ps --json "$id" | jq -r '[.[0].state, .[0].net, .[0].net_lost] | join(" ")')" \
	"running lost proxy killed by signal 9" "sbx-ps --json: running, net lost, and why"
is "$(sbx-ps --no-headers "$id" | awk -F'\t' '{ print $2, $(NF - 1) }')" "running lost" "sbx-ps: NET lost"
sbx-exec "$id" -- true
ok $? "the session still runs commands"
e=$(ls "$S/$id/execs" | grep -v '^\.' | tail -1)
is "$(jq -r '.violations.network_lost' "$S/$id/execs/$e/result.json")" "proxy killed by signal 9" \
	"the next exec's record says the network was lost"
n=$(sbx-create -q)
ok $? "a session without network"
is "$(sbx-ps --json "$n" | jq -r '.[0].net')" null "has no net in sbx-ps --json"
is "$(sbx-ps --no-headers "$n" | awk -F'\t' '{ print $(NF - 1) }')" - "and - in its NET column"
sbx-exec "$n" -- true
e=$(ls "$S/$n/execs" | grep -v '^\.' | tail -1)
is "$(jq -r '.violations.network_lost' "$S/$n/execs/$e/result.json")" null "nor network_lost in its execs"
done_testing
