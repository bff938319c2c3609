# shellcheck shell=bash disable=SC2034,SC2154 # variables shared with the caller
# The first half of sbx-template-helper (template-helper.sh is the rest):
# the kernel and initramfs a template boots and the reproducible ext4
# root.  The caller sets prog and calls image_init first; image_initrd and
# image_mkfs write into $tpl and use $work for their scratch files.

die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }

# image_init: cache paths, the epoch and the kernel module list.
image_init() {
	export LC_ALL=C
	cache=${SBX_CACHE:-/var/cache/sbx}
	debs=$cache/debs
	epoch=${SOURCE_DATE_EPOCH:-0}
	kmeta=linux-image-cloud-amd64
	# Load order: each module after the ones it links against.
	# virtio-mmio devices and the ISA pvpanic device (pvpanic-mmio, found
	# through ACPI) on QEMU microvm; virtio-pci ones and a PCI pvpanic
	# device on Cloud Hypervisor (guest-init skips the PCI drivers when
	# the VM has no PCI device).
	modules=(virtio_ring virtio virtio_mmio virtio_pci_legacy_dev virtio_pci_modern_dev
		virtio_pci virtio_blk virtio_console failover
		net_failover virtio_net vsock vmw_vsock_virtio_transport_common
		vmw_vsock_virtio_transport overlay virtio-rng pvpanic pvpanic-mmio pvpanic-pci)
	# A confined step (common/confine.h) has no cache: it sees only its tree.
	[ -n "${SBX_CONFINED:-}" ] || mkdir -p "$debs" "$cache/unpacked"
}

# sha256 FILE: hex digest.  openssl uses the SHA extensions and is ~4x
# faster than sha256sum on a 512 MiB rootfs.
if command -v openssl >/dev/null; then
	sha256() { openssl dgst -sha256 -r "$1" | cut -d' ' -f1; }
else
	sha256() { sha256sum "$1" | cut -d' ' -f1; }
fi

# newest_deb PKG: path of the newest cached .deb of PKG, or nothing.
newest_deb() {
	local best='' v bv='' f
	for f in "$debs/$1"_*.deb; do
		[ -f "$f" ] || continue
		v=$(dpkg-deb -f "$f" Version)
		if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$bv"; then
			best=$f bv=$v
		fi
	done
	printf '%s' "$best"
}

# fetch_deb PKG: the cached .deb of PKG, downloading it when absent.
fetch_deb() {
	local f
	f=$(newest_deb "$1")
	if [ -z "$f" ]; then
		note "downloading $1"
		(cd "$debs" && apt-get download -q "$1" >&2) || die "apt-get download $1 failed"
		f=$(newest_deb "$1")
		[ -n "$f" ] || die "apt-get download $1 left no .deb in $debs"
	fi
	printf '%s' "$f"
}

# unpack_deb DEB: a directory holding DEB's files, extracted once into the cache.
unpack_deb() {
	local d
	d=$cache/unpacked/$(dpkg-deb -f "$1" Package)_$(dpkg-deb -f "$1" Version)
	if [ ! -d "$d" ]; then
		rm -rf "$d.tmp"
		mkdir -p "$d.tmp"
		dpkg-deb -x "$1" "$d.tmp"
		mv "$d.tmp" "$d"
	fi
	printf '%s' "$d"
}

# image_kernel: the cloud kernel package (kpkg, kver, krel, kmoddir) and
# its PVH vmlinux (vmlinux_cache), both cached.
image_kernel() {
	local meta_deb kdeb ktree vmlinuz found off
	meta_deb=$(fetch_deb "$kmeta")
	kpkg=$(dpkg-deb -f "$meta_deb" Depends | tr ',' '\n' |
		sed -n 's/^ *\(linux-image-[0-9][^ ]*-cloud-amd64\).*/\1/p' | head -n1)
	[ -n "$kpkg" ] || die "$meta_deb: no linux-image-*-cloud-amd64 in Depends"
	kdeb=$(fetch_deb "$kpkg")
	kver=$(dpkg-deb -f "$kdeb" Version)
	krel=${kpkg#linux-image-}
	ktree=$(unpack_deb "$kdeb")
	[ -f "$ktree/boot/vmlinuz-$krel" ] || die "$kdeb: no boot/vmlinuz-$krel"
	kmoddir=$ktree/lib/modules/$krel

	vmlinux_cache=$cache/unpacked/vmlinux-${krel}_$kver
	[ -f "$vmlinux_cache" ] && return 0
	vmlinuz=$ktree/boot/vmlinuz-$krel
	found=
	# The first magic match is the payload in practice; try later ones in
	# case the setup code happens to contain the same four bytes.
	for off in $(grep -obUaP '\x02\x21\x4c\x18' "$vmlinuz" | cut -d: -f1 | head -n 8); do
		# lz4 -dc stops at the end of the legacy stream and complains
		# about what follows it (the bzImage trailer): expected.
		tail -c +$((off + 1)) "$vmlinuz" | lz4 -dc >"$vmlinux_cache.tmp" 2>/dev/null || true
		if [ "$(head -c 4 "$vmlinux_cache.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
			found=$off
			break
		fi
	done
	[ -n "$found" ] || { rm -f "$vmlinux_cache.tmp"; die "no lz4-legacy ELF payload in $vmlinuz"; }
	mv "$vmlinux_cache.tmp" "$vmlinux_cache"
	note "vmlinux: lz4 payload at byte $found of vmlinuz-$krel"
}

stamp() { find "$1" -exec touch -h -d "@$epoch" {} +; }

# image_initrd: $tpl/initrd.cpio, guest-init as /init and the modules in
# load order.  Needs image_kernel, guest_init and mkcpio.
image_initrd() {
	local ird=$work/initrd m f n base
	mkdir -p "$ird/lib/modules" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/newroot"
	install -m 0755 "$guest_init" "$ird/init"
	: >"$ird/lib/modules/order"
	for m in "${modules[@]}"; do
		f=
		for n in "$m" "${m//-/_}" "${m//_/-}"; do
			f=$(find "$kmoddir/kernel" \( -name "$n.ko" -o -name "$n.ko.xz" -o -name "$n.ko.zst" \) \
				-print -quit)
			[ -n "$f" ] && break
		done
		if [ -z "$f" ]; then
			if grep -qE "/(${m//-/_}|${m//_/-})\.ko$" "$kmoddir/modules.builtin" 2>/dev/null; then
				note "module $m is built in; skipped"
			else
				note "warning: module $m not found in $krel; skipped"
			fi
			continue
		fi
		base=$(basename "$f")
		# The guest loads with finit_module and no decompression flags.
		case $f in
		*.ko.xz) base=${base%.xz}; xz -dc "$f" >"$ird/lib/modules/$base" ;;
		*.ko.zst) base=${base%.zst}; zstd -qdc "$f" >"$ird/lib/modules/$base" ;;
		*) cp "$f" "$ird/lib/modules/$base" ;;
		esac
		chmod 0644 "$ird/lib/modules/$base"
		echo "$base" >>"$ird/lib/modules/order"
	done
	chmod 0644 "$ird/lib/modules/order"
	stamp "$ird"
	"$mkcpio" -o "$tpl/initrd.cpio" "$ird"
}

# image_mkfs ROOTDIR SIZE [MKE2FS-OPTION...]: $tpl/rootfs.ext4 from
# ROOTDIR, reproducibly: the same tree gives the same bytes.  Uses
# fs_uuid and fs_seed.  The caller has set ROOTDIR's mtimes and owners
# (users 0 and 1000 for /home/user and /workspace).
image_mkfs() {
	local rd=$1 size=$2 fstime uid ws_owner
	shift 2
	# E2FSPROGS_FAKE_TIME pins the superblock times, -U and hash_seed the rest
	# of what mke2fs would randomise (it ignores a fake time of 0).  Inode
	# tables are zeroed now so the guest kernel never runs ext4lazyinit under TCG.
	fstime=$((epoch > 0 ? epoch : 1))
	E2FSPROGS_FAKE_TIME=$fstime mkfs.ext4 -q -F -L sbxroot -U "$fs_uuid" \
		-E "root_owner=0:0,hash_seed=$fs_seed,lazy_itable_init=0,lazy_journal_init=0,nodiscard" \
		"$@" -d "$rd" "$tpl/rootfs.ext4" "$size" >&2
	# mke2fs -d copies each file's ctime and atime, which no build can pin in
	# the staging tree, so rewrite them (and, for unprivileged builds that
	# could not chown, the owners) in the image itself.
	uid=$(id -u)
	{
		(cd "$rd" && find . -mindepth 1 -printf '%P\n') |
			awk -v e="$epoch" -v u="$uid" '{
				printf "sif \"/%s\" ctime @%s\nsif \"/%s\" atime @%s\n", $0, e, $0, e
				if (u != 0) printf "sif \"/%s\" uid 0\nsif \"/%s\" gid 0\n", $0, $0
			}'
		printf 'sif / ctime @%s\nsif / atime @%s\n' "$epoch" "$epoch"
		if [ "$uid" -ne 0 ]; then
			printf 'sif /%s uid 1000\nsif /%s gid 1000\n' home/user home/user workspace workspace
		fi
	} >"$work/fix.debugfs"
	E2FSPROGS_FAKE_TIME=$fstime debugfs -w -f "$work/fix.debugfs" "$tpl/rootfs.ext4" >/dev/null \
		2>"$work/debugfs.err" || { cat "$work/debugfs.err" >&2; die "debugfs failed on rootfs.ext4"; }
	# debugfs exits 0 when a command fails; anything past its banner is one.
	if grep -v '^debugfs [0-9]' "$work/debugfs.err" >&2; then
		die "debugfs could not pin every inode of rootfs.ext4"
	fi
	ws_owner=$(debugfs -R 'stat /workspace' "$tpl/rootfs.ext4" 2>/dev/null |
		sed -n 's/.*User: *\([0-9]*\) *Group: *\([0-9]*\).*/\1:\2/p')
	[ "$ws_owner" = 1000:1000 ] || die "rootfs.ext4: /workspace owned by '$ws_owner', want 1000:1000"
}

