#!/bin/bash
# sbx-serve's filesystem API and /files (issue 37): the real E2B JS SDK
# (tests/serve/files.test.mjs: write, read, list, makeDir, rename, remove,
# exists, getInfo, megabytes, errors) with only E2B_API_URL,
# E2B_SANDBOX_URL and E2B_API_KEY set; then the attacks, with curl: paths
# that climb ("../", NUL), symlinks in the guest that point out of what
# the policy lets cross, an upload over files.max_transfer, a wrong token,
# another tenant's sandbox, hostile messages; WatchDir's stream and the
# watchers, inotify in the guest, and a guest whose watcher lies.  Everything is done in the
# guest: a host file of the same name is never what is served.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_vm
command -v curl >/dev/null || skip_all "curl not installed"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
L=$SBX_ROOT/var/lib/sbx
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
U=http://127.0.0.1:$port
mkdir -p "$SBX_ROOT/etc/sbx"
: >"$SBX_ROOT/etc/sbx/sbx.yaml"
KA=$(sbx-serve key add --tenant alice 2>/dev/null)
KB=$(sbx-serve key add --tenant bob 2>/dev/null)
sbx-serve --listen "127.0.0.1:$port" >"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.1; done
curl -sf "$U/health" >/dev/null; ok $? "sbx-serve --listen 127.0.0.1:$port answers"

# --- the real SDK ------------------------------------------------------------------
if npm_fixture_install "$top/tests/fixtures/e2b-sdk" e2b-sdk; then
	SDK=$NPM_DIR/node_modules/e2b
	diag "e2b $(jq -r .version "$SDK/package.json") on node $(node --version)"
	E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KA E2B_SDK=$SDK/dist/index.mjs SBX_TEMPLATE=python \
		timeout 900 node --test --test-reporter=tap "$top/tests/serve/files.test.mjs" >"$TEST_TMP/sdk.tap" 2>&1
	rc=$?
	pass=$(sed -n 's/^# pass //p' "$TEST_TMP/sdk.tap")
	total=$(sed -n 's/^# tests //p' "$TEST_TMP/sdk.tap")
	[ "$rc" = 0 ] || sed 's/^/#   /' "$TEST_TMP/sdk.tap" | tail -60
	is "$rc" 0 "the E2B SDK's files tests (tests/serve/files.test.mjs): ${pass:-0} of ${total:-?} pass"
elif [ "${SBX_REQUIRE_NODE:-0}" = 1 ]; then
	ok 1 "the E2B SDK installs: $NPM_WHY"
else
	diag "SKIP the SDK's tests: $NPM_WHY"
fi

# --- raw HTTP ----------------------------------------------------------------------
api() { # api KEY METHOD PATH [BODY]: the status, the body in $TEST_TMP/body
	curl -s -o "$TEST_TMP/body" -w '%{http_code}' -X "$2" ${1:+-H "X-API-Key: $1"} \
		-H 'Content-Type: application/json' ${4:+--data-binary "$4"} "$U$3"
}
is "$(api "$KA" POST /sandboxes '{"templateID":"python","timeout":900}')" 201 "alice creates a sandbox"
sa=$(jq -r .sandboxID "$TEST_TMP/body"); tok=$(jq -r .envdAccessToken "$TEST_TMP/body")
is "$(api "$KB" POST /sandboxes '{"templateID":"python","timeout":900}')" 201 "bob creates one"
sb=$(jq -r .sandboxID "$TEST_TMP/body"); tokb=$(jq -r .envdAccessToken "$TEST_TMP/body")
# fs TOKEN SANDBOX RPC BODY [CURL ARGS]: a filesystem call's status; its body in
# $TEST_TMP/out.  Its Content-Type is $CT (Connect's JSON by default).
fs() {
	local t=$1 s=$2 rpc=$3 body=$4
	shift 4
	curl -s -o "$TEST_TMP/out" -w '%{http_code}' -H "E2b-Sandbox-Id: $s" ${t:+-H "X-Access-Token: $t"} \
		-H "Content-Type: ${CT:-application/json}" "$@" --data-binary "$body" "$U/filesystem.Filesystem/$rpc"
}
# get TOKEN SANDBOX QUERY: /files GET's status, its body in $TEST_TMP/got
get() {
	curl -s -o "$TEST_TMP/got" -w '%{http_code}' -H "E2b-Sandbox-Id: $2" ${1:+-H "X-Access-Token: $1"} "$U/files?$3"
}
# put TOKEN SANDBOX QUERY FILE: /files POST (multipart, as the SDK sends it)
put() {
	curl -s -o "$TEST_TMP/put" -w '%{http_code}' -H "E2b-Sandbox-Id: $2" ${1:+-H "X-Access-Token: $1"} \
		-F "file=@$4" "$U/files?$3"
}
code() { jq -r .code "$TEST_TMP/$1" 2>/dev/null; }
inguest() { sbx-exec --tenant alice "$sa" -- sh -c "$1"; }

echo "hello" >"$TEST_TMP/hello.txt"
is "$(put "$tok" "$sa" 'path=/tmp/h/hello.txt' "$TEST_TMP/hello.txt")" 200 "an upload with the sandbox's token: 200"
is "$(jq -c . "$TEST_TMP/put")" '[{"path":"/tmp/h/hello.txt","name":"hello.txt","type":"file"}]' "answered as envd does"
is "$(inguest 'cat /tmp/h/hello.txt; stat -c %U /tmp/h/hello.txt')" "hello
user" "it is in the guest, the user's"
is "$(get "$tok" "$sa" 'path=/tmp/h/hello.txt')" 200 "a download: 200"
is "$(cat "$TEST_TMP/got")" hello "of the file's bytes"
is "$(fs "$tok" "$sa" Stat '{"path":"/tmp/h/hello.txt"}')" 200 "Stat: 200"
is "$(jq -r '.entry | "\(.type) \(.size) \(.permissions) \(.owner)"' "$TEST_TMP/out")" "FILE_TYPE_FILE 6 -rw-r--r-- user" \
	"as envd's EntryInfo"
is "$(fs "$tok" "$sa" MakeDir '{"path":"/tmp/h"}'; echo " $(code out)")" "409 already_exists" \
	"MakeDir of an existing directory: already_exists"
is "$(fs "$tok" "$sa" ListDir '{"path":"/tmp/nope"}'; echo " $(code out)")" "404 not_found" "ListDir of nothing: not_found"

# The host's files are never what is served: a host file of the same name.
echo "host secret" >"$TEST_TMP/host-only"
is "$(get "$tok" "$sa" "path=$TEST_TMP/host-only")" 404 "a path only the host has: 404, not the host's file"

# Paths that climb: cleaned as envd cleans them, then the policy's rules.
is "$(get "$tok" "$sa" 'path=/tmp/../etc/passwd')" 403 "GET /tmp/../etc/passwd: 403 (not exportable)"
is "$(get "$tok" "$sa" 'path=../../etc/passwd')" 403 "GET ../../etc/passwd (from the home): 403"
is "$(get "$tok" "$sa" 'path=/tmp/h/hello.txt%00.png')" 400 "a path with a NUL: 400"
is "$(put "$tok" "$sa" 'path=/tmp/x/../../etc/evil' "$TEST_TMP/hello.txt")" 403 "POST /tmp/x/../../etc/evil: 403"
is "$(put "$tok" "$sa" 'path=/tmp/h%00/x' "$TEST_TMP/hello.txt")" 400 "POST to a path with a NUL: 400"
is "$(fs "$tok" "$sa" Stat '{"path":"/tmp/h\u0000x"}'; echo " $(code out)")" "400 invalid_argument" "Stat of a path with a NUL"
# Symlinks in the guest resolve in the guest, and the rules are checked
# on where they lead.
sum=$(inguest 'ln -s /etc/passwd /tmp/link; ln -s /etc /tmp/ldir; ln -s /tmp/h/hello.txt /tmp/good; md5sum </etc/passwd')
is "$(get "$tok" "$sa" 'path=/tmp/link')" 403 "GET of a guest symlink to /etc/passwd: 403"
is "$(get "$tok" "$sa" 'path=/tmp/good'; echo " $(cat "$TEST_TMP/got")")" "200 hello" "one to a file under /tmp: its target's bytes"
is "$(put "$tok" "$sa" 'path=/tmp/ldir/evil' "$TEST_TMP/hello.txt")" 403 "POST through a symlinked directory to /etc: 403"
is "$(put "$tok" "$sa" 'path=/tmp/link&username=root' "$TEST_TMP/hello.txt")" 200 "POST onto the symlink itself, as root: 200"
is "$(inguest 'md5sum </etc/passwd; [ -L /tmp/link ] || echo replaced; ls /etc/evil 2>&1 | grep -c "No such"')" "$sum
replaced
1" "the link was replaced, never followed: /etc/passwd unchanged, no /etc/evil"
# Users: the guest's own permissions apply.
is "$(fs "$tok" "$sa" MakeDir '{"path":"/root/x"}'; echo " $(code out)")" "403 permission_denied" "the user cannot make /root/x"
is "$(fs "$tok" "$sa" MakeDir '{"path":"/root/x"}' -u root:; echo " $(jq -r .entry.owner "$TEST_TMP/out")")" "200 root" \
	"root (HTTP Basic, as the SDK sends it) can, and owns it"
is "$(fs "$tok" "$sa" Stat '{"path":"x"}' -u root:; echo " $(jq -r .entry.path "$TEST_TMP/out")")" "200 /root/x" \
	"a relative path is under that user's home"

# Caps: files.max_transfer (256 MiB by default) bounds an upload.
truncate -s 257M "$TEST_TMP/big"
is "$(put "$tok" "$sa" 'path=/tmp/big' "$TEST_TMP/big")" 413 "an upload over files.max_transfer: 413"
like "$(jq -r .message "$TEST_TMP/put")" 'max_transfer' "saying which cap"
is "$(inguest 'ls /tmp/big 2>&1 | grep -c "No such"')" 1 "and nothing of it reached the guest"
rm -f "$TEST_TMP/big"

# Who asks.
# The wrong token differs from the right one in its last digit, whatever
# that digit is (a fixed "0" was the right token one time in sixteen).
[ "${tok: -1}" = 0 ] && wrong=${tok%?}1 || wrong=${tok%?}0
ok "$([ "$wrong" != "$tok" ]; echo $?)" "the wrong token is not the right one"
is "$(get "$wrong" "$sa" 'path=/tmp/h/hello.txt')" 404 "GET with a wrong token: 404"
is "$(get '' "$sa" 'path=/tmp/h/hello.txt')" 401 "GET with no token and no key: 401"
is "$(get "$tokb" "$sa" 'path=/tmp/h/hello.txt')" 404 "GET with another sandbox's token: 404"
is "$(put "$tokb" "$sa" 'path=/tmp/h/bob.txt' "$TEST_TMP/hello.txt")" 404 "POST with another sandbox's token: 404"
is "$(curl -s -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $sa" -H "X-API-Key: $KB" "$U/files?path=/tmp/h/hello.txt")" 404 \
	"GET with another tenant's API key: 404"
is "$(fs "$tokb" "$sa" Stat '{"path":"/tmp"}'; echo " $(code out)")" "404 not_found" "Stat with another sandbox's token: not_found"
is "$(fs '' "$sa" Remove '{"path":"/tmp/h"}'; echo " $(code out)")" "401 unauthenticated" "Remove with no token: unauthenticated"
is "$(inguest 'cat /tmp/h/hello.txt')" hello "none of it touched alice's files"

# Hostile messages.
is "$(fs "$tok" "$sa" Stat '{"path":1}'; echo " $(code out)")" "400 invalid_argument" "a path that is no string"
is "$(fs "$tok" "$sa" ListDir '{"path":"/tmp","depth":1000}'; echo " $(code out)")" "400 invalid_argument" "a depth over 64"
is "$(fs "$tok" "$sa" Stat '{"path":' )" 400 "broken JSON: 400"
is "$(CT=application/proto fs "$tok" "$sa" Stat '{"path":"/tmp"}')" 415 "Connect's binary format: 415"
is "$(curl -s -o /dev/null -w '%{http_code}' -H "E2b-Sandbox-Id: $sa" -H "X-Access-Token: $tok" -H 'Content-Type: text/plain' \
	--data-binary x "$U/files?path=/tmp/t")" 400 "an upload that is neither multipart nor a raw body: 400"
is "$(CT=application/connect+json fs "$tok" "$sa" WatchDir x)" 200 "WatchDir with no envelope: a stream"
grep -q '"code":"invalid_argument"' "$TEST_TMP/out"; ok $? "that ends at once with invalid_argument"

# --- WatchDir and the watchers: inotify in the guest ----------------------------------
# envelope JSON: Connect's envelope around a message
envelope() { python3 -c 'import sys, struct; b = sys.argv[1].encode(); sys.stdout.buffer.write(b"\0" + struct.pack(">I", len(b)) + b)' "$1"; }
# watch TOKEN SANDBOX MESSAGE OUT: a WatchDir stream into OUT, in the
# background ($watch), keepalives each second
watch() {
	envelope "$3" >"$TEST_TMP/wbody"
	curl -s -N -m 300 -o "$4" -H "E2b-Sandbox-Id: $2" ${1:+-H "X-Access-Token: $1"} -H 'Keepalive-Ping-Interval: 1' \
		-H 'Content-Type: application/connect+json' --data-binary @"$TEST_TMP/wbody" "$U/filesystem.Filesystem/WatchDir" &
	watch=$!
}
# envelopes FILE: a stream's envelopes, a line each: flags, then the JSON
envelopes() {
	python3 -c '
import struct, sys
d = open(sys.argv[1], "rb").read()
i = 0
while i + 5 <= len(d):
    n = struct.unpack(">I", d[i + 1:i + 5])[0]
    print(d[i], d[i + 5:i + 5 + n].decode())
    i += 5 + n' "$1"
}
# events FILE: "TYPE NAME" of each event so far (names with a newline left out)
events() {
	envelopes "$1" | sed -n 's/^0 {"filesystem":\(.*\)}$/\1/p' |
		jq -r 'select(.name | contains("\n") | not) | "\(.type | sub("EVENT_TYPE_"; "")) \(.name)"'
}
# until_in FILE LINE: wait (up to a minute) for the event LINE
until_in() { for _ in $(seq 600); do events "$1" | grep -qxF "$2" && return 0; sleep 0.1; done; return 1; }
started() { for _ in $(seq 1200); do grep -q '"start"' "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# watchers: the guest's watchers running
watchers() { inguest 'for p in /proc/[0-9]*; do tr "\0" " " <$p/cmdline 2>/dev/null; echo; done | grep -c "^/run/sbx/guest-init --watch"'; }

inguest 'mkdir -p /tmp/w/sub'
watch "$tok" "$sa" '{"path":"/tmp/w"}' "$TEST_TMP/w1"
started "$TEST_TMP/w1"; ok $? "WatchDir /tmp/w: the start message comes first"
is "$(envelopes "$TEST_TMP/w1" | head -1)" '0 {"start":{}}' "as envd's StartEvent"
inguest 'cd /tmp/w && echo a >f && mv f g && chmod 600 g && rm g && touch sub/deep && printf x >"new
line" && touch done'
until_in "$TEST_TMP/w1" "CREATE done"; ok $? "the events came"
is "$(events "$TEST_TMP/w1" | uniq | tr '\n' ,)" \
	"CREATE f,WRITE f,RENAME f,CREATE g,CHMOD g,REMOVE g,CREATE done,CHMOD done," \
	"create, write, rename (from and to), chmod and remove, in order"
is "$(envelopes "$TEST_TMP/w1" | grep -c 'sub/deep')" 0 "not recursive: nothing from sub/"
is "$(envelopes "$TEST_TMP/w1" | sed -n 's/^0 {"filesystem":\(.*\)}$/\1/p' | jq -c 'select(.name | test("line")) | .name' | sort -u)" \
	'"new\nline"' "a name with a newline, whole"
sleep 2
grep -q '"keepalive"' "$TEST_TMP/w1"; ok $? "keepalives between events (Keepalive-Ping-Interval)"
is "$(watchers)" 1 "one watcher in the guest"
is "$(curl -s -H "E2b-Sandbox-Id: $sa" -H "X-Access-Token: $tok" -H 'Content-Type: application/json' --data-binary '{}' \
	"$U/process.Process/List" | jq '[.processes[] | select(.cmd | test("guest-init"))] | length')" 0 \
	"which is no process of the sandbox's (process.List)"
kill "$watch"; wait "$watch" 2>/dev/null
n=1; for _ in $(seq 30); do n=$(watchers); [ "$n" = 0 ] && break; sleep 1; done
is "$n" 0 "the client gone, the guest's watcher ends"

watch "$tok" "$sa" '{"path":"/tmp/w","recursive":true}' "$TEST_TMP/w2"
started "$TEST_TMP/w2"; ok $? "a recursive watch starts"
inguest 'mkdir -p /tmp/w/a/b && touch /tmp/w/a/b/c /tmp/w/sub/deep2 && touch /tmp/w/done2'
until_in "$TEST_TMP/w2" "CREATE done2"; ok $? "its events came"
events "$TEST_TMP/w2" | grep -qxF "CREATE sub/deep2"; ok $? "a file in a directory that was there: sub/deep2"
events "$TEST_TMP/w2" | grep -qxF "CREATE a/b/c"; ok $? "one in directories made after the start: a/b/c"
inguest 'rm -rf /tmp/w'
until_in "$TEST_TMP/w2" "REMOVE ."; ok $? "the directory removed: REMOVE ."
wait "$watch"
is "$(envelopes "$TEST_TMP/w2" | tail -1)" "2 {}" "and the stream ends, cleanly"

wr() { # wr TOKEN SANDBOX MESSAGE: a WatchDir that ends at once; its last envelope
	envelope "$3" >"$TEST_TMP/wbody"
	curl -s -m 120 -o "$TEST_TMP/w3" -H "E2b-Sandbox-Id: $2" ${1:+-H "X-Access-Token: $1"} \
		-H 'Content-Type: application/connect+json' --data-binary @"$TEST_TMP/wbody" "$U/filesystem.Filesystem/WatchDir"
	envelopes "$TEST_TMP/w3" | tail -1 | cut -d' ' -f2- | jq -r .error.code
}
is "$(wr "$tok" "$sa" '{"path":"/tmp/nope"}')" not_found "WatchDir of a missing directory: not_found"
is "$(wr "$tok" "$sa" '{"path":"/tmp/h/hello.txt"}')" invalid_argument "of a file: invalid_argument"
is "$(wr "$tok" "$sa" '{"path":"/root"}')" permission_denied "of what the user cannot read: permission_denied"
is "$(wr "$tokb" "$sa" '{"path":"/tmp"}')" not_found "with another sandbox's token: not_found"
is "$(wr "$tok" "$sa" '{"path":"/tmp","recursive":"yes"}')" invalid_argument "recursive that is no bool"

# The polling API (E2B's Python SDK): CreateWatcher, GetWatcherEvents, RemoveWatcher.
inguest 'mkdir -p /tmp/p'
is "$(fs "$tok" "$sa" CreateWatcher '{"path":"/tmp/p"}')" 200 "CreateWatcher: 200"
wid=$(jq -r .watcherId "$TEST_TMP/out")
like "$wid" '^w[0-9a-f]{16}$' "a watcher ID"
inguest 'touch /tmp/p/x'
evs=; for _ in $(seq 100); do
	fs "$tok" "$sa" GetWatcherEvents "{\"watcherId\":\"$wid\"}" >/dev/null
	evs="$evs$(jq -r '.events[] | "\(.type) \(.name)"' "$TEST_TMP/out" 2>/dev/null | tr '\n' ,)"
	case $evs in *"EVENT_TYPE_CHMOD x"*) break ;; esac
	sleep 0.2
done
is "$evs" "EVENT_TYPE_CREATE x,EVENT_TYPE_CHMOD x," "GetWatcherEvents: the events since, each once"
is "$(fs "$tokb" "$sb" GetWatcherEvents "{\"watcherId\":\"$wid\"}"; echo " $(code out)")" "404 not_found" \
	"another tenant's sandbox does not find it"
is "$(fs "$tokb" "$sa" GetWatcherEvents "{\"watcherId\":\"$wid\"}"; echo " $(code out)")" "404 not_found" \
	"nor does another sandbox's token"
is "$(fs "$tok" "$sa" RemoveWatcher "{\"watcherId\":\"$wid\"}")" 200 "RemoveWatcher: 200"
is "$(fs "$tok" "$sa" GetWatcherEvents "{\"watcherId\":\"$wid\"}"; echo " $(code out)")" "404 not_found" "then it is gone"
is "$(fs "$tok" "$sa" CreateWatcher '{"path":"/tmp/nope"}'; echo " $(code out)")" "404 not_found" \
	"CreateWatcher of a missing directory: not_found"
is "$(fs "$tokb" "$sa" CreateWatcher '{"path":"/tmp"}'; echo " $(code out)")" "404 not_found" \
	"CreateWatcher in another tenant's sandbox: not_found"
n=1; for _ in $(seq 30); do n=$(watchers); [ "$n" = 0 ] && break; sleep 1; done
is "$n" 0 "no watcher is left in the guest"
grep -q '"op":"watch".*"session":"'"$sa" "$L/audit.log"; ok $? "watches are audited, with the session"
# A guest that lies: root in it swaps the watcher for a program that prints
# what it likes.  The stream ends with an error, the liar is stopped, and the
# service goes on.
printf '#!/bin/sh\nprintf "S\\000Cok\\000Xbad\\000"\nexec sleep 600\n' >"$TEST_TMP/fake1"
printf '#!/bin/sh\nprintf "S\\000"\nhead -c 10000 /dev/zero | tr "\\000" a\nexec sleep 600\n' >"$TEST_TMP/fake2"
put "$tok" "$sa" 'path=/tmp/fake1' "$TEST_TMP/fake1" >/dev/null
put "$tok" "$sa" 'path=/tmp/fake2' "$TEST_TMP/fake2" >/dev/null
liars() { inguest 'for p in /proc/[0-9]*; do tr "\0" " " <$p/cmdline 2>/dev/null; echo; done | grep -c "^sleep 600"'; }
inguest 'mkdir -p /tmp/lie'
for f in fake1 fake2; do
	sbx-exec --tenant alice -u root "$sa" -- sh -c "umount /run/sbx/guest-init; cat /tmp/$f >/run/sbx/guest-init"
	watch "$tok" "$sa" '{"path":"/tmp/lie"}' "$TEST_TMP/$f.out"
	wait "$watch"
	is "$(envelopes "$TEST_TMP/$f.out" | tail -1 | cut -d' ' -f2- | jq -r .error.code)" internal \
		"a watcher that prints $([ $f = fake1 ] && echo "an unknown record" || echo "a record of 10000 bytes"): the stream ends, internal"
done
is "$(events "$TEST_TMP/fake1.out")" "CREATE ok" "what came before the lie was passed on, nothing after"
n=1; for _ in $(seq 30); do n=$(liars); [ "$n" = 0 ] && break; sleep 1; done
is "$n" 0 "the lying watchers were stopped"
grep -q '"op":"upload".*"session":"'"$sa" "$L/audit.log"; ok $? "uploads are audited, with the session"
grep -q '"op":"download"' "$L/audit.log" && grep -q '"op":"fs"' "$L/audit.log"; ok $? "and downloads and filesystem calls"
grep '"type":"serve.call"' "$L/audit.log" |
	python3 "$top/tests/tools/json-schema-check.py" validate --strict --lines "$top/docs/schema" 'audit.json#/$defs/record' >/dev/null 2>&1
ok $? "serve.call records as the audit schema describes them"

kill -0 "$srv"; ok $? "the service is still up after all of it"
api "$KA" DELETE "/sandboxes/$sa" >/dev/null
api "$KB" DELETE "/sandboxes/$sb" >/dev/null
kill "$srv"; wait "$srv"
is "$?" 0 "SIGTERM ends the service with 0"
done_testing
