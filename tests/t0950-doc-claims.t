#!/bin/bash
# The docs' most load-bearing claims, kept honest where a grep can (issue
# 36, item 7; the requirements audit found each of these wrong once): what
# a policy may ask for, which VMMs there are, what the monitor sends, what
# is jailed, what the VMM can write.
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/.." && pwd)
# sbx-policy(5)'s count of top-level keys and its list are policy.c's.
keys=$(sed -n '/^static const struct key root_keys\[\] = {/,/^};/p' "$top/common/policy.c" |
	grep -o '\.name = "[a-z_]*"' | cut -d'"' -f2)
n=$(printf '%s\n' "$keys" | grep -c .)
words=(zero one two three four five six seven eight nine ten eleven twelve)
grep -q "The file is one YAML mapping with up to ${words[$n]} keys:" "$top/man/sbx-policy.5"
ok $? "sbx-policy(5) counts the policy's $n top-level keys"
listed=$(sed -n '/The file is one YAML mapping with up to/,/^and$/p;/^and$/{n;p;q}' "$top/man/sbx-policy.5" |
	sed -n 's/^\.Ic \([a-z_]*\).*/\1/p' | sort | tr '\n' ' ')
is "$listed" "$(printf '%s\n' "$keys" | sort | tr '\n' ' ')" "and lists exactly them"
# A policy with egress and package allowlists is taken: json.md must not
# call either refused.
cat >"$TEST_TMP/p.yaml" <<'Y'
network: {egress: allowlist, allow: [{domain: example.org, ports: [443]}]}
packages: {mode: allowlist, registries: [{type: pypi, url: "https://pypi.org/simple/"}]}
Y
sbx-create --dry-run -q -p "$TEST_TMP/p.yaml" >/dev/null 2>&1; ok $? "an egress and package allowlist policy is taken"
grep -E '^\| `(network\.egress|packages\.mode)` .*refused' "$top/docs/json.md" >/dev/null; is "$?" 1 \
	"json.md calls neither refused"
# json.md names every VMM backend there is.
for v in $(grep -ho '^	\.name = "[a-z-]*",' "$top"/common/vmm_*.c | cut -d'"' -f2); do
	grep -E '^\| `vmm` \| string \|' "$top/docs/json.md" | grep -q "\"$v\""; ok $? "json.md's vmm names $v"
done
# The monitor sends SHUTDOWN to a guest: design.md's protocol table says so.
grep -q 'SBX_F_SHUTDOWN' "$top"/monitor/*.c; ok $? "the monitor sends SHUTDOWN"
grep -E '^\| 16 \| SHUTDOWN' "$top/docs/design.md" | grep -q 'not sent'; is "$?" 1 "design.md does not say it is not sent"
# The monitor is split (monitor/priv.c): nothing says it is not jailed.
grep -qi 'monitor itself is not jailed' "$top/man/sbx.7" "$top/docs/design.md"; is "$?" 1 \
	"no page says the monitor is not jailed"
# The VMM writes its workspace too.
grep -q "It can write only the session's scratch disk;" "$top/man/sbx.7"; is "$?" 1 \
	"sbx(7) does not say the VMM writes only the scratch disk"
# qmp.sock is used (pause, save, suspend).
grep -q 'qmp.sock.*unused' "$top/docs/design.md"; is "$?" 1 "design.md does not call qmp.sock unused"
done_testing
