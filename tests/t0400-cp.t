#!/bin/bash
# sbx-cp: files and trees both ways, tar streams with "-", the policy's
# writable/exportable paths and byte caps, hostile tar streams from the
# user (refused, nothing written in the guest) and from a guest that runs
# its own "tar" as root (refused, nothing written on the host).
. "$(dirname "$0")/lib.sh"
require_vm
command -v python3 >/dev/null || skip_all "python3 (for hostile tars) not installed"
command -v jq >/dev/null || skip_all "jq not installed"

T=$TEST_TMP
id=$(sbx-create -q) || { echo "Bail out! sbx-create failed"; exit 1; }
gsha() { sbx-exec "$id" -- sha256sum "$1" | cut -d' ' -f1; }
hsha() { sha256sum "$1" | cut -d' ' -f1; }
# mktar OUT SPEC...: a tar from "type:name[:arg[:mode]]" (f file with arg as
# content, d dir, l symlink, h hard link, c char device, p FIFO).
mktar() {
	python3 - "$@" <<'PY'
import io, sys, tarfile
out, specs = sys.argv[1], sys.argv[2:]
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as t:
    for s in specs:
        typ, name, *rest = s.split(":")
        ti = tarfile.TarInfo(name)
        arg = rest[0] if rest else ""
        if len(rest) > 1: ti.mode = int(rest[1], 8)
        data = None
        if typ == "f": data = arg.encode(); ti.size = len(data)
        elif typ == "d": ti.type = tarfile.DIRTYPE; ti.mode = 0o755
        elif typ == "l": ti.type = tarfile.SYMTYPE; ti.linkname = arg
        elif typ == "h": ti.type = tarfile.LNKTYPE; ti.linkname = arg
        elif typ == "c": ti.type = tarfile.CHRTYPE; ti.devmajor, ti.devminor = 5, 1
        elif typ == "p": ti.type = tarfile.FIFOTYPE
        t.addfile(ti, io.BytesIO(data) if data is not None else None)
PY
}

# ---- both ways --------------------------------------------------------------
mkdir -p "$T/src/tree/sub/deeper" "$T/dl"
echo hello >"$T/src/tree/a.txt"
head -c 300000 /dev/urandom >"$T/src/tree/sub/b.bin"
head -c 1000 /dev/urandom >"$T/src/tree/sub/deeper/c.bin"
ln -s ../a.txt "$T/src/tree/sub/link"
head -c 30000000 /dev/urandom >"$T/src/big.bin"

sbx-cp "$T/src/tree/a.txt" "$id:/workspace/"; ok $? "upload a file into a directory"
is "$(sbx-exec "$id" -- cat /workspace/a.txt)" hello "it arrived"
sbx-cp "$T/src/tree/a.txt" "$id:/workspace/renamed.txt"; ok $? "upload a file under a new name"
is "$(sbx-exec "$id" -- stat -c '%U %a' /workspace/renamed.txt)" "user 644" "owned by the guest's user"
out=$(sbx-cp --json "$T/src/tree" "$id:/workspace"); ok $? "upload a tree"
is "$(printf '%s' "$out" | jq -c '[.direction, .files, .dirs, .symlinks, .bytes]')" \
   '["upload",3,3,1,301006]' "--json counts files, dirs, symlinks and bytes"
is "$(gsha /workspace/tree/sub/b.bin)" "$(hsha "$T/src/tree/sub/b.bin")" "sha256 matches in the guest"
is "$(gsha /workspace/tree/sub/deeper/c.bin)" "$(hsha "$T/src/tree/sub/deeper/c.bin")" "... deeper too"
is "$(sbx-exec "$id" -- readlink /workspace/tree/sub/link)" "../a.txt" "a relative symlink inside the tree is kept"
sbx-cp "$T/src/big.bin" "$id:/workspace/"; ok $? "upload 30 MB"
is "$(gsha /workspace/big.bin)" "$(hsha "$T/src/big.bin")" "30 MB intact"

sbx-cp "$id:/workspace/tree" "$T/dl/"; ok $? "download a tree"
diff -r "$T/src/tree" "$T/dl/tree" >/dev/null; ok $? "it matches the original"
sbx-cp "$id:/workspace/big.bin" "$T/dl/big-copy"; ok $? "download 30 MB under a new name"
is "$(hsha "$T/dl/big-copy")" "$(hsha "$T/src/big.bin")" "30 MB intact on the way back"
is "$(stat -c '%u' "$T/dl/big-copy")" "$(id -u)" "owned by the invoking user"
sbx-cp "$id:/workspace/tree" "$T/dl/" 2>/dev/null; is "$?" 3 "a directory does not replace an existing one"
ls -A "$T/dl" | grep -q '^\.sbx-cp'; is "$?" 1 "no temporary directory is left behind"

# ---- "-" both ways --------------------------------------------------------
sbx-cp "$id:/workspace/tree" - >"$T/tree.tar"; ok $? "download as a tar on stdout"
is "$(tar -tf "$T/tree.tar" | sort | head -3 | tr '\n' ' ')" "tree/ tree/a.txt tree/sub/ " "it lists as a tar"
sbx-exec "$id" -- mkdir /workspace/fromtar
sbx-cp - "$id:/workspace/fromtar" <"$T/tree.tar"; ok $? "upload a tar from stdin"
is "$(gsha /workspace/fromtar/tree/sub/b.bin)" "$(hsha "$T/src/tree/sub/b.bin")" "its content matches"
tar -C "$T/src/tree" -cf - . | sbx-cp - "$id:/workspace/fromtar"; ok $? "a tar of '.' (with a ./ entry)"
is "$(sbx-exec "$id" -- cat /workspace/fromtar/a.txt)" hello "extracted into the directory"
mktar "$T/suid.tar" "f:suid:#!/bin/sh:4755" "d:sticky" 
sbx-cp - "$id:/workspace/fromtar" <"$T/suid.tar"; ok $? "a setuid file is accepted..."
is "$(sbx-exec "$id" -- stat -c %a /workspace/fromtar/suid)" 755 "... with setuid stripped"

# ---- paths ------------------------------------------------------------------
sbx-cp "$T/src/tree/a.txt" "$id:/etc/" 2>"$T/err"; is "$?" 3 "upload to /etc refused"
like "$(cat "$T/err")" "not under a writable path" "and says why"
sbx-cp "$T/src/tree/a.txt" "$id:/workspace/../etc" 2>/dev/null; is "$?" 3 "upload with .. refused"
sbx-cp "$T/src/tree/a.txt" "$id:workspace" 2>/dev/null; is "$?" 2 "a relative guest path is a usage error"
sbx-cp "$id:/etc/passwd" "$T/dl/" 2>/dev/null; is "$?" 3 "download from /etc refused"
test -e "$T/dl/passwd"; is "$?" 1 "and nothing written"
sbx-cp "$id:/workspace/nope" "$T/dl/" 2>/dev/null; is "$?" 4 "download of a missing file: 4"
sbx-cp "$T/nope" "$id:/workspace/" 2>/dev/null; is "$?" 4 "upload of a missing file: 4"
sbx-cp "$T/src/tree/a.txt" "nosuch:/workspace/" 2>/dev/null; is "$?" 4 "no such session: 4"
sbx-cp "$T/src/tree/a.txt" "$T/src/tree" "$id:/workspace/a.txt" 2>/dev/null; is "$?" 3 "several sources need a directory"

# ---- hostile uploads: refused, and nothing written in the guest ------------
sbx-exec "$id" -- mkdir /workspace/h
hostile() { # hostile DESCRIPTION SPEC...
	local what=$1; shift
	mktar "$T/h.tar" "$@"
	sbx-cp - "$id:/workspace/h" <"$T/h.tar" 2>"$T/err"; is "$?" 3 "upload refused: $what"
	is "$(sbx-exec "$id" -- find /workspace/h /tmp -mindepth 1 | wc -l)" 0 "... nothing written"
}
hostile "traversal ../x" "f:ok:1" "f:../x:evil"
hostile "absolute /tmp/x" "f:ok:1" "f:/tmp/x:evil"
hostile "symlink-then-file a -> /etc, a/passwd" "l:a:/etc" "f:a/passwd:evil"
hostile "symlink-then-file a -> ., a/x" "l:a:." "f:a/x:evil"
hostile "symlink escaping the destination" "l:l:../../tmp"
hostile "hard link out" "h:x:../../etc/passwd"
hostile "hard link to a later name" "h:x:y" "f:y:1"
hostile "device node" "c:null"
hostile "FIFO" "p:fifo"
like "$(cat "$T/err")" "refused entry fifo: a FIFO" "the error names the entry"
python3 - "$T/many.tar" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    for i in range(100001):
        t.addfile(tarfile.TarInfo("d%d/f%d" % (i // 1000, i)))
PY
sbx-cp - "$id:/workspace/h" <"$T/many.tar" 2>"$T/err"; is "$?" 3 "100,001 entries refused"
like "$(cat "$T/err")" "more than 100000 entries" "and says why"
is "$(sbx-exec "$id" -- ls -A /workspace/h)" "" "nothing written"

# ---- a hostile guest ---------------------------------------------------------
# A symlink planted in an exportable path, pointing at /etc.
sbx-exec -u root "$id" -- ln -s /etc /workspace/etclink
mkdir "$T/dl2"
sbx-cp "$id:/workspace/etclink" "$T/dl2/" 2>"$T/err"; is "$?" 3 "download of a symlink to /etc refused"
is "$(ls -A "$T/dl2")" "" "nothing written on the host"
# Root in the guest replaces /bin/sh (busybox runs its own tar applet
# whatever PATH says) with one that answers sbx-cp's download with a
# crafted stream.
evil() { # evil DESCRIPTION SPEC...
	local what=$1; shift
	mktar "$T/evil.tar" "$@"
	sbx-exec -i "$id" -- /bin/busybox sh -c 'cat >/workspace/evil.tar' <"$T/evil.tar"
	sbx-cp "$id:/workspace/x" "$T/dl2/" 2>"$T/err"; is "$?" 3 "hostile guest stream refused: $what"
	is "$(ls -A "$T/dl2" "$T/outside" 2>&1 | tr '\n' ' ')" \
	   "ls: cannot access '$T/outside': No such file or directory $T/dl2: " "... nothing written on the host"
}
sbx-exec "$id" -- mkdir /workspace/x
sbx-exec -u root "$id" -- /bin/busybox sh -c 'rm /bin/sh && printf "%s\n" "#!/bin/busybox sh" \
	"case \"\$2\" in *\"tar -c\"*) exec cat /workspace/evil.tar ;; esac" "exec /bin/busybox sh \"\$@\"" \
	>/bin/sh && chmod 755 /bin/sh'
evil "x/../../outside" "d:x" "f:x/../../outside:evil"
evil "absolute name" "d:x" "f:$T/outside:evil"
evil "symlink then file through it" "d:x" "l:x/l:../.." "f:x/l/outside:evil"
evil "symlink to an absolute path" "d:x" "l:x/l:$T" "f:x/l/outside:evil"
evil "a name outside the requested one" "d:x" "f:outside:evil"
evil "hard link to a host file" "d:x" "h:x/h:/etc/passwd"
evil "a device node" "d:x" "c:x/null"
mktar "$T/evil.tar" "d:x" "f:x/ok:fine" "f:x/../../outside:evil"
sbx-exec -i "$id" -- /bin/busybox sh -c 'cat >/workspace/evil.tar' <"$T/evil.tar"
sbx-cp "$id:/workspace/x" - >"$T/cut.tar" 2>/dev/null; is "$?" 3 "a hostile stream to stdout is refused"
tar -tf "$T/cut.tar" >/dev/null 2>&1; is "$?" 2 "... and what was written before it does not pass as a whole tar (no end marker)"
sbx-exec -u root "$id" -- /bin/busybox ln -sf /bin/busybox /bin/sh
sbx-cp "$id:/workspace/x" "$T/dl2/"; ok $? "with the guest's sh restored, the download works"

# ---- caps ---------------------------------------------------------------------
printf 'files:\n  max_transfer: 1M\n  max_session_transfer: 3M\n' >"$T/caps.yaml"
cid=$(sbx-create -q -p "$T/caps.yaml") || { echo "Bail out! sbx-create -p failed"; exit 1; }
head -c 2000000 /dev/urandom >"$T/2m"
head -c 800000 /dev/urandom >"$T/800k"
sbx-cp "$T/2m" "$cid:/workspace/" 2>"$T/err"; is "$?" 3 "upload over max_transfer refused"
like "$(cat "$T/err")" "max_transfer" "and names the limit"
is "$(sbx-exec "$cid" -- ls -A /workspace)" "" "nothing written"
sbx-exec "$cid" -- dd if=/dev/zero of=/workspace/big bs=1k count=2000 2>/dev/null
sbx-cp "$cid:/workspace/big" "$T/dl3" 2>/dev/null; is "$?" 3 "download over max_transfer refused"
test -e "$T/dl3"; is "$?" 1 "nothing written"
for i in 1 2 3; do sbx-cp "$T/800k" "$cid:/workspace/f$i"; ok $? "upload $i of 800k within the session budget"; done
sbx-cp "$T/800k" "$cid:/workspace/f4" 2>"$T/err"; is "$?" 3 "the 4th exceeds max_session_transfer"
like "$(cat "$T/err")" "max_session_transfer" "and says so"
sbx-cp "$cid:/workspace/f1" "$T/dl3" 2>/dev/null; is "$?" 3 "a download over what is left is refused too"
is "$(jq .bytes "$SBX_ROOT/var/lib/sbx/sessions/$cid/transfer.json")" 2400000 "the session counter holds what moved"

sbx-kill "$id" "$cid"
done_testing
