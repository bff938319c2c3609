# shellcheck shell=bash disable=SC2034 # variables for the test that sources it
# A real, signed Debian archive for the apt tests (sourced after lib.sh):
# three tiny packages built with dpkg-deb, their index made with
# dpkg-scanpackages, a Release listing it (MD5Sum, SHA256, by-hash) signed
# with a key made for it (InRelease, Release.gpg), and a second, unrelated
# key.  It is built once into SBX_CACHE/apt-archive/KEY (KEY: this file's
# content and the suite; built anew when a day old, so its Valid-Until, a
# week ahead, never runs out), and each test serves a copy of its own from a
# network namespace it made (test_net_hosts), over plain HTTP.
#
#   apt_archive_build DIR SUITE      builds the archive in DIR (component
#                                    main, Architectures: amd64; packages
#                                    sbx-hello (Depends: sbx-dep), sbx-dep,
#                                    sbx-other, 1.0-1, all) and the keys in
#                                    DIR/../keys: gnupg/ and other/ (the
#                                    homes), keyring.gpg, other-keyring.gpg
#   apt_archive_get SUITE DEST       the cached build (made first if need be)
#                                    copied to DEST/archive, DEST/pristine and
#                                    DEST/keys; sets APT_SUITE, APT_DIR (the
#                                    archive), APT_KEYRING, APT_OTHER_KEYRING
#                                    (binary keyrings, for gpgv --keyring and
#                                    signed-by), or APT_WHY
#   apt_archive_serve NS ADDR PORT DIR   serves DIR over HTTP/1.1 in NS, once
#                                    it answers; sets APT_SRV_PID, APT_URL,
#                                    APT_LOG (its access log, from then on:
#                                    ... "GET /path HTTP/1.1" 200 -)
#   apt_archive_stop                 ends it and waits for it
#   apt_archive_up NETNAME [SUITE]   all of that for a test (suite bookworm):
#                                    test_net_hosts NETNAME 1, the archive in
#                                    $TEST_TMP/apt, served on $APT_HOST:8080;
#                                    a check for each step
# On the served copy (APT_DIR), each undone by apt_restore:
#   apt_tamper_deb NAME              a byte of NAME's data.tar flipped (same
#                                    size; no longer the index's SHA256)
#   apt_tamper_index                 a byte of every Packages* flipped, named
#                                    and by-hash copies (no longer the
#                                    Release's SHA256; InRelease still valid)
#   apt_tamper_release               a byte of the signed text changed in
#                                    InRelease and Release (neither signature
#                                    verifies)
#   apt_resign_with_other_key        the pristine Release, InRelease and
#                                    Release.gpg signed by the other key
#   apt_restore                      the archive as built
APT_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
APT_EPOCH=1700000000 # every file in the packages, so a rebuild is byte for byte the same

# _apt_deb POOL NAME DEPENDS FILE MODE TEXT: NAME_1.0-1_all.deb shipping
# FILE (TEXT, MODE) in POOL/main/s/NAME/.
_apt_deb() {
	local pool=$1 name=$2 dep=$3 file=$4 mode=$5 text=$6 r
	r=$(mktemp -d) || return 1
	mkdir -p "$r/DEBIAN" "$r$(dirname "$file")" "$pool/main/s/$name" &&
		printf '%s\n' "$text" >"$r$file" && chmod -R u=rwX,go=rX "$r" && chmod "$mode" "$r$file" && {
		printf 'Package: %s\nVersion: 1.0-1\nArchitecture: all\n' "$name"
		printf 'Maintainer: sbx tests <sbx-tests@example.invalid>\nInstalled-Size: 1\n'
		[ -z "$dep" ] || printf 'Depends: %s\n' "$dep"
		printf 'Section: misc\nPriority: optional\nDescription: %s, for the sbx apt tests\n' "$name"
		printf ' A package of the signed archive tests/lib-apt.sh builds.\n'
	} >"$r/DEBIAN/control" &&
		SOURCE_DATE_EPOCH=$APT_EPOCH dpkg-deb --root-owner-group --build "$r" \
			"$pool/main/s/$name/${name}_1.0-1_all.deb" >/dev/null
	local rc=$?
	rm -rf "$r"
	return $rc
}

# _apt_release DIR SUITE: DIR/dists/SUITE/Release, dated now, listing the
# indexes under it.
_apt_release() {
	local d=$1/dists/$2 now f
	now=$(date +%s)
	{
		printf 'Origin: sbx-test\nLabel: sbx-test\nSuite: %s\nCodename: %s\n' "$2" "$2"
		LC_ALL=C date -u -d "@$now" '+Date: %a, %d %b %Y %H:%M:%S UTC'
		LC_ALL=C date -u -d "@$((now + 7 * 86400))" '+Valid-Until: %a, %d %b %Y %H:%M:%S UTC'
		printf 'Acquire-By-Hash: yes\nArchitectures: amd64\nComponents: main\n'
		printf 'Description: the sbx apt tests'"'"' archive (tests/lib-apt.sh)\n'
		for f in MD5Sum:md5sum SHA256:sha256sum; do
			echo "${f%%:*}:"
			(cd "$d" && for i in main/binary-amd64/Packages*; do
				printf ' %s %8d %s\n' "$("${f#*:}" <"$i" | cut -d' ' -f1)" "$(stat -c %s "$i")" "$i"
			done)
		done
	} >"$d/Release"
}

# _apt_sign SUITEDIR HOME: InRelease and Release.gpg of SUITEDIR/Release by
# the key in the gnupg home HOME (whose agent is ended after).
_apt_sign() {
	local g=(gpg --batch --quiet --yes --homedir "$2" --digest-algo SHA512) rc
	rm -f "$1/InRelease" "$1/Release.gpg"
	"${g[@]}" --clearsign -o "$1/InRelease" "$1/Release" &&
		"${g[@]}" --armor --detach-sign -o "$1/Release.gpg" "$1/Release"
	rc=$?
	gpgconf --homedir "$2" --kill gpg-agent 2>/dev/null
	return $rc
}

# _apt_key HOME KEYRING NAME: a new ed25519 signing key, no passphrase, in
# the gnupg home HOME; its public key exported to KEYRING.
_apt_key() {
	mkdir -p "$(dirname "$1")" && mkdir -m 0700 "$1" &&
		printf '%s\n' '%no-protection' 'Key-Type: eddsa' 'Key-Curve: ed25519' 'Key-Usage: sign' \
			"Name-Real: $3" 'Name-Email: sbx-tests@example.invalid' 'Expire-Date: 0' '%commit' |
		gpg --batch --quiet --homedir "$1" --gen-key 2>/dev/null &&
		gpg --batch --quiet --homedir "$1" --export >"$2" && [ -s "$2" ]
	local rc=$?
	gpgconf --homedir "$1" --kill gpg-agent 2>/dev/null
	return $rc
}

apt_archive_build() {
	local dir=$1 suite=$2 keys p
	keys=$(dirname "$dir")/keys
	local b=$dir/dists/$suite/main/binary-amd64
	rm -rf "$dir" "$keys" && mkdir -p "$b" "$keys" || return 1
	_apt_deb "$dir/pool" sbx-hello sbx-dep /usr/bin/sbx-hello 0755 \
		"$(printf '#!/bin/sh\necho "hello from sbx-hello"')" &&
		_apt_deb "$dir/pool" sbx-dep "" /usr/share/sbx-dep/README 0644 "sbx-dep: what sbx-hello depends on." &&
		_apt_deb "$dir/pool" sbx-other "" /usr/share/sbx-other/README 0644 "sbx-other: in no allow list." || return 1
	(cd "$dir" && dpkg-scanpackages --arch amd64 pool /dev/null 2>/dev/null) >"$b/Packages" &&
		[ "$(grep -c '^Package: ' "$b/Packages")" = 3 ] &&
		gzip -9nc "$b/Packages" >"$b/Packages.gz" && xz -c "$b/Packages" >"$b/Packages.xz" || return 1
	mkdir -p "$b/by-hash/SHA256"
	for p in "$b"/Packages*; do
		cp "$p" "$b/by-hash/SHA256/$(sha256sum <"$p" | cut -d' ' -f1)" || return 1
	done
	_apt_release "$dir" "$suite" &&
		_apt_key "$keys/gnupg" "$keys/keyring.gpg" "sbx test archive" &&
		_apt_key "$keys/other" "$keys/other-keyring.gpg" "sbx test other key" &&
		_apt_sign "$dir/dists/$suite" "$keys/gnupg"
}

apt_archive_get() {
	local suite=$1 dest=$2 cache=${SBX_CACHE:-/var/cache/sbx}/apt-archive key dir tmp lock
	for tmp in gpg gpgconf dpkg-deb dpkg-scanpackages xz; do
		command -v "$tmp" >/dev/null || { APT_WHY="the host has no $tmp (scripts/deps.sh)"; return 1; }
	done
	key=$({ cat "$APT_LIB"; echo "$suite"; } | sha256sum | cut -c1-12)
	dir=$cache/$key
	mkdir -p "$cache" || { APT_WHY="cannot make $cache"; return 1; }
	exec {lock}>"$cache/.lock"
	flock "$lock"
	# Built anew once a day old: its Valid-Until is a week ahead.
	if [ -z "$(find "$dir/.complete" -mmin -1440 2>/dev/null)" ]; then
		tmp=$(mktemp -d "$cache/.$key.tmp.XXXXXX") || { APT_WHY="cannot write $cache"; exec {lock}>&-; return 1; }
		if ! apt_archive_build "$tmp/archive" "$suite" >"$tmp/build.log" 2>&1; then
			APT_WHY="building the archive failed: $(tail -3 "$tmp/build.log" | tr '\n' ' ')"
			rm -rf "$tmp"; exec {lock}>&-; return 1
		fi
		touch "$tmp/.complete"
		chmod 0755 "$tmp"
		rm -rf "$dir"
		mv "$tmp" "$dir"
		# Other versions' builds, as stale as this one was.
		find "$cache" -mindepth 1 -maxdepth 1 -name '[0-9a-f]*' ! -name "$key" -mmin +1440 -exec rm -rf {} +
	fi
	rm -rf "$dest" && mkdir -p "$dest" && cp -a "$dir/archive" "$dest/archive" &&
		cp -a "$dir/archive" "$dest/pristine" && cp -a "$dir/keys" "$dest/keys"
	tmp=$?
	exec {lock}>&-
	[ "$tmp" = 0 ] || { APT_WHY="cannot copy $dir to $dest"; return 1; }
	APT_SUITE=$suite APT_DIR=$dest/archive APT_PRISTINE=$dest/pristine APT_KEYS=$dest/keys
	APT_KEYRING=$APT_KEYS/keyring.gpg APT_OTHER_KEYRING=$APT_KEYS/other-keyring.gpg
}

apt_archive_serve() {
	local ns=$1 addr=$2 port=$3 dir=$4 i
	APT_URL=http://$addr:$port/
	APT_LOG=$TEST_TMP/apt-access.log
	ip netns exec "$ns" env -i PATH=/usr/bin:/bin /usr/bin/python3 -m http.server --protocol HTTP/1.1 \
		--bind "$addr" --directory "$dir" "$port" >>"$APT_LOG" 2>&1 &
	APT_SRV_PID=$!
	for i in $(seq 300); do
		# The log then holds only what the test's clients asked for.
		curl -sf --max-time 2 -o /dev/null "${APT_URL}dists/" && { : >"$APT_LOG"; return 0; }
		kill -0 "$APT_SRV_PID" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}

apt_archive_stop() {
	[ -n "${APT_SRV_PID:-}" ] || return 0
	kill "$APT_SRV_PID" 2>/dev/null
	wait "$APT_SRV_PID" 2>/dev/null
	APT_SRV_PID=
}

apt_archive_up() {
	APT_WHY=
	test_net_hosts "$1" 1
	APT_HOST=${NET_IP[0]}
	apt_archive_get "${2:-bookworm}" "$TEST_TMP/apt"
	ok $? "a signed apt archive (cached under ${SBX_CACHE:-/var/cache/sbx}/apt-archive) $APT_WHY"
	[ -n "${APT_DIR:-}" ] || done_testing
	apt_archive_serve "$NET_NS" "$APT_HOST" 8080 "$APT_DIR"
	ok $? "the archive answers on $APT_HOST:8080"
}

# _apt_flip FILE OFFSET: the byte at OFFSET xor 1, in place.
_apt_flip() {
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ') && [ -n "$b" ] &&
		printf '%b' "\\0$(printf %03o $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

apt_tamper_deb() {
	local f off=8 name size
	f=$(echo "$APT_DIR"/pool/main/*/"$1"/"$1"_*.deb)
	[ -f "$f" ] || return 1
	# The ar members: a 60-byte header (name 16, ..., size 10 at 48), the
	# data, padded to an even size.
	while [ "$off" -lt "$(stat -c %s "$f")" ]; do
		name=$(dd if="$f" bs=1 skip="$off" count=16 status=none)
		size=$(dd if="$f" bs=1 skip=$((off + 48)) count=10 status=none | tr -d ' ')
		case $name in data.tar*) _apt_flip "$f" $((off + 60 + size / 2)); return ;; esac
		off=$((off + 60 + size + size % 2))
	done
	return 1
}

apt_tamper_index() {
	local f
	for f in "$APT_DIR/dists/$APT_SUITE"/main/binary-amd64/{Packages*,by-hash/SHA256/*}; do
		_apt_flip "$f" $(($(stat -c %s "$f") / 2)) || return 1
	done
}

apt_tamper_release() {
	sed -i 's/^Origin: sbx-test$/Origin: sbx-tesT/' "$APT_DIR/dists/$APT_SUITE/InRelease" \
		"$APT_DIR/dists/$APT_SUITE/Release" &&
		grep -q '^Origin: sbx-tesT$' "$APT_DIR/dists/$APT_SUITE/InRelease"
}

apt_resign_with_other_key() {
	cp "$APT_PRISTINE/dists/$APT_SUITE/Release" "$APT_DIR/dists/$APT_SUITE/Release" &&
		_apt_sign "$APT_DIR/dists/$APT_SUITE" "$APT_KEYS/other"
}

apt_restore() {
	rm -rf "${APT_DIR:?}/dists" "$APT_DIR/pool" && cp -a "$APT_PRISTINE/." "$APT_DIR/"
}
