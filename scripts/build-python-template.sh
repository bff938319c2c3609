#!/bin/bash
# Build the python sbx template: the same kernel and initramfs as the
# default template over an ext4 root made by debootstrap (minbase) from
# Debian's archive, with python3, pip and venv, updated from the suite's
# -updates and -security archives.  Prints the template directory
# (python@3.11-HASH8) on stdout; everything else goes to stderr.  Root only.
#
# usage: build-python-template.sh --out DIR --guest-init PATH --mkcpio PATH [--refresh]
#   --refresh  bootstrap again even when a cached tree exists (picks up
#              the archive's newer packages; the version changes with them)
# env:   SBX_CACHE (default /var/cache/sbx): the kernel .debs and the
#        bootstrapped tree (rootfs/python-SUITE-KEY.tar.zst, KEY from the
#        sources, suite and package list), so reruns are fast and work offline.
#        SOURCE_DATE_EPOCH (default 0): timestamp of every file this script
#        writes or changes; the packages' own files keep theirs.
set -euo pipefail

prog=build-python-template.sh
. "$(dirname "$0")/lib-image.sh"
usage() { echo "usage: $prog --out DIR --guest-init PATH --mkcpio PATH [--refresh]" >&2; exit 2; }

out='' guest_init='' mkcpio='' refresh=0
while [ $# -gt 0 ]; do
	case $1 in
	--guest-init) [ $# -ge 2 ] || usage; guest_init=$2; shift 2 ;;
	--mkcpio) [ $# -ge 2 ] || usage; mkcpio=$2; shift 2 ;;
	--out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
	--refresh) refresh=1; shift ;;
	-h|--help) usage ;;
	*) usage ;;
	esac
done
if [ -z "$out" ] || [ -z "$guest_init" ] || [ -z "$mkcpio" ]; then usage; fi
[ -f "$guest_init" ] || die "guest-init not found: $guest_init"
[ -x "$mkcpio" ] || die "mkcpio tool not executable: $mkcpio"
# debootstrap and chroot need root, and so do the tree's owners.
[ "$(id -u)" = 0 ] || die "run as root"
for t in apt-get dpkg-deb dpkg-query lz4 mkfs.ext4 debugfs jq sha256sum od tar zstd unshare chroot flock; do
	command -v "$t" >/dev/null || die "missing tool: $t"
done

image_init
fs_uuid=5b5c0c2e-7d0e-4c5e-9a55-0000000000d3
fs_seed=5b5c0c2e-7d0e-4c5e-9a55-0000000000d4
suite=bookworm
arch=amd64
# netbase: /etc/services and /etc/protocols (getaddrinfo(host, "http"),
# getprotobyname), which minbase leaves out.
include=(ca-certificates netbase python3 python3-pip python3-venv)
# What the image leaves out to stay small; recorded in the manifest.
trimmed=(/usr/lib/python3.11/EXTERNALLY-MANAGED "/usr/share/doc/ (but each package's copyright)" /usr/share/man/ /usr/share/info/
	"/usr/share/locale/ (but locale.alias)" /usr/share/lintian/ /var/cache/apt/
	/var/lib/apt/lists/ /var/log/ "/dev/ (devtmpfs in the guest)" /etc/resolv.conf)

mkdir -p "$out" "$cache/rootfs"
guest_init=$(realpath "$guest_init")
mkcpio=$(realpath "$mkcpio")
out=$(realpath "$out")

# ---- sources -----------------------------------------------------------------
# "URI SUITE COMPONENTS" for each deb source of $suite, its -updates and
# -security, from the host's deb822 sources or else sources.list.
host_sources() {
	local f=/etc/apt/sources.list.d/debian.sources
	if [ -f "$f" ]; then
		awk -v want="^$suite(-updates|-security)?\$" '
			function flush(  i, j, nu, ns, u, s) {
				if (types ~ /(^| )deb( |$)/) {
					nu = split(uris, u, " "); ns = split(suites, s, " ")
					for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
						if (s[j] ~ want) print u[i], s[j], comps
				}
				types = uris = suites = comps = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{ k = tolower($1); sub(/^[^:]*:[ \t]*/, "") }
			k == "types:" { types = $0 } k == "uris:" { uris = $0 }
			k == "suites:" { suites = $0 } k == "components:" { comps = $0 }
			END { flush() }' "$f"
	elif [ -f /etc/apt/sources.list ]; then
		sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}//p' /etc/apt/sources.list |
			awk -v want="^$suite(-updates|-security)?\$" '$2 ~ want'
	fi
}
sources=$(host_sources | awk '{ print $1, $2, "main" }' | sort -u)
mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$sources")
[ -n "$mirror" ] || die "no '$suite' source in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"

# ---- bootstrapped tree, cached by its inputs -----------------------------------
# Bump when the recipe below changes what the cached tree holds.
recipe=1
key=$(printf 'recipe %s\nsuite %s\narch %s\nvariant minbase\ninclude %s\n%s\n' \
	"$recipe" "$suite" "$arch" "${include[*]}" "$sources" | sha256sum | cut -c1-16)
base_tar=$cache/rootfs/python-$suite-$key.tar.zst

# bootstrap DIR: debootstrap into DIR, then upgrade from every source.  Each
# runs in a mount namespace of its own, so the proc and sys mounts they make
# in DIR never outlive them, and removing DIR cannot reach into a mount.
bootstrap() {
	local d=$1
	if ! command -v debootstrap >/dev/null; then
		note "installing debootstrap"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -q --no-install-recommends debootstrap >&2 ||
			{ apt-get update -q >&2 && apt-get install -y -q --no-install-recommends debootstrap >&2; } ||
			die "cannot install debootstrap"
	fi
	note "debootstrap $suite from $mirror (minutes; cached afterwards)"
	unshare --mount --propagation private debootstrap --variant=minbase --arch="$arch" \
		--include="$(IFS=,; echo "${include[*]}")" "$suite" "$d" "$mirror" >&2 || {
		cp "$d/debootstrap/debootstrap.log" "$cache/rootfs/debootstrap.log" 2>/dev/null
		die "debootstrap failed (its log: $cache/rootfs/debootstrap.log)"
	}
	awk '{ printf "deb %s %s %s\n", $1, $2, $3 }' <<<"$sources" >"$d/etc/apt/sources.list"
	note "upgrading from $(awk '{ printf "%s ", $2 }' <<<"$sources")"
	# shellcheck disable=SC2016 # expanded by the inner shell
	unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" \
		/usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C \
		sh -c "apt-get -q update && apt-get -q -y --no-install-recommends -o Dpkg::Use-Pty=0 \
			-o Dpkg::Options::=--force-confold upgrade && apt-get clean"' sh "$d" >&2 ||
		die "upgrading the bootstrapped tree failed"
	rm -rf "$d"/var/lib/apt/lists/* "$d/debootstrap"
}

exec 9>"$cache/rootfs/.python.lock"
flock 9 # two cold builds would both bootstrap
if [ ! -f "$base_tar" ] || [ "$refresh" = 1 ]; then
	btmp=$(mktemp -d "$cache/rootfs/.python-$key.tmp.XXXXXX")
	trap 'rm -rf "$btmp"' EXIT
	bootstrap "$btmp/root"
	tar --numeric-owner --xattrs --xattrs-include='*' -C "$btmp/root" -cf - . |
		zstd -q -T0 -6 -o "$btmp/base.tar.zst"
	mv "$btmp/base.tar.zst" "$base_tar"
	printf '%s\n' "$sources" >"$cache/rootfs/python-$suite-$key.sources"
	rm -rf "$btmp"
	trap - EXIT
	note "cached $base_tar"
fi
exec 9>&-

# ---- kernel and initramfs ----------------------------------------------------------
image_kernel
image_work python
image_initrd

# ---- root filesystem ---------------------------------------------------------------
rd=$work/rootfs
mkdir "$rd"
: >"$work/unpacked" # what is newer was written or changed here
zstd -q -dc "$base_tar" | tar --numeric-owner --xattrs --xattrs-include='*' -p -C "$rd" -xf -

# Trim.  Copyright files stay: the licences ask for them.
find "$rd/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$rd/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$rd/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -rf "${rd:?}"/{usr/share/man,usr/share/info,usr/share/lintian,var/cache/apt,dev}/* "$rd/etc/resolv.conf"
find "$rd/var/lib/apt/lists" "$rd/var/log" -mindepth 1 ! -type d -delete
find "$rd/var/cache/debconf" "$rd/var/lib/dpkg" -maxdepth 1 -name '*-old' -delete
# PEP 668's marker makes Debian's pip refuse every `pip install` outside a
# venv.  It protects a host's apt-managed Python; a session is thrown away,
# and AI-written code runs `pip install x` as is (as uid 1000 it lands in
# ~/.local).  What reaches the guest is governed by the packages policy.
rm -f "$rd"/usr/lib/python3*/EXTERNALLY-MANAGED

# What guest-init expects: /bin/sh for sh -c, the user it runs commands as
# (uid 1000, home /home/user, cwd /workspace), and the mount points of /dev,
# /proc, /sys and /run (/run/secrets is made on /run's tmpfs).
grep -q '^[^:]*:[^:]*:1000:' "$rd/etc/passwd" && die "uid 1000 already taken in the bootstrapped tree"
echo 'user:x:1000:1000:user:/home/user:/bin/bash' >>"$rd/etc/passwd"
echo 'user:x:1000:' >>"$rd/etc/group"
echo 'user:!::' >>"$rd/etc/gshadow"
echo 'user:*:0:0:99999:7:::' >>"$rd/etc/shadow"
mkdir -p "$rd"/{proc,sys,dev,run,tmp,var/tmp,root,home/user,workspace}
cp -a "$rd/etc/skel/." "$rd/home/user/"
chown -R 1000:1000 "$rd/home/user" "$rd/workspace"
chmod 0755 "$rd/home/user" "$rd/workspace"
chmod 1777 "$rd/tmp" "$rd/var/tmp"
chmod 0700 "$rd/root"
echo sbx >"$rd/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$rd/etc/hosts"
chmod 0644 "$rd/etc/hostname" "$rd/etc/hosts"
cat >"$rd/etc/pip.conf" <<'EOF'
# pip's site-wide configuration in sbx's python template.  No index is set:
# pip uses its defaults (sessions have no network yet).  A package-registry
# cache for sessions will set index-url here, under [global].
[global]
disable-pip-version-check = true
EOF
chmod 0644 "$rd/etc/pip.conf"
for f in /bin/sh /usr/bin/python3 /usr/bin/pip /usr/bin/pip3; do
	[ -x "$rd$f" ] || die "bootstrapped tree has no $f"
done

# Run the interpreter once (no .pyc writes) for its version and to catch a
# broken tree at build time rather than in a session.
inroot() { chroot "$rd" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C "$@"; }
py_ver=$(inroot python3 -I -B -c 'import hashlib, json, ssl, subprocess, venv, ensurepip, sys
print("%d.%d.%d" % sys.version_info[:3])') || die "python3 does not run in the bootstrapped tree"
inroot python3 -I -B -m pip --version >/dev/null || die "pip does not run in the bootstrapped tree"
pip_ver=$(dpkg-query --admindir="$rd/var/lib/dpkg" -W -f='${Version}' python3-pip)
pip_ver=${pip_ver%%[+-]*}

# Package files keep the times they came with (a .pyc records its source's
# mtime); what changed here gets SOURCE_DATE_EPOCH.
find "$rd" -newer "$work/unpacked" -exec touch -h -d "@$epoch" {} +
# Sized from the tree alone (not from du, which depends on the host's file
# system), with headroom for the journal and metadata only: the image is
# mounted read-only, sessions write to their own scratch disk.
data_mib=$(find "$rd" -type f -printf '%s\n' | awk '{ b += int(($1 + 4095) / 4096) } END { print int(b / 256) }')
inodes=$(find "$rd" | wc -l)
image_mkfs "$rd" "$(((data_mib * 5 / 4 + 64 + 15) / 16 * 16))M" -b 4096 -N $((inodes * 5 / 4 + 1024))

# ---- manifest --------------------------------------------------------------------
image_files
version=${py_ver%.*}-${content_sha256:0:8}
image_have python "$version" && exit 0

packages=$({
	dpkg-query --admindir="$rd/var/lib/dpkg" -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\n' |
		awk -F'\t' '$1 ~ /^ii/ { print $2 "\t" $3 }'
	printf '%s\t%s\n' "$kpkg" "$kver"
} | sort | jq -R -s -c 'split("\n") | map(select(. != "") | split("\t") | {name: .[0], version: .[1]})')
jq -n --arg version "$version" --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	--arg kpkg "$kpkg" --arg kver "$kver" --arg krel "$krel" --argjson packages "$packages" \
	--argjson files "$files_json" --arg content "$content_sha256" --arg gi "$gi_sha256" \
	--arg py "$py_ver" --arg pip "$pip_ver" --arg suite "$suite" --arg key "$key" \
	--arg sources "$sources" --arg incl "${include[*]}" \
	--argjson trimmed "$(printf '%s\n' "${trimmed[@]}" | jq -R . | jq -s -c .)" '{
	schema: 1, name: "python", version: $version, created: $created,
	kernel: {package: $kpkg, version: $kver, release: $krel},
	packages: $packages,
	files: $files, content_sha256: $content, guest_init_sha256: $gi,
	python: {version: $py, pip: $pip},
	base: {distribution: "debian", suite: $suite, variant: "minbase",
	       include: ($incl | split(" ")), sources: ($sources | split("\n")),
	       trimmed: $trimmed, cache_key: $key}}' >"$tpl/manifest.json"
image_install python "$version"
