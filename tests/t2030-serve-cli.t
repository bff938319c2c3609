#!/bin/bash
# Host users other than root use sbx's own commands (issue 37, item 5):
# run by such a user, sbx-create, sbx-exec, sbx-cp, sbx-ps, sbx-kill,
# sbx-port, sbx-snapshot and sbx-audit go through sbx-serve's CLI socket
# as the user's tenant (serve.users), with the same output and exit
# statuses.  The attacks first: an unmapped user, another tenant named,
# another user's session, host paths outside host_paths or not the
# user's to read or write (each opened with the user's rights, never
# root's), a command not served, hostile messages on the socket.
. "$(dirname "$0")/lib.sh"
require_vm
command -v setpriv >/dev/null || skip_all "setpriv not installed"
H=$TEST_TMP/homes
mkdir -p "$SBX_ROOT/etc/sbx" "$SBX_ROOT/run" "$H/alice" "$H/bob"
# The service's own sandboxes (E2B's API) get this policy; a request may
# narrow it (allow_internet_access: false), never widen it.
cat >"$SBX_ROOT/etc/sbx/serve-policy.yaml" <<EOF2
network:
  egress: allowlist
  allow:
    - {cidr: 198.51.100.1/32, ports: [80]}
EOF2
cat >"$SBX_ROOT/etc/sbx/sbx.yaml" <<EOF2
serve:
  policy: $SBX_ROOT/etc/sbx/serve-policy.yaml
  users: {"54321": alice, "54322": bob}
host_paths:
  read: ["$H/{tenant}"]
  write: ["$H/{tenant}"]
EOF2
# mktemp's 0700 made passable, as /run and /home are.
chmod 0711 "$SBX_ROOT" "$SBX_ROOT/run" "$SBX_ROOT/tmp" "$H"
chown 54321:54321 "$H/alice"
chown 54322:54322 "$H/bob"
as() { # UID CMD...: run as that user, with only the environment a user has
	local u=$1
	shift
	setpriv --reuid "$u" --regid "$u" --clear-groups env -i PATH="$PATH" SBX_ROOT="$SBX_ROOT" HOME=/ "$@"
}
alice() { as 54321 "$@"; }
# In the background, the user's command itself (its pid is $!): a
# function's subshell would take the signals the tests send.
alice_bg() { exec setpriv --reuid 54321 --regid 54321 --clear-groups env -i PATH="$PATH" SBX_ROOT="$SBX_ROOT" HOME=/ "$@"; }
bob() { as 54322 "$@"; }
SOCK=$SBX_ROOT/run/sbx-serve/cli.sock
nz() { [ "$1" != 0 ]; ok $? "$2 ($1)"; }

# --- no service ----------------------------------------------------------------
out=$(alice sbx-ps 2>&1)
is "$?" 69 "a user's command with no sbx-serve running: 69"
like "$out" "sbx-serve.*not reachable" "and says why"

sbx-serve >"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ]; ok $? "sbx-serve listens on $SOCK"
is "$(stat -c %a "$SOCK")" 666 "for any user to connect to"

# --- who may -----------------------------------------------------------------------
out=$(as 54323 sbx-ps 2>&1)
is "$?" 77 "a user that serve.users does not name: 77"
like "$out" "uid 54323 is no tenant" "and says so"
out=$(alice sbx-ps --tenant bob 2>&1)
is "$?" 77 "alice naming tenant bob: 77"
like "$out" "you act as tenant alice" "and is told whose she is"
alice sbx-create --tenant bob >/dev/null 2>&1
is "$?" 77 "sbx-create --tenant bob by alice: 77"

# --- alice works as root would -------------------------------------------------------
cat >"$H/alice/web.yaml" <<EOF2
ports: [8080]
EOF2
chown 54321:54321 "$H/alice/web.yaml"
id=$(alice sbx-create -p "$H/alice/web.yaml" 2>"$TEST_TMP/err")
ok $? "alice creates a session through the socket"
like "$id" '^s-[0-9a-f]{12}$' "and gets its ID on stdout, as root would ($id)"
is "$(sbx-ps --tenant alice -q)" "$id" "it is tenant alice's"
is "$(alice sbx-exec "$id" -- sh -c 'echo out; echo err >&2; exit 7' 2>"$TEST_TMP/err")" out \
	"sbx-exec's stdout is alice's stdout"
is "$(cat "$TEST_TMP/err")" err "and its stderr hers"
alice sbx-exec "$id" -- sh -c 'exit 7' >/dev/null 2>&1
is "$?" 7 "and the command's exit status is sbx-exec's"
is "$(echo piped | alice sbx-exec -i "$id" -- cat)" piped "stdin reaches the command"
is "$(alice sbx-ps -q)" "$id" "sbx-ps shows alice her session"
is "$(alice sbx-ps --json | jq -r '.[0].id')" "$id" "--json as root's"
alice sbx-exec s-000000000000 -- true >/dev/null 2>&1
is "$?" 4 "an unknown session: 4, as for root"
alice sbx-exec "$id" >/dev/null 2>&1
is "$?" 2 "a usage error: 2, as for root"

# --- bob sees none of it ------------------------------------------------------------
is "$(bob sbx-ps -q)" "" "bob lists nothing of alice's"
bob sbx-exec "$id" -- true >/dev/null 2>&1
is "$?" 4 "bob's sbx-exec in alice's session: 4 (no such session, for him)"
bob sbx-kill "$id" >/dev/null 2>&1
is "$?" 4 "bob's sbx-kill of it: 4"
sbx-ps -q --tenant alice | grep -qx "$id"; ok $? "and it is still there"

# --- host paths: alice's rights, not root's -----------------------------------------
echo hello >"$H/alice/in.txt"
chown 54321:54321 "$H/alice/in.txt"
(cd "$H/alice" && alice sbx-cp in.txt "$id:/tmp/in.txt")
ok $? "sbx-cp up of her file, named relative to her working directory"
is "$(alice sbx-exec "$id" -- cat /tmp/in.txt)" hello "it arrived"
alice sbx-cp "$id:/tmp/in.txt" "$H/alice/back.txt"
ok $? "sbx-cp down into her directory"
is "$(stat -c %u:%g "$H/alice/back.txt")" 54321:54321 "the file written is hers, not root's"
is "$(cat "$H/alice/back.txt")" hello "and holds what was copied"
echo secret >"$H/alice/root-only"
chmod 0600 "$H/alice/root-only"
alice sbx-cp "$H/alice/root-only" "$id:/tmp/x" >/dev/null 2>&1
nz "$?" "a root-only file inside her host_paths root is not copied for her"
alice sbx-exec "$id" -- test -e /tmp/x
is "$?" 1 "nothing arrived"
mkdir -m 0755 "$H/alice/rootdir"
alice sbx-cp "$id:/tmp/in.txt" "$H/alice/rootdir/x" >/dev/null 2>&1
nz "$?" "a download into a directory she cannot write: refused"
[ ! -e "$H/alice/rootdir/x" ]; ok $? "and nothing was written there"
[ -z "$(ls -A "$H/alice/rootdir")" ]; ok $? "not even a temporary directory"
alice sbx-cp /etc/hostname "$id:/tmp/y" >/dev/null 2>&1
is "$?" 3 "a path outside her host_paths: 3"
alice sbx-cp "$H/bob" "$id:/tmp/z" >/dev/null 2>&1
is "$?" 3 "bob's root: 3"
cat >"$H/alice/pol.yaml" <<EOF2
resources: {memory_mib: 128}
EOF2
alice sbx-create -p /etc/shadow >"$TEST_TMP/out" 2>&1
nz "$?" "a policy file she cannot read (/etc/shadow): refused"
! grep -q 'root:' "$TEST_TMP/out"; ok $? "and nothing of it is shown"
mkdir -p "$H/alice/vol/sub"
echo v1 >"$H/alice/vol/sub/f"
chown -R 54321:54321 "$H/alice/vol"
echo hidden >"$H/alice/vol/root-only"
chmod 0600 "$H/alice/vol/root-only"
alice sbx-create -v "$H/alice/vol:/mnt/vol:ro" >/dev/null 2>"$TEST_TMP/err"
nz "$?" "a volume holding a file she cannot read: refused"
like "$(cat "$TEST_TMP/err")" "cannot copy .* into a volume" "by the copy, made with her rights"
rm -f "$H/alice/vol/root-only"
vid=$(alice sbx-create -v "$H/alice/vol:/mnt/vol:ro" 2>"$TEST_TMP/err")
ok $? "a volume of her own files"
is "$(alice sbx-exec "$vid" -- cat /mnt/vol/sub/f)" v1 "is in the session"
alice sbx-kill "$vid" >/dev/null
alice sbx-port "$id" 8080 --unix "$H/alice/web.sock" >/dev/null 2>"$TEST_TMP/err"
ok $? "sbx-port --unix into her directory"
is "$(stat -c %u "$H/alice/web.sock")" 54321 "the socket is hers"
alice sbx-port "$id" 8081 --unix "$H/alice/rootdir/web.sock" >/dev/null 2>&1
nz "$?" "--unix where she cannot write: refused"

# --- snapshots, audit ----------------------------------------------------------------
snap=$(alice sbx-snapshot save "$id" mine 2>/dev/null)
ok $? "sbx-snapshot save"
is "$(alice sbx-snapshot ls -q | grep -cx "$snap")" 1 "her snapshot is listed to her"
is "$(bob sbx-snapshot ls -q | grep -cx "$snap")" 0 "not to bob"
alice sbx-audit --json >"$TEST_TMP/audit" 2>&1
ok $? "sbx-audit for alice"
is "$(jq -r '[.[] | .tenant // "-"] | unique | join(",")' "$TEST_TMP/audit")" alice "shows only tenant alice's records"
bob sbx-audit --tenant alice >/dev/null 2>&1
is "$?" 77 "bob asking for alice's: 77"
like "$(sbx-audit --type serve.call --json | jq -c '.[] | select(.command == "sbx-create")' | head -n1)" \
	'"principal":"uid:54321"' "the trail names the user behind each command"

# --- signals, hang-ups -------------------------------------------------------------------
alice_bg sbx-exec "$id" -- sh -c 'trap "echo got-int; exit 9" INT; echo ready; sleep 60' >"$TEST_TMP/sig" 2>&1 &
cl=$!
for _ in $(seq 100); do grep -q ready "$TEST_TMP/sig" && break; sleep 0.1; done
kill -INT "$cl"
wait "$cl"
rc=$?
grep -q got-int "$TEST_TMP/sig"; ok $? "a ^C to the user's sbx-exec reaches the command"
is "$rc" 9 "whose exit is sbx-exec's"
alice_bg sbx-exec "$id" -- sleep 600 >/dev/null 2>&1 &
cl=$!
for _ in $(seq 100); do [ -n "$(sbx-ps --tenant alice --execs "$id" -q 2>/dev/null)" ] && break; sleep 0.1; done
kill -KILL "$cl"
gone=1
for _ in $(seq 200); do
	pgrep -u 0 -f "sbx-exec $id -- sleep 600" >/dev/null || { gone=0; break; }
	sleep 0.1
done
is "$gone" 0 "a user's command whose client dies is hung up, not left running as root"

# --- the socket's own parser ------------------------------------------------------------
py() { alice python3 -c "$1" "$SOCK"; }
send='
import socket, sys, os, array, json
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
def go(msg, fds):
    s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
    s.settimeout(20)
    print(s.recv(4096).decode())
'
is "$(py "$send"'go(b"{\"argv\": [\"sbx-gc\"]}", [0, 1, 2, os.open(".", os.O_RDONLY)])' | jq -r .exit)" 3 \
	"a command not served (sbx-gc): 3"
is "$(py "$send"'go(b"{\"argv\": [\"/bin/sh\", \"-c\", \"id\"]}", [0, 1, 2, os.open(".", os.O_RDONLY)])' | jq -r .exit)" 3 \
	"a program by path: 3"
is "$(py "$send"'go(b"{\"argv\": [\"../sbx-ps\"]}", [0, 1, 2, os.open(".", os.O_RDONLY)])' | jq -r .exit)" 3 \
	"a path trick on the name: 3"
is "$(py "$send"'go(b"not json", [0, 1, 2, os.open(".", os.O_RDONLY)])' | jq -r .exit)" 3 "not JSON: 3"
is "$(py "$send"'go(b"{\"argv\": [\"sbx-ps\"]}", [])' | jq -r .exit)" 3 "no fds: 3"
is "$(py "$send"'go(b"{\"argv\": [\"sbx-ps\"], \"env\": {\"SBX_ROOT\": \"/tmp\", \"SBX_TENANT\": \"bob\", \"LD_PRELOAD\": \"/tmp/x.so\"}}", [0, os.open("/dev/null", os.O_WRONLY), 2, os.open(".", os.O_RDONLY)])' | jq -r .exit)" 0 \
	"variables other than the terminal's are dropped (the command ran, as alice)"
big=$(alice python3 -c "$send"'go(json.dumps({"argv": ["sbx-ps"] + ["x" * 4000] * 300}).encode(), [0, 1, 2, os.open(".", os.O_RDONLY)])' "$SOCK" 2>&1)
like "$big" '"exit": ?3|Message too long' "an oversized command is refused (by the service, or by the socket's size cap)"
kill -0 "$srv"; ok $? "sbx-serve is still up after all of it"
is "$(alice sbx-ps -q)" "$id" "and serves alice as before"

# --- the service's policy, and what a request may do to it -------------------------
post() { # BODY: alice's create through the API's unix socket; the status, the body in $H/alice/body
	alice curl -s -o "$H/alice/body" -w '%{http_code}' --unix-socket "$SBX_ROOT/run/sbx-serve/serve.sock" \
		-H 'Content-Type: application/json' -d "$1" http://sbx/sandboxes
}
L=$SBX_ROOT/var/lib/sbx
is "$(post '{"templateID":"default","timeout":120}')" 201 "a sandbox through the API gets serve.policy"
s1=$(jq -r .sandboxID "$H/alice/body")
is "$(jq -r '.net.egress // "none"' "$L/sessions/$s1/session.json")" allowlist "its egress is the operator's allowlist"
is "$(post '{"templateID":"default","timeout":120,"allow_internet_access":false}')" 201 \
	"allow_internet_access: false narrows it"
s2=$(jq -r .sandboxID "$H/alice/body")
is "$(jq -r '(.net.egress // "none") + " " + .limits.packages.mode' "$L/sessions/$s2/session.json")" "none offline" \
	"to no egress and no package registry"
is "$(post '{"templateID":"default","autoPause":true,"autoPauseMemory":false}')" 400 \
	"autoPauseMemory: false (not served: a paused sandbox keeps its memory): 400"
is "$(post '{"templateID":"default","autoPause":true,"autoResume":{"enabled":true}}')" 400 "autoResume (not served): 400"
is "$(post '{"templateID":"default","autoPause":"yes"}')" 400 "autoPause that is no boolean: 400"
is "$(post '{"templateID":"default","network":{"allowOut":["0.0.0.0/0"]}}')" 400 "network options (not served): 400"
is "$(post '{"templateID":"default","allow_internet_access":"yes"}')" 400 "allow_internet_access that is no boolean: 400"
is "$(sbx-ps --tenant alice -q | grep -vx "$id" | sort | tr '\n' ' ')" "$(printf '%s\n' "$s1" "$s2" | sort | tr '\n' ' ')" \
	"and the refused ones made nothing"
sbx-kill "$s1" "$s2" >/dev/null

alice sbx-kill "$id" >/dev/null
is "$?" 0 "alice kills her session"
is "$(sbx-ps --tenant alice -q)" "" "it is gone"
kill "$srv"
wait "$srv" 2>/dev/null
done_testing
