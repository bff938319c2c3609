#!/bin/bash
# --json, everywhere: docs/json.md's tables match docs/schema/, and every
# JSON output of every command, run on real sessions, matches its schema
# with --strict (no member missing, none undocumented, every type right).
. "$(dirname "$0")/lib.sh"
if declare -F require_vm >/dev/null; then require_vm; else have_template || skip_all "no template built (make image)"; fi
command -v jq >/dev/null || skip_all "jq not installed"
command -v python3 >/dev/null || skip_all "python3 not installed"
top=$(cd "$(dirname "$0")/.." && pwd)
T=$TEST_TMP
# `cmd | check ...` runs check in this shell, so its test count sticks.
shopt -s lastpipe

# check REF DESCRIPTION [--lines] <JSON: validate standard input against
# docs/schema/REF, strictly; the checker's complaints as diagnostics.
check() {
	local out rc
	out=$(python3 "$top/tests/tools/json-schema-check.py" validate --strict ${3:-} "$top/docs/schema" "$1" 2>&1)
	rc=$?
	ok $rc "$2"
	[ $rc -eq 0 ] || printf '%s\n' "$out" | head -20 | sed 's/^/#   /'
}
# err DESCRIPTION WANT-STATUS COMMAND...: an error, as JSON on stderr.
err() {
	local what=$1 want=$2 rc
	shift 2
	"$@" >/dev/null 2>"$T/err.json"; rc=$?
	is "$rc" "$want" "$what exits $want"
	check error.json "$what: the error on stderr" --lines <"$T/err.json"
	is "$(jq -s '[.[] | .code] | unique | join(",")' -r <"$T/err.json")" \
		"$([ "$1" = sbx-exec ] && [ "$want" = 125 ] && echo 75 || echo "$want")" "$what: code is the status"
}

out=$(python3 "$top/tests/tools/json-schema-check.py" doc "$top/docs/schema" "$top/docs/json.md" 2>&1)
ok $? "docs/json.md's tables and docs/schema/ agree"
[ -z "$out" ] || printf '%s\n' "$out" | head -20 | sed 's/^/#   /'

# Three sessions, one after the other (parallel boots under TCG on a busy
# host can pass the boot timeout): j1 for most, j2 is powered off from
# inside, j3 expires.
sbx-create --json --id j1 --tenant acme >"$T/create.json" 2>/dev/null
ok $? "sbx-create --json exits 0"
check create.json "sbx-create --json" <"$T/create.json"
sbx-create --json --id j1 --tenant acme 2>/dev/null | tee "$T/again.json" | check create.json "sbx-create --json, idempotent"
is "$(jq -r '[.session, .id, .existed] | join(" ")' <"$T/again.json")" "j1 j1 true" "the same session, existed"
sbx-create -q --id j2 >/dev/null 2>"$T/j2.err"; ok $? "second session created"
sbx-create -q --id j3 --ttl 15s >/dev/null 2>"$T/j3.err"; ok $? "third session created"

# sbx-create --dry-run: defaults, a shipped policy, and one with every kind
# of list entry (allowlists are parsed; only a real create refuses them).
sbx-create --dry-run --json | check policy.json "sbx-create --dry-run --json (defaults)"
sbx-create --dry-run | check policy.json "sbx-create --dry-run, indented"
cat >"$T/full.yaml" <<'EOF'
network:
  egress: allowlist
  allow:
    - {domain: example.org, ports: [443]}
    - {cidr: 203.0.113.0/24, ports: [80, 443]}
packages:
  mode: allowlist
  registries:
    - {type: pypi, url: "https://pypi.org/simple"}
secrets:
  - {name: TOKEN, from_env: SBX_TEST_TOKEN}
EOF
echo value >"$T/key"
sbx-create --dry-run --json -p "$T/full.yaml" --secret KEY=@"$T/key" |
	check policy.json "sbx-create --dry-run -p (allowlists, secrets from env and file)"
sbx-create --dry-run --json -p "$top/policies/coding-agent.yaml" | check policy.json "sbx-create --dry-run -p coding-agent.yaml"

# sbx-exec: attached, detached, --wait.
sbx-exec --json j1 -- sh -c 'echo out; echo err >&2; exit 3' >"$T/exec.json"
is "$?" 3 "sbx-exec --json exits with the command's status"
check exec-result.json "sbx-exec --json" <"$T/exec.json"
sbx-exec --json -e SBX_X=1 -w /tmp -u root j1 -- true | check exec-result.json "sbx-exec --json -e -w -u"
sbx-exec -d --json j1 -- sleep 1 >"$T/detached.json"
check exec-detached.json "sbx-exec -d --json" <"$T/detached.json"
e=$(jq -r .exec <"$T/detached.json")
sbx-exec --wait "$e" --json j1 | check exec-result.json "sbx-exec --wait --json"

# sbx-snapshot: pause, resume, save, list, rm (where it is built).
snaps=
if command -v sbx-snapshot >/dev/null; then
	# j1 is tenant acme's: its snapshots are too.
	sbx-snapshot pause --tenant acme --json j1 | check snapshot-state.json "sbx-snapshot pause --json"
	sbx-snapshot resume --tenant acme --json j1 | check snapshot-state.json "sbx-snapshot resume --json"
	sbx-snapshot save --tenant acme --json j1 snap1@1 | check snapshot-save.json "sbx-snapshot save --json"
	sbx-snapshot list --tenant acme --json | check snapshot-list.json "sbx-snapshot list --json"
	is "$(sbx-snapshot list --tenant acme --json | jq length)" 1 "one snapshot listed"
	sbx-snapshot rm --tenant acme --json snap1@1 | check snapshot-rm.json "sbx-snapshot rm --json"
	snaps=session.pause,session.resume,snapshot.rm,snapshot.save
fi
long=$(sbx-exec -d j1 -- sleep 1000)

# sbx-ps: sessions (one with a tenant and a lifetime, one corrupt), execs
# (ended and running), capacity, workspaces.
mkdir -p "$SBX_ROOT/var/lib/sbx/sessions/bad-1"
echo '{"schema":' >"$SBX_ROOT/var/lib/sbx/sessions/bad-1/session.json"
sbx-ps --json >"$T/ps.json"
check ps.json "sbx-ps --json" <"$T/ps.json"
is "$(jq -r '[.[] | select(.state == "corrupt") | .session] | join(",")' <"$T/ps.json")" bad-1 \
	"a corrupt record is listed as such"
is "$(jq -r '.[] | select(.session == "j1") | [.id, .tenant, (.ttl_left_s > 0)] | map(tostring) | join(" ")' <"$T/ps.json")" \
	"j1 acme true" "j1: id and session agree, tenant, ttl_left_s"
sbx-ps --execs j1 --json >"$T/execs.json"
check ps-execs.json "sbx-ps --execs --json" <"$T/execs.json"
is "$(jq -r '[.[].state] | unique | join(",")' <"$T/execs.json")" "ended,running" "ended and running execs both checked"
sbx-ps --capacity --json | check capacity.json "sbx-ps --capacity --json"
if sbx-ps --help | grep -q -- --workspaces; then
	sbx-ps --workspaces --json | check workspaces.json "sbx-ps --workspaces --json"
fi

# sbx-cp: up, down, down to standard output (the object on stderr).
echo hello >"$T/f.txt"
sbx-cp --json "$T/f.txt" j1:/workspace/ | check cp.json "sbx-cp --json (upload)"
tar -cf - -C "$T" f.txt | sbx-cp --json - j1:/tmp | check cp.json "sbx-cp --json - (tar from stdin)"
sbx-cp --json j1:/workspace/f.txt "$T/back" | check cp.json "sbx-cp --json (download)"
sbx-cp --json j1:/workspace/f.txt - 2>"$T/cp-err.json" >/dev/null
check cp.json "sbx-cp --json SESSION:PATH - (the object on stderr)" <"$T/cp-err.json"

# Errors, one of each kind of status.
err "sbx-create --cpus 0" 2 sbx-create --json --cpus 0
err "sbx-kill ../x" 3 sbx-kill --json ../x
err "sbx-exec into no session" 4 sbx-exec --json nosuch -- true
is "$(jq -r .session <"$T/err.json")" nosuch "the error names the session"
err "sbx-ps of two missing sessions" 4 sbx-ps --json nosuch1 nosuch2
is "$(wc -l <"$T/err.json")" 2 "one error line per missing session"
err "sbx-create -t nosuch" 4 sbx-create --json -t nosuch
err "sbx-create without a template directory" 4 env SBX_TEMPLATES="$T/none" sbx-create --json
is "$(jq -r .errno <"$T/err.json")" "No such file or directory" "errno is the error's text"
err "sbx-create with --id of another spec" 5 sbx-create --json --id j1 --memory 512
err "sbx-create without a VMM" 69 env SBX_QEMU="$T/no-qemu" sbx-create --json
is "$(jq -r .kind <"$T/err.json")" platform "69 is a platform error"
err "sbx-create on a full host" 75 env SBX_MAX_SESSIONS=1 sbx-create --json
is "$(jq -r .retry_after_ms <"$T/err.json")" 5000 "75 at capacity says when to retry"
err "sbx-exec --wait past its timeout" 125 sbx-exec --json --wait "$long" --timeout 100ms j1
err "sbx-audit --type BAD" 3 sbx-audit --json --type 'Bad!'

# j2 powered off from inside: its exec is lost, the session stopped.
sbx-exec --json -u root j2 -- poweroff -f >"$T/lost.json" 2>/dev/null
is "$?" 125 "an exec whose guest powers off exits 125"
check exec-result.json "sbx-exec --json of a lost exec" <"$T/lost.json"
for i in $(seq 100); do [ "$(sbx-ps --json j2 | jq -r '.[0].state')" = stopped ] && break; sleep 0.1; done
sbx-ps --json j2 | check ps.json "sbx-ps --json of a stopped session (end_reason)"
sbx-kill --json j2; ok $? "sbx-kill --json of the stopped session"

# j3 reaches its lifetime; sbx-gc reclaims it and the corrupt record.
for i in $(seq 600); do [ "$(sbx-ps --json j3 | jq -r '.[0].state')" = expired ] && break; sleep 0.1; done
is "$(sbx-ps --json j3 | jq -r '.[0].state')" expired "j3 expired"
sbx-gc --json --grace 0 --dry-run | check gc.json "sbx-gc --json --dry-run"
sbx-gc --json --grace 0 >"$T/gc.json"
check gc.json "sbx-gc --json" <"$T/gc.json"
is "$(jq -r '[.actions[].session] | sort | join(",")' <"$T/gc.json")" "bad-1,j3" "it reclaimed j3 and the corrupt record"
sbx-gc --json --grace 0 | check gc.json "sbx-gc --json with nothing to do"
sbx-kill j1; ok $? "sbx-kill j1"

# sbx-audit: every record so far (create, exec, copy, stop, expire,
# destroy both ways, gc), as an array and as lines; verify.
sbx-audit --json >"$T/audit.json"
check audit.json "sbx-audit --json" <"$T/audit.json"
want=$(tr ',' '\n' <<<"exec.end,exec.start,files.download,files.upload,gc.reclaim,session.create,session.destroy,session.expire,session.stop${snaps:+,$snaps}" | sort | paste -sd,)
is "$(jq -r '[.[].type] | unique | join(",")' <"$T/audit.json")" "$want" "every kind of record the test caused was checked"
sbx-audit --jsonl | check audit.json#/\$defs/record "sbx-audit --jsonl" --lines
sbx-audit --json verify | check audit-verify.json "sbx-audit verify --json"

# A torn tail and a refused policy (appended as the commands would), then
# an edited record: audit.repair, policy.refused, and a broken verdict.
r2=$T/r2
mkdir -p "$r2/var/lib/sbx" "$r2/run/sbx"
cp -p "$SBX_ROOT"/var/lib/sbx/audit.* "$r2/var/lib/sbx/"
printf '{"seq":99,"ti' >>"$r2/var/lib/sbx/audit.log"
SBX_ROOT=$r2 "$SBX_BUILD/tools/sbx-audit-append" policy.refused '{"policy":"p.yaml","reason":"egress"}'
SBX_ROOT=$r2 sbx-audit --json --type 'audit.*' | check audit.json "an audit.repair record"
SBX_ROOT=$r2 sbx-audit --json --type policy.refused | check audit.json "a policy.refused record"
sed -i '2s/"time":"2/"time":"3/' "$r2/var/lib/sbx/audit.log"
SBX_ROOT=$r2 sbx-audit --json verify >"$T/broken.json"
is "$?" 1 "verify of an edited trail exits 1"
check audit-verify.json "sbx-audit verify --json of an edited trail" <"$T/broken.json"
# sbx-template, in a root and templates directory of its own (its audit
# records stay out of the trail checked above).
r3=$T/r3
mkdir -p "$r3/tpl"
ln -s "$SBX_TEMPLATES"/default@* "$r3/tpl/"
printf 'from: default\nenv: {A: b}\nuser: user\nworkdir: /workspace\n' >"$r3/a.yaml"
printf 'from: default\nenv: {A: c}\n' >"$r3/b.yaml"
tt() { SBX_ROOT=$r3 SBX_TEMPLATES=$r3/tpl sbx-template "$@"; }
tt build --json t -f "$r3/a.yaml" | check template-build.json "sbx-template build --json"
tt build --json t -f "$r3/b.yaml" >/dev/null
tt list --json | check template-list.json "sbx-template list --json"
tt inspect --json t | check template-inspect.json "sbx-template inspect --json (a built one)"
tt inspect --json default | check template-inspect.json "sbx-template inspect --json (a shipped one)"
tt prune --json | check template-rm.json "sbx-template prune --json"
tt rm --json t | check template-rm.json "sbx-template rm --json"
err "sbx-template build of a bad spec" 3 env SBX_ROOT="$r3" SBX_TEMPLATES="$r3/tpl" sbx-template build --json t -f "$r3/none.yaml"
done_testing
