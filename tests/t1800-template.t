#!/bin/bash
# sbx-template on real templates and VMs: build from a spec (files, env,
# user, workdir; Debian packages when the python template is there), the
# result booted; list, inspect, rm (5 while in use), prune (keeps the
# newest and what is in use); every bad spec and name refused with its
# status and the templates directory byte-for-byte unchanged; a build
# killed with SIGKILL leaves nothing visible and sbx-gc reclaims it; two
# builds of one name both land.
. "$(dirname "$0")/lib.sh"
require_vm
L=$SBX_ROOT/var/lib/sbx
CONF=$SBX_ROOT/etc/sbx/sbx.yaml
PY=$(ls -d "$SBX_TEMPLATES"/python@* 2>/dev/null | head -n1)
# Templates built here go to a directory of our own.
mkdir -p "$TEST_TMP/templates"
ln -s "$SBX_TEMPLATES"/default@* "$TEST_TMP/templates/"
[ -n "$PY" ] && ln -s "$PY" "$TEST_TMP/templates/"
export SBX_TEMPLATES=$TEST_TMP/templates
T=$SBX_TEMPLATES
S=$TEST_TMP/spec
mkdir -p "$S/tools" "$TEST_TMP/outside"
echo hello >"$S/tools/hi.txt"
echo secret >"$TEST_TMP/outside/secret"
# Everything in it (the directory's own mtime moves when a failed build's
# work directory comes and goes, and is not part of what it holds).
listing() { find "$T" -mindepth 1 -printf '%P %y %s %m %T@ %l\n' | sort; }
same_dir() { listing >"$TEST_TMP/after"; cmp -s "$TEST_TMP/before" "$TEST_TMP/after"; ok $? "$1"; }
# bad EXPECTED-STATUS MESSAGE-REGEX DESCRIPTION -- ARGS...: refused, said why, nothing changed
bad() {
	local want=$1 re=$2 what=$3
	shift 4
	listing >"$TEST_TMP/before"
	sbx-template "$@" >"$TEST_TMP/out" 2>"$TEST_TMP/err"
	is "$?" "$want" "$what: exits $want"
	like "$(cat "$TEST_TMP/err")" "$re" "$what: says why"
	is "$(cat "$TEST_TMP/out")" "" "$what: nothing on stdout"
	same_dir "$what: the templates directory is unchanged"
}
spec() { printf '%b' "$2" >"$S/$1"; }

# --- build ---------------------------------------------------------------------
spec web.yaml 'from: default\nfiles: [{src: ./tools, dst: /opt/tools, mode: "0750"}, {src: tools/hi.txt, dst: /etc/hi}]\nenv: {GREETING: hello, EMPTY: ""}\nuser: user\nworkdir: /workspace/proj\n'
ref=$(sbx-template build web -f "$S/web.yaml" 2>"$TEST_TMP/err"); ok $? "build from a spec exits 0"
like "$ref" '^web@[0-9a-f]{12}$' "and prints NAME@VERSION only ($ref)"
is "$(cat "$TEST_TMP/err")" "" "nothing on stderr when it is not a terminal"
if command -v script >/dev/null; then
	script -qec "sbx-template build web -f '$S/web.yaml' 2>&1 >/dev/null" /dev/null >"$TEST_TMP/tty" </dev/null
	like "$(tr -d '\r' <"$TEST_TMP/tty")" "sbx-template: web: unpack the base's root" "on a terminal, each step is named on stderr"
fi
v=${ref#web@}
M=$T/$ref/manifest.json
is "$(jq -c .env "$M")" '{"GREETING":"hello","EMPTY":""}' "manifest.json records env"
is "$(jq -r '.user + " " + .workdir' "$M")" "user /workspace/proj" "and user and workdir"
is "$(jq -r '.source.kind + " " + .spec.from + " " + .owner' "$M")" "spec default operator" "and the source spec, base and owner"
like "$(jq -r .base "$M")" '^default@' "and the base template's version"
is "$(jq -r '[.packages[].name] | index("busybox-static") != null' "$M")" true "packages come with their versions"
[ "$(jq -r '.files["rootfs.ext4"].sha256' "$M")" = "$(sha256sum <"$T/$ref/rootfs.ext4" | cut -d' ' -f1)" ]
ok $? "the manifest's hash is the root's"
ls -a "$T" | grep -q '^\.tmp-build-'; ok $((!$?)) "no work directory is left"
is "$(sbx-template build web -f "$S/web.yaml")" "$ref" "the same spec builds the same version again"
is "$(sbx-template build --json web -f "$S/web.yaml" | jq -r '.template + " " + (.existed|tostring)')" "$ref true" \
	"--json says it existed"
grep -q '"type":"template.build".*"template":"'"$ref"'"' "$L/audit.log"; ok $? "the build is audited"
top=$(cd "$(dirname "$0")/.." && pwd)
grep '"type":"template.build"' "$L/audit.log" |
	python3 "$top/tests/tools/json-schema-check.py" validate --strict --lines "$top/docs/schema" 'audit.json#/$defs/record' >/dev/null 2>&1
ok $? "as a record its schema describes"

id=$(sbx-create -q -t web); ok $? "a session boots from the built template"
is "$(sbx-exec --user root "$id" -- cat /etc/hi /opt/tools/hi.txt | tr '\n' ' ')" "hello hello " "with the spec's files"
is "$(sbx-exec "$id" -- stat -c '%a %U' /opt/tools /workspace/proj | tr '\n' ' ')" "750 root 755 user " \
	"their modes, and the workdir owned by the spec's user"

# A user of the root's /etc/passwd other than root and user is recorded as
# its uid (what a session takes), and execs run as it.
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\napp:x:1001:1001:app:/workspace/app:/bin/sh\n' \
	>"$S/passwd"
spec app.yaml 'from: default\nfiles: [{src: passwd, dst: /etc/passwd, mode: "0644"}]\nuser: app\nworkdir: /workspace/app\n'
ra=$(sbx-template build app -f "$S/app.yaml"); ok $? "a spec whose user is another user of its passwd builds"
is "$(jq -r .user "$T/$ra/manifest.json")" 1001 "the manifest records its uid"
a=$(sbx-create -q -t app)
is "$(sbx-exec "$a" -- sh -c 'id -u; pwd; stat -c %u .' | tr '\n' ' ')" "1001 /workspace/app 1001 " \
	"execs run as it, in the workdir it owns"
sbx-kill "$a" >/dev/null

# from: busybox (the default template's root) on the default template's
# kernel: the packages are the two .debs', remove: takes what it names.
spec bb.yaml 'from: busybox\nremove: [/bin/vi]\n'
rb=$(sbx-template build bb -f "$S/bb.yaml"); ok $? "from: busybox builds ($rb)"
is "$(jq -r '[.packages[].name] | join(" ")' "$T/$rb/manifest.json")" \
	"busybox-static netbase $(jq -r .kernel.package "$T/$ref/manifest.json")" "its packages: busybox, netbase, the kernel"
like "$(jq -r '.base + " " + .spec.from' "$T/$rb/manifest.json")" '^default@[0-9a-f]+ busybox$' \
	"the kernel and initramfs are the default template's"
debugfs -R 'stat /bin/vi' "$T/$rb/rootfs.ext4" 2>&1 | grep -q 'File not found'; ok $? "and /bin/vi is gone"
# The shipped default template's spec, built twice: the same version (the
# rootfs is reproducible).
d1=$(sbx-template build dflt -f "$top/templates/default.yaml"); ok $? "templates/default.yaml builds ($d1)"
rm -rf "${T:?}/$d1"
is "$(sbx-template build dflt -f "$top/templates/default.yaml")" "$d1" "and builds the same version from scratch again"
is "$(jq -r '.base + "|" + .kernel.package' "$T/$d1/manifest.json")" "|$(jq -r .kernel.package "$T/$ref/manifest.json")" \
	"with a kernel of its own (no base)"
sbx-template rm dflt bb app >/dev/null

# --- run: steps in a build microVM ---------------------------------------------------
spec run.yaml 'from: default\nrun:\n  - echo built-in-vm > /etc/motd; rm /etc/hostname; mkdir -p /opt/made\n  - {cmd: "id -u > /workspace/uid", user: user}\nuser: user\n'
rr=$(sbx-template build run -f "$S/run.yaml" 2>"$TEST_TMP/err"); ok $? "a spec with run: steps builds ($rr)"
is "$(sbx-ps -q)" "$id" "its build VM is gone (only the session above is left)"
r=$(sbx-create -q -t run)
is "$(sbx-exec "$r" -- cat /etc/motd /workspace/uid | tr '\n' ' ')" "built-in-vm 1000 " \
	"what the steps wrote is in the template, as root and as the named user"
sbx-exec "$r" -- test -e /etc/hostname; is "$?" 1 "what a step removed is gone"
is "$(sbx-exec "$r" -- stat -c '%U %a' /workspace/uid /tmp | tr '\n' ' ')" "user 644 root 1777 " "owners and modes kept"
is "$(sbx-exec "$r" -- sh -c 'ls /bin | wc -l')" "$(sbx-exec "$id" -- sh -c 'ls /bin | wc -l')" \
	"the rest of the root is as the base's"
sbx-kill "$r" >/dev/null

# --- list, inspect ---------------------------------------------------------------
is "$(sbx-template list -q web)" "$ref" "list -q NAME"
like "$(sbx-template list --no-headers | grep '^web')" "^web	$v	operator	[^	]+	no	1	" \
	"list: a line per template, in use by the session"
is "$(sbx-template list --json web | jq -r '.[0].used_by[0]')" "session:$id" "list --json says who uses it"
sbx-template list nosuch >/dev/null 2>&1; is "$?" 4 "list of an unknown name exits 4"
j=$(sbx-template inspect --json web)
is "$(jq -r '.template + " " + .owner + " " + (.size_bytes > 0 | tostring)' <<<"$j")" "$ref operator true" "inspect --json"
is "$(jq -r '.content_sha256 | length' <<<"$j")" 64 "with the content hash"
is "$(jq -r '.used_by[0]' <<<"$j")" "session:$id" "and who uses it"
like "$(sbx-template inspect "$ref")" "env	GREETING=hello" "inspect NAME@VERSION as text"
sbx-template inspect web@000000000000 >/dev/null 2>&1; is "$?" 4 "inspect of an unknown version exits 4"
is "$(sbx-snapshot template list -q web)" "$ref" "sbx-snapshot template list is the same listing"

# --- rm and prune ----------------------------------------------------------------
bad 5 "in use by session:$id" "rm of a version in use" -- rm "$ref"
spec web2.yaml 'from: default\nenv: {V: "2"}\n'
spec web3.yaml 'from: default\nenv: {V: "3"}\n'
r2=$(sbx-template build web -f "$S/web2.yaml"); ok $? "a second version ($r2)"
r3=$(sbx-template build web -f "$S/web3.yaml"); ok $? "a third ($r3)"
is "$(sbx-template list -q web | wc -l)" 3 "three versions listed"
is "$(sbx-template prune)" "$r2" "prune removes the old unused version only"
is "$(sbx-template list -q web | sort | tr '\n' ' ')" "$(printf '%s\n' "$ref" "$r3" | sort | tr '\n' ' ')" \
	"keeping the newest and the one in use"
is "$(sbx-template prune --json | jq -c .removed)" "[]" "a second prune has nothing to do"
[ -L "$T/$(basename "$(ls -d "$T"/default@*)")" ]; ok $? "the default template is untouched"
sbx-kill "$id" >/dev/null
is "$(sbx-template rm --json "$ref" | jq -r '.removed[0]')" "$ref" "rm once the session is gone"
sbx-template rm web run >/dev/null; ok $? "rm NAME removes every version"
is "$(ls -d "$T"/web@* 2>/dev/null)" "" "and they are gone"
grep -q '"type":"template.rm".*"template":"'"$r3"'"' "$L/audit.log"; ok $? "removals are audited"

# --- bad input: specs ----------------------------------------------------------------
spec unknown.yaml 'from: default\npackges: [git]\n'
bad 3 "unknown.yaml:2:1: unknown key 'packges'" "a spec with an unknown key" -- build x -f "$S/unknown.yaml"
spec dup.yaml 'from: default\nuser: user\nuser: root\n'
bad 3 "dup.yaml:3:1: duplicate key 'user'" "a duplicate key" -- build x -f "$S/dup.yaml"
spec esc.yaml 'from: default\nfiles: [{src: ../outside/secret, dst: /etc/secret}]\n'
bad 3 "esc.yaml:2:15: files\\[0\\].src: '../outside/secret' must not leave the spec's directory" \
	"files.src with .." -- build x -f "$S/esc.yaml"
ln -s "$TEST_TMP/outside" "$S/link-out"
spec link.yaml 'from: default\nfiles: [{src: link-out/secret, dst: /etc/secret}]\n'
bad 3 "src 'link-out/secret' leaves the spec's directory" "files.src through a symlink out" -- build x -f "$S/link.yaml"
spec abs.yaml 'from: default\nfiles: [{src: /etc/shadow, dst: /etc/x}]\n'
bad 3 "must be relative" "an absolute files.src" -- build x -f "$S/abs.yaml"
spec nosrc.yaml 'from: default\nfiles: [{src: missing, dst: /etc/x}]\n'
bad 3 "src 'missing' cannot be opened" "a files.src that does not exist" -- build x -f "$S/nosrc.yaml"
spec dst.yaml 'from: default\nfiles: [{src: tools, dst: /opt/../../etc}]\n'
bad 3 "'.' or '..'" "files.dst with .." -- build x -f "$S/dst.yaml"
spec suid.yaml 'from: default\nfiles: [{src: tools/hi.txt, dst: /bin/x, mode: "4755"}]\n'
bad 3 "setuid and setgid bits are not allowed" "a setuid mode" -- build x -f "$S/suid.yaml"
spec nouser.yaml 'from: default\nuser: nobody2\n'
bad 3 "user 'nobody2' is not root, user, a uid or a user of the root's /etc/passwd" "a user the root does not have" \
	-- build x -f "$S/nouser.yaml"
spec kern.yaml 'from: busybox\nkernel: linux-image-amd64\n'
bad 3 "kern.yaml:2:9: kernel: 'linux-image-amd64' is not a kernel sbx boots" "a kernel: sbx cannot boot" \
	-- build x -f "$S/kern.yaml"
spec rmgone.yaml 'from: default\nremove: [/bin/sh, /no/such/file]\n'
bad 3 "remove: /no/such/file is not in the root" "a remove: path the root does not have" -- build x -f "$S/rmgone.yaml"
spec rmlink.yaml 'from: default\nremove: [/bin/sh/x]\n'
bad 3 "/bin/sh is a symbolic link; refusing" "a remove: path through a symbolic link" -- build x -f "$S/rmlink.yaml"
spec bbpkg.yaml 'from: busybox\npackages: [jq]\n'
bad 3 "the base has no apt-get" "packages: on the busybox root" -- build x -f "$S/bbpkg.yaml"
spec nobase.yaml 'from: nosuch\n'
bad 4 "no template 'nosuch'" "from: a template that does not exist" -- build x -f "$S/nobase.yaml"
spec trick.yaml 'from: ../default\n'
bad 3 "must be debian:SUITE, busybox or TEMPLATE" "from: a path" -- build x -f "$S/trick.yaml"
spec fail.yaml 'from: default\nrun: ["echo made-it > /etc/one", "echo step-output-here; echo to-stderr >&2; exit 7", "touch /etc/never"]\n'
bad 3 "run\\[1\\]: echo step-output-here.* exited 7: .*step-output-here.*to-stderr" \
	"a run: step that fails (its output shown)" -- build x -f "$S/fail.yaml"
is "$(sbx-ps -q)" "" "and its build VM is gone"
spec runu.yaml 'from: default\nrun: [{cmd: "id", user: nosuch}]\n'
bad 3 "run\\[0\\]: no user 'nosuch'" "a run: step as a user the root lacks" -- build x -f "$S/runu.yaml"
spec nopkg.yaml 'from: default\npackages: [jq]\n'
bad 3 "the base has no apt-get" "packages on a root without apt" -- build x -f "$S/nopkg.yaml"
bad 3 "cannot read template spec" "a spec that does not exist" -- build x -f "$S/none.yaml"
bad 3 "not a regular file" "a directory as the spec" -- build x -f "$S"
head -c 300000 /dev/zero | tr '\0' '#' >"$S/big.yaml"
bad 3 "larger than 256 KiB" "a spec over the size limit" -- build x -f "$S/big.yaml"

# --- bad input: names and usage ---------------------------------------------------------
for n in ../x .hidden -x 'a/b' 'a@b' "$(head -c 70 /dev/zero | tr '\0' a)"; do
	bad 3 "invalid template" "the name '$n'" -- build -f "$S/web2.yaml" -- "$n"
done
bad 2 "build takes NAME and -f SPEC" "build without -f" -- build x
bad 2 "unknown command" "an unknown verb" -- frobnicate
bad 2 "import takes NAME FILE" "import without a file" -- import x
bad 3 "cannot read" "import of a file that does not exist" -- import x "$S/none.tar"
bad 2 "bad --keep" "prune --keep -1" -- prune --keep -1
bad 4 "no template 'nosuch'" "rm of an unknown template" -- rm nosuch
bad 3 "invalid (template|tenant)" "rm of a path" -- rm ../default
mkdir -p "$(dirname "$CONF")"
# A tenant's spec is read from its own host_paths only (t1820 has the rest).
printf 'templates:\n  publishers: [b]\nhost_paths:\n  read: ["%s"]\n' "$S" >"$CONF"
bad 3 "tenant a is not in templates.publishers" "a build by a tenant that may not publish" -- \
	build --tenant a x -f "$S/web2.yaml"
bad 3 "belongs to the operator" "a tenant's build never shadows an operator template" -- \
	build --tenant b default -f "$S/web2.yaml"
rb=$(sbx-template build --tenant b mine -f "$S/web2.yaml"); ok $? "a publisher builds into its own templates"
[ -f "$T/tenants/b/$rb/manifest.json" ] && is "$(jq -r .owner "$T/tenants/b/$rb/manifest.json")" b "owned by it"
is "$(sbx-template list --tenant b -q mine)" "b/$rb" "and lists it as b/NAME"
sbx-template list --tenant a -q b/mine >/dev/null 2>&1; is "$?" 4 "another tenant cannot see it (4)"
rm -f "$CONF"

# --- Debian packages (apt from the host's archive) ------------------------------------
if [ -n "$PY" ]; then
	spec missing.yaml 'from: python\npackages: [sbx-no-such-package]\n'
	bad 3 "E: Unable to locate package sbx-no-such-package" "a package Debian does not have: apt's own message" -- \
		build x -f "$S/missing.yaml"
	spec jq.yaml 'from: python\npackages: [jq]\n'
	rj=$(sbx-template build jq -f "$S/jq.yaml"); ok $? "a python-based template with jq from the archive ($rj)"
	like "$(jq -r '.packages[] | select(.name == "jq") | .version' "$T/$rj/manifest.json")" '^[0-9]' \
		"the manifest lists jq with its version"
	id=$(sbx-create -q -t jq)
	is "$(sbx-exec "$id" -- sh -c 'echo "{\"a\":41}" | jq ".a + 1"')" 42 "jq runs in a session"
	is "$(sbx-exec "$id" -- stat -c %a /tmp)" 1777 "the base's special bits survive (sticky /tmp)"
	sbx-kill "$id" >/dev/null

	# --- a build killed midway ---------------------------------------------------------
	listing >"$TEST_TMP/before"
	spec slow.yaml 'from: python\nfiles: [{src: tools, dst: /opt/tools}]\n'
	sbx-template build slow -f "$S/slow.yaml" >/dev/null 2>&1 &
	bp=$!
	for _ in $(seq 200); do ls -a "$T" | grep -q '^\.tmp-build-' && break; sleep 0.05; done
	w=$(ls -a "$T" | grep '^\.tmp-build-slow-'); ok $? "the build works in a hidden directory ($w)"
	kill -9 "$bp"; wait "$bp" 2>/dev/null
	is "$(ls "$T" | grep -c '^slow@')" 0 "a build killed with SIGKILL publishes nothing"
	sbx-template list -q slow >/dev/null 2>&1; is "$?" 4 "and nothing is listed"
	# Its steps die with it or finish; then the directory is unlocked and sbx-gc takes it.
	for _ in $(seq 300); do
		sbx-gc --grace 0 >/dev/null 2>&1
		[ -e "$T/$w" ] || break
		sleep 0.1
	done
	[ ! -e "$T/$w" ]; ok $? "sbx-gc reclaims its work directory"
	same_dir "the templates directory is as before"
fi

# --- a build killed while its build VM runs a step ----------------------------------------
listing >"$TEST_TMP/before"
spec hang.yaml 'from: default\nrun: ["sleep 600"]\n'
sbx-template build hang -f "$S/hang.yaml" >/dev/null 2>&1 &
bp=$!
vm=
for _ in $(seq 600); do vm=$(sbx-ps -q | grep '^tmplbuild-') && break; sleep 0.1; done
like "$vm" '^tmplbuild-' "the build VM is a session while it runs ($vm)"
# Killed only once the step runs: a build killed while its VM still boots
# leaves nothing for gc (the monitor abandons a boot nobody waits for).
for _ in $(seq 1200); do
	[ -n "$vm" ] && [ "$(sbx-ps --json --execs "$vm" 2>/dev/null | jq -r '[.[] | select(.state == "running")] | length')" = 1 ] &&
		break
	sleep 0.1
done
is "$(sbx-ps --json --execs "$vm" | jq -r '[.[] | select(.state == "running")] | length')" 1 "its step is running"
sbx-gc --grace 0 >/dev/null 2>&1
is "$(sbx-ps -q | grep -c '^tmplbuild-')" 1 "sbx-gc leaves a live build's VM alone"
kill -9 "$bp"; wait "$bp" 2>/dev/null
for _ in $(seq 100); do
	sbx-gc --grace 0 >/dev/null 2>&1
	[ -z "$(sbx-ps -q | grep '^tmplbuild-')" ] && ! ls -a "$T" | grep -q '^\.tmp-build-' && break
	sleep 0.2
done
is "$(sbx-ps -q | grep -c '^tmplbuild-')" 0 "once the build is killed, sbx-gc destroys its VM"
ls -a "$T" | grep -q '^\.tmp-build-'; ok $((!$?)) "and reclaims its work directory"
same_dir "the templates directory is as before"
grep -q '"what":"reclaim-build-vm"' "$L/audit.log"
ok $? "the reclaim is audited"

# --- two builds of one name ----------------------------------------------------------------
spec p1.yaml 'from: default\nenv: {P: "1"}\n'
spec p2.yaml 'from: default\nenv: {P: "2"}\n'
sbx-template build par -f "$S/p1.yaml" >"$TEST_TMP/p1" 2>&1 &
a=$!
sbx-template build par -f "$S/p2.yaml" >"$TEST_TMP/p2" 2>&1
rc2=$?
wait "$a"
rc1=$?
is "$rc1 $rc2" "0 0" "two builds of one name at once both succeed"
is "$(sbx-template list -q par | sort | tr '\n' ' ')" "$(sort "$TEST_TMP/p1" "$TEST_TMP/p2" | tr '\n' ' ')" \
	"and both versions are complete and listed"
for r in $(cat "$TEST_TMP/p1" "$TEST_TMP/p2"); do
	is "$(jq -r .env.P "$T/$r/manifest.json")" "$(grep -l "$r" "$TEST_TMP/p1" >/dev/null && echo 1 || echo 2)" \
		"$r has its own spec's env"
done
ls -a "$T" | grep -q '^\.tmp-build-'; ok $((!$?)) "no work directory is left"

# --- the helper's read of a template leaves no mount point -----------------------------------
# The helper SIGKILLed while it streams a template (as a killed build's
# is): nothing of it may be left on the host.  Before, each such kill left
# a /tmp/sbx-tpl-mnt.XXXXXX directory behind (70 in a day of test runs).
H=$SBX_BUILD/libexec/sbx/sbx-template-helper
img=$(ls -d "$T"/default@* | head -n1)/rootfs.ext4 # $T: SBX_TEMPLATES (not in build-asan/)
ls -d /tmp/sbx-tpl-mnt.* 2>/dev/null | sort >"$TEST_TMP/mnt.before"
{ "$H" tar-template "$img" & p=$!; } > >(sleep 1; wc -c >"$TEST_TMP/partial")
sleep 0.3
kill -9 "$p"
wait "$p" 2>/dev/null
for _ in $(seq 300); do [ -s "$TEST_TMP/partial" ] && break; sleep 0.1; done
[ "$(cat "$TEST_TMP/partial" 2>/dev/null || echo 0)" -gt 0 ]
ok $? "the helper was streaming the template when it was killed"
ls -d /tmp/sbx-tpl-mnt.* 2>/dev/null | sort >"$TEST_TMP/mnt.after"
is "$(comm -13 "$TEST_TMP/mnt.before" "$TEST_TMP/mnt.after")" "" "a template read SIGKILLed midway leaves no directory in /tmp"
is "$("$H" tar-template "$img" | tar -tf - | grep -c '^./etc/passwd$')" 1 "and a whole read still lists the template's files"

done_testing
