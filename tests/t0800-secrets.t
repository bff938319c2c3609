#!/bin/bash
# Secrets reach the guest as tmpfs files and nothing else: not the kernel or
# QEMU command line, not host files, not the stored output or the audit
# trail, where they are scrubbed to [secret:NAME].
. "$(dirname "$0")/lib.sh"
require_vm
A=$SBX_ROOT/var/lib/sbx/audit.log
S=$SBX_ROOT/var/lib/sbx/sessions
# The inputs live outside SBX_ROOT and go before the final search.
IN=$(mktemp -d /tmp/sbx-t0800.XXXXXX)
trap 'rm -rf "$IN"; _cleanup' EXIT
rnd() { head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
CANARY=canary-$(rnd)
ENVVAL=envtok-$(rnd)
printf '%s\n' "$CANARY" >"$IN/canary"
printf 'secrets:\n  - {name: ENVTOK, from_env: SBX_T0800_TOKEN}\n' >"$IN/policy.yaml"

id=$(SBX_T0800_TOKEN=$ENVVAL sbx-create -q -p "$IN/policy.yaml" --secret CANARY=@"$IN/canary")
ok $? "a session with a file secret and an env secret is created"

sum() { sha256sum | cut -d' ' -f1; }
is "$(sbx-exec "$id" -- sh -c 'sha256sum </run/secrets/CANARY' | cut -d' ' -f1)" "$(sum <"$IN/canary")" \
   "the default user reads the file secret in /run/secrets"
is "$(sbx-exec "$id" -- sh -c 'sha256sum </run/secrets/ENVTOK' | cut -d' ' -f1)" "$(printf %s "$ENVVAL" | sum)" \
   "and the env secret, byte for byte"
is "$(sbx-exec "$id" -- stat -c '%a %u' /run/secrets /run/secrets/CANARY | tr '\n' ' ')" "500 1000 400 1000 " \
   "directory 0500 and files 0400, owned by the unprivileged user"
sbx-exec -u 1001 "$id" -- cat /run/secrets/CANARY >/dev/null 2>&1
ok $((! $?)) "another user cannot read them"
is "$(sbx-exec "$id" -- stat -f -c %T /run/secrets)" tmpfs "they live on a tmpfs"

out=$(sbx-exec "$id" -- cat /proc/cmdline)
case $out in *"$CANARY"*|*"$ENVVAL"*|*'[secret:'*) r=1 ;; *) r=0 ;; esac
ok $r "not on the guest kernel command line"
vmm=$(jq -r .vmm_process.pid "$S/$id/session.json")
mon=$(jq -r .monitor.pid "$S/$id/session.json")
r=0
for f in /proc/$vmm/cmdline /proc/$vmm/environ /proc/$mon/cmdline /proc/$mon/environ; do
	[ -r "$f" ] || { diag "cannot read $f"; r=1; }
	grep -qaF -e "$CANARY" -e "$ENVVAL" "$f" && { diag "found in $f"; r=1; }
done
ok $r "not on the QEMU or monitor command line or environment"

out=$(sbx-exec "$id" -- cat /run/secrets/CANARY)
is "$out" "[secret:CANARY]" "exec output is scrubbed, live"
is "$(cat "$S/$id/execs/e7/stdout")" "[secret:CANARY]" "and as stored"

# The value split across the agent's 64 KiB reads, at several offsets.
r=0
for pad in 65530 65535 65536 131060; do
	out=$(sbx-exec "$id" -- sh -c "head -c $pad /dev/zero | tr '\\0' x; cat /run/secrets/CANARY; echo tail")
	case $out in *"$CANARY"*) r=1 ;; esac
	[ "${out#"${out%?????????????????????????????????????????}"}" ] || r=1
	case $out in *"x[secret:CANARY]"*tail) ;; *) diag "pad $pad: ${out: -40}"; r=1 ;; esac
done
ok $r "a value split across chunks is scrubbed"
r=0
for f in "$S/$id"/execs/*/stdout; do grep -qF "$CANARY" "$f" && r=1; done
ok $r "no stored output holds the value"
is "$(wc -c <"$S/$id/execs/e8/stdout")" $((65530 + 16 + 5)) "stored sizes count the scrubbed bytes"

sbx-exec "$id" -- echo "$CANARY" >/dev/null
r=0
grep -rqF "$CANARY" "$S/$id/execs" "$A" && r=1
ok $r "argv holding a value is scrubbed in request.json, result.json and the audit trail"
like "$(cat "$S/$id/execs/e12/request.json")" '\[secret:CANARY\]' "with the name in its place"
is "$(sbx-audit --session "$id" --type session.create --json | jq -r '.[0].secrets | sort | join(",")')" \
   "CANARY,ENVTOK" "session.create names the secrets"

sbx-kill "$id"
rm -rf "$IN"
r=0
grep -rlsF -e "$CANARY" -e "$ENVVAL" "$SBX_ROOT" /tmp 2>/dev/null | sed 's/^/# found in /' | grep . && r=1
ok $r "after sbx-kill the values are nowhere under SBX_ROOT or /tmp"
sbx-audit verify >/dev/null; ok $? "the trail verifies"

# Fail closed: a secret that cannot be read creates nothing.
sbx-create -q --secret MISSING=@/nonexistent/file >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 3 "a missing secret file exits 3"
like "$(cat "$TEST_TMP/err")" "MISSING" "naming the secret"
mkdir -p "$TEST_TMP/pol"
printf 'secrets:\n  - {name: GONE, from_env: SBX_T0800_UNSET}\n' >"$TEST_TMP/pol/p.yaml"
env -u SBX_T0800_UNSET sbx-create -q -p "$TEST_TMP/pol/p.yaml" >/dev/null 2>"$TEST_TMP/err"; rc=$?
is "$rc" 3 "an unset environment variable exits 3"
sbx-create -q --secret DIR=@/tmp >/dev/null 2>&1; is "$?" 3 "a secret that is not a regular file exits 3"
sbx-create -q --secret bad=@/etc/hostname >/dev/null 2>&1; is "$?" 2 "a bad secret name is a usage error"
is "$(ls "$S" | wc -l)" 0 "refused creates left no session"
done_testing
