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
. "$(dirname "$0")/lib-image.sh"
. "$(dirname "$0")/progress.sh"
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

image_init
# Fixed so the same inputs give a byte-identical rootfs.ext4 (and version).
fs_uuid=5b5c0c2e-7d0e-4c5e-9a55-0000000000d1
fs_seed=5b5c0c2e-7d0e-4c5e-9a55-0000000000d2

mkdir -p "$out"
guest_init=$(realpath "$guest_init")
mkcpio=$(realpath "$mkcpio")
out=$(realpath "$out")

# ---- (a, b) kernel package and its PVH vmlinux -------------------------------
sbx_progress_run "$prog: kernel" --watch "$cache" -- image_kernel

# ---- busybox -----------------------------------------------------------------
bb_deb=$(fetch_deb busybox-static)
bb_ver=$(dpkg-deb -f "$bb_deb" Version)
bb_tree=$(unpack_deb "$bb_deb")
[ -x "$bb_tree/bin/busybox" ] || die "$bb_deb: no bin/busybox"
# /etc/services and /etc/protocols (getservbyname, getprotobyname: busybox
# is static glibc, whose files lookups read them).
nb_deb=$(fetch_deb netbase)
nb_ver=$(dpkg-deb -f "$nb_deb" Version)
nb_tree=$(unpack_deb "$nb_deb")
[ -f "$nb_tree/etc/services" ] && [ -f "$nb_tree/etc/protocols" ] || die "$nb_deb: no /etc/services"

# ---- (c) initramfs -------------------------------------------------------------
image_work default
image_initrd

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
install -m 0644 "$nb_tree/etc/services" "$nb_tree/etc/protocols" "$rd/etc/"
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
sbx_progress_run "$prog: rootfs.ext4" --watch "$tpl/rootfs.ext4" -- image_mkfs "$rd" 512M

# ---- (e) manifest --------------------------------------------------------------------
image_files
version=${content_sha256:0:12}
image_have default "$version" && exit 0

jq -n --arg version "$version" --arg created "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	--arg kpkg "$kpkg" --arg kver "$kver" --arg krel "$krel" --arg bbver "$bb_ver" --arg nbver "$nb_ver" \
	--argjson files "$files_json" --arg content "$content_sha256" --arg gi "$gi_sha256" '{
	schema: 1, name: "default", version: $version, created: $created,
	kernel: {package: $kpkg, version: $kver, release: $krel},
	packages: [{name: "busybox-static", version: $bbver}, {name: "netbase", version: $nbver}, {name: $kpkg, version: $kver}],
	files: $files, content_sha256: $content, guest_init_sha256: $gi}' >"$tpl/manifest.json"
image_install default "$version"
