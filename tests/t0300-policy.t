#!/bin/bash
# Policies: the shipped ones load and say what they should, the command
# line overrides them, and hostile files exit 3 quickly and create nothing.
# --dry-run needs no VM.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
POL=$(cd "$(dirname "$0")/.." && pwd)/policies

snapshot() { (cd "$SBX_ROOT" && find . -path ./tmp -prune -o -print | sort); }
dry() { sbx-create --dry-run --json "$@"; }
ms() { date +%s%3N; }

# The shipped policies.
for p in default strict coding-agent; do
	dry -p "$POL/$p.yaml" >"$TEST_TMP/$p.json"; is "$?" 0 "$p.yaml loads"
done
is "$(jq -c '[.resources.vcpus, .resources.memory, .network.egress, .packages.mode, .network.allow]' "$TEST_TMP/default.json")" \
   '[1,268435456,"none","offline",[]]' "default: 1 vcpu, 256M, no network, offline"
is "$(jq -r .source "$TEST_TMP/default.json")" "$POL/default.yaml" "the JSON names its source"
is "$(jq -c '[.resources.vcpus, .resources.memory, .network.egress, .packages.mode]' "$TEST_TMP/strict.json")" \
   '[1,268435456,"none","offline"]' "strict: 1 vcpu, 256M, offline"
jq -e '.resources.disk <= 268435456 and .resources.ttl <= 3600000 and .resources.exec_timeout.max <= 600000
       and .resources.pids.per_session <= 256 and .resources.require_kvm' "$TEST_TMP/strict.json" >/dev/null
ok $? "strict: small disk, short ttl and timeouts, few pids, KVM required"
is "$(jq -c '[.resources.vcpus, .resources.memory, .network.egress]' "$TEST_TMP/coding-agent.json")" \
   '[2,1073741824,"allowlist"]' "coding-agent: 2 vcpus, 1G, egress allowlist"
is "$(jq -c '[.network.allow[] | .domain, .ports]' "$TEST_TMP/coding-agent.json")" \
   '["pypi.org",[443],"files.pythonhosted.org",[443],"registry.npmjs.org",[443]]' \
   "coding-agent: PyPI, its file host and npm on 443"
is "$(jq -c '[.packages.mode, [.packages.registries[].type]]' "$TEST_TMP/coding-agent.json")" \
   '["allowlist",["pypi","npm"]]' "coding-agent: pypi and npm registries"

# Defaults without -p; text output is JSON too.
out=$(sbx-create --dry-run); is "$?" 0 "--dry-run without -p"
is "$(printf '%s' "$out" | jq -c '[.source, .resources.vcpus, .resources.ttl, .resources.exec_timeout.default]')" \
   '[null,1,3600000,600000]' "prints the defaults (durations in ms)"

# The command line wins over the file.
is "$(dry -p "$POL/coding-agent.yaml" --cpus 4 --memory 2048 --disk 8G --ttl 30m |
      jq -c '[.resources.vcpus, .resources.memory, .resources.disk, .resources.ttl, .resources.cpu_limit]')" \
   '[4,2147483648,8589934592,1800000,4]' "--cpus, --memory, --disk, --ttl override the policy"
is "$(dry -p "$POL/strict.yaml" --ttl 0 | jq .resources.ttl)" 0 "--ttl 0 is no lifetime limit"
sbx-create --dry-run --disk 5X 2>"$TEST_TMP/err"; is "$?" 2 "a bad --disk is a usage error"
like "$(cat "$TEST_TMP/err")" "^sbx-create: error: --disk: '5X' is not a size" "and says why"
sbx-create --dry-run --disk 1K 2>/dev/null; is "$?" 2 "--disk below range is a usage error"
sbx-create --dry-run --ttl 1h30m 2>/dev/null; is "$?" 2 "a bad --ttl is a usage error"
sbx-create --dry-run --ttl 99999999999999999999d 2>/dev/null; is "$?" 2 "an overflowing --ttl is a usage error"

# Hostile and broken files: exit 3, with or without --dry-run, nothing created.
H=$TEST_TMP/h
mkdir -p "$H"
printf 'resources:\n  vcpus: 2\n  cpuz: 1\n' >"$H/unknown.yaml"
printf 'resources: {vcpus: 1}\nresources: {vcpus: 2}\n' >"$H/duplicate.yaml"
printf 'resources: &r {vcpus: 1}\n' >"$H/anchor.yaml"
printf 'resources: {vcpus: !!int 1}\n' >"$H/tag.yaml"
printf 'resources: {}\n---\nresources: {}\n' >"$H/two-docs.yaml"
printf 'resources: {vcpus: [1]}\n' >"$H/type.yaml"
printf 'resources: {vcpus: 65}\n' >"$H/range.yaml"
printf 'resources: {memory: 99999999999999999999G}\n' >"$H/overflow.yaml"
printf 'resources: {require_kvm: yes}\n' >"$H/yes.yaml"
printf 'network: {allow: [{domain: pypi.org}]}\n' >"$H/allow-none.yaml"
printf 'resources: {vcpus: 1}\0\n' >"$H/nul.yaml"
printf 'resources: {vcpus: \xff}\n' >"$H/utf8.yaml"
head -c 65536 /dev/urandom >"$H/garbage.yaml"
{
	echo 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
	prev=a
	for n in b c d e f g h i; do
		printf '%s: &%s [' $n $n; for k in 1 2 3 4 5 6 7 8; do printf '*%s,' $prev; done; printf '*%s]\n' $prev
		prev=$n
	done
} >"$H/laughs.yaml"
printf 'resources: &r {vcpus: 1}\nnetwork: *r\n' >"$H/laughs-known-keys.yaml"
{ printf 'resources: '; head -c 100000 /dev/zero | tr '\0' '['; head -c 100000 /dev/zero | tr '\0' ']'; echo; } >"$H/nested.yaml"
{ head -c 100000 /dev/zero | tr '\0' '['; head -c 100000 /dev/zero | tr '\0' ']'; echo; } >"$H/nested-top.yaml"
{ printf 'resources: {}\n'; head -c $((1048576 + 1 - 14)) /dev/zero | tr '\0' '#'; } >"$H/big.yaml"
mkdir "$H/dir.yaml"
mkfifo "$H/fifo.yaml"

before=$(snapshot)
for f in "$H"/*.yaml; do
	b=$(basename "$f")
	t0=$(ms)
	timeout 10 sbx-create --dry-run -p "$f" >/dev/null 2>"$TEST_TMP/err"; rc=$?
	t1=$(ms)
	is "$rc" 3 "$b: --dry-run exits 3"
	timeout 10 sbx-create -q -p "$f" >/dev/null 2>&1; rc=$?
	is "$rc" 3 "$b: create exits 3"
	case $b in laughs*|nested*|big*|garbage*)
		[ $((t1 - t0)) -lt 2000 ]; ok $? "$b: refused in $((t1 - t0)) ms";;
	esac
done
is "$(snapshot)" "$before" "hostile policies created nothing under SBX_ROOT"
[ ! -d "$SBX_ROOT/var/lib/sbx/sessions" ] || [ -z "$(ls "$SBX_ROOT/var/lib/sbx/sessions")" ]
ok $? "no session directories"
is "$(stat -c %s "$H/big.yaml")" 1048577 "the big file is 1 MiB + 1"

msg() { sbx-create --dry-run -p "$1" 2>&1 >/dev/null; }
cd "$H" || exit 1
is "$(msg unknown.yaml)" \
   "sbx-create: error: unknown.yaml:3:3: unknown key 'cpuz' in resources (expected one of: vcpus, memory, disk, cpu_limit, pids, exec_memory, exec_timeout, ttl, output_cap, output_session_cap, require_kvm, disk_bps, disk_iops)" \
   "an unknown key is named with file:line:col and the keys allowed"
like "$(msg duplicate.yaml)" "^sbx-create: error: duplicate.yaml:2:1: duplicate key 'resources'" "duplicate key position"
like "$(msg anchor.yaml)" "anchor.yaml:1:12: anchors are not allowed" "anchor position"
like "$(msg laughs-known-keys.yaml)" "laughs-known-keys.yaml:1:12: anchors are not allowed" \
     "billion laughs is refused at the first anchor"
like "$(msg two-docs.yaml)" "two-docs.yaml:2:1: only one YAML document" "second document position"
like "$(msg nul.yaml)" "nul.yaml:1:22: NUL byte" "NUL byte position"
like "$(msg nested.yaml)" "nested.yaml:1:12: resources: expected a mapping, got a list" "deep nesting: refused at once"
like "$(msg big.yaml)" "larger than 1 MiB" "1 MiB + 1 is too big"
like "$(msg dir.yaml)" "not a regular file" "a directory is not a regular file"
like "$(msg fifo.yaml)" "not a regular file" "a FIFO is not a regular file (and open did not block)"
like "$(msg missing.yaml)" "cannot read policy missing.yaml: No such file or directory" "a missing file"
sbx-create --dry-run -p missing.yaml 2>/dev/null; is "$?" 3 "a missing file exits 3"
ln -s "$POL/strict.yaml" link.yaml
is "$(dry -p link.yaml | jq .resources.require_kvm)" true "a symlink to a policy is followed"
is "$(sbx-create --json --dry-run -p yes.yaml 2>&1 >/dev/null | jq -c '[.code, .error, .kind]')" '[3,"invalid","user"]' \
   "--json reports policy errors as JSON"
# A usage error wins over a broken file: the command line is checked first.
sbx-create --dry-run -p unknown.yaml --disk nope 2>/dev/null; is "$?" 2 "bad --disk with a bad policy exits 2"
done_testing
