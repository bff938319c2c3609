#!/bin/bash
# Bash completion (completions/sbx.bash): every option of every command's
# getopt table is offered (so the completion cannot fall behind a new
# flag), option values, session and exec IDs of a real session, templates,
# policy files, sbx-cp's SESSION:PATH; quiet when sbx-ps fails; installed
# with one name per command.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip_all "jq not installed"
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/completions/sbx.bash"
COMP_WORDBREAKS=$' \t\n"\'@><=;|&(:'

# comp LINE: what a TAB at the end of LINE offers, one per line, sorted.
# COMP_WORDS is split as bash splits it: at blanks, and runs of the
# word-break characters the tests use (= : @) are words of their own.
comp() {
	local line=$1 w rest re='^([^=:@]+|[=:@]+)'
	COMP_LINE=$line COMP_POINT=${#line} COMP_WORDS=()
	set -f
	for w in $line; do
		rest=$w
		while [ -n "$rest" ]; do
			[[ $rest =~ $re ]]
			COMP_WORDS+=("${BASH_REMATCH[1]}")
			rest=${rest:${#BASH_REMATCH[1]}}
		done
	done
	set +f
	[[ -z $line || $line == *[[:space:]] ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	_sbx
	[ ${#COMPREPLY[@]} -eq 0 ] || printf '%s\n' "${COMPREPLY[@]}" | sort
}
# has LINE WORD DESCRIPTION: WORD is among what LINE offers.
has() {
	local got
	got=$(comp "$1")
	_n=$((_n + 1))
	if grep -qxF -- "$2" <<<"$got"; then echo "ok $_n - $3"; else
		echo "not ok $_n - $3"; echo "#   '$1<TAB>' offered: $(tr '\n' ' ' <<<"$got")"; echo "#   want: '$2'"
		_fail=$((_fail + 1)); fi
}

# Every option in the getopt table of every command the Makefile installs
# on PATH (not the libexec helpers).  Long options from the struct option
# array, short ones from the optstring.
cmds=$(sed -n 's/^CMDS *= *//p' "$top/Makefile")
[ -n "$cmds" ]; ok $? "the Makefile lists the commands"
for cmd in $cmds; do
	src=$top/cmd/$cmd.c
	longs=$(sed -n 's/^[[:space:]]*{ *"\([a-z0-9-]*\)", *\(no\|required\|optional\)_argument.*/--\1/p' "$src")
	shorts=$(grep -o 'getopt_long([^"]*"[^"]*"' "$src" | sed 's/.*"\(.*\)"/\1/; s/[+:]//g' | fold -w1 | sed 's/^/-/')
	[ -n "$longs" ]; ok $? "$cmd: its getopt table was found"
	offered=$(comp "$cmd -")
	missing=
	for o in $longs $shorts; do
		grep -qxF -- "$o" <<<"$offered" || missing+=" $o"
	done
	is "${missing# }" "" "$cmd: every option of cmd/$cmd.c is completed"
	[ "$(complete -p "$cmd" 2>/dev/null)" = "complete -F _sbx $cmd" ]; ok $? "$cmd: bound to _sbx"
done
complete -p sbx-snapshot >/dev/null 2>&1; ok $? "sbx-snapshot is bound too"

# Options and their values.
is "$(comp 'sbx-ps --st')" "--state" "sbx-ps --st completes to --state"
has 'sbx-ps --state ' crashed "sbx-ps --state offers the states"
is "$(comp 'sbx-ps --state=ru')" "running" "--state=ru: the value after '=' (what readline replaces)"
is "$(comp 'sbx-exec -u r')" "root" "sbx-exec -u offers root"
has 'sbx-audit --type exec.' exec.start "sbx-audit --type offers event types"
is "$(comp 'sbx-audit ver')" "verify" "sbx-audit offers verify"
is "$(comp 'sbx-snapshot ')" "$(printf '%s\n' fork list pause resume rm save suspend template)" "sbx-snapshot offers its subcommands"
is "$(comp 'sbx-snapshot template ')" "$(printf '%s\n' list rm)" "and template's"
is "$(comp 'sbx-template ')" "$(printf '%s\n' build import inspect list prune rm)" "sbx-template offers its subcommands"
is "$(comp 'sbx-create --cpus ')" "" "free-form values (--cpus) offer nothing"
mkdir -p "$TEST_TMP/pol/dir"
touch "$TEST_TMP/pol/a.yaml" "$TEST_TMP/pol/b.yml" "$TEST_TMP/pol/c.txt"
is "$(cd "$TEST_TMP/pol" && comp 'sbx-create -p ')" "$(printf '%s\n' a.yaml b.yml dir/)" \
	"-p offers policy files (*.yaml, *.yml) and directories"
is "$(cd "$TEST_TMP/pol" && comp 'sbx-create --policy=a')" "a.yaml" "--policy=FILE too"
is "$(cd "$TEST_TMP/pol" && comp 'sbx-create -v d')" "dir/" "-v offers host directories only"
has "sbx-create --secret TOKEN=@$TEST_TMP/pol/c" "$TEST_TMP/pol/c.txt" "--secret NAME=@FILE completes the file"

# Templates: SBX_TEMPLATES, else SBX_ROOT/var/lib/sbx/templates, as
# common/template.c looks; NAME and NAME@VERSION, only with a manifest.
if have_template; then
	v=$(basename "$(ls -d "$SBX_TEMPLATES"/default@* | head -1)")
	has 'sbx-create -t ' default "sbx-create -t offers a template's NAME"
	has 'sbx-create -t ' "$v" "and NAME@VERSION"
	has 'sbx-create -t default@' "${v#default@}" "after NAME@, the versions (what readline replaces)"
	has 'sbx-template rm ' "$v" "sbx-template rm offers templates"
	has 'sbx-template inspect ' default "and so does inspect"
fi
mkdir -p "$SBX_ROOT/var/lib/sbx/templates/py@3.11-1" "$SBX_ROOT/var/lib/sbx/templates/half@1"
echo '{}' >"$SBX_ROOT/var/lib/sbx/templates/py@3.11-1/manifest.json"
is "$(SBX_TEMPLATES='' comp 'sbx-create --template ')" "$(printf '%s\n' py py@3.11-1)" \
	"empty SBX_TEMPLATES: SBX_ROOT's templates, none without a manifest"

# Quiet when sbx-ps cannot answer: no candidates, not a byte on stderr.
err=$(SBX_ROOT=not/absolute comp 'sbx-kill ' 2>&1 >/dev/null)
is "$err" "" "nothing on stderr when sbx-ps fails"
is "$(SBX_ROOT=not/absolute comp 'sbx-kill ')" "" "and nothing offered"

# A real session, where one can boot (require_vm, in a subshell, prints a
# skip line when not).
vm_ok() { have_template && { ! declare -F require_vm >/dev/null || [ -z "$(require_vm)" ]; }; }
if vm_ok; then
	id=$(sbx-create -q --id comp-1) || { echo "Bail out! sbx-create failed"; exit 1; }
	sbx-exec "$id" -- true
	has 'sbx-exec ' "$id" "sbx-exec offers a running session"
	has 'sbx-kill comp' "$id" "sbx-kill offers it"
	has 'sbx-ps --execs ' "$id" "sbx-ps --execs offers it"
	has 'sbx-audit --session ' "$id" "sbx-audit --session offers it"
	has 'sbx-cp comp' "$id:" "sbx-cp offers SESSION: (no space after it)"
	has 'sbx-cp ./x comp-1:/w' /workspace/ "sbx-cp SESSION:/w offers the policy's paths (after the colon)"
	has "sbx-kill $id --exec " e1 "sbx-kill --exec offers the session's exec IDs"
	has 'sbx-port comp' "$id" "sbx-port offers a running session"
	sbx-port "$id" 8080 >/dev/null
	has "sbx-port --rm $id " 8080 "sbx-port --rm offers what the session forwards"
	has "sbx-exec --wait e $id" "$id" "and sbx-exec --wait, with the session anywhere"
	PATH=/usr/bin:/bin has "$SBX_BUILD/bin/sbx-kill " "$id" "a command run by path asks the sbx-ps beside it"
	is "$(comp "sbx-exec $id -- ")" "" "nothing is offered for the guest command"
	sbx-kill "$id"
	is "$(comp 'sbx-kill ')" "" "a killed session is no longer offered"
fi

# make install: the file and one name per command.
dest=$TEST_TMP/dest
make -s -C "$top" B="$SBX_BUILD" DESTDIR="$dest" install >"$TEST_TMP/install.out" 2>&1
ok $? "make install DESTDIR=... succeeds"
f=$(find "$dest" -path '*/bash-completion/completions/sbx' | head -1)
[ -n "$f" ] && cmp -s "$f" "$top/completions/sbx.bash"; ok $? "the completion is installed as .../bash-completion/completions/sbx"
missing=
for c in sbx-create sbx-exec sbx-ps sbx-kill sbx-cp sbx-gc sbx-audit sbx-snapshot sbx-template sbx-port sbx-oci; do
	[ "$(readlink "${f%/sbx}/$c" 2>/dev/null)" = sbx ] || missing+=" $c"
done
is "${missing# }" "" "a symlink per command name"
is "$(bash -c ". '${f%/sbx}/sbx-ps' && complete -p sbx-ps")" "complete -F _sbx sbx-ps" \
	"sourcing it by a command's name binds the completion"
done_testing
