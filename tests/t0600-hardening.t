#!/bin/bash
# The VMM runs jailed (common/jail.c): its own unprivileged uid, no
# capabilities, no_new_privs, a seccomp filter, and a root that holds only
# what the VMM (QEMU, Cloud Hypervisor) needs.  A failed jail step means no
# VMM.
. "$(dirname "$0")/lib.sh"
require_vm
[ "${SBX_JAIL:-on}" = on ] || skip_all "SBX_JAIL=$SBX_JAIL"
L=$SBX_ROOT/var/lib/sbx/sessions
R=$SBX_ROOT/run/sbx/sessions
# A /proc/PID/status field, its values separated by single spaces.
field() { awk -v k="$1:" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "/proc/$2/status"; }
first() { field "$@" | cut -d' ' -f1; }

a=$(sbx-create -q); ok $? "create a session"
vmm=$(jq -r .vmm_process.pid "$L/$a/session.json")
backend=$(jq -r .vmm "$L/$a/session.json")
uid=$(field Uid "$vmm")
gid=$(field Gid "$vmm")
u=${uid%% *}
is "$uid" "$u $u $u $u" "real, effective, saved and fs uid are one"
is "$gid" "$u $u $u $u" "and the gids are the same number"
[ "$u" -ge $((0x5b000000)) ]; ok $? "the uid ($u) is from the jail range, not 0 nor a login user's"
accel=$(jq -r .accel "$L/$a/session.json")
if [ "$accel" = kvm ] && [ "$(stat -c %a /dev/kvm | cut -c3)" != 6 ]; then
	kvm=$(stat -c %g /dev/kvm)
else
	kvm=
fi
is "$(field Groups "$vmm")" "$kvm" "no supplementary groups (but /dev/kvm's when KVM needs it)"
is "$(field NoNewPrivs "$vmm")" 1 "no_new_privs is set"
is "$(field Seccomp "$vmm")" 2 "a seccomp filter is on"
if [ "$backend" = qemu ]; then
	is "$(field Seccomp_filters "$vmm")" 2 "ours and QEMU's -sandbox"
else # Cloud Hypervisor installs its own per thread
	[ "$(field Seccomp_filters "$vmm")" -ge 1 ]; ok $? "ours, at least ($backend)"
fi
for c in CapInh CapPrm CapEff CapBnd CapAmb; do
	is "$(field $c "$vmm")" 0000000000000000 "$c is empty"
done

root=/proc/$vmm/root
extra=$(ls -A "$root/" | grep -vxE 'bin|sbin|lib|lib32|lib64|libx32|usr|etc|dev|sbx')
is "$extra" "" "the jail's root holds only /usr, the lib links, /etc, /dev and /sbx"
for p in home root var tmp proc sys run etc/shadow etc/passwd "${SBX_ROOT#/}"; do
	[ ! -e "$root/$p" ]; ok $? "/$p is not in the jail"
done
is "$(ls -A "$root/etc")" "ld.so.cache" "/etc has only the loader cache"
want="null urandom "
[ "$accel" = kvm ] && want="kvm $want"
is "$(ls -A "$root/dev" | tr '\n' ' ')" "$want" "/dev has only null, urandom and kvm under KVM ($accel)"
# QEMU connects to the monitor's agent.sock; Cloud Hypervisor makes its
# vsock socket in a directory of its own.  The console is the VMM's
# stdout, a pipe to the monitor: no file of it in the jail.
want="agent.sock "
[ "$backend" = qemu ] || want="vsock "
is "$(ls -A "$root/sbx/run" | tr '\n' ' ')" "$want" \
   "the cwd shows only the agent's socket (or directory) ($backend)"
is "$(readlink "/proc/$vmm/cwd")" /sbx/run "the VMM's cwd is in the jail"
rw=$(awk '$6 ~ /^rw/ { print $5 }' "/proc/$vmm/mountinfo" | sort | tr '\n' ' ')
want="/dev/null /sbx/scratch.img "
# Cloud Hypervisor also writes its vsock socket and its snapshot files.
[ "$backend" = qemu ] || want="/dev/null /sbx/run/vsock /sbx/scratch.img /sbx/state "
[ "$accel" = kvm ] && want="/dev/kvm $want"
is "$rw" "$want" "only the scratch disk (and devices) are writable"
if [ "$backend" = qemu ]; then
	grep -q 'file=/sbx/scratch.img' "/proc/$vmm/cmdline"; ok $? "the VMM's argv names in-jail paths"
else # the configuration goes over the API
	tr '\0' ' ' <"/proc/$vmm/cmdline" | grep -qE -- '--api-socket fd=[0-9]+ --event-monitor fd=[0-9]+ $'
	ok $? "the VMM's argv holds only the API socket and event monitor fds"
fi
is "$(tr '\0' '\n' <"/proc/$vmm/environ")" "PATH=/usr/local/bin:/usr/bin:/bin" "the VMM gets a clean environment"
is "$(stat -c %u "$L/$a/scratch.img")" "$u" "scratch.img belongs to the VMM's uid"
is "$(stat -c '%u %a' "$R/$a" "$R/$a/monitor.sock" | tr '\n' ' ')" "0 700 0 755 " \
   "the runtime directory and the monitor's socket stay root's"
if command -v python3 >/dev/null && [ "$backend" = qemu ]; then
	g=$(cd "$R/$a" && python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.settimeout(5)
s.connect("qmp.sock"); print(s.recv(4096).decode()[:8])' 2>&1)
	is "$g" '{"QMP": ' "QMP answers on qmp.sock, passed to the VMM as an fd"
elif command -v curl >/dev/null; then
	g=$(cd "$R/$a" && curl -s --max-time 5 --unix-socket qmp.sock http://localhost/api/v1/vmm.ping | jq -r .version)
	[ -n "$g" ] && [ "$g" != null ]; ok $? "the API answers on qmp.sock, passed to the VMM as an fd ($g)"
fi

# The session still works.
out=$(sbx-exec "$a" -- sh -c 'echo out; echo err >&2; exit 7' 2>"$TEST_TMP/err"); rc=$?
is "$out" out "exec output"
is "$rc:$(cat "$TEST_TMP/err")" "7:err" "exec status and stderr"
sbx-exec "$a" -- dd if=/dev/zero of=/workspace/f bs=1M count=8 conv=fsync 2>/dev/null
ok $? "the guest writes its scratch disk"
sbx-exec --timeout 1 "$a" -- sleep 30; is "$?" 124 "exec timeout"

b=$(sbx-create -q); ok $? "a second session"
vb=$(jq -r .vmm_process.pid "$L/$b/session.json")
ub=$(first Uid "$vb")
[ "$ub" != "$u" ] && [ "$ub" -ge $((0x5b000000)) ]; ok $? "concurrent VMMs run as different uids ($u, $ub)"
is "$(sbx-exec "$b" -- echo b)" b "the second session works"
sbx-kill "$a" "$b"; ok $? "kill both"
is "$(root_procs | wc -l)" 0 "no VMM left behind"

# Fail closed.
SBX_JAIL=maybe sbx-create -q 2>"$TEST_TMP/err" >/dev/null; is "$?" 3 "SBX_JAIL=maybe is an error, not a silent off"
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
bad=$TEST_TMP/templates/default@badroot
mkdir -p "$bad/rootfs.ext4"
cp "$tmpl/manifest.json" "$tmpl/initrd.cpio" "$tmpl/vmlinux" "$bad/"
SBX_TEMPLATES=$TEST_TMP/templates sbx-create -q -t default@badroot 2>"$TEST_TMP/err" >/dev/null; rc=$?
[ "$rc" -ne 0 ]; ok $? "a jail step that fails stops the create ($rc)"
like "$(cat "$TEST_TMP/err")" 'status 126.*cannot jail the VMM: .*rootfs.ext4 is not a regular file' \
     "the VMM exits 126 and says which step failed"
is "$(ls "$L" | wc -l):$(root_procs | wc -l)" "0:0" "and leaves no session and no process"

# SBX_JAIL=off: the debugging aid.
c=$(SBX_JAIL=off sbx-create -q 2>"$TEST_TMP/err"); ok $? "SBX_JAIL=off creates"
[ -n "$c" ] || diag "$(cat "$TEST_TMP/err")"
vc=$(jq -r .vmm_process.pid "$L/$c/session.json")
is "$(first Uid "$vc")" 0 "and its VMM is not jailed"
is "$(sbx-exec "$c" -- echo ok)" ok "and works"
sbx-kill "$c"
done_testing
