#!/bin/bash
# sbx-oci (issue 38): runc's command line, each container an sbx session.
# Straight through the CLI (create/start/state/kill/delete, run, exec, the
# rootfs prepared once per content, a terminal through a console socket,
# linux.resources as the VM's shape), hostile bundles, mounts and IDs
# refused with nothing created, then real engines: containerd (a daemon of
# the test's own, ctr and the runc shim v2) and rootful Podman with
# conmon, their storage, state and run roots under the test's root, each
# with a terminal (run -t, driven by script(1)) and resource limits.
. "$(dirname "$0")/lib.sh"
require_vm
command -v debugfs >/dev/null || skip_all "debugfs (e2fsprogs) not installed"
command -v jq >/dev/null || skip_all "jq not installed"
OCI=$SBX_BUILD/bin/sbx-oci
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
R=$SBX_ROOT/run/sbx-oci # the runtime's --root (its default under SBX_ROOT)
O() { "$OCI" --root "$R" --log "$TEST_TMP/oci.log" --log-format json "$@"; }
nothing_left() { # DESCRIPTION: no container, no session
	is "$(ls -A "$R" 2>/dev/null)$(sbx-ps -q)" "" "$1"
}

# A bundle: the default template's busybox root, dumped (as a `docker
# export` would give it), and a config.json.
B=$TEST_TMP/bundle
mkdir -p "$B/rootfs"
debugfs -R "rdump / $B/rootfs" "$(ls -d "$SBX_TEMPLATES"/default@* | head -n1)/rootfs.ext4" 2>/dev/null
rm -rf "$B/rootfs/lost+found"
[ -x "$B/rootfs/bin/busybox" ]; ok $? "a busybox root for the bundle"
config() { # ARGS-JSON [ENV-JSON] [ROOT]
	jq -n --argjson a "$1" --argjson e "${2:-[]}" --arg r "${3:-rootfs}" \
		'{ociVersion: "1.0.2", process: {args: $a, env: $e, cwd: "/tmp", user: {uid: 0, gid: 0}},
		  root: {path: $r}, annotations: {"org.example": "x"}}' >"$B/config.json"
}

# --- the command line ------------------------------------------------------------
like "$("$OCI" --version | tr '\n' ' ')" '^sbx-oci version .*spec: 1\.0\.2' "--version names the spec version"
is "$("$OCI" features | jq -r .ociVersionMax)" 1.0.2 "features is JSON"
"$OCI" --bogus state x 2>"$TEST_TMP/err"; is $? 2 "an unknown global option is 2"
O pause x 2>"$TEST_TMP/err"; is $? 2 "pause is refused (not in this version)"
like "$(cat "$TEST_TMP/err")" 'pause: not supported' "with a message that says so"
like "$(tail -n1 "$TEST_TMP/oci.log" | jq -r '.level + " " + .msg')" '^error pause: not supported' \
	"and the --log gets it as runc's JSON"
O state nosuch 2>"$TEST_TMP/err"; is $? 4 "state of an unknown container is 4"
like "$(cat "$TEST_TMP/err")" 'container nosuch does not exist' "saying it does not exist (engines match that)"

# --- run: output, status, env, cwd, user -----------------------------------------
config '["sh","-c","echo out $FOO; echo err >&2; id -u; pwd; exit 7"]' '["FOO=bar","PATH=/bin:/usr/bin"]'
t0=$(date +%s%N)
out=$(O run -b "$B" c1 2>"$TEST_TMP/err"); rc=$?
diag "sbx-oci run, the first of this content (prepare + boot + exec): $((($(date +%s%N) - t0) / 1000000)) ms"
is "$rc" 7 "run exits with the process's status"
is "$(echo $out)" "out bar 0 /tmp" "stdout, env, uid and cwd are the config's"
is "$(cat "$TEST_TMP/err")" err "stderr is the process's"
is "$(O state c1 | jq -r '.status + " " + (.pid|tostring) + " " + .annotations["org.example"]')" "stopped 0 x" \
	"state: stopped, no pid, the annotations"
is "$(sbx-ps -q)" "" "the session ended with the process"
ms1=$(jq .rootfs_prepare_ms "$R/c1/state.json")
tmpl=$(jq -r .template "$R/c1/state.json")
like "$tmpl" '^oci-[0-9a-f]{24}$' "the root became template $tmpl, named by its digest"
O delete c1; ok $? "delete"
t0=$(date +%s%N)
O run -b "$B" c2 >/dev/null 2>&1
diag "sbx-oci run, the same content again: $((($(date +%s%N) - t0) / 1000000)) ms"
is "$(jq -r '.template + " " + (.rootfs_reused|tostring)' "$R/c2/state.json")" "$tmpl true" \
	"the same tree again reuses the template"
diag "rootfs prepare: ${ms1} ms the first time (tar, digest, import), $(jq .rootfs_prepare_ms "$R/c2/state.json") ms the second (tar, digest)"
O delete c2
is "$(ls "$SBX_TEMPLATES" | grep -c '^oci-')" 1 "one template for one content"
rm -rf "$SBX_TEMPLATES"/oci-*

# --- create, start, state, kill, delete -------------------------------------------
config '["sh","-c","trap \"echo got TERM; exit 9\" TERM; echo started; while :; do sleep 1; done"]'
O create -b "$B" --pid-file "$TEST_TMP/pid" c3 >"$TEST_TMP/c3.out" 2>&1; ok $? "create"
pid=$(cat "$TEST_TMP/pid")
is "$(O state c3 | jq -r '.status + " " + (.pid|tostring)')" "created $pid" "state: created, the pid file's pid"
[ -d "/proc/$pid" ]; ok $? "the holder lives"
O start c3; ok $? "start"
O start c3 2>"$TEST_TMP/err"; is $? 5 "start twice is 5"
is "$(O state c3 | jq -r .status)" running "state: running"
is "$(O ps --format json c3)" "[$pid]" "ps --format json: the holder, the one host process"
O delete c3 2>"$TEST_TMP/err"; is $? 5 "delete of a running container without --force is 5"
is "$(O exec c3 sh -c 'echo in $0; exit 4' guest; echo "rc=$?")" "in guest
rc=4" "exec runs a second process in the container, with its status"
echo '{"args":["sh","-c","echo $A; pwd"],"env":["A=from-process"],"cwd":"/etc","user":{"uid":1000,"gid":1000}}' \
	>"$TEST_TMP/process.json"
O exec --process "$TEST_TMP/process.json" --pid-file "$TEST_TMP/epid" c3 >"$TEST_TMP/eout"; ok $? "exec --process"
is "$(cat "$TEST_TMP/eout")" "from-process
/etc" "with the process.json's env and cwd"
[ -s "$TEST_TMP/epid" ]; ok $? "and its --pid-file"
O exec c3b true 2>/dev/null; is $? 4 "exec in no such container is 4"
# exec with a terminal, into the running c3: the engine's end of the
# console socket is tests/tools/console-socket.py.
CS=$(cd "$(dirname "$0")" && pwd)/tools/console-socket.py
out=$(python3 "$CS" "$TEST_TMP" -- "$OCI" --root "$R" exec --tty --console-socket SOCK c3 \
	sh -c 'tty; test -t 0 && echo stdin-tty; exit 6' 2>"$TEST_TMP/err"); rc=$?
is "$rc" 6 "exec --tty --console-socket: the process's status"
like "$out" '/dev/pts/[0-9]' "  ... its stdio a terminal in the guest" || diag "$(cat "$TEST_TMP/err")"
like "$out" 'stdin-tty' "  ... stdin too"
O exec --tty c3 true 2>"$TEST_TMP/err"; is $? 3 "exec --tty without --console-socket is 3"
like "$(cat "$TEST_TMP/err")" 'needs --console-socket' "  ... saying why"
O exec --console-socket "$TEST_TMP/nosock" c3 true 2>/dev/null; is $? 2 "--console-socket without a terminal is 2"
for _ in $(seq 50); do grep -q started "$TEST_TMP/c3.out" && break; sleep 0.2; done
O kill c3 TERM; ok $? "kill TERM"
for _ in $(seq 50); do [ "$(O state c3 | jq -r .status)" = stopped ] && break; sleep 0.2; done
is "$(O state c3 | jq -r .status)" stopped "the process caught it and ended: stopped"
like "$(cat "$TEST_TMP/c3.out")" 'got TERM' "the signal reached the process in the guest"
O kill c3 KILL 2>/dev/null; is $? 5 "kill of a stopped container is 5"
O delete c3; ok $? "delete"
O create -b "$B" c4 >/dev/null 2>&1 && O start c4 && O delete --force c4; ok $? "delete --force of a running one"
nothing_left "nothing is left: no container, no session"

# --- a terminal through the console socket (runc's protocol) ---------------------
config '["sh","-c","tty; stty size; read x; stty size; echo got $x; exit 3"]'
jq '.process.terminal = true | .process.consoleSize = {height: 40, width: 100}' "$B/config.json" >"$B/c" &&
	mv "$B/c" "$B/config.json"
out=$(python3 "$CS" "$TEST_TMP" --after '40 100' --resize 50 120 --input $'hello\n' -- \
	"$OCI" --root "$R" run -b "$B" --console-socket SOCK t1 2>"$TEST_TMP/err"); rc=$?
is "$rc" 3 "run with process.terminal: the process's status" || diag "$(cat "$TEST_TMP/err")"
like "$out" '/dev/pts/[0-9]' "the process's stdio is a terminal in the guest"
like "$out" '40 100' "sized as process.consoleSize says"
like "$out" 'got hello' "input typed on the engine's master reaches the process (echoed by the guest's pty)"
like "$out" '50 120' "a resize of the master reaches the guest's terminal"
O delete t1
nothing_left "a terminal's container leaves nothing"

# --- linux.resources: the VM's shape; process.rlimits: the process's ----------
config '["sh","-c","nproc; sed -n \"s/MemTotal: *\\([0-9]*\\) kB/\\1/p\" /proc/meminfo; ulimit -n; ulimit -Hn"]'
jq '.linux.resources = {memory: {limit: 402653184, swap: 805306368}, cpu: {quota: 200000, period: 100000},
	pids: {limit: 100}} | .process.rlimits = [{type: "RLIMIT_NOFILE", soft: 1000, hard: 2000}]' \
	"$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
out=$(O run -b "$B" r1 2>"$TEST_TMP/err"); rc=$?
is "$rc" 0 "run with memory 384M, 2 CPUs, 100 pids, nofile 1000:2000" || diag "$(cat "$TEST_TMP/err")"
set -- $out
is "${1:-}" 2 "the guest has 2 vCPUs (quota/period rounded up)"
[ "${2:-0}" -gt 300000 ] && [ "${2:-0}" -le 393216 ]; ok $? "and MemTotal ${2:-?} kB, at most 384M"
is "${3:-}/${4:-}" "1000/2000" "the process has the rlimits, set in the guest"
O delete r1

# --- hostile bundles and IDs: refused, nothing created ---------------------------
rm -rf "$SBX_TEMPLATES"/oci-*
bad() { # STATUS REGEX DESCRIPTION [ID]
	O create -b "$B" "${4:-bad}" >/dev/null 2>"$TEST_TMP/err"; is $? "$1" "$3"
	like "$(cat "$TEST_TMP/err")" "$2" "  ... saying: $2"
}
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$B/config.json"
bad 3 'config.json.*File too large' "a config.json over 1 MiB"
python3 -c 'print("[" * 100000 + "]" * 100000)' >"$B/config.json"
bad 3 'invalid config.json' "100000 nested arrays"
config "$(jq -nc '[range(5000) | "x"]')"
bad 3 'process.args has 5000 entries' "5000 args"
config "[\"$(head -c 70000 /dev/zero | tr '\0' a)\"]"
bad 3 'process.args\[0\] must be a string of at most' "a 70000-byte arg"
config '"sh"'
bad 3 'process.args must be an array' "args of the wrong type"
config '["true"]' '["NOEQUALS"]'
bad 3 'process.env\[0\] is not NAME=VALUE' "an env entry without ="
echo '{"ociVersion":"1.0.2","ociVersion":"1.0.2"}' >"$B/config.json"
bad 3 'duplicate' "a duplicate key"
config '["true"]'
jq '.process.user.uid = 100000' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'process.user.uid must be 0..65534' "a uid the guest does not have"
config '["true"]'
jq '.process.terminal = true' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'process.terminal needs --console-socket' "a terminal without a console socket"
config '["true"]'
O create -b "$B" --console-socket "$TEST_TMP/nosock" bad >/dev/null 2>&1; is $? 2 "a console socket without a terminal is 2"
jq '.process.terminal = true' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
O create -b "$B" --console-socket "$TEST_TMP/nosock" bad >/dev/null 2>"$TEST_TMP/err"
is $? 3 "a console socket that is not there is 3"
like "$(cat "$TEST_TMP/err")" 'cannot connect to --console-socket' "  ... saying so (nothing left: below)"
config '["true"]'
jq '.process.rlimits = [{type: "RLIMIT_NOPE", soft: 1, hard: 1}]' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'rlimits\[0\].type is not a Linux RLIMIT_ name' "an rlimit Linux does not have"
config '["true"]'
jq '.linux.resources.memory.limit = 33554432' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'memory.limit 33554432 is out of range' "a memory limit under 64M"
config '["true"]'
jq '.linux.resources.cpu = {quota: 7000000, period: 100000}' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 "70.000 CPUs: a session's CPU limit is 0.05 to 64" "70 CPUs"
config '["true"]'
jq '.linux.resources.cpu.shares = 512' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'cpu.shares is not supported' "CPU shares (no weight in a session)"
config '["true"]'
jq '.mounts = [{destination: "/data", type: "bind", source: "/etc/shadow", options: ["rbind","ro"]}]' \
	"$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'bind mount on /data is not supported' "a bind of /etc/shadow"
config '["true"]'
jq --arg s "$SBX_ROOT" '.mounts = [{destination: "/sbx", type: "none", source: $s, options: ["bind"]}]' \
	"$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'bind mount on /sbx is not supported' "a bind of sbx's state directory"
config '["true"]'
jq '.mounts = [{destination: "/mnt", type: "ext4", source: "/dev/sda1"}]' "$B/config.json" >"$B/c" &&
	mv "$B/c" "$B/config.json"
bad 3 'ext4 mount on /mnt is not supported' "a device mount"
ln -s /etc "$B/evil"
config '["true"]' '[]' evil
bad 3 'cannot open root.path evil' "root.path a symlink out of the bundle"
config '["true"]' '[]' ../bundle/rootfs
bad 3 'cannot open root.path' "root.path ../ out of the bundle"
config '["true"]' '[]' "$B/evil"
bad 3 'cannot open root.path' "an absolute root.path through a symlink"
config '["true"]'
bad 3 'invalid container ID' "an ID with ../" "../escape"
bad 3 'invalid container ID' "an ID with /" "a/b"
bad 3 'invalid container ID' "an ID starting with ." ".hidden"
bad 3 'invalid container ID' "a 200-character ID" "$(head -c 200 /dev/zero | tr '\0' a)"
[ ! -e "$TEST_TMP/escape" ]; ok $? "nothing was made outside the root"
nothing_left "every refusal left nothing behind"
is "$(ls "$SBX_TEMPLATES" | grep -v '^default@')" "" "and prepared no template"

# --- org.sbx.policy: a policy by the operator's name for it ----------------------
mkdir -p "$SBX_ROOT/etc/sbx"
printf 'resources:\n  memory: 320M\n' >"$TEST_TMP/big.yaml"
printf 'oci:\n  default_policy: big\n  policies:\n    big: %s\n    small: %s\n' "$TEST_TMP/big.yaml" \
	"$TEST_TMP/small.yaml" >"$SBX_ROOT/etc/sbx/sbx.yaml"
printf 'resources:\n  memory: 192M\n' >"$TEST_TMP/small.yaml"
config '["sh","-c","sed -n \"s/MemTotal: *\\([0-9]*\\) kB/\\1/p\" /proc/meminfo"]'
jq 'del(.annotations)' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
mem=$(O run -b "$B" p1 2>"$TEST_TMP/err"); rc=$?
is "$rc/$(jq -r .policy "$R/p1/state.json")" "0/big" "no annotation: oci.default_policy" || diag "$(cat "$TEST_TMP/err")"
[ "${mem:-0}" -gt 262144 ] && [ "${mem:-0}" -le 327680 ]; ok $? "  ... its memory, 320M (MemTotal $mem kB)"
O delete p1
jq '.annotations["org.sbx.policy"] = "small"' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
mem=$(O run -b "$B" p2 2>"$TEST_TMP/err"); rc=$?
is "$rc/$(jq -r .policy "$R/p2/state.json")" "0/small" "org.sbx.policy: small chooses it" ||
	diag "$(cat "$TEST_TMP/err")"
[ "${mem:-0}" -gt 120000 ] && [ "${mem:-0}" -le 196608 ]; ok $? "  ... its memory, 192M (MemTotal $mem kB)"
O delete p2
jq '.annotations["org.sbx.policy"] = "nope"' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 "org.sbx.policy 'nope' is not one of the policies" "an org.sbx.policy sbx.yaml does not name"
jq --arg p "$TEST_TMP/big.yaml" '.annotations["org.sbx.policy"] = $p' "$B/config.json" >"$B/c" &&
	mv "$B/c" "$B/config.json"
bad 3 "is not one of the policies" "a policy file's path (a name only, never a path)"
jq '.annotations = {"org.sbx.templates": "default"}' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 'annotation org.sbx.templates is not supported' "an org.sbx.* annotation sbx-oci does not know"
# org.sbx.template: the operator's template instead of the bundle's root
# (an empty directory here: nothing of it could run sh).
printf 'oci:\n  templates:\n    base: default\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
mkdir -p "$TEST_TMP/emptyroot"
config '["sh","-c","echo from-template"]' '[]' "$TEST_TMP/emptyroot"
jq '.annotations["org.sbx.template"] = "base"' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
out=$(O run -b "$B" tp1 2>"$TEST_TMP/err"); rc=$?
is "$rc/$out/$(jq -r .template "$R/tp1/state.json")" "0/from-template/default" \
	"org.sbx.template: base boots the operator's template 'default'" || diag "$(cat "$TEST_TMP/err")"
O delete tp1
jq '.annotations["org.sbx.template"] = "default"' "$B/config.json" >"$B/c" && mv "$B/c" "$B/config.json"
bad 3 "org.sbx.template 'default' is not one of the templates" "a template's own name (an entry's only)"
printf 'oci:\n  default_policy: big\n' >"$SBX_ROOT/etc/sbx/sbx.yaml"
config '["true"]'
bad 3 "oci.default_policy: 'big' is not one of oci.policies" "a default that names no policy fails closed"
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"
nothing_left "the policy refusals left nothing"

# --- containerd (ctr, the runc shim v2) ---------------------------------------------
ctr_section() {
	command -v containerd >/dev/null && command -v ctr >/dev/null && command -v containerd-shim-runc-v2 >/dev/null ||
		{ diag "containerd not installed: its part skipped"; return; }
	local D=$TEST_TMP/containerd
	mkdir -p "$D"
	# A daemon of the test's own: root, state and sockets beneath it, no CRI.
	cat >"$D/config.toml" <<EOC
version = 2
root = "$D/root"
state = "$D/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$D/c.sock"
[ttrpc]
  address = "$D/c.sock.ttrpc"
EOC
	# The shim passes a --root of its own (/run/containerd/runc/NS): the
	# wrapper drops it for the test's, and gives the test's state root.
	cat >"$D/sbx-oci" <<EOW
#!/bin/sh
for a; do
	shift
	case \$a in --root) skip=1; continue ;; --root=*) continue ;; esac
	[ -n "\$skip" ] && { skip=; continue; }
	set -- "\$@" "\$a"
done
SBX_ROOT=$SBX_ROOT SBX_TEMPLATES=$SBX_TEMPLATES exec $OCI --root $R "\$@"
EOW
	chmod +x "$D/sbx-oci"
	containerd --config "$D/config.toml" >"$D/containerd.log" 2>&1 &
	CTD_PID=$!
	for _ in $(seq 50); do [ -S "$D/c.sock" ] && break; sleep 0.1; done
	local C=(ctr --address "$D/c.sock")
	out=$(timeout 300 "${C[@]}" run --rm --runc-binary "$D/sbx-oci" --rootfs "$B/rootfs" k1 \
		sh -c 'echo hi from ctr; exit 5' 2>"$TEST_TMP/err"); rc=$?
	is "$out/$rc" "hi from ctr/5" "ctr run --rootfs: output and exit status" || diag "$(cat "$TEST_TMP/err")"
	timeout 300 "${C[@]}" run -d --runc-binary "$D/sbx-oci" --rootfs "$B/rootfs" k2 sleep 600 >/dev/null
	is "$("${C[@]}" task ls | awk '$1 == "k2" {print $3}')" RUNNING "ctr run -d: the task runs"
	out=$(timeout 120 "${C[@]}" task exec --exec-id e1 k2 sh -c 'echo exec ok; exit 6'); rc=$?
	is "$out/$rc" "exec ok/6" "ctr task exec: output and status"
	"${C[@]}" task kill -s KILL k2; ok $? "ctr task kill -s KILL"
	for _ in $(seq 50); do [ "$("${C[@]}" task ls | awk '$1 == "k2" {print $3}')" = STOPPED ] && break; sleep 0.2; done
	is "$("${C[@]}" task ls | awk '$1 == "k2" {print $3}')" STOPPED "the task stopped"
	"${C[@]}" task rm k2 >/dev/null 2>&1 && "${C[@]}" container rm k2; ok $? "ctr task rm, container rm"
	# ctr run -t: the shim's console socket; script(1) is ctr's terminal.
	out=$(timeout 300 script -qefc "${C[*]} run --rm -t --runc-binary $D/sbx-oci --rootfs $B/rootfs k3 \
		sh -c 'tty; stty size; exit 6'" /dev/null </dev/null 2>&1); rc=$?
	is "$rc" 6 "ctr run -t: the exit status" || diag "$out"
	like "$out" '/dev/pts/[0-9]' "  ... the process on a terminal in the guest"
	out=$(timeout 300 "${C[@]}" run --rm --memory-limit 402653184 --cpus 2 --runc-binary "$D/sbx-oci" \
		--rootfs "$B/rootfs" k4 sh -c 'echo $(nproc) $(sed -n "s/MemTotal: *\([0-9]*\) kB/\1/p" /proc/meminfo)' \
		2>"$TEST_TMP/err"); rc=$?
	set -- $out
	is "$rc/${1:-}" "0/2" "ctr run --cpus 2: the guest has 2 vCPUs" || diag "$(cat "$TEST_TMP/err")"
	[ "${2:-0}" -gt 300000 ] && [ "${2:-0}" -le 393216 ]; ok $? "ctr run --memory-limit 384M: MemTotal ${2:-?} kB"
	nothing_left "after ctr: no container state, no session"
	kill "$CTD_PID" 2>/dev/null
	wait "$CTD_PID" 2>/dev/null
	CTD_PID=
	# What ctr and the shim make in the machine's /run whatever the
	# config says (fifo/, s/) goes if it is empty.
	rmdir /run/containerd/fifo /run/containerd/s /run/containerd 2>/dev/null
}
CTD_PID=
# lib.sh's cleanup calls this hook: the daemon goes, containers left by a
# failed run go, and with them the shm mounts Podman makes under its root.
_net_cleanup() {
	[ -z "$CTD_PID" ] || kill "$CTD_PID" 2>/dev/null
	[ -z "${PO+x}" ] || "${PO[@]}" rm -fa >/dev/null 2>&1
	[ -z "${P:-}" ] || grep -F " $P/" /proc/mounts | awk '{print $2}' | xargs -r -n1 umount 2>/dev/null
}
ctr_section

# --- Podman -----------------------------------------------------------------------
command -v podman >/dev/null && command -v conmon >/dev/null || skip_all "podman or conmon not installed"
P=$TEST_TMP/podman
mkdir -p "$P"
# Its own storage, run root and tmpdir: nothing of the machine's; no
# network, no journald.
# Podman calls its runtime with an environment of its own (XDG_RUNTIME_DIR
# alone) and drops --runtime-flag in its cleanup process: a wrapper gives
# every call this test's state root, templates and runtime root.
cat >"$P/sbx-oci" <<EOW
#!/bin/sh
SBX_ROOT=$SBX_ROOT SBX_TEMPLATES=$SBX_TEMPLATES exec $OCI --root $R "\$@"
EOW
chmod +x "$P/sbx-oci"
PO=(podman --root "$P/root" --runroot "$P/run" --tmpdir "$P/tmp" --storage-driver vfs --cgroup-manager cgroupfs
	--events-backend file --runtime "$P/sbx-oci")
tar -C "$B/rootfs" -cf "$TEST_TMP/rootfs.tar" .
ntmpl=$(ls "$SBX_TEMPLATES" | grep -c '^oci-')
"${PO[@]}" import "$TEST_TMP/rootfs.tar" localhost/sbx-busybox >/dev/null 2>&1; ok $? "podman import of the busybox rootfs"
out=$(timeout 300 "${PO[@]}" run --rm --network none localhost/sbx-busybox echo hi 2>"$TEST_TMP/err")
is "$out" hi "podman run --rm prints the container's output" || diag "$(cat "$TEST_TMP/err")"
timeout 300 "${PO[@]}" run --network none --name exit7 -e FOO=bar localhost/sbx-busybox \
	sh -c 'echo "$FOO $(uname -r)"; exit 7' >"$TEST_TMP/out" 2>&1
is $? 7 "podman run exits with the container's status"
like "$(cat "$TEST_TMP/out")" "^bar " "env -e reaches the process"
[ "$(awk '{print $2}' "$TEST_TMP/out")" != "$(uname -r)" ]; ok $? "and uname -r is the guest's kernel, not the host's"
is "$("${PO[@]}" inspect -f '{{.State.Status}} {{.State.ExitCode}}' exit7)" "exited 7" "podman inspect: exited, 7"
is "$("${PO[@]}" logs exit7)" "$(cat "$TEST_TMP/out")" "podman logs has the output"
"${PO[@]}" rm exit7 >/dev/null; ok $? "podman rm"
timeout 300 "${PO[@]}" run -d --network none --name sleeper localhost/sbx-busybox sleep 600 >/dev/null; ok $? "podman run -d"
is "$("${PO[@]}" inspect -f '{{.State.Status}}' sleeper)" running "it runs"
out=$(timeout 120 "${PO[@]}" exec sleeper sh -c 'echo exec $(id -u); exit 3' 2>"$TEST_TMP/err"); rc=$?
is "$out/$rc" "exec 0/3" "podman exec: output and status" || diag "$(cat "$TEST_TMP/err")"
out=$(timeout 300 script -qefc "${PO[*]} exec -t sleeper sh -c 'tty; exit 5'" /dev/null </dev/null 2>&1); rc=$?
is "$rc" 5 "podman exec -t: the exit status" || diag "$out"
like "$out" '/dev/pts/[0-9]' "  ... on a terminal in the guest"
timeout 60 "${PO[@]}" kill sleeper >/dev/null; ok $? "podman kill"
for _ in $(seq 50); do [ "$("${PO[@]}" inspect -f '{{.State.Status}}' sleeper)" != running ] && break; sleep 0.2; done
is "$("${PO[@]}" inspect -f '{{.State.ExitCode}}' sleeper)" 137 "killed: 137"
"${PO[@]}" rm -f sleeper >/dev/null; ok $? "podman rm -f"
nothing_left "after podman rm: no container state, no session"
# A terminal: podman run -t hands conmon's console socket to sbx-oci;
# script(1) is podman's terminal.
out=$(timeout 300 script -qefc "${PO[*]} run --rm -t --network none localhost/sbx-busybox \
	sh -c 'tty; stty size; exit 4'" /dev/null </dev/null 2>&1); rc=$?
is "$rc" 4 "podman run -t: the exit status" || diag "$out"
like "$out" '/dev/pts/[0-9]' "  ... the process on a terminal in the guest"
# Resources: --memory and --cpus become the VM's memory and vCPUs.
out=$(timeout 300 "${PO[@]}" run --rm --network none --memory 384m --cpus 2 localhost/sbx-busybox \
	sh -c 'echo $(nproc) $(sed -n "s/MemTotal: *\([0-9]*\) kB/\1/p" /proc/meminfo)' 2>"$TEST_TMP/err"); rc=$?
set -- $out
is "$rc/${1:-}" "0/2" "podman run --cpus 2: the guest has 2 vCPUs" || diag "$(cat "$TEST_TMP/err")"
[ "${2:-0}" -gt 300000 ] && [ "${2:-0}" -le 393216 ]; ok $? "podman run --memory 384m: MemTotal ${2:-?} kB"
out=$(timeout 300 "${PO[@]}" run --rm --network none --memory 256m --cpus 1 --ulimit nofile=1000:2000 \
	localhost/sbx-busybox sh -c 'echo $(nproc) $(sed -n "s/MemTotal: *\([0-9]*\) kB/\1/p" /proc/meminfo) \
	$(ulimit -n) $(ulimit -Hn)' 2>"$TEST_TMP/err"); rc=$?
set -- $out
is "$rc/${1:-}" "0/1" "podman run --memory 256m --cpus 1: 1 vCPU" || diag "$(cat "$TEST_TMP/err")"
[ "${2:-0}" -gt 150000 ] && [ "${2:-0}" -le 262144 ]; ok $? "  ... and MemTotal ${2:-?} kB, at most 256M"
is "${3:-}/${4:-}" "1000/2000" "  ... and --ulimit nofile=1000:2000 in the guest"
timeout 300 "${PO[@]}" run --rm --network none --memory 32m localhost/sbx-busybox true >/dev/null 2>"$TEST_TMP/err"
[ $? -ne 0 ]; ok $? "podman run --memory 32m is refused"
like "$(cat "$TEST_TMP/err")" 'memory.limit 33554432 is out of range' "  ... with sbx-oci's reason"
timeout 300 "${PO[@]}" run --rm --network none --annotation org.sbx.policy=nope localhost/sbx-busybox true \
	>/dev/null 2>"$TEST_TMP/err"
[ $? -ne 0 ]; ok $? "podman run --annotation org.sbx.policy=nope is refused"
like "$(cat "$TEST_TMP/err")" "org.sbx.policy 'nope' is not one of" "  ... naming the unknown policy"
timeout 300 "${PO[@]}" run --rm --network none -v "$TEST_TMP:/data" localhost/sbx-busybox true >/dev/null \
	2>"$TEST_TMP/err"
[ $? -ne 0 ]; ok $? "podman run -v HOSTDIR:/data is refused"
like "$(cat "$TEST_TMP/err")" 'bind mount on /data is not supported' "  ... saying a bind is not supported"
"${PO[@]}" rm -fa >/dev/null 2>&1
nothing_left "after the refusals: no container state, no session"
is "$(($(ls "$SBX_TEMPLATES" | grep -c '^oci-') - ntmpl))" 1 \
	"podman's containers of one image (a copy each) shared one new template"
[ ! -e /run/sbx-oci ]; ok $? "nothing in the machine's /run/sbx-oci"
done_testing
