#!/bin/bash
# Install the Debian packages sbx needs to build, run and test.  Idempotent:
# apt is only called when something is missing.
set -euo pipefail
PKGS=(
	build-essential pkg-config
	libjansson-dev libbsd-dev libmd-dev libarchive-dev libyaml-dev libseccomp-dev
	libcurl4-openssl-dev libxml2-dev
	# sbx-serve: its HTTP server, and OpenSSL (base64, constant-time compare, TLS)
	libmicrohttpd-dev libssl-dev
	libnl-3-dev libnl-route-3-dev libnftables-dev nftables iproute2 util-linux
	qemu-system-x86 qemu-utils busybox-static debootstrap e2fsprogs lz4 zstd libzstd-dev
	jq mandoc procps python3 python3-yaml clang libclang-rt-14-dev curl
	# tests: the tree's layout (t0946)
	clang-format
	# tests: fault injection at a syscall (t0520, t1500), a TLS origin (t1930)
	strace openssl
	# tests: real engines calling sbx-oci (t2100)
	podman conmon crun containerd
	# tests: a signed Debian archive (tests/lib-apt.sh: gpg makes its keys)
	gnupg
)
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# The npm tests' registry (tests/lib-npm.sh) runs on the host's Node.js and
# is installed with its npm.  A Node.js from elsewhere (NodeSource's brings
# its own npm, and conflicts with Debian's) is kept.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
