# shellcheck shell=bash disable=SC2154 # lib-image.sh is prepended at build time
# sbx-template-helper: the steps of a template build that are other
# programs' work (debugfs, debootstrap, apt in a chroot, mkfs.ext4), run by
# sbx-template build (common/tmplbuild.c), which owns the spec, the lock,
# the work directory and the publish.  Installed in libexec/sbx as
# lib-image.sh followed by this file.  Diagnostics on stderr (the builder
# keeps them in the work directory's log), data on stdout.
#
#   root-template IMAGE DIR   DIR <- the tree in a template's rootfs.ext4
#   root-debian SUITE DIR     DIR <- debootstrap minbase (cached), user 1000
#   root-busybox DIR          DIR <- busybox-static and netbase unpacked, user
#                             1000; their NAME<TAB>VERSION on stdout
#   kernel PACKAGE OUTDIR     OUTDIR/vmlinux (PVH) and initrd.cpio (guest-init
#                             beside this script, the virtio modules); KEY<TAB>VALUE
#                             of package, version, release, guest_init_sha256
#   apt DIR PKG...            apt-get upgrade, then install PKG... in DIR (a
#                             chroot); documentation trimmed
#   remove DIR PATH...        rm -rf each PATH of the root (it must exist)
#   packages DIR              NAME<TAB>VERSION of each installed package
#   mkfs DIR IMAGE            IMAGE <- DIR, reproducibly (lib-image.sh)
#   replace-root TAR DIR      DIR <- the root a build VM tarred
#   prepare DIR               user 1000, /workspace, mount points (an import)
set -euo pipefail
prog=sbx-template-helper
# Exit 3: the input is at fault (the builder reports 3); anything else is 70.
bad() { echo "$prog: error: $*" >&2; exit 3; }
image_init
export DEBIAN_FRONTEND=noninteractive

# The host's deb sources for SUITE (and -updates, -security): URI SUITE.
host_sources() {
	local suite=$1 f=/etc/apt/sources.list.d/debian.sources
	if [ -f "$f" ]; then
		awk -v want="^$suite(-updates|-security)?\$" '
			function flush(  i, j, nu, ns, u, s) {
				if (types ~ /(^| )deb( |$)/) {
					nu = split(uris, u, " "); ns = split(suites, s, " ")
					for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
						if (s[j] ~ want) print u[i], s[j]
				}
				types = uris = suites = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{ k = tolower($1); sub(/^[^:]*:[ \t]*/, "") }
			k == "types:" { types = $0 } k == "uris:" { uris = $0 } k == "suites:" { suites = $0 }
			END { flush() }' "$f"
	elif [ -f /etc/apt/sources.list ]; then
		sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}//p' /etc/apt/sources.list |
			awk -v want="^$suite(-updates|-security)?\$" '$2 ~ want { print $1, $2 }'
	fi
}

# no_links DIR PATH...: refuse a root where a path this script writes
# through on the host is a symbolic link (or under one): a root from an
# archive or a build VM is the guest's work, and /home -> / must not make
# us chown the host.  What runs in a chroot resolves inside it anyway.
no_links() {
	local d=$1 p q c part
	shift
	for p in "$@"; do
		q=$d
		IFS=/ read -ra c <<<"$p"
		for part in "${c[@]}"; do
			[ -n "$part" ] || continue
			q=$q/$part
			[ -L "$q" ] && bad "the root's /${q#"$d"/} is a symbolic link; refusing to write through it"
		done
	done
	return 0
}

# In the tree, in a mount namespace of its own (its proc mount never
# outlives it), with a clean environment.
inroot() {
	local d=$1
	shift
	mkdir -p "$d/proc" "$d/dev"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" &&
		d=$1 && shift &&
		exec chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_FRONTEND=noninteractive "$@"' sh "$d" "$@"
}

# A read-only mount in a mount namespace of our own (gone with it), copied
# whole: modes with their setuid and sticky bits, owners, hard links,
# xattrs, which debugfs's rdump does not all keep.
root_template() {
	local img=$1 d=$2
	mkdir -p "$d.mnt"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private sh -c 'mount -o ro,loop,noload -t ext4 "$1" "$2" &&
		tar --numeric-owner --xattrs --xattrs-include="*" -C "$2" -cf - . |
		tar --numeric-owner --xattrs --xattrs-include="*" -p -C "$3" -xf -' sh "$img" "$d.mnt" "$d" ||
		die "cannot copy the root of $img"
	rmdir "$d.mnt"
	rmdir "$d/lost+found" 2>/dev/null || true
}

root_debian() {
	local suite=$1 d=$2 sources mirror key base_tar btmp
	sources=$(host_sources "$suite" | sort -u)
	mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$sources")
	[ -n "$mirror" ] || bad "from: debian:$suite: no '$suite' source in this host's apt sources"
	key=$(printf 'recipe 1\nsuite %s\nvariant minbase\ninclude ca-certificates netbase\n%s\n' \
		"$suite" "$sources" | sha256sum | cut -c1-16)
	mkdir -p "$cache/rootfs"
	base_tar=$cache/rootfs/debian-$suite-$key.tar.zst
	exec 8>"$cache/rootfs/.debian-$suite.lock"
	flock 8 # two cold builds would both bootstrap
	if [ ! -f "$base_tar" ]; then
		command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
		btmp=$(mktemp -d "$cache/rootfs/.debian-$key.tmp.XXXXXX")
		note "debootstrap $suite from $mirror (minutes; cached afterwards)"
		unshare --mount --propagation private debootstrap --variant=minbase --include=ca-certificates,netbase \
			"$suite" "$btmp/root" "$mirror" >&2 || { rm -rf "$btmp"; die "debootstrap failed"; }
		awk '{ printf "deb %s %s main\n", $1, $2 }' <<<"$sources" >"$btmp/root/etc/apt/sources.list"
		rm -rf "$btmp/root/debootstrap" "$btmp"/root/var/lib/apt/lists/* "$btmp"/root/var/cache/apt/archives/*.deb
		tar --numeric-owner --xattrs --xattrs-include='*' -C "$btmp/root" -cf - . |
			zstd -q -T0 -6 -o "$btmp/base.tar.zst"
		mv "$btmp/base.tar.zst" "$base_tar"
		rm -rf "$btmp"
	fi
	exec 8>&-
	zstd -q -dc "$base_tar" | tar --numeric-owner --xattrs --xattrs-include='*' -p -C "$d" -xf -
	# debootstrap leaves its .debs in apt's cache: not the template's business
	rm -f "$d"/var/cache/apt/archives/*.deb "$d"/var/cache/apt/*.bin
	root_prepare "$d"
	root_trim "$d"
}

# The busybox root: Debian's busybox-static (every applet a link to it)
# and netbase's /etc/services and /etc/protocols (busybox is static glibc,
# whose files lookups read them), unpacked from their .debs (cached), not
# installed: there is no package manager in it.
root_busybox() {
	local d=$1 bb_deb nb_deb bb_tree nb_tree
	bb_deb=$(fetch_deb busybox-static)
	bb_tree=$(unpack_deb "$bb_deb")
	[ -x "$bb_tree/bin/busybox" ] || die "$bb_deb: no bin/busybox"
	nb_deb=$(fetch_deb netbase)
	nb_tree=$(unpack_deb "$nb_deb")
	if [ ! -f "$nb_tree/etc/services" ] || [ ! -f "$nb_tree/etc/protocols" ]; then die "$nb_deb: no /etc/services"; fi
	mkdir -p "$d"/{bin,sbin,usr/bin,usr/sbin,etc,root}
	install -m 0755 "$bb_tree/bin/busybox" "$d/bin/busybox"
	# ~400 applets: one perl (Essential on Debian) instead of a fork per link.
	"$bb_tree/bin/busybox" --list-full | perl -e '
		my $rd = shift;
		while (my $a = <STDIN>) {
			chomp $a;
			next if $a eq "" || $a eq "bin/busybox" || $a =~ m{(^/|\.\.)};
			(my $p = $a) =~ s{/[^/]*$}{};
			system("mkdir", "-p", "$rd/$p") if $p ne $a && !-d "$rd/$p";
			next if -e "$rd/$a" || -l "$rd/$a";
			symlink("/bin/busybox", "$rd/$a") or die "symlink $a: $!\n";
		}' "$d"
	printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$d/etc/passwd"
	printf 'root:x:0:\ntty:x:5:\nuser:x:1000:\n' >"$d/etc/group"
	printf 'root:*:0:0:99999:7:::\nuser:*:0:0:99999:7:::\n' >"$d/etc/shadow"
	install -m 0644 "$nb_tree/etc/services" "$nb_tree/etc/protocols" "$d/etc/"
	# shellcheck disable=SC2016 # for the guest's shell
	printf '%s\n' 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'if [ "$(id -u)" -eq 0 ]; then PS1='\''\h:\w# '\''; else PS1='\''\u@\h:\w$ '\''; fi' \
		'export PS1' >"$d/etc/profile"
	chmod 0644 "$d/etc/passwd" "$d/etc/group" "$d/etc/profile"
	chmod 0600 "$d/etc/shadow"
	chmod 0700 "$d/root"
	root_prepare "$d"
	printf '%s\t%s\n' busybox-static "$(dpkg-deb -f "$bb_deb" Version)" netbase "$(dpkg-deb -f "$nb_deb" Version)"
}

# The template's own kernel and initramfs (lib-image.sh), from the kernel
# package PKG and the guest-init installed beside this script.
root_kernel() {
	local here
	kmeta=$1 tpl=$2
	here=$(dirname "$(realpath "$0")")
	guest_init=$here/guest-init mkcpio=$here/sbx-mkcpio
	[ -f "$guest_init" ] || die "no guest-init beside $0"
	[ -x "$mkcpio" ] || die "no sbx-mkcpio beside $0"
	image_kernel
	work=$(mktemp -d "$tpl/.kernel.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	image_initrd
	cp "$vmlinux_cache" "$tpl/vmlinux"
	printf 'package\t%s\nversion\t%s\nrelease\t%s\nguest_init_sha256\t%s\n' "$kpkg" "$kver" "$krel" \
		"$(sha256 "$guest_init")"
}

# What a template's users never read and apt leaves behind: documentation
# but each package's copyright file (the licences ask for it), manual
# pages, info, translations (but locale.alias), lintian overrides.
root_trim() {
	local d=$1
	no_links "$d" usr/share/doc usr/share/locale usr/share/man usr/share/info usr/share/lintian
	if [ -d "$d/usr/share/doc" ]; then
		find "$d/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
		find "$d/usr/share/doc" -mindepth 1 -type d -empty -delete
	fi
	if [ -d "$d/usr/share/locale" ]; then
		find "$d/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
	fi
	rm -rf "${d:?}"/usr/share/{man,info,lintian}/*
}

# A spec's remove: paths, each one that must be there (a typo, or a
# package that moved a file, fails the build rather than passing unseen).
root_remove() {
	local d=$1 p
	shift
	for p in "$@"; do
		no_links "$d" "$(dirname "$p")"
		[ -e "$d$p" ] || [ -L "$d$p" ] || bad "remove: $p is not in the root"
		rm -rf -- "${d:?}$p"
	done
}

# What guest-init expects of any root: uid 1000 "user" owning /home/user
# and /workspace, /bin/sh, and the mount points.
root_prepare() {
	local d=$1 sh=/bin/sh
	no_links "$d" etc/passwd etc/group etc/shadow etc/gshadow etc/skel etc/hostname etc/hosts \
		proc sys dev run tmp var/tmp root home/user workspace
	[ -e "$d/bin/sh" ] || [ -L "$d/bin/sh" ] || bad "the root has no /bin/sh (guest-init runs commands with sh -c)"
	[ -x "$d/bin/bash" ] && sh=/bin/bash
	mkdir -p "$d/etc"
	touch "$d/etc/passwd" "$d/etc/group"
	grep -q '^[^:]*:[^:]*:1000:' "$d/etc/passwd" || {
		grep -q '^user:' "$d/etc/passwd" && bad "the root has a user 'user' whose uid is not 1000"
		echo "user:x:1000:1000:user:/home/user:$sh" >>"$d/etc/passwd"
		grep -q '^[^:]*:[^:]*:1000:' "$d/etc/group" || echo 'user:x:1000:' >>"$d/etc/group"
		[ -f "$d/etc/gshadow" ] && echo 'user:!::' >>"$d/etc/gshadow"
		[ -f "$d/etc/shadow" ] && echo 'user:*:0:0:99999:7:::' >>"$d/etc/shadow"
	}
	mkdir -p "$d"/{proc,sys,dev,run,tmp,var/tmp,root,home/user,workspace}
	[ -d "$d/etc/skel" ] && cp -a "$d/etc/skel/." "$d/home/user/"
	chown -R 1000:1000 "$d/home/user" "$d/workspace"
	chmod 1777 "$d/tmp" "$d/var/tmp"
	[ -s "$d/etc/hostname" ] || echo sbx >"$d/etc/hostname"
	[ -s "$d/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$d/etc/hosts"
	rm -f "$d/etc/resolv.conf"
}

root_apt() {
	local d=$1
	shift
	[ -x "$d/usr/bin/apt-get" ] || bad "packages: the base has no apt-get (build from debian:SUITE or a Debian-based template)"
	no_links "$d" etc proc dev var/lib/apt/lists var/cache/apt var/log var/cache/debconf var/cache/ldconfig var/lib/dpkg
	# The host's resolver for apt only; the guest gets its own at boot.
	rm -f "$d/etc/resolv.conf"
	cp /etc/resolv.conf "$d/etc/resolv.conf"
	# apt's own messages (E: Unable to locate package ...) go to stderr as they are.
	# The base's packages first take the archive's updates (its -updates
	# and -security suites too).
	# shellcheck disable=SC2016 # expanded by the inner shell
	inroot "$d" sh -c 'o="-q -y --no-install-recommends -o Dpkg::Use-Pty=0 -o Dpkg::Options::=--force-confold"
		apt-get -q update >/dev/null && apt-get $o upgrade >/dev/null && apt-get $o install "$@" &&
		apt-get clean' sh "$@" >&2 || exit 3
	# ldconfig's aux-cache records inode numbers and times of this host's
	# unpack: the one file two builds of the same packages would differ in.
	rm -rf "$d"/var/lib/apt/lists/* "$d"/var/cache/apt/*.bin "$d/var/cache/ldconfig/aux-cache"
	find "$d/var/log" -mindepth 1 ! -type d -delete 2>/dev/null || true
	find "$d/var/cache/debconf" "$d/var/lib/dpkg" -maxdepth 1 -name '*-old' -delete 2>/dev/null || true
	rm -f "$d/etc/resolv.conf"
	root_trim "$d"
}

# The root a build VM's guest tarred (its own tar, of its whole root but
# its mounts) replaces DIR.  Extracted into an empty directory, so no
# symbolic link already there can carry a member elsewhere; GNU tar
# refuses '..' and absolute names and makes symbolic links last.  Device
# nodes are dropped (the guest has devtmpfs).
root_replace() {
	local tar=$1 d=$2
	rm -rf "$d.new"
	mkdir "$d.new"
	tar --numeric-owner -p -C "$d.new" -xf "$tar" >&2 || bad "cannot unpack the root the build VM sent"
	find "$d.new" \( -type b -o -type c -o -type p -o -type s \) -delete
	mkdir -p "$d.new"/{proc,dev,sys,run}
	for m in proc dev sys run; do
		chmod --reference="$d/$m" "$d.new/$m" 2>/dev/null || true
	done
	rm -rf "$d"
	mv "$d.new" "$d"
}

root_packages() {
	local d=$1
	no_links "$d" var/lib/dpkg/status
	[ -f "$d/var/lib/dpkg/status" ] || return 0
	dpkg-query --admindir="$d/var/lib/dpkg" -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\n' |
		awk -F'\t' '$1 ~ /^ii/ { print $2 "\t" $3 }' | sort
}

root_mkfs() {
	local rd=$1 data_mib inodes
	tpl=$(dirname "$2")
	work=$(mktemp -d "$tpl/.mkfs.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	fs_uuid=5b5c0c2e-7d0e-4c5e-9a55-0000000000d5
	fs_seed=5b5c0c2e-7d0e-4c5e-9a55-0000000000d6
	# Files the build wrote get the epoch; package files keep their times.
	[ -n "${SBX_BUILD_STAMP:-}" ] && find "$rd" -newer "$SBX_BUILD_STAMP" -exec touch -h -d "@$epoch" {} +
	touch -h -d "@$epoch" "$rd"
	data_mib=$(find "$rd" -type f -printf '%s\n' | awk '{ b += int(($1 + 4095) / 4096) } END { print int(b / 256) }')
	inodes=$(find "$rd" | wc -l)
	image_mkfs "$rd" "$(((data_mib * 5 / 4 + 64 + 15) / 16 * 16))M" -b 4096 -N $((inodes * 5 / 4 + 1024))
	[ "$2" = "$tpl/rootfs.ext4" ] || mv "$tpl/rootfs.ext4" "$2"
}

[ $# -ge 1 ] || die "usage: $prog STEP ARG..."
step=$1
shift
case $step in
root-template) [ $# = 2 ] || die "usage: root-template IMAGE DIR"; root_template "$@" ;;
root-debian) [ $# = 2 ] || die "usage: root-debian SUITE DIR"; root_debian "$@" ;;
root-busybox) [ $# = 1 ] || die "usage: root-busybox DIR"; root_busybox "$@" ;;
kernel) [ $# = 2 ] || die "usage: kernel PACKAGE OUTDIR"; root_kernel "$@" ;;
remove) [ $# -ge 2 ] || die "usage: remove DIR PATH..."; root_remove "$@" ;;
apt) [ $# -ge 2 ] || die "usage: apt DIR PKG..."; root_apt "$@" ;;
packages) [ $# = 1 ] || die "usage: packages DIR"; root_packages "$@" ;;
mkfs) [ $# = 2 ] || die "usage: mkfs DIR IMAGE"; root_mkfs "$@" ;;
prepare) [ $# = 1 ] || die "usage: prepare DIR"; root_prepare "$@" ;;
replace-root) [ $# = 2 ] || die "usage: replace-root TAR DIR"; root_replace "$@" ;;
*) die "unknown step '$step'" ;;
esac
