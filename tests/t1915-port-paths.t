#!/bin/bash
# Where sbx-port may put a forward (review r3, N7).  sbx-port binds as
# root: a tenant's --unix PATH must lie beneath a host_paths.write root of
# sbx.yaml, like any host path a tenant names (t1610), and nobody's, the
# operator's neither, under sbx's state (LIB, RUN), where a squatted name
# would break another session's create, save or attach.  A tenant may not
# --listen on a port below 1024.
. "$(dirname "$0")/lib.sh"
require_vm
command -v jq >/dev/null || skip_all "jq not installed"
LIB=$SBX_ROOT/var/lib/sbx
RUN=$SBX_ROOT/run/sbx
IN=$(mktemp -d /tmp/sbx-t1915.XXXXXX)
trap 'rm -rf "$IN"; _cleanup' EXIT
mkdir -p "$IN/out/acme" "$IN/elsewhere" "$SBX_ROOT/etc/sbx"
ln -s "$IN/elsewhere" "$IN/out/acme/esc"
cat >"$SBX_ROOT/etc/sbx/sbx.yaml" <<EOF
host_paths:
  write:
    - "$IN/out/{tenant}"
EOF
printf 'ports: [ 8080 ]\n' >"$TEST_TMP/web.yaml"

o=$(sbx-create -q); ok $? "an operator's session"
t=$(sbx-create -q --tenant acme -p "$TEST_TMP/web.yaml"); ok $? "tenant acme's session with ports: [8080]"

for p in "$LIB/sessions/squat" "$LIB/squat.sock" "$RUN/sessions/squat" "$LIB/sessions/$o/x.sock"; do
	sbx-port --unix "$p" "$o" 8080 2>"$TEST_TMP/err"; is $? 3 "the operator's --unix ${p#$SBX_ROOT} is refused (3)"
	[ ! -e "$p" ] && [ ! -L "$p" ]; ok $? "and nothing is made there"
	sbx-port --tenant acme --unix "$p" "$t" 8080 2>/dev/null; is $? 3 "a tenant's too"
	[ ! -e "$p" ] && [ ! -L "$p" ]; ok $? "and nothing is made there"
done
like "$(cat "$TEST_TMP/err")" "--unix" "the refusal names --unix"

sbx-port --tenant acme --unix "$IN/elsewhere/a.sock" "$t" 8080 2>"$TEST_TMP/err"; is $? 3 \
	"a tenant's --unix outside its host_paths.write is refused (3)"
like "$(cat "$TEST_TMP/err")" "host_paths" "saying host_paths does not grant it"
[ ! -e "$IN/elsewhere/a.sock" ]; ok $? "and nothing is made there"
sbx-port --tenant acme --unix "$IN/out/acme/esc/b.sock" "$t" 8080 2>/dev/null; is $? 3 \
	"nor through a symbolic link beneath its root"
[ ! -e "$IN/elsewhere/b.sock" ]; ok $? "and nothing is made where the link points"
a=$(sbx-port --tenant acme --unix "$IN/out/acme/web.sock" "$t" 8080); ok $? "beneath its root it is allowed ($a)"
[ -S "$IN/out/acme/web.sock" ]; ok $? "the socket is there"
is "$(sbx-port --tenant acme --list -q "$t")" "unix:$IN/out/acme/web.sock" "and listed"
sbx-port --tenant acme --rm "$t" "unix:$IN/out/acme/web.sock"; ok $? "and removed"
[ ! -e "$IN/out/acme/web.sock" ]; ok $? "with its socket"

sbx-port --tenant acme --listen 127.0.0.1:80 "$t" 8080 2>"$TEST_TMP/err"; is $? 3 "a tenant's --listen :80 is refused (3)"
like "$(cat "$TEST_TMP/err")" "1024" "saying ports below 1024 are not a tenant's"
sbx-port --tenant acme --listen '[::1]:1023' "$t" 8080 2>/dev/null; is $? 3 "nor :1023 on ::1"
b=$(sbx-port --tenant acme --listen 127.0.0.1:0 "$t" 8080); ok $? "any free port above is ($b)"

sbx-kill "$o" >/dev/null && sbx-kill --tenant acme "$t" >/dev/null; ok $? "the sessions are destroyed"
done_testing
