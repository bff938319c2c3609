#!/bin/bash
# sbx-serve (issue 37): the E2B API over sbx.  The real E2B JS SDK (pinned
# in tests/fixtures/e2b-sdk, installed with npm ci) creates, runs and
# kills against the service with only E2B_API_URL, E2B_SANDBOX_URL and
# E2B_API_KEY set; then the attacks, with curl: no key, a wrong key,
# another tenant's sandbox, an envd call without its sandbox's token or
# with another's, hostile JSON, an oversized body, path tricks; the unix
# socket's callers told apart by their uid; and the front's own
# confinement (uid, capabilities, namespaces).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_vm
command -v curl >/dev/null || skip_all "curl not installed"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
fi
# base (templates/base.yaml) is E2B's default template; scripts/test.sh
# builds it.  Without it the SDK's own default is left untested.
BASE=0
ls "$SBX_TEMPLATES"/base@*/manifest.json >/dev/null 2>&1 && BASE=1
[ "$BASE" = 1 ] || [ "${SBX_REQUIRE_BASE:-0}" = 0 ] || { ok 1 "the base template is built (scripts/test.sh)"; done_testing; }
top=$(cd "$(dirname "$0")/.." && pwd)
if ! npm_fixture_install "$top/tests/fixtures/e2b-sdk" e2b-sdk; then
	[ "${SBX_REQUIRE_NODE:-0}" = 1 ] || skip_all "$NPM_WHY"
	ok 1 "the E2B SDK installs: $NPM_WHY"
	done_testing
fi
SDK=$NPM_DIR/node_modules/e2b
L=$SBX_ROOT/var/lib/sbx
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
U=http://127.0.0.1:$port
SOCK=$SBX_ROOT/run/sbx-serve/serve.sock
mkdir -p "$SBX_ROOT/etc/sbx"
cat >"$SBX_ROOT/etc/sbx/sbx.yaml" <<EOF2
serve:
  users: {"54321": carol}
EOF2

# --- keys ------------------------------------------------------------------------
KA=$(sbx-serve key add --tenant alice 2>"$TEST_TMP/err"); ok $? "sbx-serve key add --tenant alice"
like "$KA" '^e2b_[0-9a-f]{40}$' "prints a key in E2B's format, and only it"
like "$(cat "$TEST_TMP/err")" 'key [0-9a-f]{12} for tenant alice' "its ID on stderr"
KB=$(sbx-serve key add --tenant bob 2>/dev/null)
idb=$(sbx-serve key list --json | jq -r '.[] | select(.tenant == "bob") | .id')
like "$idb" '^[0-9a-f]{12}$' "key list --json names bob's key ($idb)"
! grep -rqF "${KA#e2b_}" "$L/serve/keys"; ok $? "the keys are stored hashed, not as text"
is "$(stat -c %a "$L/serve/keys")" 700 "in a root-only directory"
sbx-serve key add >/dev/null 2>&1; is "$?" 2 "key add without a tenant: 2"
sbx-serve key add --tenant operator >/dev/null 2>&1; is "$?" 3 "key add for a reserved name: 3"
sbx-serve key rm 000000000000 >/dev/null 2>&1; is "$?" 4 "key rm of an unknown ID: 4"
sbx-serve key rm ../../x >/dev/null 2>&1; is "$?" 3 "key rm of a path: 3"

# --- the service -----------------------------------------------------------------
sbx-serve --listen "127.0.0.1:$port" >"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.1; done
curl -sf "$U/health" >/dev/null; ok $? "sbx-serve --listen 127.0.0.1:$port answers"
[ -S "$SOCK" ]; ok $? "and listens on $SOCK"
front=$(pgrep -P "$srv" | head -n1)
st=$(grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' "/proc/$front/status" | tr -s '\t ' ' ' | tr '\n' ' ')
like "$st" "Uid: $((0x5b000000 + (1 << 24) + front)) " "the front (HTTP parser) runs as a uid of its own ($st)"
like "$st" 'CapEff: 0000000000000000' "with no capabilities"
like "$st" 'NoNewPrivs: 1 Seccomp: 2' "no_new_privs, under seccomp"
[ "$(readlink "/proc/$front/ns/net")" != "$(readlink /proc/self/ns/net)" ]; ok $? "in a network namespace of its own"
is "$(ls "/proc/$front/root/" 2>/dev/null | wc -l)" 0 "with an empty root"

# --- the real SDK ------------------------------------------------------------------
ver=$(jq -r .version "$SDK/package.json")
diag "e2b $ver on node $(node --version)"
E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KA E2B_SDK=$SDK/dist/index.mjs SBX_TEMPLATE=python SBX_BASE=$BASE \
	timeout 600 node --test --test-reporter=tap "$top/tests/serve/sdk.test.mjs" >"$TEST_TMP/sdk.tap" 2>&1
rc=$?
pass=$(grep -c '^# pass' "$TEST_TMP/sdk.tap" >/dev/null && sed -n 's/^# pass //p' "$TEST_TMP/sdk.tap")
total=$(sed -n 's/^# tests //p' "$TEST_TMP/sdk.tap")
[ "$rc" = 0 ] || sed 's/^/#   /' "$TEST_TMP/sdk.tap" | tail -40
is "$rc" 0 "the E2B SDK $ver's tests (tests/serve/sdk.test.mjs): ${pass:-0} of ${total:-?} pass"
grep -q '"type":"serve.call".*"principal":"key:' "$L/audit.log"; ok $? "the SDK's calls are audited under its key's ID"
# The README's example, as pasted, with only the three variables set.
awk '/^node -e "$/ { f = 1; next } f && /^\}\)\(\)"$/ { print "})()"; exit } f' "$top/README.md" >"$TEST_TMP/readme.js"
out=$(cd "$TEST_TMP" && E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KA NODE_PATH=$NPM_DIR/node_modules \
	timeout 300 node "$TEST_TMP/readme.js" 2>&1)
is "$out" "hello from sbx" "the README's example runs with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set"

# --- the attacks, with curl ----------------------------------------------------------
api() { # api KEY METHOD PATH [BODY]: the status, the body in $TEST_TMP/body
	curl -s -o "$TEST_TMP/body" -w '%{http_code}' -X "$2" ${1:+-H "X-API-Key: $1"} \
		-H 'Content-Type: application/json' ${4:+--data-binary "$4"} "$U$3"
}
is "$(api '' GET /sandboxes)" 401 "no key: 401"
is "$(api e2b_0000000000000000000000000000000000000000 GET /sandboxes)" 401 "a wrong key: 401"
is "$(api "$KA"x GET /sandboxes)" 401 "a malformed key: 401"
code=$(api "$KA" POST /sandboxes '{"templateID":"python","timeout":300}')
is "$code" 201 "alice creates a sandbox: 201"
sa=$(jq -r .sandboxID "$TEST_TMP/body"); tok=$(jq -r .envdAccessToken "$TEST_TMP/body")
like "$tok" '^[0-9a-f]{48}$' "with an access token for its envd calls"
is "$(sbx-ps --json --tenant alice | jq -r '.[0].session')" "$sa" "it is an sbx session of tenant alice"
is "$(api "$KB" GET "/sandboxes/$sa")" 404 "bob cannot see it: 404"
is "$(api "$KB" DELETE "/sandboxes/$sa")" 404 "nor kill it: 404"
is "$(api "$KB" GET /sandboxes) $(jq length "$TEST_TMP/body")" "200 0" "bob's list is empty"
is "$(api "$KA" GET "/sandboxes/$sa/logs")" 200 "its logs (the guest's console): 200"
jq -e '(.logs | length) > 10 and (.logs | length) == (.logEntries | length)' "$TEST_TMP/body" >/dev/null
ok $? "lines in logs and as logEntries"
like "$(jq -r '.logs[0].timestamp + " " + .logEntries[0].message' "$TEST_TMP/body")" \
	'^20[0-9-]+T[0-9:.]+Z Linux version' "each stamped from the kernel's clock, the prefix taken off the entry"
is "$(api "$KA" GET "/v2/sandboxes/$sa/logs?direction=backward&limit=2")" 200 "v2, the newest 2: 200"
is "$(jq '.logs | length' "$TEST_TMP/body")" 2 "two of them"
jq -e '.logs[0].timestamp >= .logs[1].timestamp' "$TEST_TMP/body" >/dev/null; ok $? "newest first"
is "$(api "$KA" GET "/v2/sandboxes/$sa/logs?cursor=99999999999999")" 200 "a cursor past the end: 200"
is "$(jq '.logs | length' "$TEST_TMP/body")" 0 "and nothing"
is "$(api "$KA" GET "/sandboxes/$sa/logs?limit=x")" 400 "a limit that is no number: 400"
is "$(api "$KA" GET "/sandboxes/$sa/logs?limit=5000")" 400 "one over 1000: 400"
is "$(api "$KB" GET "/sandboxes/$sa/logs")" 404 "bob cannot read them: 404"
is "$(api "$KA" POST "/sandboxes/$sa/snapshots" '{"name":"../x"}')" 400 "a snapshot name with a path: 400"
is "$(api "$KA" POST "/sandboxes/$sa/snapshots" '{"name":7}')" 400 "a name that is no string: 400"
is "$(api "$KA" POST "/sandboxes/$sa/snapshots" '{"name":"a1"}')" 201 "alice snapshots hers: 201"
sid=$(jq -r .snapshotID "$TEST_TMP/body")
like "$sid" '^a1@' "its ID is NAME@VERSION ($sid)"
is "$(api "$KB" GET /snapshots) $(jq length "$TEST_TMP/body")" "200 0" "bob lists none of alice's snapshots"
is "$(api "$KB" DELETE "/templates/$sid")" 404 "nor deletes one: 404"
is "$(api "$KB" POST "/sandboxes/$sa/snapshots" '{}')" 404 "nor snapshots her sandbox: 404"
like "$(api "$KB" POST /sandboxes "{\"templateID\":\"$sid\",\"timeout\":60}")" '^40[04]$' \
	"nor makes a sandbox of it"
is "$(api "$KA" GET "/snapshots?sandboxID=$sa") $(jq -r '.[0].snapshotID' "$TEST_TMP/body")" "200 $sid" \
	"alice's list of her sandbox's snapshots has it"
is "$(api "$KA" DELETE "/templates/$sid")" 204 "alice deletes it: 204"
is "$(api "$KA" DELETE "/templates/$sid")" 404 "and it is gone: 404"
start() { # start TOKEN SANDBOX: a Start call's status and body
	python3 -c 'import sys, struct; m = b"{\"process\":{\"cmd\":\"/bin/echo\",\"args\":[\"hi\"]}}"
sys.stdout.buffer.write(b"\0" + struct.pack(">I", len(m)) + m)' >"$TEST_TMP/start"
	curl -s -o "$TEST_TMP/out" -w '%{http_code}' -H "E2b-Sandbox-Id: $2" ${1:+-H "X-Access-Token: $1"} \
		-H 'Content-Type: application/connect+json' --data-binary @"$TEST_TMP/start" "$U/process.Process/Start"
}
is "$(start "$tok" "$sa")" 200 "a Start with the sandbox's token: 200"
grep -q '"stdout":"aGkK"' "$TEST_TMP/out"; ok $? "and its output"
start '' "$sa" >/dev/null; grep -q '"code":"unauthenticated"' "$TEST_TMP/out"; ok $? "without the token: unauthenticated"
last=${tok: -1}; [ "$last" = 0 ] && wrong=${tok%?}1 || wrong=${tok%?}0 # differs in its last digit
start "$wrong" "$sa" >/dev/null; grep -q '"code":"not_found"' "$TEST_TMP/out"; ok $? "with a wrong token: not found"
is "$(api "$KA" POST /sandboxes '{"templateID":')" 400 "broken JSON: 400"
is "$(api "$KA" POST /sandboxes '[1,2]')" 400 "JSON that is not an object: 400"
is "$(api "$KA" POST /sandboxes '{"templateID":"python","timeout":-1}')" 400 "a negative timeout: 400"
is "$(api "$KA" POST /sandboxes '{"templateID":"../../etc","timeout":1}')" 400 "a template name with a path: 400"
is "$(api "$KA" POST /sandboxes '{"templateID":"python","envVars":{"A=B":"x"}}')" 400 "an env name with '=': 400"
head -c 2000000 /dev/zero | tr '\0' ' ' >"$TEST_TMP/big"
is "$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $KA" --data-binary @"$TEST_TMP/big" "$U/sandboxes")" 413 \
	"a body over a MiB: 413"
is "$(api "$KA" GET '/sandboxes/..%2F..%2Fetc')" 404 "a sandbox ID with a path: 404"
is "$(api "$KA" GET '/sandboxes/s-1%00x')" 404 "a sandbox ID with a NUL: 404"
is "$(api "$KA" DELETE "/sandboxes/$sa")" 204 "alice kills hers: 204"
is "$(api "$KA" GET "/sandboxes/$sa")" 404 "and it is gone"
# A flood from one key: past serve.rate (default 50 a second, twice that at
# once) it is told 429, with Retry-After; another key is not slowed.  32
# at a time outrun 50 a second even when each answer takes half a second.
KF=$(sbx-serve key add --tenant flood 2>/dev/null)
seq 1000 | xargs -P 32 -I{} curl -s -o /dev/null -w '%{http_code} %header{retry-after}\n' -H "X-API-Key: $KF" \
	"$U/sandboxes" >"$TEST_TMP/flood"
n429=$(grep -c '^429 ' "$TEST_TMP/flood"); n200=$(grep -c '^200 ' "$TEST_TMP/flood")
[ "$n429" -gt 0 ] && [ "$n200" -ge 100 ] && [ $((n429 + n200)) = 1000 ]
ok $? "a flood of 1000 from one key, 32 at a time: $n200 answered, $n429 told 429, nothing else"
is "$(grep '^429 ' "$TEST_TMP/flood" | sort -u)" "429 5" "each 429 says when to come back (Retry-After)"
is "$(api "$KA" GET /sandboxes)" 200 "meanwhile another key is answered"
# Idle connections hold nothing that others need: 500 of them open, and
# the service still answers.
python3 - "$port" "$U" "$KA" <<'PY' >"$TEST_TMP/idle"
import socket, sys, urllib.request
port, url, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
for c in conns[:250]:
    c.sendall(b"GET /sandboxes HTTP/1.1\r\nHost: x\r\n")  # a head never finished
req = urllib.request.Request(url + "/sandboxes", headers={"X-API-Key": key})
print(urllib.request.urlopen(req, timeout=30).status)
PY
is "$(cat "$TEST_TMP/idle")" 200 "with 500 idle or half-sent connections open, a request is answered"
kill -0 "$srv"; ok $? "the service is still up after all of it"

# --- the unix socket ------------------------------------------------------------------
chmod 0711 "$SBX_ROOT" "$SBX_ROOT/run" # mktemp's 0700; /run is open to all
us() { curl -s -o "$TEST_TMP/body" -w '%{http_code}' --unix-socket "$SOCK" "$@"; }
is "$(us http://x/sandboxes)" 200 "root on the unix socket is the operator: 200"
is "$(setpriv --reuid 54321 --regid 54321 --clear-groups curl -s -o /dev/null -w '%{http_code}' \
	--unix-socket "$SOCK" http://x/sandboxes)" 200 "uid 54321 (serve.users: carol) is let in"
is "$(setpriv --reuid 54322 --regid 54322 --clear-groups curl -s -o /dev/null -w '%{http_code}' \
	--unix-socket "$SOCK" http://x/sandboxes)" 401 "uid 54322, in no serve.users, is refused: 401"
out=$(setpriv --reuid 54321 --regid 54321 --clear-groups curl -s -w '\n%{http_code}' \
	-H 'Content-Type: application/json' -d '{"templateID":"python"}' --unix-socket "$SOCK" http://x/sandboxes)
is "$(printf '%s' "$out" | tail -n1)" 201 "carol creates over the socket: 201"
sc=$(printf '%s' "$out" | head -n1 | jq -r .sandboxID)
is "$(sbx-ps --json --tenant carol | jq -r '.[0].session')" "$sc" "as tenant carol"
is "$(setpriv --reuid 54321 --regid 54321 --clear-groups curl -s -o /dev/null -w '%{http_code}' -X DELETE \
	--unix-socket "$SOCK" "http://x/sandboxes/$sc")" 204 "and kills it"
grep -q '"principal":"uid:54321"' "$L/audit.log"; ok $? "audited under uid 54321"
grep '"type":"serve.call"' "$L/audit.log" |
	python3 "$top/tests/tools/json-schema-check.py" validate --strict --lines "$top/docs/schema" 'audit.json#/$defs/record' >/dev/null 2>&1
ok $? "serve.call records as the audit schema describes them"

kill "$srv"; wait "$srv"
is "$?" 0 "SIGTERM ends the service with 0"
[ ! -e "$SOCK" ]; ok $? "and removes its socket"

# --- a restart: sandboxes and their commands live on, and a client reconnects ----------
cat >"$TEST_TMP/restart.mjs" <<'EOF2'
const { Sandbox } = await import(process.env.E2B_SDK)
const [what, id, pid] = process.argv.slice(2)
if (what === 'start') {
	const s = await Sandbox.create('python', { timeoutMs: 300_000 })
	const h = await s.commands.run('for i in 1 2 3 4 5 6; do echo line$i; sleep 1; done', { background: true, timeoutMs: 0 })
	console.log(s.sandboxId, h.pid)
	process.exit(0) // the client goes, its stream with it
}
const s = await Sandbox.connect(id)
const h = await s.commands.connect(Number(pid))
const r = await h.wait()
console.log(JSON.stringify([r.exitCode, r.stdout]))
await s.kill()
EOF2
E2B_ENV=(E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KA E2B_SDK=$SDK/dist/index.mjs)
sbx-serve --listen "127.0.0.1:$port" >>"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.1; done
read -r rs rpid < <(env "${E2B_ENV[@]}" timeout 120 node "$TEST_TMP/restart.mjs" start)
like "$rs $rpid" '^s-[0-9a-f]{12} [0-9]+$' "a sandbox with a command in the background ($rs, pid $rpid)"
kill "$srv"; wait "$srv"
sbx-serve --listen "127.0.0.1:$port" >>"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf "$U/health" >/dev/null && break; sleep 0.1; done
is "$(sbx-ps --json | jq -r --arg s "$rs" '.[] | select(.session == $s) | .state')" running \
	"the sandbox ran on while the service was down"
out=$(env "${E2B_ENV[@]}" timeout 120 node "$TEST_TMP/restart.mjs" connect "$rs" "$rpid" 2>&1)
is "$out" '[0,"line1\nline2\nline3\nline4\nline5\nline6\n"]' \
	"after the restart the SDK reconnects to the command and gets all of its output and its end"
kill "$srv"; wait "$srv"
done_testing
