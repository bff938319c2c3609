#!/bin/bash
# The warm pool: sbx-gc fills it from the host configuration, sbx-create
# claims a member (renamed, re-identified, given its tenant, TTL and
# secrets) and a refill follows; a request that does not fit boots cold;
# sbx-gc replaces a dead member and trims to size; a claim that fails
# boots cold; sbx-create killed -9 around the commit leaves exactly one of
# the member or the session; members serve policies with egress (the
# namespace is finished at the claim) and package policies (told at the
# claim), and one whose namespace cannot be finished is not handed out;
# the pool holds no more than the host's capacity.
. "$(dirname "$0")/lib.sh"
require_vm
[ "$(id -u)" = 0 ] || skip_all "needs root (network namespaces)"
command -v ip >/dev/null && command -v python3 >/dev/null && command -v nsenter >/dev/null ||
	skip_all "needs ip, nsenter and python3"
# Test hosts for the egress claims (tests/lib.sh), and one web server.
test_web_host pool 2 "hello from the allowed host"
OTHER=${NET_IP[1]}
# Members' monitors (booted by sbx-gc) start a claimed session's proxy:
# it reads the names from the environment they were started with.
export SBX_HOSTS_FILE=$TEST_TMP/hosts
printf '%s web.example.test\n%s other.example.test\n' "$WEB" "$OTHER" >"$SBX_HOSTS_FILE"
h=$(printf '%s' "$SBX_ROOT" | sha256sum | cut -c1-8)
S=$SBX_ROOT/var/lib/sbx/sessions
R=$SBX_ROOT/run/sbx/sessions
CONF=$SBX_ROOT/etc/sbx/sbx.yaml
mkdir -p "$SBX_ROOT/etc/sbx"
# The claim below reads a tenant's secret from TEST_TMP: granted (sbx.yaml(5) Host paths).
# pool_size SIZE [NETWORK]: of SIZE members, NETWORK with a NIC
pool_size() {
	printf 'pool:\n  templates:\n    default: {size: %s, network: %s, vcpus: 1, memory: 256M}\nhost_paths:\n  read: ["%s"]\n' \
		"$1" "${2:-0}" "$TEST_TMP" >"$CONF"
}
nic_members() { for m in $(members); do [ -n "$(rec "$m" '.net.mac // empty')" ] && echo "$m"; done; }
members() { sbx-ps --pool -q --state=pooled 2>/dev/null; }
rec() { jq -r "$2" "$S/$1/session.json" 2>/dev/null; }
# Wait (up to $2 s) for the pool to hold $1 pooled members.
wait_members() {
	for _ in $(seq $(($2 * 5))); do [ "$(members | wc -l)" = "$1" ] && return 0; sleep 0.2; done
	return 1
}
# Host CPU the member's VMM used over 2 s (its cgroup, ns).
cpu_over_2s() {
	local a b; a=$(cat /sys/fs/cgroup/cpuacct/sbx-"$h"/"$1"/cpuacct.usage 2>/dev/null) || return 1
	sleep 2; b=$(cat /sys/fs/cgroup/cpuacct/sbx-"$h"/"$1"/cpuacct.usage) && echo $((b - a))
}

# The CPU weight of a session's VMM cgroup, on cgroup v2's scale (v1's
# cpu.shares: 1024 = 100); empty without cgroups.
cg_weight() {
	if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
		cat /sys/fs/cgroup/sbx-"$h"/"$1"/cpu.weight 2>/dev/null
	elif [ -e /sys/fs/cgroup/cpu/sbx-"$h"/"$1"/cpu.shares ]; then
		echo $(( ($(cat /sys/fs/cgroup/cpu/sbx-"$h"/"$1"/cpu.shares) * 100 + 512) / 1024 ))
	fi
}

# --- the configuration fails closed -------------------------------------
printf 'pool:\n  templates:\n    default: {size: 1, colour: red}\n' >"$CONF"
out=$(sbx-gc 2>&1); rc=$?
is "$rc" 3 "an unknown key in sbx.yaml: sbx-gc exits 3"
like "$out" "sbx.yaml:3:24: unknown key 'colour'" "naming the file, line and column"
is "$(ls "$S" | wc -l)" 0 "and boots nothing"

# --- sbx-gc fills the pool ----------------------------------------------
pool_size 1
out=$(sbx-gc); rc=$?
is "$rc" 0 "sbx-gc with a pool of 1 succeeds"
like "$out" "^pool-add	pool-[0-9a-f]{9}	default@" "and says it added a member"
m1=$(members)
like "$m1" "^pool-[0-9a-f]{9}$" "one member, pooled, with a pool- ID"
is "$(sbx-ps -q)" "" "sbx-ps hides pool members"
is "$(sbx-ps --all -q)" "$m1" "sbx-ps --all shows them"
is "$(sbx-ps --json "$m1" | jq -r '.[0].pool')" true "a member named on the command line is shown, marked pool"
is "$(sbx-ps --capacity --json | jq -c '[.sessions.used, .pooled]')" "[1,1]" "capacity counts the member"
is "$(sbx-gc)" "" "a second sbx-gc has nothing to do"
if [ -d /sys/fs/cgroup/cpuacct ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
	used=$(cpu_over_2s "$m1")
	[ -n "$used" ] && [ "$used" -lt 100000000 ]; ok $? "a member waits paused: its VMM used ${used:-?} ns of CPU in 2 s"
fi
w=$(cg_weight "$m1")
if [ -n "$w" ]; then
	is "$w" 10 "a member's VMM has a low CPU weight: its boot and wait take no CPU from sessions"
else
	ok 0 "# SKIP no cpu cgroup to read the weight from"
fi
sbx-exec "$m1" -- true 2>"$TEST_TMP/err"; rc=$?
is "$rc" 4 "a member runs no exec (4)"
like "$(cat "$TEST_TMP/err")" "warm-pool member" "and says why"
sbx-create --id pool-mine 2>"$TEST_TMP/err"; rc=$?
is "$rc" 3 "--id pool-... is refused with 3: that namespace is the pool's"

# --- a claim -------------------------------------------------------------
printf 'hunter2\n' >"$TEST_TMP/token"
sleep 2 # the member's files are older than the claim by this much (pip.conf below)
t0=$(date +%s%N)
j=$(sbx-create --json --id job1 --tenant acme --ttl 10m --secret TOKEN=@"$TEST_TMP/token"); rc=$?
t1=$(date +%s%N)
is "$rc" 0 "sbx-create claims the member"
diag "claim: $(( (t1 - t0) / 1000000 )) ms end to end, $(jq -r .claim_ms <<<"$j") ms in the monitor"
is "$(jq -r '[.id, .existed, .from_pool, .state] | join(" ")' <<<"$j")" "job1 false true running" \
   "the session has the requested ID, from the pool, running"
[ ! -e "$S/$m1" ] && [ ! -e "$R/$m1" ]; ok $? "the member's directories became the session's"
is "$(rec job1 '[.tenant, .limits.ttl_ms, .from_pool, (.pool // false), .state] | join(" ")')" \
   "acme 600000 true false running" "its record: tenant, TTL and limits of the request"
is "$(jq -r .resources.ttl "$S/job1/policy.json")" 600000 "and its policy.json is the request's"
# An operator finds the claimed session's processes (issue 36, item 8).
mpid=$(sbx-ps --json | jq -r '.[] | select(.id == "job1") | .pids.monitor')
is "$(pgrep -f -- "sbx-monitor --id job1( |\$)" | sort -n | head -n1)" "$mpid" \
	"pgrep finds the claimed session's monitor by its ID (its title follows the claim)"
pgrep -f -- "sbx-monitor --id $m1( |\$)" >/dev/null; is "$?" 1 "and no monitor is titled with the member's ID"
vpid=$(sbx-ps --json | jq -r '.[] | select(.id == "job1") | .pids.vmm')
is "$(rec job1 .vmm_process.pid)" "$vpid" "sbx-ps --json shows its VMM's pid"
like "$(sbx-ps | awk '$1 == "job1" { print $NF }')" "^$mpid/$vpid/" "and its PIDS column MONITOR/VMM/PROXY"
# The session's first command: /etc/hosts, written after the claim's
# answer (guest-init defers it), is there before any command runs.
is "$(sbx-exec job1 -- grep -c '^127\.0\.1\.1	job1$' /etc/hosts)" 1 "the claim's first command finds the new ID in /etc/hosts"
is "$(sbx-exec job1 -- hostname)" job1 "inside, the hostname is the new ID"
is "$(sbx-exec job1 -- cat /run/secrets/TOKEN)" "[secret:TOKEN]" "the secret was delivered (and is scrubbed from output)"
h0=$(date +%s); g=$(sbx-exec job1 -- date +%s); h1=$(date +%s)
[ "$g" -ge $((h0 - 1)) ] && [ "$g" -le $((h1 + 1)) ]
ok $? "the guest's clock is the host's ($g in $h0..$h1) although it waited paused"
# The member booted with the package policy the session has (the
# default): the claim leaves pip.conf as the boot wrote it.
c=$(sbx-exec job1 -- stat -c %Z /etc/pip.conf)
[ -n "$c" ] && [ "$c" -lt $((t0 / 1000000000 - 1)) ]
ok $? "a claim with the member's own package policy does not rewrite it (pip.conf changed at ${c:-?}, claim at $((t0 / 1000000000)))"
is "$(sbx-ps --json job1 | jq -r ".[0].tenant")" acme "sbx-ps shows its tenant"
is "$(sbx-audit --session job1 --type session.create --json | jq -r '.[-1] | [.from_pool, .tenant, .member] | join(" ")')" \
   "true acme $m1" "session.create is audited with from_pool and the tenant"
if [ -d /sys/fs/cgroup/pids/sbx-"$h" ]; then
	[ -d /sys/fs/cgroup/pids/sbx-"$h"/job1 ] && [ ! -e /sys/fs/cgroup/pids/sbx-"$h"/"$m1" ]
	ok $? "the host cgroups were renamed to the ID (cgroup v1)"
fi
if [ -n "$w" ]; then
	is "$(cg_weight "$(rec job1 '.cgroup // empty' | grep . || echo job1)")" 100 "a claim gives the session the default CPU weight"
else
	ok 0 "# SKIP no cpu cgroup to read the weight from"
fi
j2=$(sbx-create --json --id job1 --tenant acme --ttl 10m --secret TOKEN=@"$TEST_TMP/token"); rc=$?
is "$rc:$(jq -r .existed <<<"$j2")" "0:true" "the same create again is the idempotent hit"
wait_members 1 90; ok $? "a refill puts a new member in the pool"
m2=$(members)
[ "$m2" != "$m1" ]; ok $? "a new one ($m2)"

# --- the refill is detached and gets none of the claim's secrets ----------
# sbx-create forks it (pool.c): stdio on /dev/null, its own session, the
# environment without the policy's from_env secrets.
ENVVAL=envtok-$RANDOM$RANDOM
printf 'secrets:\n  - {name: ENVTOK, from_env: SBX_T1100_TOKEN}\n' >"$TEST_TMP/envsec.yaml"
j=$(SBX_T1100_TOKEN=$ENVVAL sbx-create --json --id envsec -p "$TEST_TMP/envsec.yaml"); rc=$?
is "$rc:$(jq -r .from_pool <<<"$j")" "0:true" "a claim with an env secret"
is "$(sbx-exec envsec -- sha256sum /run/secrets/ENVTOK | cut -d' ' -f1)" "$(printf %s "$ENVVAL" | sha256sum | cut -d' ' -f1)" \
   "the session has the secret"
wait_members 1 90; ok $? "the claim's refill put a member in the pool"
m3=$(members)
mon3=$(rec "$m3" .monitor.pid)
[ -n "$mon3" ] && [ -r "/proc/$mon3/environ" ] && ! tr '\0' '\n' <"/proc/$mon3/environ" | grep -q "$ENVVAL"
ok $? "the refill's member ($m3) was not given the claim's env secret"
tr '\0' '\n' <"/proc/$mon3/environ" | grep -q "^SBX_ROOT="
ok $? "but the rest of the environment"
[ "$(ps -o sid= -p "$mon3" | tr -d ' ')" != "$(ps -o sid= -p $$ | tr -d ' ')" ]
ok $? "and it runs in a session of its own"
sbx-kill envsec
m2=$m3

# --- a request the pool cannot serve boots cold ---------------------------
j=$(sbx-create --json --memory 320); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:false" "another memory size boots cold"
is "$(members)" "$m2" "and leaves the member alone"
sbx-kill "$(jq -r .id <<<"$j")"

# --- sbx-gc replaces a dead member ----------------------------------------
mon=$(rec "$m2" .monitor.pid)
kill -9 "$(rec "$m2" .vmm_process.pid)"
for _ in $(seq 50); do [ "$(sbx-ps --no-headers "$m2" | cut -f2)" = crashed ] && break; sleep 0.1; done
is "$(sbx-ps --no-headers "$m2" | cut -f2)" crashed "a member whose VMM was killed is crashed"
# Its monitor records that, then ends; until it has, the member is its
# (sbx-gc leaves a locked session alone) and a run now would leave it to the next.
for _ in $(seq 300); do kill -0 "$mon" 2>/dev/null || break; sleep 0.1; done
out=$(sbx-gc)
like "$out" "reclaim	$m2	pool member crashed" "sbx-gc reclaims it at once"
like "$out" "pool-add	pool-" "and boots a replacement"
[ ! -e "$S/$m2" ]; ok $? "nothing of the dead member is left"
m3=$(members)
like "$m3" "^pool-[0-9a-f]{9}$" "one member again"

# --- kill -9 of sbx-create before the commit: the member stays -----------
mon=$(rec "$m3" .monitor.pid)
# The whole monitor: both its halves (docs/design.md, "Splitting the
# monitor"); the unprivileged one is the one that answers clients.
mons="$mon $(pgrep -P "$mon" -x sbx-monitor)"
kill -STOP $mons
sbx-create -q --id k1 >/dev/null 2>&1 &
cp=$!
sleep 1
kill -9 $cp; wait $cp 2>/dev/null
kill -CONT $mons
sleep 1
is "$(members):$(ls "$S" | grep -c '^k1$')" "$m3:0" "sbx-create killed before its claim: the member is still pooled, no k1"

# --- kill -9 of sbx-create after the commit: the session is completed ----
# The claim is held after its commit by the audit trail's lock: the
# session.create record, the claim's last step before its answer, waits.
exec 9<>"$SBX_ROOT/var/lib/sbx/audit.lock"
flock 9
sbx-create -q --id k2 >/dev/null 2>&1 &
cp=$!
for _ in $(seq 200); do [ -e "$S/k2" ] && break; sleep 0.05; done
[ -e "$S/k2" ]; ok $? "the claim committed: the member was renamed to k2"
kill -9 $cp; wait $cp 2>/dev/null
flock -u 9; exec 9>&-
for _ in $(seq 100); do [ "$(rec k2 .state)" = running ] && break; sleep 0.1; done
is "$(rec k2 '[.state, .from_pool] | join(" ")'):$(members | wc -l)" "running true:0" \
   "sbx-create killed after the commit: the claim completes, the member is gone"
is "$(sbx-exec k2 -- hostname)" k2 "and the session works"
is "$(sbx-ps -q | sort | tr '\n' ' ')" "job1 k2 " "sessions: job1 and k2, nothing half-made"

# --- a claim that fails boots cold ---------------------------------------
out=$(sbx-gc --pool-only 2>&1)
m4=$(members)
like "$m4" "^pool-" "sbx-gc --pool-only refills the pool"
[ -n "$m4" ] || diag "sbx-gc --pool-only: $out"
vmm=$(rec "$m4" .vmm_process.pid)
kill -STOP "$vmm" # its resume is never answered: the claim gives up (SBX_CLAIM_RESUME_MS)
j=$(sbx-create --json --id k3 2>"$TEST_TMP/err"); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:false" "a claim that fails falls back to a cold boot"
[ "$rc" = 0 ] || diag "sbx-create: $(cat "$TEST_TMP/err")"
[ ! -e "$S/$m4" ] && ! kill -0 "$vmm" 2>/dev/null; ok $? "the member it tried was destroyed, VMM and all"
like "$(sbx-audit --type session.destroy --json | jq -r --arg m "$m4" '.[] | select(.session == $m) | [.reason, .error] | join(" ")')" \
   "^claim-failed cannot resume the VM" "its end is audited: the claim failed before its commit, saying why"
is "$(sbx-exec k3 -- hostname)" k3 "the cold session works"
sbx-kill k2 k3

# --- sizes: raised, lowered ------------------------------------------------
wait_members 1 90 # the refill after the failed claim
pool_size 2
out=$(sbx-gc)
like "$out" "pool-add" "a pool raised to 2 gets a member"
is "$(members | wc -l)" 2 "two members"
pool_size 1
out=$(sbx-gc)
is "$(grep -c '^pool-trim' <<<"$out")" 1 "lowered to 1, one member is trimmed"
is "$(members | wc -l)" 1 "one member left"
rm "$CONF"
like "$(sbx-gc)" "^pool-trim	pool-.*no pool is configured" "without a configuration, the pool is emptied"
is "$(sbx-ps --all -q)" "job1" "only job1 is left"

# --- a template that holds a snapshot: its members are restored ---------
# (into a copy of the templates: sbx-snapshot save --template writes there)
mkdir -p "$TEST_TMP/templates"
cp -al "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates"/ 2>/dev/null ||
	cp -a --sparse=always "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates"/
export SBX_TEMPLATES=$TEST_TMP/templates
src=$(sbx-create -q)
sbx-exec "$src" -- sh -c 'echo baked >/workspace/marker'
sbx-snapshot save --template "$src" warm@1 >/dev/null; ok $? "a session saved as the template warm@1"
sbx-kill "$src"
printf 'pool:\n  templates:\n    warm: {size: 1}\n' >"$CONF"
sbx-gc --pool-only >/dev/null
m5=$(members)
is "$(rec "$m5" .snapshot.ref)" "template:warm@1" "its member is restored from the snapshot"
j=$(sbx-create --json -t warm --id w1); rc=$?
is "$rc:$(jq -r .from_pool <<<"$j")" "0:true" "and claimed"
is "$(sbx-exec w1 -- sh -c 'hostname; cat /workspace/marker' | tr '\n' ' ')" "w1 baked " \
   "with the snapshot's files and the session's hostname"
rm "$CONF"
sbx-gc --pool-only >/dev/null # waits for the refill, then trims it
sbx-kill w1
is "$(sbx-ps --all -q)" "job1" "only job1 is left"

# --- a member serves a policy with egress: the namespace is built at claim
cat >"$TEST_TMP/net.yaml" <<EOF
network:
  egress: allowlist
  allow:
    - {domain: web.example.test, ports: [80]}
EOF
pool_size 1 1
like "$(sbx-gc --pool-only)" "^pool-add	pool-[0-9a-f]{9}	default@[^ ]*, 1 vCPU, 256 MiB, network" "sbx-gc boots a member with a NIC (network: 1)"
m6=$(members)
mac6=$(rec "$m6" .net.mac)
like "$mac6" '^[0-9a-f]{2}(:[0-9a-f]{2}){5}$' "its record has a MAC"
vmm=$(rec "$m6" .vmm_process.pid)
is "$(nsenter --net=/proc/"$vmm"/ns/net ip -o -4 addr | wc -l):$(nsenter --net=/proc/"$vmm"/ns/net ip -o route | wc -l)" "0:0" \
   "whose namespace holds no address and no route while it waits"
is "$(rec "$m6" '.proxy_process.pid // 0')" 0 "and no proxy"
j=$(sbx-create --json --id net1 -p "$TEST_TMP/net.yaml"); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:true" "a create with network.egress: allowlist is a claim"
is "$(rec net1 .net.mac):$(rec net1 .net.egress)" "$mac6:allowlist" "its record has the member's NIC and the policy's egress"
ppid=$(rec net1 .proxy_process.pid)
is "$(tr '\0' ' ' </proc/"$ppid"/cmdline 2>/dev/null | cut -d' ' -f1-3)" "sbx-proxy --id net1" "its proxy runs, for the session"
# The member's monitor is split (priv.c): its privileged half completed the
# namespace and started the proxy, and handed its log and pidfd on.
mon=$(rec net1 .monitor.pid)
half=$(ps --ppid "$mon" -o pid=,uid=,comm= | awk '$3 == "sbx-monitor" && $2 != 0 { print $1 }')
like "$half" '^[0-9]+$' "its monitor's half facing the guest is unprivileged (pid ${half:-none})"
is "$(awk '/^PPid:/ { print $2 }' /proc/"$ppid"/status 2>/dev/null)" "$mon" "the privileged half started the proxy"
ls -l /proc/"${half:-0}"/fd 2>/dev/null | grep -q '/proxy\.log$'
ok $? "and the unprivileged half holds proxy.log"
is "$(sbx-exec net1 -- sh -c 'ip -4 addr show eth0 | grep -o "inet [0-9./]*"; cat /etc/resolv.conf')" \
   "inet 10.0.2.15/24
nameserver 10.0.2.2" "eth0 came up at the claim, with the session's resolver"
out=$(sbx-exec --timeout 60s net1 -- wget -q -O- http://web.example.test/ 2>&1)
is "$out" "hello from the allowed host" "the allowed host is reached"
out=$(sbx-exec --timeout 60s net1 -- sh -c "printf 'GET / HTTP/1.0\r\nHost: other.example.test\r\n\r\n' | nc $OTHER 80" 2>&1)
is "$(grep -c 'allowed host' <<<"$out")" 0 "another host is refused"
# (the proxy writes refusals from its main thread, once a second)
for _ in $(seq 50); do grep -q '"other.example.test"' "$S/net1/net.log" 2>/dev/null && break; sleep 0.1; done
like "$(jq -r 'select(.domain == "other.example.test") | "\(.verdict) \(.reason)"' "$S/net1/net.log")" \
   "^deny not in the allowlist" "and the refusal is in net.log"
is "$(sbx-audit --session net1 --type session.create --json | jq -r '.[-1] | [.from_pool, .member] | join(" ")')" \
   "true $m6" "session.create says it came from the pool"

# --- a member with a NIC serves only sessions with one ---------------------
wait_members 1 90
m=$(members)
j=$(sbx-create --json --id plain1); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:false" "a default create does not take a member with a NIC: it boots cold"
is "$(sbx-exec plain1 -- ls /sys/class/net | tr '\n' ' '):$(members)" "lo :$m" "with no network device, the member left alone"

# --- a package policy (-p) travels in the claim ----------------------------
cat >"$TEST_TMP/no-installs.yaml" <<EOF
packages:
  mode: offline
EOF
cat >"$TEST_TMP/pkgs.yaml" <<EOF
packages:
  mode: allowlist
  registries:
    - {type: pypi, url: "http://web.example.test/simple"}
EOF
pool_size 2 1
sbx-gc --pool-only >/dev/null
is "$(members | wc -l):$(nic_members | wc -l)" "2:1" "a pool of 2 with network: 1 has one member with a NIC and one without"
j=$(sbx-create --json -p "$TEST_TMP/no-installs.yaml"); rc=$?
pkg1=$(jq -r .id <<<"$j")
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:true" "a create with -p (packages offline) is a claim"
# A default ID is as long as a member's, so the guest overwrites
# /etc/hosts in place (guest-init; sbx_pool_id_new and sbx_id_new must
# keep the lengths equal), and it must come out whole.
claimed=$(sbx-audit --session "$pkg1" --type session.create --json | jq -r '.[-1].member')
is "${#claimed}" "${#pkg1}" "the member it claimed ($claimed) has an ID as long as the session's"
is "$(sbx-exec "$pkg1" -- cat /etc/hosts)" \
   "$(printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters' "$pkg1")" \
   "a claim with a default ID ($pkg1): /etc/hosts names it, whole"
like "$(sbx-exec "$pkg1" -- cat /etc/pip.conf)" "follows policy no-installs.yaml" "its pip.conf names the session's policy"
out=$(sbx-exec "$pkg1" -- wget -q -O- http://127.0.0.1:3141/pypi/0/simple/six/ 2>&1)
like "$out" "packages.mode: offline in policy no-installs.yaml" "and the guest's refusal names it too"
wait_members 2 90
j=$(sbx-create --json --id pkg2 -p "$TEST_TMP/pkgs.yaml"); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:true" "a create with a package registry is a claim"
like "$(sbx-exec pkg2 -- cat /etc/pip.conf)" 'index-url = http://10\.0\.2\.2:3141/pypi/0/simple' \
   "its pip.conf points at the session's cache"
like "$(sbx-exec pkg2 -- cat /etc/npmrc)" 'registry=http://127\.0\.0\.1:3141/npm/0/' \
   "its npmrc at the guest's refusal (the policy has no npm registry)"
ppid=$(rec pkg2 .proxy_process.pid)
is "$(tr '\0' ' ' </proc/"$ppid"/cmdline 2>/dev/null | cut -d' ' -f1-3)" "sbx-proxy --id pkg2" "whose proxy serves the cache"
sbx-kill net1 plain1 "$pkg1" pkg2

# --- a namespace that cannot be finished at the claim: never handed out ---
wait_members 2 90
m7=$(nic_members)
vmm=$(rec "$m7" .vmm_process.pid)
nsenter --net=/proc/"$vmm"/ns/net ip link set sbx0 name sbxgone; ok $? "the member's TAP is renamed under it"
j=$(sbx-create --json --id net2 -p "$TEST_TMP/net.yaml"); rc=$?
is "$rc:$(jq -r '.from_pool // false' <<<"$j")" "0:false" "the claim fails and the create boots cold"
[ ! -e "$S/$m7" ] && ! kill -0 "$vmm" 2>/dev/null; ok $? "the member was destroyed, VMM and all"
like "$(sbx-audit --type session.create --json | jq -r --arg m "$m7" '.[] | select(.member == $m) | [.ok, .error] | join(" ")')" \
   "^false .*sbx0" "the failed claim is audited, saying why"
out=$(sbx-exec --timeout 60s net2 -- wget -q -O- http://web.example.test/ 2>&1)
is "$out" "hello from the allowed host" "the cold session's egress works"
sbx-kill net2
rm "$CONF"
sbx-gc --pool-only >/dev/null

# --- the pool holds no more than the host can afford ----------------------
# job1 holds 256 + 512 MiB; 1600 MiB leave room for one member, not three.
pool_size 3
out=$(SBX_MAX_MEMORY=1600M sbx-gc --pool-only)
is "$(grep -c '^pool-add' <<<"$out")" 1 "a pool of 3 on a host with room for one more session gets one member"
like "$out" "pool-error	default	cannot boot a member: " "and says why it stopped"
is "$(SBX_MAX_MEMORY=1600M sbx-ps --capacity --json | jq -c '[.sessions.used, .pooled]')" \
   "[2,1]" "sbx-ps --capacity counts the member"
rm "$CONF"
sbx-gc --pool-only >/dev/null
is "$(sbx-ps --all -q)" "job1" "only job1 is left"

sbx-kill job1
sbx-gc --grace 0 >/dev/null
is "$(find "$S" "$R" -mindepth 1 -maxdepth 1 | wc -l):$(root_procs | wc -l):$(ls -d /sys/fs/cgroup/*/sbx-$h/*/ 2>/dev/null | wc -l)" "0:0:0" \
   "nothing left: directories, processes, cgroups"
sbx-audit verify >/dev/null; ok $? "the audit trail verifies"
done_testing
