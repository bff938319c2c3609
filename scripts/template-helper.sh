# shellcheck shell=bash disable=SC2154 # lib-image.sh is prepended at build time
# sbx-template-helper: the steps of a template build that are other
# programs' work (debootstrap, tar, apt and dpkg, mkfs.ext4), run by
# sbx-template build (common/tmplbuild.c), which owns the spec, the lock,
# the work directory and the publish.  Installed in libexec/sbx as
# lib-image.sh followed by this file.  Diagnostics on stderr (the builder
# keeps them in the work directory's log), data on stdout.
#
# Every step that reads, writes or runs anything of a template's root runs
# confined (common/confine.h): root only in namespaces of its own, its ids
# a host range nobody else has, no network, the host's programs read-only
# and nothing of the host's but the directories it is given.  The steps on
# the host's side handle only what the operator trusts (the host's archive,
# sbx's own kernel and guest-init, a template image sbx made) and hand the
# tree over as a tar stream; apt's downloads run on the host as the build's
# unprivileged uid.
#
# On the host, as root:
#   tar-template IMAGE        a template's rootfs.ext4 as a tar on stdout
#   tar-debian SUITE          debootstrap minbase (cached) as a tar on stdout
#   tar-busybox TSV           busybox-static and netbase as a tar on stdout;
#                             their NAME<TAB>VERSION in TSV
#   kernel PACKAGE OUTDIR     OUTDIR/vmlinux (PVH) and initrd.cpio (guest-init
#                             beside this script, the virtio modules); KEY<TAB>VALUE
#                             of package, version, release, guest_init_sha256
# On the host, as the build's unprivileged uid:
#   apt-fetch APTDIR PKG...   the host archive's lists and the .debs an upgrade
#                             and an install of PKG... need, for the suite,
#                             architecture and dpkg status apt-facts left there
# Confined:
#   unpack DIR KIND           DIR <- the tar on stdin; KIND template (as it
#                             is), debian (then prepare and trim) or busybox
#                             (then prepare)
#   prepare DIR               user 1000, /workspace, mount points (an import)
#   apt-facts DIR APTDIR      the tree's suite, architecture, dpkg status
#   apt-install DIR APTDIR PKG...  apt-get upgrade, then install PKG..., in DIR
#                             (a chroot) from APTDIR only; documentation trimmed
#   remove DIR PATH...        rm -rf each PATH of the root (it must exist)
#   put PARENT NAME [MODE]    the tar on stdin (member NAME and what is below
#                             it) into PARENT, a directory of the root; MODE
#                             (octal) for NAME
#   packages DIR              NAME<TAB>VERSION of each installed package
#   mkfs DIR IMAGE [STAMP]    IMAGE <- DIR, reproducibly (lib-image.sh); what
#                             is newer than STAMP gets the epoch
#   replace-root DIR          DIR <- the root a build VM tarred (stdin)
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

# In the tree (a confined step with chroot_tree: its /proc and /dev are
# the confinement's), with a clean environment.
inroot() {
	local d=$1
	shift
	chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_FRONTEND=noninteractive "$@"
}

# The tar options every confined extraction uses: numeric owners (the
# namespace's, which the image keeps), modes, file capabilities and user
# xattrs (no trusted.* in a user namespace), and no device nodes (the guest
# has devtmpfs; a user namespace cannot make them).
untar() {
	tar --numeric-owner -p --xattrs --xattrs-include='security.capability' --xattrs-include='user.*' \
		--exclude='./dev/*' -C "$1" -xf -
}

# A read-only mount in a mount namespace of our own (gone with it), as a
# tar stream: modes with their setuid and sticky bits, owners, hard links,
# xattrs, which debugfs's rdump does not all keep.  The image is one sbx's
# mkfs made; tar only reads it, and the extraction is confined.  It is
# mounted over /mnt inside that namespace, never on a directory of the
# host's: a mount point made in /tmp stayed behind whenever the helper
# died first (SIGPIPE from a reader that stopped, a build SIGKILLed), 70
# of them in a day of test runs.
tar_template() {
	local img=$1
	[ -d /mnt ] || die "no /mnt to mount $img on in a private namespace"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private sh -c 'mount -o ro,loop,noload,nosuid,nodev,noexec -t ext4 "$1" /mnt &&
		exec tar --numeric-owner --xattrs --xattrs-include="*" -C /mnt --exclude=./lost+found -cf - .' sh "$img" ||
		die "cannot read the root of $img"
}

tar_debian() {
	local suite=$1 sources mirror key base_tar btmp
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
	zstd -q -dc "$base_tar"
}

# The busybox root: Debian's busybox-static (every applet a link to it)
# and netbase's /etc/services and /etc/protocols (busybox is static glibc,
# whose files lookups read them), unpacked from their .debs (cached), not
# installed: there is no package manager in it.
tar_busybox() {
	local tsv=$1 d bb_deb nb_deb bb_tree nb_tree
	d=$(mktemp -d /tmp/sbx-busybox.XXXXXX)
	bb_tmp=$d
	trap 'rm -rf "$bb_tmp"' EXIT
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
	printf '%s\t%s\n' busybox-static "$(dpkg-deb -f "$bb_deb" Version)" netbase "$(dpkg-deb -f "$nb_deb" Version)" >"$tsv"
	# Every file this step made gets the epoch here: tar keeps whole
	# seconds, so a time from now could fall before the build's stamp
	# once unpacked and escape mkfs's pinning.
	tar --numeric-owner --mtime="@$epoch" -C "$d" -cf - .
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
	# A tar pipe, not cp: tar replaces a link it finds in home/user (an
	# archive's .profile -> /etc/shadow) where cp would write through it.
	if [ -d "$d/etc/skel" ]; then
		tar -C "$d/etc/skel" --numeric-owner -cf - . | tar -C "$d/home/user" --numeric-owner -p -xf -
	fi
	chown -R 1000:1000 "$d/home/user" "$d/workspace"
	chmod 1777 "$d/tmp" "$d/var/tmp"
	[ -s "$d/etc/hostname" ] || echo sbx >"$d/etc/hostname"
	[ -s "$d/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$d/etc/hosts"
	rm -f "$d/etc/resolv.conf"
}

# The facts apt-fetch needs from the tree, read here (confined): its
# suite (os-release's VERSION_CODENAME), dpkg's architecture and status.
root_apt_facts() {
	local d=$1 a=$2 suite arch
	[ -x "$d/usr/bin/apt-get" ] || bad "packages: the base has no apt-get (build from debian:SUITE or a Debian-based template)"
	suite=$({ cat "$d/etc/os-release" "$d/usr/lib/os-release" 2>/dev/null || true; } |
		sed -n 's/^VERSION_CODENAME=\(.*\)$/\1/p' | tr -d '"' | sed -n 1p)
	printf '%s' "$suite" | grep -Eqx '[a-z][a-z0-9.-]{0,31}' ||
		bad "packages: the base's /etc/os-release names no Debian suite (VERSION_CODENAME)"
	arch=$(inroot "$d" dpkg --print-architecture) || bad "packages: the base's dpkg does not run"
	printf '%s' "$arch" | grep -Eqx '[a-z0-9]{1,16}' || bad "packages: the base's dpkg names no architecture"
	printf '%s\n' "$suite" >"$a/suite"
	printf '%s\n' "$arch" >"$a/arch"
	if [ -f "$d/var/lib/dpkg/status" ]; then cat "$d/var/lib/dpkg/status"; fi >"$a/status"
}

# apt's options for the host's apt-get working on APTDIR alone: the host
# archive's sources for the tree's suite (never the tree's own sources),
# verified with the host's keys, the tree's dpkg status, no locks.
apt_host_opts() {
	local a=$1
	apt_opts=(-o "Dir::Etc::SourceList=$a/sources.list" -o "Dir::Etc::SourceParts=$a/empty"
		-o "Dir::Etc::Preferences=$a/none" -o "Dir::Etc::PreferencesParts=$a/empty"
		-o Dir::Etc::Trusted=/etc/apt/trusted.gpg -o Dir::Etc::TrustedParts=/etc/apt/trusted.gpg.d
		-o "Dir::State=$a/state" -o "Dir::State::Lists=$a/lists" -o "Dir::State::status=$a/status"
		-o "Dir::Cache=$a/cache" -o "Dir::Cache::Archives=$a/archives" -o "Dir::Log=$a/log"
		-o "APT::Architecture=$(cat "$a/arch")" -o APT::Architectures::= -o Debug::NoLocking=1
		-o Acquire::Languages=none -q)
}

# On the host as the build's uid (no root, no capabilities): the lists and
# the .debs of an upgrade and of installing PKG..., nothing installed.
root_apt_fetch() {
	local a=$1 suite sources signed=''
	shift
	suite=$(cat "$a/suite")
	sources=$(host_sources "$suite" | sort -u)
	[ -n "$sources" ] || bad "packages: the base is Debian '$suite', for which this host's apt has no source"
	[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] &&
		signed='[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] '
	awk -v s="$signed" '{ printf "deb %s%s %s main\n", s, $1, $2 }' <<<"$sources" >"$a/sources.list"
	awk '{ printf "deb %s %s main\n", $1, $2 }' <<<"$sources" >"$a/sources.tree"
	mkdir -p "$a/state" "$a/lists/partial" "$a/cache" "$a/archives/partial" "$a/log" "$a/empty"
	apt_host_opts "$a"
	local o=(-y --no-install-recommends -d)
	apt-get "${apt_opts[@]}" update >/dev/null || die "apt-get update from this host's archive failed"
	apt-get "${apt_opts[@]}" "${o[@]}" upgrade >/dev/null || exit 3
	apt-get "${apt_opts[@]}" "${o[@]}" install "$@" >/dev/null || exit 3
}

# Confined, in the tree: the upgrade and the install from APTDIR's lists
# and .debs only (--no-download: there is no network here).
root_apt_install() {
	local d=$1 a=$2 t=var/lib/sbx-apt
	shift 2
	no_links "$d" etc proc dev var/lib var/lib/apt/lists var/cache/apt var/log var/cache/debconf \
		var/cache/ldconfig var/lib/dpkg
	rm -rf "${d:?}/$t"
	mkdir -p "$d/$t/empty"
	cp -R "$a/lists" "$a/archives" "$d/$t/"
	cp "$a/sources.tree" "$d/$t/sources.list"
	rm -f "$d/etc/resolv.conf"
	# apt's own messages (E: Unable to locate package ...) go to stderr as they are.
	# The base's packages first take the archive's updates (its -updates
	# and -security suites too).
	# shellcheck disable=SC2016 # expanded by the inner shell
	inroot "$d" sh -c 't=/var/lib/sbx-apt
		o="-q -y --no-install-recommends --no-download -o Dpkg::Use-Pty=0 -o Dpkg::Options::=--force-confold
		-o Dir::Etc::SourceList=$t/sources.list -o Dir::Etc::SourceParts=$t/empty -o Dir::State::Lists=$t/lists
		-o Dir::Cache::Archives=$t/archives -o APT::Sandbox::User=root"
		apt-get $o upgrade >/dev/null && apt-get $o install "$@"' sh "$@" >&2 || exit 3
	rm -rf "${d:?}/$t"
	# ldconfig's aux-cache records inode numbers and times of this host's
	# unpack: the one file two builds of the same packages would differ in.
	rm -rf "$d"/var/lib/apt/lists/* "$d"/var/cache/apt/*.bin "$d/var/cache/ldconfig/aux-cache"
	rm -f "$d"/var/cache/apt/archives/*.deb
	find "$d/var/log" -mindepth 1 ! -type d -delete 2>/dev/null || true
	find "$d/var/cache/debconf" "$d/var/lib/dpkg" -maxdepth 1 -name '*-old' -delete 2>/dev/null || true
	root_trim "$d"
}

# The root a build VM's guest tarred (its own tar, of its whole root but
# its mounts, on stdin) replaces DIR's contents.  Extracted into an empty
# directory, so no symbolic link already there can carry a member
# elsewhere; GNU tar refuses '..' and absolute names and makes symbolic
# links last.  Device nodes are dropped (the guest has devtmpfs).
root_replace() {
	local d=$1 m
	find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
	untar "$d" >&2 || bad "cannot unpack the root the build VM sent"
	find "$d" \( -type b -o -type c -o -type p -o -type s \) -delete
	for m in proc sys; do mkdir -p "$d/$m" && chmod 0555 "$d/$m"; done
	for m in dev run; do mkdir -p "$d/$m" && chmod 0755 "$d/$m"; done
}

# A spec's files: entry, as a tar of one member (the file or directory,
# already named as its destination) on stdin, into PARENT, a directory of
# the root that tmplbuild.c resolved inside it.  tar replaces a link it
# finds at a member's name rather than write through it.  Owned by root,
# modes kept (MODE, when given, for the member itself).
root_put() {
	local parent=$1 name=$2 mode=${3:-}
	tar -C "$parent" --no-same-owner -p -xf - || bad "cannot copy $name into the root"
	if [ -n "$mode" ]; then chmod "$mode" -- "$parent/$name"; fi
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
	# Files the build wrote (newer than STAMP, the build's start) get the
	# epoch; package files keep their times.
	[ -n "${3:-}" ] && find "$rd" -newer "$3" -exec touch -h -d "@$epoch" {} +
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
tar-template) [ $# = 1 ] || die "usage: tar-template IMAGE"; tar_template "$@" ;;
tar-debian) [ $# = 1 ] || die "usage: tar-debian SUITE"; tar_debian "$@" ;;
tar-busybox) [ $# = 1 ] || die "usage: tar-busybox TSV"; tar_busybox "$@" ;;
kernel) [ $# = 2 ] || die "usage: kernel PACKAGE OUTDIR"; root_kernel "$@" ;;
apt-fetch) [ $# -ge 2 ] || die "usage: apt-fetch APTDIR PKG..."; root_apt_fetch "$@" ;;
unpack)
	[ $# = 2 ] || die "usage: unpack DIR KIND"
	untar "$1"
	case $2 in
	template) ;;
	debian)
		# debootstrap leaves its .debs in apt's cache: not the template's business
		rm -f "$1"/var/cache/apt/archives/*.deb "$1"/var/cache/apt/*.bin
		root_prepare "$1"
		root_trim "$1" ;;
	busybox) root_prepare "$1" ;;
	*) die "unknown kind '$2'" ;;
	esac ;;
prepare) [ $# = 1 ] || die "usage: prepare DIR"; root_prepare "$@" ;;
apt-facts) [ $# = 2 ] || die "usage: apt-facts DIR APTDIR"; root_apt_facts "$@" ;;
apt-install) [ $# -ge 3 ] || die "usage: apt-install DIR APTDIR PKG..."; root_apt_install "$@" ;;
remove) [ $# -ge 2 ] || die "usage: remove DIR PATH..."; root_remove "$@" ;;
put) [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: put PARENT NAME [MODE]"; root_put "$@" ;;
packages) [ $# = 1 ] || die "usage: packages DIR"; root_packages "$@" ;;
mkfs) [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: mkfs DIR IMAGE [STAMP]"; root_mkfs "$@" ;;
replace-root) [ $# = 1 ] || die "usage: replace-root DIR"; root_replace "$@" ;;
*) die "unknown step '$step'" ;;
esac
