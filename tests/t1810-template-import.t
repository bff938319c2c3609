#!/bin/bash
# sbx-template import (issue 14) through the CLI: a `docker export`-like
# tarball of the default template's root (plain, gzip, zstd) imported and
# booted; device nodes dropped and setuid bits stripped; a two-layer
# `docker save` and an OCI layout imported with their whiteouts applied
# and the image's Env and WorkingDir in the manifest; every hostile
# archive (tests/tools/mkhostile.py) refused with its status, naming the
# entry, nothing written outside the root and the templates directory
# unchanged.  No Docker here: the archives are built with python.
. "$(dirname "$0")/lib.sh"
require_vm
command -v debugfs >/dev/null || skip_all "debugfs (e2fsprogs) not installed"
command -v jq >/dev/null || skip_all "jq not installed"
command -v zstd >/dev/null || skip_all "zstd not installed"
MK=$(cd "$(dirname "$0")" && pwd)/tools/mkhostile.py
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
T=$SBX_TEMPLATES
A=$TEST_TMP/archives
mkdir -p "$A"

listing() { find "$T" -mindepth 1 -printf '%P %y %s %m %T@ %l\n' | sort; }
# The root of an imported template, read from its ext4 image (no mount).
dbg() { debugfs -R "$2" "$T/$1/rootfs.ext4" 2>/dev/null; }

# The tree a `docker export` of a session of the default template would
# give: its root, dumped from the image (debugfs loses /tmp's sticky bit,
# which the export keeps).
tree=$TEST_TMP/tree
mkdir -p "$tree"
debugfs -R "rdump / $tree" "$(ls -d "$SBX_TEMPLATES"/default@* | head -n1)/rootfs.ext4" 2>/dev/null
rm -rf "$tree/lost+found"
chmod 1777 "$tree/tmp"
echo imported >"$tree/etc/sbx-imported"
echo accent >"$tree/etc/caf$(printf '\303\251')" # a UTF-8 name: a pax path record
[ -x "$tree/bin/busybox" ]; ok $? "the default template's root is dumped for export"

# --- a rootfs tarball ------------------------------------------------------------
python3 "$MK" rootfs "$tree" "$A/export.tar.gz"
ref=$(sbx-template import exp "$A/export.tar.gz" 2>"$TEST_TMP/err"); ok $? "import of a docker-export tar.gz exits 0"
like "$ref" '^exp@[0-9a-f]{12}$' "and prints NAME@VERSION ($ref)"
M=$T/$ref/manifest.json
is "$(jq -r '.source.kind + " " + .source.format' "$M")" "import rootfs" "the manifest says import, format rootfs"
id=$(sbx-create -q -t exp); ok $? "a session boots from the imported template"
is "$(sbx-exec "$id" -- cat /etc/sbx-imported)" imported "and runs a command in the imported root"
is "$(sbx-exec "$id" -- stat -c '%a %u' /tmp /workspace | tr '\n' ' ')" "1777 0 755 1000 " \
	"modes (sticky /tmp) and numeric owners are kept"
sbx-kill "$id" >/dev/null

python3 "$MK" rootfs "$tree" "$A/export.tar.zst"
python3 "$MK" rootfs "$tree" "$A/export.tar"
refz=$(sbx-template import expz "$A/export.tar.zst"); ok $? "a tar.zst imports"
refp=$(sbx-template import expp "$A/export.tar"); ok $? "a plain tar imports"
is "$(dbg "$refz" 'cat /etc/sbx-imported')$(dbg "$refp" 'cat /etc/sbx-imported')" "importedimported" \
	"both roots hold the tree's files"
is "$(dbg "$ref" "cat /etc/caf$(printf '\303\251')")" accent "a non-ASCII name (UTF-8 in a pax header) is kept"

# Devices, FIFOs dropped; setuid/setgid stripped (the operator did not allow them).
python3 "$MK" rootfs-odd "$tree" "$A/odd.tar"
refo=$(sbx-template import odd "$A/odd.tar"); ok $? "a tarball with device nodes and setuid files imports"
is "$(dbg "$refo" 'ls /opt/dev' | grep -Eo 'sda|mem|fifo' | wc -l)" 0 "device nodes and the FIFO are dropped"
is "$(dbg "$refo" 'stat /opt/suid' | grep -Eo 'Mode: +[0-7]+' | grep -Eo '[0-7]+$') $(dbg "$refo" 'stat /opt/sgid' |
	grep -Eo 'Mode: +[0-7]+' | grep -Eo '[0-7]+$')" "0755 0755" "setuid and setgid bits are stripped"

# --- images ----------------------------------------------------------------------
python3 "$MK" docker-save "$tree" "$A/save.tar"
refd=$(sbx-template import img "$A/save.tar"); ok $? "a two-layer docker save imports"
M=$T/$refd/manifest.json
is "$(jq -r .source.format "$M")" docker "the manifest says format docker"
is "$(jq -r '.env.SBX_IMAGE + " " + .env.PATH' "$M")" "two-layer /usr/sbin:/usr/bin:/sbin:/bin" \
	"the image config's Env is in the manifest"
is "$(jq -r .workdir "$M")" /workspace "and its WorkingDir"
id=$(sbx-create -q -t img); ok $? "a session boots from the imported image"
is "$(sbx-exec "$id" -- sh -c 'ls /etc/sbx-lower 2>&1 >/dev/null | grep -c "No such"; ls /opt/lower; cat /etc/sbx-upper')" \
	"$(printf '1\nupper\nupper')" "layer 2's whiteout removed a lower file, its opaque directory hid the lower one"
is "$(sbx-exec "$id" -- cat /etc/sbx-imported)" imported "layer 1's files are there"
# shellcheck disable=SC2016 # the guest's shell expands them
is "$(sbx-exec "$id" -- sh -c 'echo "$SBX_IMAGE $PATH"; pwd')" \
	"$(printf 'two-layer /usr/sbin:/usr/bin:/sbin:/bin\n/workspace')" \
	"the image's Env and WorkingDir are every exec's defaults"
# shellcheck disable=SC2016
is "$(sbx-exec -e SBX_IMAGE=mine -w /tmp "$id" -- sh -c 'echo "$SBX_IMAGE"; pwd')" "$(printf 'mine\n/tmp')" \
	"and the caller's -e and -w win"
sbx-kill "$id" >/dev/null

# The image's User, as a session takes it: root, user, a uid, or a user of
# the image's /etc/passwd (recorded as its uid); USER:GROUP only with the
# user's own group.
python3 "$MK" docker-save "$tree" "$A/save-root.tar" 0:0
refu=$(sbx-template import imgroot "$A/save-root.tar"); ok $? "an image whose User is 0:0 imports"
is "$(jq -r .user "$T/$refu/manifest.json")" 0 "the manifest records uid 0"
id=$(sbx-create -q -t imgroot)
is "$(sbx-exec "$id" -- id -u)" 0 "and its execs run as root"
sbx-kill "$id" >/dev/null
for u in nosuchuser 1000:0 "user:wheel"; do
	python3 "$MK" docker-save "$tree" "$A/save-bad.tar" "$u"
	listing >"$TEST_TMP/before"
	sbx-template import imgbad "$A/save-bad.tar" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
	is "$?" 3 "an image whose User is $u: exits 3"
	like "$(cat "$TEST_TMP/err")" "User: user '$u'" "and says why ($(head -c 160 "$TEST_TMP/err"))"
	listing >"$TEST_TMP/after"
	cmp -s "$TEST_TMP/before" "$TEST_TMP/after"; ok $? "User $u: the templates directory is unchanged"
done

python3 "$MK" oci "$tree" "$A/oci.tar"
refc=$(sbx-template import ociimg "$A/oci.tar"); ok $? "an OCI image layout (gzip layers) imports"
M=$T/$refc/manifest.json
is "$(jq -r '.source.format + " " + .env.SBX_IMAGE' "$M")" "oci two-layer" "format oci, Env recorded"
is "$(dbg "$refc" 'ls /opt/lower' | grep -Eo '\b(a|b|upper)\b' | tr '\n' ' ')" "upper " \
	"the OCI layers' opaque directory is applied"
dbg "$refc" 'stat /etc/sbx-lower' | grep -q Inode; ok $((!$?)) "and the whiteout"

# --- hostile archives --------------------------------------------------------------
python3 "$MK" hostile "$A/h"
python3 "$MK" oci-tampered "$tree" "$A/h/oci-tampered.tar"
printf 'oci-tampered.tar\t3\ttampered\n' >>"$A/h/expect"
rm -f /tmp/sbx-escape-* 2>/dev/null
while IFS=$'\t' read -r f want text; do
	listing >"$TEST_TMP/before"
	sbx-template import "bad-${f%%.*}" "$A/h/$f" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
	is "$?" "$want" "$f: exits $want"
	like "$(cat "$TEST_TMP/err")" "${text//[\".()]/.}" "$f: says why ($(head -c 160 "$TEST_TMP/err"))"
	is "$(cat "$TEST_TMP/out")" "" "$f: nothing on stdout"
	listing >"$TEST_TMP/after"
	cmp -s "$TEST_TMP/before" "$TEST_TMP/after"; ok $? "$f: the templates directory is unchanged"
done <"$A/h/expect"
ls /tmp/sbx-escape-* >/dev/null 2>&1; ok $((!$?)) "nothing escaped into /tmp"
is "$(find "$SBX_ROOT" -name '*escape*' | wc -l)" 0 "nor anywhere under the test's root"

done_testing
