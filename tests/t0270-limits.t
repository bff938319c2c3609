#!/bin/bash
# Each limit hit on purpose, with the reason asserted; the session survives.
. "$(dirname "$0")/lib.sh"
require_vm
pol=$TEST_TMP/limits.yaml
cat >"$pol" <<'Y'
resources:
  pids: {per_exec: 64, per_session: 200}
  exec_memory: 48M
  exec_timeout: {default: 3s, max: 20s}
  output_cap: 1M
Y
id=$(sbx-create -q -p "$pol") || { ok 1 "create with a limits policy"; done_testing; }

# A fork bomb is contained by pids.max and reported; the session lives on.
sbx-exec --timeout 10s "$id" -- sh -c 'bomb() { bomb | bomb & }; bomb; sleep 3' >/dev/null 2>&1
hit=$(sbx-ps --execs "$id" --json | jq '.[-1].pids_limit_hit')
[ "${hit:-0}" -gt 0 ]; ok $? "a fork bomb is contained and reported (pids_limit_hit=$hit)"
is "$(sbx-exec -u root "$id" -- sh -c 'ps -o user | grep -c "^user"')" 0 "nothing of it is left running"
is "$(sbx-exec "$id" -- echo alive)" alive "the session survives the fork bomb"

# Memory per exec: the OOM killer ends the hog; reason oom; the session lives.
# (Under the policy's maximum timeout, not its 3 s default: on a loaded host
# TCG can take longer than that to grow the string to 48M, and the exec
# then ends as a timeout before the OOM killer ends it.)
sbx-exec --timeout 20s "$id" -- sh -c 'x=a; while :; do x="$x$x"; done' 2>/dev/null; rc=$?
is "$rc" 137 "a memory hog is killed (137)"
last=$(sbx-ps --execs "$id" --json | jq -r '.[-1].reason')
is "$last" oom "its reason is oom"
is "$(sbx-exec "$id" -- echo alive)" alive "the session survives the memory hog"

# Exec timeouts from the policy: the default applies, the maximum holds.
t0=$(date +%s)
sbx-exec "$id" -- sleep 30; is "$?" 124 "the policy's default exec timeout applies"
[ $(( $(date +%s) - t0 )) -lt 15 ]; ok $? "within about its 3 s"
sbx-exec --timeout 1m "$id" -- true 2>"$TEST_TMP/err"; is "$?" 3 "a timeout over the policy's maximum exits 3"
like "$(cat "$TEST_TMP/err")" "exec_timeout.max" "the message names the policy key"

# Output cap: truncation is recorded, never silent.
# (Under the maximum timeout: 3 MB through TCG on a loaded host can take
# longer than the 3 s default, and the exec then ends as a timeout.)
sbx-exec --timeout 20s "$id" -- head -c 3000000 /dev/zero | wc -c >"$TEST_TMP/n"
is "$(cat "$TEST_TMP/n")" 3000000 "the live client still gets everything"
r=$(sbx-ps --execs "$id" --json | jq -c '.[-1] | [.truncated, .stdout_bytes]')
is "$r" "[true,3000000]" "the kept output is capped and marked truncated"
e=$(sbx-ps --execs "$id" --json | jq -r '.[-1].exec')
is "$(wc -c <"$SBX_ROOT/var/lib/sbx/sessions/$id/execs/$e/stdout")" 1048576 "exactly the cap is kept"

# Same --id with another policy is a conflict.
sbx-create -q --id pol-1 -p "$pol" >/dev/null
sbx-create -q --id pol-1 >/dev/null 2>&1; is "$?" 5 "the same --id under another policy exits 5"
sbx-kill pol-1 "$id"

# TTL: the monitor destroys the VM at expiry and records it.
# (30 s: the TTL runs from the create, and a boot under ASan on a loaded
# host took most of 10 s, leaving the exec below no session to start in)
id=$(sbx-create -q --ttl 30s)
e=$(sbx-exec -d "$id" -- sleep 120)
is "$(sbx-ps --json "$id" | jq '.[0].ttl_left_s <= 30')" true "sbx-ps shows the TTL left"
for i in $(seq 300); do [ "$(sbx-ps --no-headers "$id" | cut -f2)" = expired ] && break; sleep 0.2; done
is "$(sbx-ps --no-headers "$id" | cut -f2)" expired "the session is recorded as expired at its TTL"
like "$(sbx-ps --json "$id" | jq -r '.[0].end_reason')" "ttl" "with the reason"
sbx-exec --wait "$e" "$id"; is "$?" 137 "its running exec ended as killed"
is "$(root_procs | wc -l)" 0 "no VMM left after expiry"
sbx-kill "$id"

# Fail closed: what this build cannot enforce is refused.
printf 'resources:\n  require_kvm: true\n' >"$TEST_TMP/kvm.yaml"
if [ "$(jq -r .accel "$SBX_ROOT/var/lib/sbx/accel.json" 2>/dev/null || echo tcg)" != kvm ]; then
	sbx-create -q -p "$TEST_TMP/kvm.yaml" 2>/dev/null; is "$?" 69 "require_kvm under TCG exits 69"
fi
# An installation without the session proxy cannot enforce an egress
# allowlist: refused, not ignored.
mkdir -p "$TEST_TMP/libexec"
ln -s "$SBX_BUILD/libexec/sbx/sbx-monitor" "$TEST_TMP/libexec/sbx-monitor"
SBX_LIBEXEC=$TEST_TMP/libexec sbx-create -q -p "$(dirname "$0")/../policies/coding-agent.yaml" 2>"$TEST_TMP/err"
is "$?" 69 "an egress allowlist without sbx-proxy is refused (69), not ignored"
like "$(cat "$TEST_TMP/err")" "network.egress" "the message names the key"
is "$(ls "$SBX_ROOT/var/lib/sbx/sessions" | wc -l)" 0 "refused creates leave nothing"
done_testing
