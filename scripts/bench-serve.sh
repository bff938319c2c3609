#!/bin/bash
# sbx-serve's figures (issue 37), each beside the CLI doing the same in
# the same run:
#  - time to interactive: the E2B SDK's Sandbox.create -> commands.run
#    ('echo hi') -> kill, against sbx-create; sbx-exec; sbx-kill;
#  - commands.run('true') on a live sandbox against sbx-exec ID -- true,
#    and against sbx-exec ID -- /bin/bash -l -c true: what the SDK asks
#    the sandbox to run (E2B's envd runs every command so), which costs
#    a login shell's start (under TCG, ~0.2 s of the guest's time);
#  - output streamed through the API (BENCH_SERVE_STREAM_MIB, 32 MiB of
#    zeros) against sbx-exec's, and against the same SDK call served by
#    an envd that costs nothing (bench-serve-replay.py), with the CPU per
#    MiB of the SDK client and of the service: the SDK decodes JSON and
#    base64 in JavaScript;
#  - BENCH_SERVE_CLIENTS (64) SDK clients at once, each creating, running
#    and killing: how many succeeded, were told 429 (the host's capacity)
#    or failed otherwise, and the service's peak memory (the Pss of its
#    processes: its call children share their pages) and CPU time.
# The SDK is the tests' pinned one (tests/fixtures/e2b-sdk); the template
# the python one (bash: the SDK runs commands with bash -l -c).
#
# bench.sh sources this and calls bench_serve RAW OUT (BENCH_SERVE_RUNS=0
# leaves it out); run alone it uses a root of its own and prints the rows,
# e.g. quickly: BENCH_SERVE_RUNS=2 BENCH_SERVE_CLIENTS=4 scripts/bench-serve.sh
bench_serve() {
	local raw=$1 out=$2 runs=${BENCH_SERVE_RUNS:-10} clients=${BENCH_SERVE_CLIENTS:-64} mib=${BENCH_SERVE_STREAM_MIB:-32}
	local top t key port srv sdk id rport envd_url=
	[ "$runs" -gt 0 ] || return 0
	top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	t=$top/scripts/bench-time.py
	# shellcheck source=../tests/lib-npm.sh
	. "$top/tests/lib-npm.sh"
	if ! ls "$SBX_TEMPLATES"/python@*/manifest.json >/dev/null 2>&1 ||
		! npm_fixture_install "$top/tests/fixtures/e2b-sdk" e2b-sdk; then
		echo "bench: sbx-serve: no python template or no SDK (${NPM_WHY:-make python-image}); left out" >&2
		return 0
	fi
	sdk=$NPM_DIR/node_modules/e2b/dist/index.mjs
	key=$(sbx-serve key add --operator 2>/dev/null)
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	# The service ends with this shell (PR_SET_PDEATHSIG): a step that fails
	# under bench.sh's set -e must not leave a root daemon listening.
	setpriv --pdeathsig TERM sbx-serve --listen "127.0.0.1:$port" 2>"$raw/serve.log" &
	srv=$!
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
	serve_cpu() { # PID: CPU seconds of PID's tree, reaped children included
		python3 - "$1" <<'PY'
import os, sys
def tree(p):
    out = [p]
    try:
        for t in os.listdir(f"/proc/{p}/task"):
            for c in open(f"/proc/{p}/task/{t}/children").read().split():
                out += tree(int(c))
    except OSError:
        pass
    return out
tot = 0
for p in set(tree(int(sys.argv[1]))):
    try:
        st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        tot += sum(int(x) for x in st[11:15])  # utime stime cutime cstime
    except (OSError, IndexError):
        pass
print(tot / os.sysconf("SC_CLK_TCK"))
PY
	}
	node_b() { # the bench's node script, as E2B code runs: only the three variables
		E2B_API_URL=http://127.0.0.1:$port E2B_SANDBOX_URL=${envd_url:-http://127.0.0.1:$port} E2B_API_KEY=$key \
			E2B_SDK=$sdk SBX_TEMPLATE=python node "$top/scripts/bench-serve.mjs" "$@"
	}
	echo "bench: sbx-serve: $runs SDK creates to a first command, and the CLI's" >&2
	node_b tti "$runs" >"$raw/serve-tti.json"
	: >"$raw/cli-tti.txt"
	: >"$raw/cli-tti-bash.txt"
	# The CLI's run as asked (echo hi), and as the SDK's is (bash -l -c),
	# alternating.
	for _ in $(seq "$runs"); do
		for how in plain bash; do
			python3 - "$raw/cli-tti$([ $how = bash ] && echo -bash).txt" "$how" <<'PY'
import subprocess, sys, time
cmd = ["echo", "hi"] if sys.argv[2] == "plain" else ["/bin/bash", "-l", "-c", "echo hi"]
t0 = time.monotonic()
i = subprocess.run(["sbx-create", "-q", "-t", "python"], capture_output=True, text=True, check=True).stdout.strip()
assert subprocess.run(["sbx-exec", i, "--"] + cmd, capture_output=True, text=True, check=True).stdout == "hi\n"
subprocess.run(["sbx-kill", i], capture_output=True, check=True)
open(sys.argv[1], "a").write("%.3f\n" % ((time.monotonic() - t0) * 1000))
PY
		done
	done
	echo "bench: sbx-serve: commands.run('true') and sbx-exec true, x $((runs * 5)); $mib MiB streamed" >&2
	id=$(curl -sf -H "X-API-Key: $key" -d '{"templateID":"python","timeout":1800}' "http://127.0.0.1:$port/sandboxes" | jq -r .sandboxID)
	node_b exec "$id" 3 >/dev/null # warm: the first exec of a session is not the steady state
	node_b exec "$id" $((runs * 5)) >"$raw/serve-exec.json"
	"$t" $((runs * 5)) sbx-exec "$id" -- true >"$raw/cli-exec.txt"
	"$t" $((runs * 5)) sbx-exec "$id" -- /bin/bash -l -c true >"$raw/cli-exec-bash.txt"
	# The service's CPU over the stream (its processes and the calls'
	# children they reaped), beside the client's own.
	serve_cpu "$srv" >"$raw/serve-cpu0"
	node_b stream "$id" "$mib" >"$raw/serve-stream.json"
	serve_cpu "$srv" >"$raw/serve-cpu1"
	# The client's floor: the same SDK call against an envd that costs
	# nothing (bench-serve-replay.py: the front's envelopes, made up front).
	rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	setpriv --pdeathsig TERM python3 "$top/scripts/bench-serve-replay.py" "$rport" "$mib" 2>"$raw/replay.log" &
	local replay=$!
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$rport/" && break; sleep 0.1; done
	envd_url=http://127.0.0.1:$rport node_b stream "$id" "$mib" >"$raw/replay-stream.json"
	kill "$replay" 2>/dev/null
	wait "$replay" 2>/dev/null || true
	python3 - "$raw/cli-stream.json" "$id" "$mib" <<'PY'
import subprocess, sys, time
t0 = time.monotonic()
n = len(subprocess.run(["sbx-exec", sys.argv[2], "--", "head", "-c", sys.argv[3] + "M", "/dev/zero"], capture_output=True, check=True).stdout)
open(sys.argv[1], "w").write("%.3f\n" % (n / 1048576 / (time.monotonic() - t0)))
PY
	curl -sf -X DELETE -H "X-API-Key: $key" "http://127.0.0.1:$port/sandboxes/$id" >/dev/null
	echo "bench: sbx-serve: $clients SDK clients at once" >&2
	python3 - "$srv" "$raw/serve-usage.json" <<'PY' &
import json, os, sys, time
root, out = int(sys.argv[1]), sys.argv[2]
tick = os.sysconf("SC_CLK_TCK")
peak, cpu = 0, {}
def tree(p):
    kids = [p]
    try:  # the service may end between the loop's check and this
        tasks = os.listdir(f"/proc/{p}/task")
    except OSError:
        return kids
    for t in tasks:
        try:
            kids += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except OSError:
            pass
    return kids
while os.path.exists(f"/proc/{root}"):
    rss = 0
    for p in set(tree(root)):
        try:
            st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            cpu[p] = (int(st[11]) + int(st[12])) / tick
            # Pss, not RSS: the back forks a child per call, and their
            # RSSes summed counted the pages they share once per child.
            for l in open(f"/proc/{p}/smaps_rollup"):
                if l.startswith("Pss:"):
                    rss += int(l.split()[1]) * 1024
        except (OSError, IndexError):
            pass
    peak = max(peak, rss)
    json.dump({"pss_peak_bytes": peak, "cpu_s": round(sum(cpu.values()), 3)}, open(out, "w"))
    time.sleep(0.2)
PY
	local mon=$!
	node_b clients "$clients" >"$raw/serve-clients.json"
	sleep 0.5
	# Under bench.sh's set -e a failed kill or wait would end the whole
	# bench, unexplained: say it and go on to the rows.
	kill "$srv" 2>/dev/null || echo "bench: sbx-serve was gone before the end (see $raw/serve.log)" >&2
	wait "$srv" || echo "bench: sbx-serve exited with $? (see $raw/serve.log)" >&2
	wait "$mon" || echo "bench: the service's usage was not measured to the end" >&2
	python3 - "$raw" "$out" "$clients" "$mib" <<'PY'
import json, os, statistics, sys
raw, out, clients = sys.argv[1], sys.argv[2], int(sys.argv[3])
def pct(v, p):
    v = sorted(v)
    return round(v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))], 1)
def floats(f):
    return [float(l) for l in open(f) if l.strip()]
sdk_tti, cli_tti = json.load(open(f"{raw}/serve-tti.json")), floats(f"{raw}/cli-tti.txt")
cli_tti_bash = floats(f"{raw}/cli-tti-bash.txt")
sdk_exec = json.load(open(f"{raw}/serve-exec.json"))
cli_exec = [float(l.split()[0]) for l in open(f"{raw}/cli-exec.txt") if l.strip()]
cli_exec_bash = [float(l.split()[0]) for l in open(f"{raw}/cli-exec-bash.txt") if l.strip()]
st = json.load(open(f"{raw}/serve-stream.json"))
rp = json.load(open(f"{raw}/replay-stream.json"))
sdk_mibs, cli_mibs = st["mib_s"], floats(f"{raw}/cli-stream.json")[0]
serve_cpu_s = floats(f"{raw}/serve-cpu1")[0] - floats(f"{raw}/serve-cpu0")[0]
cl = json.load(open(f"{raw}/serve-clients.json"))
usage = json.load(open(f"{raw}/serve-usage.json"))
rows = [
    ("SDK create->run->kill (ms)", sdk_tti, "sbx-create; sbx-exec; sbx-kill (ms)", cli_tti),
    ("SDK create->run->kill (ms)", sdk_tti, "the same, exec bash -l -c (ms)", cli_tti_bash),
    ("SDK commands.run('true') (ms)", sdk_exec, "sbx-exec true (ms)", cli_exec),
    ("SDK commands.run('true') (ms)", sdk_exec, "sbx-exec bash -l -c true (ms)", cli_exec_bash),
]
res = json.load(open(out)) if os.path.exists(out) else {}  # run alone: a file of its own
mib = int(sys.argv[4])
serve = {"rows": [], "stream_mib_s": {"sdk": round(sdk_mibs, 1), "cli": round(cli_mibs, 1),
                                      "ratio": round(sdk_mibs / cli_mibs, 2) if cli_mibs else None,
                                      "sdk_floor": round(rp["mib_s"], 1),
                                      "ratio_to_sdk_floor": round(sdk_mibs / rp["mib_s"], 2),
                                      "cpu_ms_per_mib": {"sdk_client": round(st["client_cpu_s"] * 1000 / mib, 2),
                                                         "service": round(serve_cpu_s * 1000 / mib, 2),
                                                         "sdk_client_at_floor": round(rp["client_cpu_s"] * 1000 / mib, 2)}},
         "clients": {"n": clients, "ok": cl["ok"], "throttled_429": cl["throttled"], "errors": cl["errors"],
                     "ms_p50": pct(cl["ms"], 50) if cl["ms"] else None, "ms_p95": pct(cl["ms"], 95) if cl["ms"] else None},
         "service": usage}
print()
print(f"{'sbx-serve':40} {'p50':>9} {'p95':>9}  {'the CLI':38} {'p50':>9} {'p95':>9} {'x p50':>6} {'x p95':>6}")
for name, v, fname, f in rows:
    r = {"figure": name, "p50": pct(v, 50), "p95": pct(v, 95), "floor": fname, "floor_p50": pct(f, 50),
         "floor_p95": pct(f, 95)}
    r["ratio_p50"] = round(r["p50"] / r["floor_p50"], 2)
    r["ratio_p95"] = round(r["p95"] / r["floor_p95"], 2)
    serve["rows"].append(r)
    print(f"{name:40} {r['p50']:>9} {r['p95']:>9}  {fname:38} {r['floor_p50']:>9} {r['floor_p95']:>9} "
          f"{r['ratio_p50']:>6} {r['ratio_p95']:>6}")
s = serve["stream_mib_s"]
print(f"{'output streamed (MiB/s)':40} {s['sdk']:>9} {'':>9}  {'sbx-exec':38} {s['cli']:>9} {'':>9} {s['ratio']:>6}")
print(f"{'output streamed (MiB/s)':40} {s['sdk']:>9} {'':>9}  {'the SDK from an envd that costs nothing':38} "
      f"{s['sdk_floor']:>9} {'':>9} {s['ratio_to_sdk_floor']:>6}")
print(f"  CPU per MiB streamed: the SDK client {s['cpu_ms_per_mib']['sdk_client']} ms "
      f"({s['cpu_ms_per_mib']['sdk_client_at_floor']} at its floor), the service {s['cpu_ms_per_mib']['service']} ms")
c = serve["clients"]
print(f"{clients} SDK clients at once: {c['ok']} ok, {c['throttled_429']} told 429, {len(c['errors'])} other errors; "
      f"p50 {c['ms_p50']} ms, p95 {c['ms_p95']} ms; service peak Pss {usage['pss_peak_bytes'] >> 20} MiB, "
      f"CPU {usage['cpu_s']} s")
res["serve"] = serve
json.dump(res, open(out, "w"), indent=2)
PY
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
	export PATH=$SBX_BUILD/bin:$PATH SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
	SBX_ROOT=$(mktemp -d /tmp/sbx-bench-serve.XXXXXX)
	export SBX_ROOT
	. "$(dirname "$0")/lib-root.sh"
	trap root_cleanup EXIT
	mkdir -p "$SBX_ROOT/raw"
	bench_serve "$SBX_ROOT/raw" "${BENCH_OUT:-$SBX_BUILD/bench-serve.json}"
fi
