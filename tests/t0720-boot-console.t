#!/bin/bash
# A boot that never answers (issue 35, item 7) keeps its whole console:
# the guest boots at the kernel's full log level, and a boot that fails
# leaves the last 256 KiB of its console as LIB/boot-failures/ID.console,
# named in the error (which still ends with the console's last lines); the
# newest 16 such files are kept.  The first failure is a guest whose init
# never answers, given 30 s (the kernel has printed by then however loaded
# the host); the rest are boot timeouts shorter than any TCG boot.
. "$(dirname "$0")/lib.sh"
require_vm
command -v busybox >/dev/null || skip_all "busybox not installed"
F=$SBX_ROOT/var/lib/sbx/boot-failures
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
real=default@${tmpl##*@}
mkdir -p "$TEST_TMP/templates"
ln -s "$tmpl" "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
# default@hang: the default template's kernel and root, an init that sleeps
d=$SBX_TEMPLATES/default@hang root=$TEST_TMP/hang-root
mkdir -p "$d" "$root/bin"
(cd "$root" && busybox cpio -idm <"$tmpl/initrd.cpio" 2>/dev/null)
rm -f "$root/init"
cp "$(command -v busybox)" "$root/bin/busybox"
printf '#!/bin/busybox sh\nexec /bin/busybox sleep 100000\n' >"$root/init"
chmod +x "$root/init"
cp "$tmpl/manifest.json" "$tmpl/vmlinux" "$d/"
ln -s "$tmpl/rootfs.ext4" "$d/rootfs.ext4"
"$SBX_BUILD/tools/sbx-mkcpio" -o "$d/initrd.cpio" "$root"
id=$(SBX_BOOT_TIMEOUT=30 sbx-create -q -t default@hang --id never-1 2>"$TEST_TMP/err"); rc=$?
is "$rc" 69 "a boot that does not answer within SBX_BOOT_TIMEOUT: 69"
err=$(cat "$TEST_TMP/err")
like "$err" "did not answer within 30 s" "the error says so"
like "$err" "within 30 s \(0 bytes from the guest\)" "and that the VMM connected the channel but nothing came over it"
like "$err" "whole console: $F/never-1.console" "and names the whole console"
[ -s "$F/never-1.console" ]; ok $? "which is kept"
grep -q "Linux version" "$F/never-1.console"; ok $? "holding the kernel's own boot messages (no 'quiet')"
[ ! -e "$SBX_ROOT/var/lib/sbx/sessions/never-1" ]; ok $? "nothing else of the session is left"
is "$(stat -c %a "$F")" 700 "the directory is root's alone"
# More failures than are kept: the newest 16 stay.
for i in $(seq 2 18); do
	SBX_BOOT_TIMEOUT=1 sbx-create -q -t "$real" --id "never-$i" >/dev/null 2>&1
	sleep 1.1 # mtimes a second apart: the order is the age
done
is "$(find "$F" -type f | wc -l)" 16 "only the newest 16 consoles are kept"
[ -e "$F/never-18.console" ] && [ ! -e "$F/never-1.console" ]; ok $? "the oldest went first"
id=$(sbx-create -q -t "$real"); ok $? "a session with the default timeout boots"
[ ! -e "$F/$id.console" ]; ok $? "and keeps no console there"
sbx-kill "$id" >/dev/null
done_testing
