#!/bin/bash
# make fuzz: build every libFuzzer target in tests/fuzz with ASan+UBSan and
# run each for FUZZ_SECONDS (default 60), corpus seeded from tests/fuzz/corpus
# (and a dictionary from tests/fuzz/NAME.dict when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-fuzz
SECS=${FUZZ_SECONDS:-60}
mkdir -p "$B"
# The policy module's files, which several parsers link.
policy=(common/caller.c common/policy.c common/policy_check.c common/policy_json.c common/pkglock.c)
for src in tests/fuzz/fuzz-*.c; do
	name=$(basename "$src" .c)
	case $name in
	fuzz-policy)
		deps=("${policy[@]}" common/units.c common/yamlstrict.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs yaml-0.1 jansson)" ;;
	fuzz-tmplspec)
		# state.c for the ID allowlist, and hostconf.c (with units.c)
		# for the sbx.yaml check it makes as it opens the state.
		deps=(common/tmplspec.c common/yamlstrict.c common/state.c common/hostconf.c common/units.c common/err.c
			common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs yaml-0.1 jansson libbsd-overlay)" ;;
	fuzz-hostconf)
		# policy.c for its size parser.
		deps=(common/hostconf.c "${policy[@]}" common/units.c common/yamlstrict.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs yaml-0.1 jansson)" ;;
	fuzz-record|fuzz-ch)
		deps=(common/*.c)
		read -ra libs <<<"$(pkg-config --cflags --libs $(sed -n 's/^PKGS = //p' Makefile))" ;;
	fuzz-pkgcache)
		# The cache's request head and index parsers; the cache's files
		# (all of proxy/ but the proxy itself) link the audit trail and
		# the deny list.
		deps=(proxy/pkgcache.c proxy/http.c proxy/reply.c proxy/names.c proxy/upstream.c proxy/pypi.c
			proxy/npm.c proxy/npmtgz.c proxy/apt.c proxy/aptidx.c proxy/store.c common/audit.c common/audit_read.c common/audit_seg.c common/state.c common/util.c
			common/err.c proxy/egress.c "${policy[@]}" common/units.c common/yamlstrict.c common/hostconf.c
			common/budget.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libcurl libxml-2.0 libbsd-overlay libmd yaml-0.1 libarchive)" ;;
	fuzz-tar)
		# The checker alone (tarcheck.c is pure).
		deps=(common/tarcheck.c common/err.c)
		read -ra libs <<<"$(pkg-config --cflags --libs libarchive jansson libbsd-overlay)" ;;
	fuzz-egress)
		# The request head parser it shares with the cache (http.c, pure).
		deps=(proxy/egress.c proxy/http.c)
		read -ra libs <<<"$(pkg-config --cflags jansson)" ;;
	fuzz-audit)
		# hostconf.c (and its size parser) for audit retention's settings.
		deps=(common/audit.c common/audit_read.c common/audit_seg.c common/state.c common/util.c common/err.c
			common/hostconf.c "${policy[@]}" common/units.c common/yamlstrict.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libbsd-overlay libmd yaml-0.1)" ;;
	fuzz-rootfs)
		# The import unpacker: libarchive, jansson and libmd's SHA-256.
		deps=(common/rootfs.c common/rootfs_tar.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libarchive libbsd-overlay libmd)" ;;
	fuzz-serve)
		# sbx-serve's request decoder, Connect framing and the filesystem
		# calls' parsers (all pure).
		deps=(serve/wire.c serve/connect.c serve/fsparse.c serve/query.c serve/logs.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libcrypto libbsd-overlay)" ;;
	fuzz-oci-spec)
		# sbx-oci's config.json parser, linux.resources and mounts
		# included (pure but for util.c's reader).
		deps=(common/oci_spec.c common/oci_linux.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libbsd-overlay)" ;;
	fuzz-wmsg)
		# The proxy writer's channel decoder (wmsg.c is pure) and the JSON parse after it.
		deps=(proxy/wmsg.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson)" ;;
	fuzz-pkglock)
		# The lock parsers and the rules' JSON (pkglock.c is pure).
		deps=(common/pkglock.c common/err.c common/util.c)
		read -ra libs <<<"$(pkg-config --cflags --libs jansson libbsd-overlay)" ;;
	fuzz-npmtgz)
		# The install-script check of npm tarballs and metadata (pure).
		deps=(proxy/npmtgz.c common/util.c common/err.c)
		read -ra libs <<<"$(pkg-config --cflags --libs libarchive jansson libbsd-overlay)" ;;
	fuzz-aptidx)
		# The apt route's Release and Packages parsers (pure).
		deps=(proxy/aptidx.c)
		read -ra libs <<<"$(pkg-config --cflags --libs libarchive)" ;;
	fuzz-priv)
		# The monitor's request decoder alone (privmsg.c is pure).
		deps=(monitor/privmsg.c common/proto.c)
		libs=() ;;
	*)
		deps=(common/proto.c)
		libs=() ;;
	esac
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Icommon -Iproxy -Imonitor -Iserve -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined "$src" "${deps[@]}" "${libs[@]}" -o "$B/$name"
	corpus=$B/corpus-$name
	mkdir -p "$corpus"
	[ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
	dict=()
	[ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
	echo "fuzz: $name for ${SECS}s" >&2
	"$B/$name" "${dict[@]}" -max_total_time="$SECS" -max_len=70000 "$corpus" 2>&1 | tail -3
	# A crash leaves crash-*/leak-*/timeout-* files behind: fail the run.
	if ls crash-* leak-* timeout-* oom-* >/dev/null 2>&1; then
		echo "fuzz: $name found a failure" >&2
		exit 1
	fi
done
