#!/bin/bash
# Build the default sbx template: a Debian cloud kernel (PVH vmlinux), an
# initramfs holding guest-init and the virtio modules, and a busybox ext4
# root filesystem.  Prints the template directory on stdout; everything else
# goes to stderr.
#
# usage: build-image.sh --out DIR --guest-init PATH --mkcpio PATH
# env:   SBX_CACHE (default /var/cache/sbx): downloaded .debs and unpacked
#        trees, reused so reruns are fast and work offline.
#        SOURCE_DATE_EPOCH (default 0): timestamp stamped on every file.
set -euo pipefail

prog=build-image.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
note() { echo "$prog: $*" >&2; }
usage() { echo "usage: $prog --out DIR --guest-init PATH --mkcpio PATH" >&2; exit 2; }

out='' guest_init='' mkcpio=''
while [ $# -gt 0 ]; do
	case $1 in
	--out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
	--guest-init) [ $# -ge 2 ] || usage; guest_init=$2; shift 2 ;;
	--mkcpio) [ $# -ge 2 ] || usage; mkcpio=$2; shift 2 ;;
	-h|--help) usage ;;
	*) usage ;;
	esac
done
if [ -z "$out" ] || [ -z "$guest_init" ] || [ -z "$mkcpio" ]; then usage; fi
[ -f "$guest_init" ] || die "guest-init not found: $guest_init"
[ -x "$mkcpio" ] || die "mkcpio tool not executable: $mkcpio"
for t in apt-get dpkg-deb lz4 mkfs.ext4 debugfs jq sha256sum od; do
	command -v "$t" >/dev/null || die "missing tool: $t"
done

export LC_ALL=C
cache=${SBX_CACHE:-/var/cache/sbx}
debs=$cache/debs
epoch=${SOURCE_DATE_EPOCH:-0}
# Fixed so the same inputs give a byte-identical rootfs.ext4 (and version).
fs_uuid=5b5c0c2e-7d0e-4c5e-9a55-0000000000d1
fs_seed=5b5c0c2e-7d0e-4c5e-9a55-0000000000d2
kmeta=linux-image-cloud-amd64
# Load order: each module after the ones it links against.
modules=(virtio_ring virtio virtio_mmio virtio_blk virtio_console failover
	net_failover virtio_net vsock vmw_vsock_virtio_transport_common
	vmw_vsock_virtio_transport overlay virtio-rng)

mkdir -p "$debs" "$cache/unpacked" "$out"
guest_init=$(realpath "$guest_init")
mkcpio=$(realpath "$mkcpio")
out=$(realpath "$out")

# sha256 FILE: hex digest.  openssl uses the SHA extensions and is ~4x
# faster than sha256sum on the 512 MiB rootfs.
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

# ---- (a) kernel package ------------------------------------------------------
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

# ---- (b) PVH vmlinux out of the lz4-legacy vmlinuz ---------------------------
vmlinux_cache=$cache/unpacked/vmlinux-${krel}_$kver
if [ ! -f "$vmlinux_cache" ]; then
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
fi

# ---- busybox -----------------------------------------------------------------
bb_deb=$(fetch_deb busybox-static)
bb_ver=$(dpkg-deb -f "$bb_deb" Version)
bb_tree=$(unpack_deb "$bb_deb")
[ -x "$bb_tree/bin/busybox" ] || die "$bb_deb: no bin/busybox"

# ---- work area -----------------------------------------------------------------
work=$(mktemp -d "$out/.default.tmp.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
tpl=$work/tpl
mkdir -p "$tpl"

stamp() { find "$1" -exec touch -h -d "@$epoch" {} +; }

# ---- (c) initramfs ---------------------------------------------------------------
ird=$work/initrd
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

# ---- (d) root filesystem -----------------------------------------------------------
rd=$work/rootfs
mkdir -p "$rd"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,home/user,workspace,var/tmp}
install -m 0755 "$bb_tree/bin/busybox" "$rd/bin/busybox"
# ~400 applets: one perl (Essential on Debian) instead of a fork per link.
"$bb_tree/bin/busybox" --list-full | perl -e '
	my $rd = shift;
	while (my $a = <STDIN>) {
		chomp $a;
		next if $a eq "" || $a eq "bin/busybox" || $a =~ m{(^/|\.\.)};
		(my $d = $a) =~ s{/[^/]*$}{};
		system("mkdir", "-p", "$rd/$d") if $d ne $a && !-d "$rd/$d";
		next if -e "$rd/$a" || -l "$rd/$a";
		symlink("/bin/busybox", "$rd/$a") or die "symlink $a: $!\n";
	}' "$rd"
cat >"$rd/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
EOF
cat >"$rd/etc/group" <<'EOF'
root:x:0:
tty:x:5:
user:x:1000:
EOF
cat >"$rd/etc/shadow" <<'EOF'
root:*:0:0:99999:7:::
user:*:0:0:99999:7:::
EOF
echo sbx >"$rd/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$rd/etc/hosts"
cat >"$rd/etc/profile" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [ "$(id -u)" -eq 0 ]; then PS1='\h:\w# '; else PS1='\u@\h:\w$ '; fi
export PS1
EOF
chmod 0644 "$rd/etc/passwd" "$rd/etc/group" "$rd/etc/hostname" "$rd/etc/hosts" "$rd/etc/profile"
chmod 0600 "$rd/etc/shadow"
chmod 1777 "$rd/tmp" "$rd/var/tmp"
chmod 0700 "$rd/root"
chmod 0755 "$rd/home/user" "$rd/workspace"
if [ "$(id -u)" -eq 0 ]; then
	chown -hR 0:0 "$rd"
	chown 1000:1000 "$rd/home/user" "$rd/workspace"
fi
stamp "$rd"
# E2FSPROGS_FAKE_TIME pins the superblock times, -U and hash_seed the rest
# of what mke2fs would randomise (it ignores a fake time of 0).  Inode
# tables are zeroed now so the guest kernel never runs ext4lazyinit under TCG.
fstime=$((epoch > 0 ? epoch : 1))
E2FSPROGS_FAKE_TIME=$fstime mkfs.ext4 -q -F -L sbxroot -U "$fs_uuid" \
	-E "root_owner=0:0,hash_seed=$fs_seed,lazy_itable_init=0,lazy_journal_init=0,nodiscard" \
	-d "$rd" "$tpl/rootfs.ext4" 512M >&2
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
E2FSPROGS_FAKE_TIME=$fstime debugfs -w -f "$work/fix.debugfs" "$tpl/rootfs.ext4" >/dev/null 2>"$work/debugfs.err" ||
	{ cat "$work/debugfs.err" >&2; die "debugfs failed on rootfs.ext4"; }
ws_owner=$(debugfs -R 'stat /workspace' "$tpl/rootfs.ext4" 2>/dev/null |
	sed -n 's/.*User: *\([0-9]*\) *Group: *\([0-9]*\).*/\1:\2/p')
[ "$ws_owner" = 1000:1000 ] || die "rootfs.ext4: /workspace owned by '$ws_owner', want 1000:1000"

# ---- kernel ----------------------------------------------------------------------
cp "$vmlinux_cache" "$tpl/vmlinux"
chmod 0644 "$tpl/vmlinux" "$tpl/initrd.cpio" "$tpl/rootfs.ext4"

# ---- (e) manifest --------------------------------------------------------------------
files_json='{}'
sums=
for f in initrd.cpio rootfs.ext4 vmlinux; do
	sum=$(sha256 "$tpl/$f")
	size=$(stat -c %s "$tpl/$f")
	files_json=$(jq -c --arg f "$f" --arg s "$sum" --argjson n "$size" \
		'. + {($f): {size: $n, sha256: $s}}' <<<"$files_json")
	sums+="$f $sum"$'\n'
done
content_sha256=$(printf '%s' "$sums" | sort | sha256sum | cut -d' ' -f1)
version=${content_sha256:0:12}
gi_sha256=$(sha256 "$guest_init")
dest=$out/default@$version

if [ -f "$dest/manifest.json" ] &&
	[ "$(jq -r .content_sha256 "$dest/manifest.json" 2>/dev/null)" = "$content_sha256" ]; then
	printf '%s\n' "$dest"
	exit 0
fi

jq -n --arg version "$version" --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	--arg kpkg "$kpkg" --arg kver "$kver" --arg krel "$krel" --arg bbver "$bb_ver" \
	--argjson files "$files_json" --arg content "$content_sha256" --arg gi "$gi_sha256" '{
	schema: 1, name: "default", version: $version, created: $created,
	kernel: {package: $kpkg, version: $kver, release: $krel},
	packages: [{name: "busybox-static", version: $bbver}, {name: $kpkg, version: $kver}],
	files: $files, content_sha256: $content, guest_init_sha256: $gi}' >"$tpl/manifest.json"
chmod 0644 "$tpl/manifest.json"
chmod 0755 "$tpl"

if [ -e "$dest" ]; then
	# A partial or foreign directory under our name: set it aside first,
	# since rename cannot replace a non-empty directory.
	mv "$dest" "$work/old"
fi
mv "$tpl" "$dest"
printf '%s\n' "$dest"
