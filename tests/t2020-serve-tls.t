#!/bin/bash
# sbx-serve's TCP listener over TLS (serve.tls; libmicrohttpd's own, GnuTLS).
# A CA and a server certificate made here with openssl; curl with the CA
# is answered, without it (or with another CA) it refuses the service,
# plain HTTP to the port gets nothing, a TLS 1.1 client is turned away;
# the unix socket stays plain.  A key that others may read, that is not
# root's, that is a symlink or that is not the certificate's is refused
# at start (3), before anything listens.  The key's text is in neither
# half's memory once the front runs.  Then the real E2B SDK over https
# with only NODE_EXTRA_CA_CERTS added: create, run, kill.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib-npm.sh"
require_vm
command -v curl >/dev/null || skip_all "curl not installed"
command -v openssl >/dev/null || skip_all "openssl not installed"
if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1; then
	[ "${SBX_REQUIRE_PYTHON:-0}" = 1 ] || skip_all "no python template built (make python-image)"
fi
top=$(cd "$(dirname "$0")/.." && pwd)
L=$SBX_ROOT/var/lib/sbx
SOCK=$SBX_ROOT/run/sbx-serve/serve.sock
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
U=https://127.0.0.1:$port
C=$TEST_TMP/tls
mkdir -p "$C" "$SBX_ROOT/etc/sbx"

# --- a CA, a certificate for 127.0.0.1 from it, and another CA ----------------------
ec() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "$@" 2>>"$C/openssl.log"; }
ec -x509 -days 2 -subj /CN=sbx-test-ca -keyout "$C/ca.key" -out "$C/ca.pem"
ec -x509 -days 2 -subj /CN=sbx-other-ca -keyout "$C/other.key" -out "$C/other.pem"
ec -subj /CN=127.0.0.1 -keyout "$C/srv.key" -out "$C/srv.csr"
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$C/ext"
openssl x509 -req -days 2 -in "$C/srv.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial \
	-extfile "$C/ext" -out "$C/srv.pem" 2>>"$C/openssl.log"
chmod 0600 "$C/srv.key"
openssl verify -CAfile "$C/ca.pem" "$C/srv.pem" >/dev/null 2>&1; ok $? "a CA and a server certificate for 127.0.0.1"

# --- refused at start ----------------------------------------------------------------
refused() { # refused WANT-STATUS WANT-MESSAGE DESCRIPTION ARGS...
	local want=$1 msg=$2 what=$3
	shift 3
	timeout 30 sbx-serve --listen "127.0.0.1:$port" "$@" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
	is "$?" "$want" "$what: $want"
	like "$(cat "$TEST_TMP/err")" "$msg" "and says so ($(head -n1 "$TEST_TMP/err"))"
}
cp "$C/srv.key" "$C/k644" && chmod 0644 "$C/k644"
refused 3 "k644 is owned by uid 0 with mode 0644: it must be root's and readable by no one else" \
	"a key file of mode 0644 (anyone may read it) is refused" --tls-cert "$C/srv.pem" --tls-key "$C/k644"
! curl -sk -o /dev/null "$U/health" && [ ! -e "$SOCK" ]
ok $? "before anything listened: no TCP port, no unix socket"
cp "$C/srv.key" "$C/k640" && chmod 0640 "$C/k640"
refused 3 "mode 0640" "mode 0640 (its group may read it) too" --tls-cert "$C/srv.pem" --tls-key "$C/k640"
cp "$C/srv.key" "$C/knobody" && chown nobody "$C/knobody"
refused 3 "owned by uid $(id -u nobody)" "a key that is not root's, even at 0600" \
	--tls-cert "$C/srv.pem" --tls-key "$C/knobody"
ln -s srv.key "$C/klink"
refused 3 "klink is a symbolic link" "a key reached through a symlink" --tls-cert "$C/srv.pem" --tls-key "$C/klink"
mkfifo "$C/kfifo"
refused 3 "kfifo is not a regular file" "a FIFO in the key's place (no hang)" --tls-cert "$C/srv.pem" --tls-key "$C/kfifo"
cp "$C/other.key" "$C/kother" && chmod 0600 "$C/kother"
refused 3 "do not match" "another certificate's key" --tls-cert "$C/srv.pem" --tls-key "$C/kother"
refused 3 "not usable" "a key given as the certificate" --tls-cert "$C/srv.key" --tls-key "$C/srv.key"
refused 2 "usage:" "--tls-cert without --tls-key" --tls-cert "$C/srv.pem"
timeout 30 sbx-serve --tls-cert "$C/srv.pem" --tls-key "$C/srv.key" >/dev/null 2>"$TEST_TMP/err"
is "$?" 2 "TLS with no TCP listener: 2"
printf 'serve:\n  listen: 127.0.0.1:%s\n  tls: {cert: %s}\n' "$port" "$C/srv.pem" >"$SBX_ROOT/etc/sbx/sbx.yaml"
timeout 30 sbx-serve >/dev/null 2>"$TEST_TMP/err"
is "$?" 3 "sbx.yaml's serve.tls with a cert and no key: 3"
like "$(cat "$TEST_TMP/err")" "serve.tls: expected both cert and key" "and says which key is missing"

# --- served --------------------------------------------------------------------------
printf 'serve:\n  listen: 127.0.0.1:%s\n  tls: {cert: %s, key: %s}\n' "$port" "$C/srv.pem" "$C/srv.key" \
	>"$SBX_ROOT/etc/sbx/sbx.yaml"
KA=$(sbx-serve key add --tenant alice 2>/dev/null)
sbx-serve >"$TEST_TMP/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do curl -sf --cacert "$C/ca.pem" "$U/health" >/dev/null && break; sleep 0.1; done
is "$(curl -s --cacert "$C/ca.pem" "$U/health")" '{"status":"ok"}' "serve.tls: curl --cacert the CA gets /health over https"
like "$(cat "$TEST_TMP/serve.log")" "and 127.0.0.1:$port \(TLS\)" "the service says its TCP listener is TLS"
is "$(curl -s -o "$TEST_TMP/body" -w '%{http_code}' --cacert "$C/ca.pem" -H "X-API-Key: $KA" "$U/sandboxes") \
$(cat "$TEST_TMP/body")" "200 []" "GET /sandboxes with a key: 200"
is "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$C/ca.pem" "$U/sandboxes")" 401 "and without one: 401"
curl -s -o /dev/null --max-time 10 "http://127.0.0.1:$port/health"
rc=$?
[ "$rc" != 0 ]; ok $? "plain HTTP to the TLS port gets no answer (curl $rc)"
curl -s -o /dev/null -H "X-API-Key: $KA" --max-time 10 "http://127.0.0.1:$port/sandboxes"
[ "$?" != 0 ]; ok $? "nor does a plain HTTP request with a key"
curl -s -o /dev/null "$U/health"
is "$?" 60 "curl without the CA: the certificate does not verify (60)"
curl -s -o /dev/null --cacert "$C/other.pem" "$U/health"
is "$?" 60 "curl trusting another CA: 60"
is "$(curl -s --cacert "$C/ca.pem" --resolve "sbx.invalid:$port:127.0.0.1" -o /dev/null -w '%{http_code}' \
	"https://sbx.invalid:$port/health"; echo " $?")" "000 60" "a name the certificate is not for: 60"
s_client() { timeout 10 openssl s_client -connect "127.0.0.1:$port" -CAfile "$C/ca.pem" "$@" </dev/null >/dev/null 2>&1; }
s_client -tls1_2; ok $? "a TLS 1.2 client is served"
s_client -tls1_3; ok $? "a TLS 1.3 client is served"
! s_client -tls1_1 -cipher 'DEFAULT:@SECLEVEL=0'; ok $? "a TLS 1.1 client is turned away"
! s_client -tls1 -cipher 'DEFAULT:@SECLEVEL=0'; ok $? "a TLS 1.0 client is turned away"
is "$(curl -s --unix-socket "$SOCK" http://x/health)" '{"status":"ok"}' "the unix socket stays plain HTTP"
front=$(pgrep -P "$srv" | head -n1)
memcount() { # memcount PID TEXT: how many times TEXT is in PID's readable memory
	python3 - "$1" "$2" <<'PY'
import re, sys
pid, needle, n = sys.argv[1], sys.argv[2].encode(), 0
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
        if "r" not in m[3] or "[vvar]" in line or "[vsyscall]" in line:
            continue
        lo, hi = int(m[1], 16), int(m[2], 16)
        # A sanitized build reserves terabytes of shadow: no heap is that big.
        if hi - lo > (1 << 30):
            continue
        # In pieces (overlapping by the needle's length), so no read is huge.
        step, at = 16 << 20, lo
        while at < hi:
            try:
                mem.seek(at)
                n += mem.read(min(step + len(needle), hi - at)).count(needle)
            except (OSError, ValueError, MemoryError):
                pass
            at += step
print(n)
PY
}
keyline=$(sed -n 2p "$C/srv.key" | cut -c1-40)
certline=$(sed -n 2p "$C/srv.pem" | cut -c1-40)
[ "$(memcount "$front" "$certline")" -ge 1 ]
ok $? "the front holds the certificate's PEM (the search finds what is there)"
is "$(memcount "$front" "$keyline") $(memcount "$srv" "$keyline")" "0 0" \
	"the key's PEM is wiped in the front (GnuTLS has it) and in the back"

# --- the real SDK over https -----------------------------------------------------------
if ! npm_fixture_install "$top/tests/fixtures/e2b-sdk" e2b-sdk; then
	[ "${SBX_REQUIRE_NODE:-0}" = 1 ] || { kill "$srv"; wait "$srv"; skip_all "$NPM_WHY"; }
	ok 1 "the E2B SDK installs: $NPM_WHY"
	kill "$srv"; wait "$srv"
	done_testing
fi
cat >"$TEST_TMP/tls.mjs" <<'EOF2'
const { Sandbox } = await import(process.env.E2B_SDK)
const s = await Sandbox.create('python', { timeoutMs: 300_000 })
const r = await s.commands.run('echo hi')
await s.kill()
console.log(JSON.stringify([r.exitCode, r.stdout, await Sandbox.kill(s.sandboxId)]))
EOF2
E2B_ENV=(E2B_API_URL=$U E2B_SANDBOX_URL=$U E2B_API_KEY=$KA E2B_SDK=$NPM_DIR/node_modules/e2b/dist/index.mjs)
out=$(env "${E2B_ENV[@]}" timeout 60 node "$TEST_TMP/tls.mjs" 2>&1)
rc=$?
why=$(printf '%s' "$out" | grep -m1 -oE 'UNABLE_TO_[A-Z_]+|SELF_SIGNED[A-Z_]*|unable to verify[a-z ]*')
[ "$rc" != 0 ] && [ -n "$why" ] && [ -z "$(sbx-ps -q)" ]
ok $? "the SDK without the CA refuses the service ($why), and creates nothing"
out=$(env "${E2B_ENV[@]}" NODE_EXTRA_CA_CERTS="$C/ca.pem" timeout 300 node "$TEST_TMP/tls.mjs" 2>&1)
is "$out" '[0,"hi\n",false]' "the E2B SDK over https (NODE_EXTRA_CA_CERTS): create, echo hi, kill"
is "$(sbx-ps -q)" "" "no sandbox is left"
grep -q '"type":"serve.call".*"principal":"key:' "$L/audit.log"; ok $? "its calls are audited under its key, as over HTTP"

kill "$srv"; wait "$srv"
is "$?" 0 "SIGTERM ends the service with 0"
done_testing
