# A real npm registry for the package tests (sourced after lib.sh): the
# verdaccio server, installed from the npm registry with the host's npm
# (tests/fixtures/verdaccio: 6.8.0, with node-fetch pinned to 2.7.0 through
# overrides, the way it installs on Node.js 20), cached under SBX_CACHE so
# later runs need no network.  It runs in a network namespace the test made
# (test_net_hosts), with no uplinks (it serves only what the test publishes
# to it) and its storage under the test's SBX_ROOT.
#
#   require_node_template              skips the test without a node template
#                                      (fails it under SBX_REQUIRE_NODE=1)
#   npm_registry_install               sets VERDACCIO (its bin), or says why not
#   npm_registry_start NS ADDR PORT    runs it in NS on ADDR:PORT; sets
#                                      NPM_REG_PID, NPM_REG_URL, NPM_REG_STORAGE
#   npm_registry_user                  a user and its token in $NPM_USERCONFIG
#   npm_registry_publish DIR           npm publish DIR (a package.json and files)
#   npm_registry_stop                  ends it and waits for it
#   npm_registry_up NETNAME            all of the above for a test: installed,
#                                      started in a namespace of its own
#                                      (test_net_hosts NETNAME 1; REG is its
#                                      address), a user; a check for each
NPM_FIXTURE=$(cd "$(dirname "${BASH_SOURCE[0]}")/fixtures/verdaccio" && pwd)

require_node_template() {
	ls "$SBX_TEMPLATES"/node@*/manifest.json >/dev/null 2>&1 && return 0
	[ "${SBX_REQUIRE_NODE:-0}" = 1 ] ||
		skip_all "no node template built (sbx-template build node -f templates/node.yaml; scripts/test.sh does)"
	ok 1 "a node template in $SBX_TEMPLATES (sbx-template build node -f templates/node.yaml)"
	done_testing
}

# npm_fixture_install FIXTURE NAME: FIXTURE's package.json and lockfile
# installed (npm ci) under SBX_CACHE/NAME/KEY, keyed by the lockfile, so
# a change to the pins installs anew beside the old one; NPM_DIR says
# where, NPM_WHY why not.  Two tests installing at once serialize.
npm_fixture_install() {
	local fixture=$1 name=$2 cache=${SBX_CACHE:-/var/cache/sbx} key dir tmp lock
	command -v npm >/dev/null && command -v node >/dev/null || { NPM_WHY="the host has no node and npm (scripts/deps.sh)"; return 1; }
	key=$(cat "$fixture/package.json" "$fixture/package-lock.json" | sha256sum | cut -c1-12)
	dir=$cache/$name/$key
	NPM_DIR=$dir
	[ -f "$dir/.complete" ] && return 0
	mkdir -p "$cache/$name" || { NPM_WHY="cannot make $cache/$name"; return 1; }
	exec {lock}>"$cache/$name/.lock"
	flock "$lock"
	if [ ! -f "$dir/.complete" ]; then
		tmp=$(mktemp -d "$cache/$name/.$key.tmp.XXXXXX")
		cp "$fixture/package.json" "$fixture/package-lock.json" "$tmp/"
		# npm ci: exactly the lockfile's versions, their integrity checked.
		if ! (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --cache "$tmp/.npm-cache" \
			--userconfig /dev/null >"$tmp/install.log" 2>&1); then
			NPM_WHY="npm ci of $name failed: $(tail -3 "$tmp/install.log" | tr '\n' ' ')"
			rm -rf "$tmp"; exec {lock}>&-; return 1
		fi
		rm -rf "$tmp/.npm-cache" "$dir"
		touch "$tmp/.complete"
		chmod 0755 "$tmp"
		mv "$tmp" "$dir"
	fi
	exec {lock}>&-
}

npm_registry_install() {
	npm_fixture_install "$NPM_FIXTURE" verdaccio || return 1
	VERDACCIO=$NPM_DIR/node_modules/verdaccio/bin/verdaccio
}

npm_registry_start() {
	local ns=$1 addr=$2 port=$3 d=$TEST_TMP/verdaccio
	NPM_REG_URL=http://$addr:$port/
	NPM_REG_STORAGE=$d/storage
	mkdir -p "$NPM_REG_STORAGE"
	: >"$d/htpasswd"
	cat >"$d/config.yaml" <<-YAML
	storage: $NPM_REG_STORAGE
	auth:
	  htpasswd: {file: $d/htpasswd, max_users: 1}
	uplinks: {}
	packages:
	  '**': {access: \$all, publish: \$all, unpublish: \$all}
	web: {enable: false}
	log: {type: stdout, format: pretty, level: http}
	YAML
	# Root, as the test is (it warns so); it holds nothing but its
	# namespace and the test's own directory.
	ip netns exec "$ns" env -i PATH=/usr/bin:/bin HOME="$d" node "$VERDACCIO" --config "$d/config.yaml" \
		--listen "$addr:$port" >"$d/log" 2>&1 &
	NPM_REG_PID=$!
	local i
	for i in $(seq 300); do
		curl -sf --max-time 2 "${NPM_REG_URL}-/ping" >/dev/null && return 0
		kill -0 "$NPM_REG_PID" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}

# A user through the registry's own adduser endpoint (what `npm adduser`
# calls), its token in a userconfig of the test's, never the host's ~/.npmrc.
npm_registry_user() {
	local tok
	NPM_USERCONFIG=$TEST_TMP/npmrc
	tok=$(curl -sf --max-time 10 -X PUT -H 'content-type: application/json' \
		-d '{"name":"sbxtest","password":"sbxtest-pass"}' \
		"${NPM_REG_URL}-/user/org.couchdb.user:sbxtest" | jq -r .token) || return 1
	[ -n "$tok" ] && [ "$tok" != null ] || return 1
	printf '//%s:_authToken=%s\n' "${NPM_REG_URL#http://}" "$tok" >"$NPM_USERCONFIG"
}

npm_registry_publish() {
	(cd "$1" && npm publish --registry "$NPM_REG_URL" --userconfig "$NPM_USERCONFIG" \
		--cache "$TEST_TMP/npm-cache" --no-audit --no-fund --loglevel=error)
}

npm_registry_up() {
	npm_registry_install
	ok $? "verdaccio is installed (cached under ${SBX_CACHE:-/var/cache/sbx}/verdaccio) ${NPM_WHY:-}"
	[ -x "$(command -v node)" ] && [ -f "$VERDACCIO" ] || done_testing
	test_net_hosts "$1" 1
	REG=${NET_IP[0]}
	npm_registry_start "$NET_NS" "$REG" 4873
	ok $? "verdaccio answers on $REG:4873" || diag "$(tail -5 "$TEST_TMP/verdaccio/log")"
	npm_registry_user
	ok $? "a registry user and its token"
}

# TERM, and KILL if it has not ended within 10 s (it renames itself to
# "verdaccio", so lib.sh's cleanup by command line would not find it).
npm_registry_stop() {
	[ -n "${NPM_REG_PID:-}" ] || return 0
	local i
	kill "$NPM_REG_PID" 2>/dev/null
	for i in $(seq 100); do
		case $(ps -o stat= -p "$NPM_REG_PID" 2>/dev/null) in '' | Z*) break ;; esac # ended (our child: a zombie until the wait)
		sleep 0.1
	done
	kill -9 "$NPM_REG_PID" 2>/dev/null
	wait "$NPM_REG_PID" 2>/dev/null
	NPM_REG_PID=
}
