#!/bin/bash
# What a hostile guest can make the host keep, write or print is bounded
# (issue 11, security review findings 7, 8 and 13).
#
# Two kinds of guest.  The default template, where root in the guest floods
# its serial console or prints a fake panic line, as any guest can.  And a
# lying agent: a template whose /init is not guest-init but a busybox
# script that speaks the frame protocol on the real agent port of a real
# microVM, sending frames written beforehand by tests/tools/lying-guest.py.
# That is exactly the position of root in a guest that has taken over PID
# 1 (ptrace, /proc/1/mem), without needing an exploit in the test.
. "$(dirname "$0")/lib.sh"
require_vm
here=$(cd "$(dirname "$0")" && pwd)
backend=${SBX_VMM:-qemu}
tmpl=$(ls -d "$SBX_TEMPLATES"/default@* | head -1)
mkdir -p "$TEST_TMP/templates"
ln -s "$tmpl" "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
lib=$SBX_ROOT/var/lib/sbx
run=$SBX_ROOT/run/sbx

# lying_template NAME MODE: default@NAME, the default kernel and root disk,
# an initramfs with the default's modules, busybox, the frames and the
# script below as /init.
lying_template() {
	local d=$SBX_TEMPLATES/default@$1 root=$TEST_TMP/root-$1
	mkdir -p "$d" "$root/bin"
	(cd "$root" && busybox cpio -idm <"$tmpl/initrd.cpio" 2>/dev/null)
	rm -f "$root/init"
	cp /bin/busybox "$root/bin/busybox"
	python3 "$here/tools/lying-guest.py" "$root" "$2" || return 1
	cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m 2>/dev/null; done
port=
while [ -z "$port" ]; do
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat "$p/name" 2>/dev/null)" = sbx.agent ] && port=/dev/${p##*/}
	done
	[ -n "$port" ] || sleep 0.05
done
exec 3<>"$port"
cat /hello.bin >&3
n=0
while :; do
	set -- $(dd bs=12 count=1 iflag=fullblock <&3 2>/dev/null | od -An -tu1 -v)
	[ $# -eq 12 ] || continue
	len=$(($1 + $2 * 256 + $3 * 65536 + $4 * 16777216))
	[ "$len" -gt 0 ] && dd bs="$len" count=1 iflag=fullblock <&3 >/dev/null 2>&1
	case $5 in
	2) n=$((n + 1)); [ -f /exec$n.bin ] && cat /exec$n.bin >&3 ;;
	16) poweroff -f ;;
	esac
done
EOF
	chmod +x "$root/init"
	cp "$tmpl/manifest.json" "$tmpl/vmlinux" "$d/"
	ln -s "$tmpl/rootfs.ext4" "$d/rootfs.ext4"
	"$SBX_BUILD/tools/sbx-mkcpio" -o "$d/initrd.cpio" "$root"
}

if [ "$backend" != qemu ]; then
	diag "the lying agent speaks virtio-serial: QEMU only"
elif ! command -v python3 >/dev/null || ! command -v busybox >/dev/null; then
	diag "python3 or busybox missing: no lying agent"
else
	# --- Finding 8: frames for an exec that has ended ----------------------
	lying_template liar exit-flood
	id=$(sbx-create -q -t default@liar); ok $? "a session whose agent lies comes up"
	# The client of e1 reads nothing for now: the monitor's queue for it
	# fills (8 MiB), the client lags and reads the rest from the files.
	mkfifo "$TEST_TMP/out1"
	sbx-exec "$id" -- x >"$TEST_TMP/out1" 2>"$TEST_TMP/err1" &
	p1=$!
	exec 4<"$TEST_TMP/out1"
	i=0
	while [ ! -e "$lib/sessions/$id/execs/e1/request.json" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	# e2's frames come after all of e1's on the agent channel: once e2 has
	# ended the monitor has handled every frame the guest sent for e1.
	sbx-exec "$id" -- y >/dev/null; is "$?" 0 "a second exec completes behind the flood"
	is "$(jq -c 'select(.type == "exec.end" and .exec == "e1")' "$lib/audit.log" | wc -l)" 1 \
	   "one exec.end for e1, not one per EXIT frame"
	is "$(jq -r '.status' "$lib/sessions/$id/execs/e1/result.json")" 7 \
	   "result.json keeps the first EXIT (status 7), later ones do not rewrite it"
	is "$(jq -r '.wall_s' "$lib/sessions/$id/execs/e1/result.json")" 0.001 \
	   "... nor its times"
	is "$(wc -c <"$lib/sessions/$id/execs/e1/stdout")" $((9 << 20)) \
	   "no output after the EXIT is stored"
	got=$(wc -c <&4)
	exec 4<&-
	wait "$p1"; rc=$?
	is "$rc" 7 "the lagging client gets the first exit status"
	is "$got" $((9 << 20)) "... after exactly the output sent before it"
	is "$(jq -c 'select(.type == "exec.end")' "$lib/audit.log" | wc -l)" 2 "two execs, two exec.end records"
	mrss=$(awk '/VmRSS/ { print $2 }' /proc/"$(jq -r .monitor.pid "$lib/sessions/$id/session.json")"/status 2>/dev/null)
	diag "monitor RSS after the flood: ${mrss:-?} kB"
	sbx-kill "$id"; ok $? "the lying session is destroyed"

	# --- Finding 13: a guest's error text on the operator's terminal -------
	lying_template liar2 error-text
	id=$(sbx-create -q -t default@liar2); ok $? "a second lying session comes up"
	sbx-exec "$id" -- x 2>"$TEST_TMP/err2"; rc=$?
	is "$rc" 3 "the guest's ERROR code passes through"
	like "$(cat "$TEST_TMP/err2")" 'refused' "its message is shown"
	! LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" "$TEST_TMP/err2"; ok $? \
	   "without control bytes (no escape sequence reaches the terminal)"
	! LC_ALL=C grep -q "$(printf '\233')" "$TEST_TMP/err2"; ok $? "... not even a C1 CSI"
	sbx-exec --json "$id" -- x 2>"$TEST_TMP/err3"
	jq -e . "$TEST_TMP/err3" >/dev/null; ok $? "with --json the error is still valid JSON"
	! LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" "$TEST_TMP/err3"; ok $? "... and raw control bytes"
	sbx-kill "$id"
fi

done_testing
