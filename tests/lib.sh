# TAP helpers for sbx's shell tests (after git's t/test-lib.sh, much smaller).
# Each test runs in its own SBX_ROOT; templates built by `make image` are
# reused through SBX_TEMPLATES.
set -u
SBX_BUILD=${SBX_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
export PATH="$SBX_BUILD/bin:$PATH"
export SBX_TEMPLATES=${SBX_TEMPLATES:-$SBX_BUILD/templates}
SBX_ROOT=$(mktemp -d /tmp/sbx-test.XXXXXX)
export SBX_ROOT
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib-root.sh" # root_cgroups_remove
TEST_TMP=$SBX_ROOT/tmp
mkdir -p "$TEST_TMP"
_n=0
_fail=0

plan() { :; } # the plan is printed at the end by done_testing
# The whole file, or (after tests already ran: a file whose VM part comes
# last) the rest of it, with the plan of what ran.
skip_all() {
	if [ "$_n" -gt 0 ]; then
		echo "# SKIP the rest: $*"
		echo "1..$_n"
		exit $((_fail > 0))
	fi
	echo "1..0 # SKIP $*"
	exit 0
}
ok() { # ok COND-EXIT-STATUS DESCRIPTION
	_n=$((_n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $_n - $2"; else echo "not ok $_n - $2"; _fail=$((_fail + 1)); fi
}
is() { # is GOT WANT DESCRIPTION
	_n=$((_n + 1))
	if [ "$1" = "$2" ]; then echo "ok $_n - $3"; else
		echo "not ok $_n - $3"; echo "#   got: '$1'"; echo "#  want: '$2'"; _fail=$((_fail + 1)); fi
}
like() { # like GOT REGEX DESCRIPTION
	_n=$((_n + 1))
	if printf '%s' "$1" | grep -Eq -- "$2"; then echo "ok $_n - $3"; else
		echo "not ok $_n - $3"; echo "#   got: '$1'"; echo "#  want match: $2"; _fail=$((_fail + 1)); fi
}
diag() { echo "# $*"; }

# Everything under our root, host-wide: processes whose command line names
# it, and jailed VMMs, whose argv has only in-jail paths but whose mounts
# are binds of files from under the root (mountinfo's 4th field, the
# mounted subtree, is beneath it).  Not a process whose mount table merely
# holds a copy of a mount made at a path under our root (t1920's tmpfs):
# anything that made a mount namespace meanwhile (`ip netns exec`,
# another test's server) has that copy, and is not ours for it.
root_procs() {
	local p
	{ pgrep -f -- "$SBX_ROOT"
	  for p in $(grep -lF -- "$SBX_ROOT/" /proc/[0-9]*/mountinfo 2>/dev/null | cut -d/ -f3); do
		awk -v r="$SBX_ROOT/" 'index($4, r) == 1 { f = 1; exit } END { exit !f }' \
			/proc/"$p"/mountinfo 2>/dev/null && echo "$p"
	  done
	} | sort -u | grep -v "^$$\$" || true
}

have_template() { ls -d "$SBX_TEMPLATES"/default@* >/dev/null 2>&1; }

# First thing in a test that boots VMs: a template, and the VMM backend
# under test able to run here.  The backend is SBX_VMM, as the commands
# read it; scripts/check.sh runs these tests once per backend, and sets
# SBX_TEST_VMM_SKIP when its real probe found that one cannot (the cheap
# checks below cover a test run by hand).
require_vm() {
	have_template || skip_all "no template built (make image)"
	[ -z "${SBX_TEST_VMM_SKIP:-}" ] || skip_all "$SBX_TEST_VMM_SKIP"
	case ${SBX_VMM:-} in
	cloud-hypervisor)
		command -v "${SBX_CLOUD_HYPERVISOR:-cloud-hypervisor}" >/dev/null ||
			skip_all "cloud-hypervisor not installed"
		[ -r /dev/kvm ] && [ -w /dev/kvm ] || skip_all "no usable KVM (/dev/kvm)" ;;
	qemu)
		command -v "${SBX_QEMU:-qemu-system-x86_64}" >/dev/null || skip_all "qemu not installed" ;;
	esac
}

_cleanup() {
	! declare -F _net_cleanup >/dev/null || _net_cleanup
	if [ -d "$SBX_ROOT/var/lib/sbx/sessions" ]; then
		ls "$SBX_ROOT/var/lib/sbx/sessions" | sbx-kill >/dev/null 2>&1 || true
	fi
	for p in $(root_procs); do kill -9 "$p" 2>/dev/null || true; done
	root_cgroups_remove || true
	rm -rf "$SBX_ROOT"
}
trap _cleanup EXIT
trap 'exit 130' INT TERM

done_testing() {
	echo "1..$_n"
	[ "$_fail" -eq 0 ]
	exit $?
}

# Test hosts for network tests, on this machine only: test_net_hosts TAG N
# makes a network namespace holding N addresses of a /29 of
# 198.51.100.0/24, routed as /32s (never 192.0.2.0/24, this machine's own network, nor
# 203.0.113.0/24, where the package registries resolve here) and a veth to
# it whose host end is the /29's first address.  The /29 is picked under a
# host-wide lock, so test files running at once never share one.  Sets
# NET_NS, NET_VETH, NET_HOSTIP and NET_IP (an array of the N addresses);
# they are removed on exit.  N is at most 5; TAG at most 4 characters
# (the veth's name is sbxTAGPID).
test_net_hosts() {
	local tag=$1 n=$2 o i used lock=/run/lock/sbx-test-net.lock
	NET_NS=sbxt-$tag-$$ NET_VETH=sbx$tag$$ NET_HOSTIP= NET_IP=()
	exec {_net_lock}>"$lock"
	flock "$_net_lock"
	for o in $(seq 8 8 248); do
		used=0
		for i in $(seq "$o" $((o + 7))); do
			ip -br addr | grep -q "198\.51\.100\.$i/" && used=1 && break
		done
		ip route show | grep -q "^198\.51\.100\.$o/" && used=1
		[ $used = 0 ] || continue
		NET_HOSTIP=198.51.100.$((o + 1))
		for i in $(seq 1 "$n"); do NET_IP+=("198.51.100.$((o + 1 + i))"); done
		break
	done
	if [ -z "$NET_HOSTIP" ]; then
		exec {_net_lock}>&-
		skip_all "no free /29 in 198.51.100.0/24"
	fi
	_net_cleanup() { ip link del "$NET_VETH" 2>/dev/null; ip netns del "$NET_NS" 2>/dev/null; }
	# Each end holds /32s and routes to the other's: the egress proxy
	# refuses every address on a subnet of the host's own links, so test
	# hosts are routed to, never on-link.
	ip netns add "$NET_NS" && ip link add "$NET_VETH" type veth peer name eth0 netns "$NET_NS" &&
		ip addr add "$NET_HOSTIP/32" dev "$NET_VETH" && ip link set "$NET_VETH" up &&
		ip -n "$NET_NS" link set eth0 up && ip -n "$NET_NS" link set lo up &&
		ip -n "$NET_NS" route add "$NET_HOSTIP/32" dev eth0 || {
		_net_cleanup; exec {_net_lock}>&-; skip_all "cannot make the test hosts"; }
	for i in "${NET_IP[@]}"; do
		ip -n "$NET_NS" addr add "$i/32" dev eth0 && ip route add "$i/32" dev "$NET_VETH" || {
			_net_cleanup; exec {_net_lock}>&-; skip_all "cannot make the test hosts"; }
	done
	# The host's end now holds an address of the /29: the next test's
	# search skips it, so the lock can go.
	exec {_net_lock}>&-
}

# A web server on test hosts: test_web_host TAG N TEXT makes test_net_hosts
# TAG N and serves TEXT (index.html) over HTTP on port 80 of the first
# address, WEB, until the test exits (WEBPID); it returns once it answers.
test_web_host() {
	test_net_hosts "$1" "$2"
	WEB=${NET_IP[0]}
	mkdir -p "$TEST_TMP/www" && echo "$3" >"$TEST_TMP/www/index.html"
	(cd "$TEST_TMP/www" && exec ip netns exec "$NET_NS" python3 -m http.server 80 >"$TEST_TMP/http.log" 2>&1) &
	WEBPID=$!
	trap 'kill "$WEBPID" 2>/dev/null; _cleanup' EXIT
	for _ in $(seq 50); do timeout 1 bash -c "exec 3<>/dev/tcp/$WEB/80" 2>/dev/null && break; sleep 0.1; done
}

# net_diag SESSIONDIR: after a failed fetch through a session's proxy, to
# stderr: the last lines of its net.log and proxy.log (what the proxy
# decided and said), and the 198.51.100 addresses on the host's links.
net_diag() {
	{
		diag "net.log: $(tail -3 "$1/net.log" 2>/dev/null)"
		diag "proxy.log: $(tail -3 "$1/proxy.log" 2>/dev/null)"
		diag "links: $(ip -br addr | grep -o '198\.51\.100\.[0-9]*/[0-9]*' | tr '\n' ' ')"
		diag "routes: $(ip route show | grep -o '^198\.51\.100\.[0-9/]*' | tr '\n' ' ')"
	} >&2
}

# A lying agent (t1520, t1910): lying_template TEMPLATE DIR SCRIPT [ARG...]
# makes DIR a template with TEMPLATE's kernel, root disk and manifest and an
# initramfs of its modules, the host's busybox and, as /init, a busybox
# script that speaks the frame protocol on the real agent port of a real
# microVM: it sends /hello.bin, answers the Nth EXEC with /execN.bin and
# the Nth PORT_CONNECT with /portN.bin when there is one, and powers off at
# SHUTDOWN.  `python3 SCRIPT ROOT ARG...` writes those frames beforehand
# (tests/tools/lying-*.py); ROOT is $TEST_TMP/root-NAME for DIR .../X@NAME.
# That is exactly the position of root in a guest that has taken over PID
# 1 (ptrace, /proc/1/mem), without needing an exploit in the test.
lying_template() {
	local tmpl=$1 d=$2 script=$3 root=$TEST_TMP/root-${2##*@}
	shift 3
	mkdir -p "$d" "$root/bin"
	(cd "$root" && busybox cpio -idm <"$tmpl/initrd.cpio" 2>/dev/null)
	rm -f "$root/init"
	cp "$(command -v busybox)" "$root/bin/busybox"
	python3 "$script" "$root" "$@" || return 1
	# The monitor's warm-up exec (SBX_WARM_STREAM 0x30000000: the 12th
	# header byte is 48) is none of the test's execs: a bare EXIT ends it.
	python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<IBBHI", 0, 12, 0, 0, 0x30000000))' \
		"$root/warm.bin" || return 1
	cat >"$root/init" <<'INIT'
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
n=0 k=0
while :; do
	set -- $(dd bs=12 count=1 iflag=fullblock <&3 2>/dev/null | od -An -tu1 -v)
	[ $# -eq 12 ] || continue
	len=$(($1 + $2 * 256 + $3 * 65536 + $4 * 16777216))
	[ "$len" -gt 0 ] && dd bs="$len" count=1 iflag=fullblock <&3 >/dev/null 2>&1
	case $5 in
	2) if [ "${12}" = 48 ]; then cat /warm.bin >&3
	   else n=$((n + 1)); [ -f /exec$n.bin ] && cat /exec$n.bin >&3; fi ;;
	25) k=$((k + 1)); [ -f /port$k.bin ] && cat /port$k.bin >&3 ;;
	16) poweroff -f ;;
	esac
done
INIT
	chmod +x "$root/init"
	cp "$tmpl/manifest.json" "$tmpl/vmlinux" "$d/"
	ln -s "$tmpl/rootfs.ext4" "$d/rootfs.ext4"
	"$SBX_BUILD/tools/sbx-mkcpio" -o "$d/initrd.cpio" "$root"
}
