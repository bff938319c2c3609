# bash completion for sbx: sbx-create, sbx-exec, sbx-ps, sbx-kill, sbx-cp,
# sbx-gc, sbx-audit, sbx-snapshot, sbx-template, sbx-port and sbx-oci.
#
# Installed as bash-completion/completions/sbx with one symlink per command
# name (bash-completion loads it the first time a command is completed), or
# sourced from ~/.bashrc.  Self-contained: bash 4.3 or later, not the
# bash-completion package.
#
# Completes each command's options (tests/t0910-completion.t checks them
# against the getopt tables in cmd/*.c), session IDs (from `sbx-ps -q`, and
# nothing, silently, when that fails, e.g. without the rights to read the
# state), exec IDs, templates (NAME and NAME@VERSION), snapshots,
# workspaces, policy files (*.yaml, *.yml), sbx-cp's SESSION:PATH, and
# sbx-snapshot's and sbx-template's subcommands.  It runs sbx-ps and sbx-snapshot list, which
# only read; never a command in a guest.

# Options per command, and those of them that take a value.
_sbx_opts_create='-e --env -h --help -p --policy -q --quiet -s --snapshot -t --template -v --volume -w --workdir --cpus --disk --dry-run --env-file --id --json --memory --secret --tenant --ttl --workspace'
_sbx_args_create='-e --env -p --policy -s --snapshot -t --template -v --volume -w --workdir --cpus --disk --env-file --id --memory --secret --tenant --ttl --workspace'
_sbx_opts_exec='-d --detach -e --env -h --help -i --interactive -j --json -t --tty -u --user -w --workdir --attach --no-resume --output --resume --since --tenant --timeout --wait'
_sbx_args_exec='-e --env -u --user -w --workdir --attach --output --since --tenant --timeout --wait'
_sbx_opts_ps='-H --no-headers -h --help -q --quiet --all --capacity --execs --json --net --packages --pool --prometheus --state --tenant --workspaces'
_sbx_args_ps='--execs --net --packages --state --tenant'
_sbx_opts_kill='-h --help --exec --json --tenant'
_sbx_args_kill='--exec --tenant'
_sbx_opts_cp='-h --help -j --json --no-resume --tenant'
_sbx_args_cp='--tenant'
_sbx_opts_gc='-h --help -n --dry-run --grace --json --pool-only'
_sbx_args_gc='--grace'
_sbx_opts_audit='-H --no-headers -h --help -q --quiet --chain --json --jsonl --session --since --tenant --type --until'
_sbx_args_audit='--session --since --tenant --type --until'
_sbx_opts_snapshot='-H --no-headers -f --force -h --help -n --number -p --policy -q --quiet --json --template --tenant'
_sbx_args_snapshot='-n --number -p --policy --tenant'
_sbx_opts_template='-H --no-headers -f --file -h --help -q --quiet --json --keep --tenant'
_sbx_args_template='-f --file --keep --tenant'
_sbx_opts_port='-h --help -q --quiet --json --list --listen --no-headers --rm --tenant --unix'
_sbx_args_port='--listen --tenant --unix'
# sbx-oci: runc's global options and those of its commands, in one list
# (an engine, not a person, is its usual caller).
_sbx_opts_oci='-a --all -b --bundle -d --detach -f --force -h --help -p --process -t --tty -v --version --console-socket --debug --format --keep --log --log-format --no-new-keyring --no-pivot --pid-file --root --rootless --systemd-cgroup'
_sbx_args_oci='-b --bundle -p --process --console-socket --format --log --log-format --pid-file --root'

_sbx_states='creating running paused suspended pooled stopped crashed expired corrupt'
_sbx_ws_states='attached idle'
_sbx_audit_types='session.create session.destroy session.expire session.crash session.stop session.pause
	session.resume session.suspend exec.start exec.end files.upload files.download snapshot.save snapshot.rm snapshot.fork template.build template.rm workspace.create
	workspace.attach workspace.remove net.connect net.close net.lost dns.query package.fetch gc.reclaim
	policy.refused audit.repair port.open port.close session.* exec.* files.* snapshot.* template.* workspace.* net.*
	port.*'

# A sibling of the command being completed, so ./build/bin/sbx-exec asks
# ./build/bin/sbx-ps; else the one on PATH.
_sbx_tool() {
	local dir=${_sbx_cmd%/*}
	if [[ $_sbx_cmd == */* && -x $dir/$1 ]]; then
		printf '%s' "$dir/$1"
	else
		printf '%s' "$1"
	fi
}

# _sbx_add WORD...: the words that extend the current word.
_sbx_add() {
	local w
	for w in "$@"; do
		[[ $w == "$_sbx_cur"* ]] && _sbx_c+=("$w")
	done
}

# _sbx_add_prefixed PREFIX WORD...: PREFIX+WORD for those that extend it.
_sbx_add_prefixed() {
	local p=$1 w
	shift
	for w in "$@"; do
		[[ $p$w == "$_sbx_cur"* ]] && _sbx_c+=("$p$w")
	done
}

# Sessions, optionally in one state; no output and no error when sbx-ps
# cannot run or read the state.
_sbx_sessions() {
	local ps
	ps=$(_sbx_tool sbx-ps)
	if [ -n "${1:-}" ]; then
		"$ps" -q --state="$1" 2>/dev/null
	else
		"$ps" -q 2>/dev/null
	fi
}

_sbx_snapshots() {
	"$(_sbx_tool sbx-snapshot)" list -q 2>/dev/null
}

_sbx_execs() {
	"$(_sbx_tool sbx-ps)" -q --execs "$1" 2>/dev/null
}

# Templates as common/template.c finds them: $SBX_TEMPLATES when set and
# not empty, else $SBX_ROOT/var/lib/sbx/templates; a NAME@VERSION
# directory counts once it has a manifest.json.  NAME alone picks the
# newest, so both forms are offered.
_sbx_templates() {
	local dir=${SBX_TEMPLATES:-} d e
	[ -n "$dir" ] || dir=${SBX_ROOT:-}/var/lib/sbx/templates
	for d in "$dir"/*@*/manifest.json; do
		[ -r "$d" ] || continue
		e=${d%/manifest.json}
		e=${e##*/}
		printf '%s\n%s\n' "${e%%@*}" "$e"
	done | sort -u
}

# The guest paths a session may copy to or from: its policy's files
# lists, from its record when it can be read, else the defaults.
_sbx_guest_paths() {
	local rec=${SBX_ROOT:-}/var/lib/sbx/sessions/$1/session.json p
	if [ -r "$rec" ] && command -v jq >/dev/null &&
		p=$(jq -r '.limits.files | (.writable + .exportable)[]' "$rec" 2>/dev/null) && [ -n "$p" ]; then
		printf '%s\n' "$p" | sed 's|/*$|/|' | sort -u
	else
		printf '%s\n' /workspace/ /tmp/
	fi
}

# Files under the current word (with PREFIX before the path, if given),
# directories marked with a slash.  When filter globs are given, only
# files matching one of them (and directories, to descend into).
_sbx_files() {
	local prefix=$1 path f g
	shift
	path=${_sbx_cur#"$prefix"}
	while IFS= read -r f; do
		if [ -d "$f" ]; then
			_sbx_c+=("$prefix$f/")
			continue
		fi
		if [ $# -gt 0 ]; then
			for g in "$@"; do
				# shellcheck disable=SC2053
				[[ $f == $g ]] && { _sbx_c+=("$prefix$f"); break; }
			done
		else
			_sbx_c+=("$prefix$f")
		fi
	done < <(compgen -f -- "$path")
}

# _sbx_value OPTION VALUE-PREFIX: the values OPTION takes.  Returns 1 for
# an option whose values cannot be listed (numbers, durations, names the
# caller chooses), so nothing is offered.
_sbx_value() {
	local opt=$1 p=$2
	case $_sbx_name:$opt in
	*:--tenant | *:--keep | *:--id | *:--cpus | *:--memory | *:--disk | *:--ttl | *:--timeout | *:--grace | *:--since | \
		*:--until | exec:-w | exec:--workdir)
		return 1 ;;
	create:-p | create:--policy | template:-f | template:--file)
		_sbx_files "$p" '*.yaml' '*.yml' ;;
	create:-s | create:--snapshot)
		mapfile -t _sbx_w < <(_sbx_snapshots)
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	create:--workspace)
		mapfile -t _sbx_w < <("$(_sbx_tool sbx-ps)" --workspaces -q 2>/dev/null)
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	create:-t | create:--template)
		mapfile -t _sbx_w < <(_sbx_templates)
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	create:-v | create:--volume)
		# HOSTDIR:GUESTPATH[:ro]: host directories, then ro.
		local rest=${_sbx_cur#"$p"}
		case $rest in
		*:*:*) _sbx_add_prefixed "${_sbx_cur%:*}:" ro ;;
		*:*) ;;
		*) _sbx_files "$p" '' ;;
		esac ;;
	create:--secret)
		# NAME=@FILE (or @- for standard input).
		local rest=${_sbx_cur#"$p"}
		if [[ $rest == *=@* ]]; then
			_sbx_files "$p${rest%%=@*}=@"
			_sbx_add_prefixed "$p${rest%%=@*}=@" -
		fi ;;
	exec:-e | exec:--env | create:-e | create:--env)
		mapfile -t _sbx_w < <(compgen -e)
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	create:--env-file)
		_sbx_files "$p" ;;
	exec:-u | exec:--user)
		_sbx_add_prefixed "$p" root user ;;
	port:--listen)
		_sbx_add_prefixed "$p" 127.0.0.1:0 '[::1]:0' localhost:0 ;;
	port:--unix)
		_sbx_files "$p" ;;
	exec:--wait | exec:--output | exec:--attach | kill:--exec)
		# The session is named after the exec; use it when it is there.
		[ -n "$_sbx_session" ] || return 1
		mapfile -t _sbx_w < <(_sbx_execs "$_sbx_session")
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	ps:--execs | ps:--net | ps:--packages | audit:--session)
		mapfile -t _sbx_w < <(_sbx_sessions)
		_sbx_add_prefixed "$p" "${_sbx_w[@]}" ;;
	ps:--state)
		# A workspace's states with --workspaces, else a session's.
		if [[ " ${_sbx_words[*]} " == *" --workspaces "* ]]; then
			# shellcheck disable=SC2086
			_sbx_add_prefixed "$p" $_sbx_ws_states
		else
			# shellcheck disable=SC2086
			_sbx_add_prefixed "$p" $_sbx_states
		fi ;;
	audit:--type)
		# shellcheck disable=SC2086
		_sbx_add_prefixed "$p" $_sbx_audit_types ;;
	*) return 1 ;;
	esac
	return 0
}

# _sbx_operand N: the Nth operand (0-based) of the command.
_sbx_operand() {
	local n=$1 w
	case $_sbx_name in
	create | gc) ;;
	exec)
		if [ "$n" -eq 0 ]; then
			mapfile -t _sbx_w < <(_sbx_sessions running)
			_sbx_add "${_sbx_w[@]}"
			# a suspended one is resumed first, unless --no-resume
			if [[ " ${_sbx_words[*]} " != *" --no-resume "* ]]; then
				mapfile -t _sbx_w < <(_sbx_sessions suspended)
				_sbx_add "${_sbx_w[@]}"
			fi
			# --resume runs a paused session again first
			if [[ " ${_sbx_words[*]} " == *" --resume "* ]]; then
				mapfile -t _sbx_w < <(_sbx_sessions paused)
				_sbx_add "${_sbx_w[@]}"
			fi
		fi ;;
	ps | kill)
		mapfile -t _sbx_w < <(_sbx_sessions)
		_sbx_add "${_sbx_w[@]}" ;;
	port)
		# SESSION, then (with --rm) what the session forwards.
		if [ "$n" -eq 0 ]; then
			mapfile -t _sbx_w < <(_sbx_sessions running)
			_sbx_add "${_sbx_w[@]}"
		elif [ "$n" -eq 1 ] && [[ " ${_sbx_words[*]} " == *" --rm "* ]]; then
			mapfile -t _sbx_w < <("$(_sbx_tool sbx-port)" --list --no-headers "$_sbx_sub" 2>/dev/null | cut -f1,2 | tr '\t' '\n' | sort -u)
			_sbx_add "${_sbx_w[@]}"
		fi ;;
	audit)
		[ "$n" -eq 0 ] && _sbx_add verify ;;
	cp)
		if [[ $_sbx_cur == *:* && ${_sbx_cur%%:*} != */* ]]; then
			mapfile -t _sbx_w < <(_sbx_guest_paths "${_sbx_cur%%:*}")
			_sbx_add_prefixed "${_sbx_cur%%:*}:" "${_sbx_w[@]}"
		else
			_sbx_files ''
			_sbx_add -
			if [[ $_sbx_cur != */* ]]; then
				mapfile -t _sbx_w < <(_sbx_sessions)
				for w in "${_sbx_w[@]}"; do _sbx_add "$w:"; done
			fi
		fi ;;
	snapshot)
		if [ "$n" -eq 0 ]; then
			_sbx_add pause resume suspend save fork list rm template
			return
		fi
		case $_sbx_sub:$n in
		pause:*) mapfile -t _sbx_w < <(_sbx_sessions running) ;;
		resume:*) mapfile -t _sbx_w < <(_sbx_sessions paused; _sbx_sessions suspended) ;;
		suspend:*) mapfile -t _sbx_w < <(_sbx_sessions running; _sbx_sessions paused) ;;
		save:1 | fork:1) mapfile -t _sbx_w < <(_sbx_sessions) ;;
		rm:* | list:1 | ls:1) mapfile -t _sbx_w < <(_sbx_snapshots) ;;
		template:1) _sbx_w=(list rm) ;;
		*) _sbx_w=() ;;
		esac
		_sbx_add "${_sbx_w[@]}" ;;
	oci)
		[ "$n" -eq 0 ] && _sbx_add create start state kill delete run exec ps features ;;
	template)
		if [ "$n" -eq 0 ]; then
			_sbx_add build import inspect list prune rm
			return
		fi
		case $_sbx_sub:$n in
		import:2) _sbx_files '' ;;
		rm:* | list:1 | ls:1 | inspect:1)
			mapfile -t _sbx_w < <(_sbx_templates)
			_sbx_add "${_sbx_w[@]}" ;;
		esac ;;
	esac
}

# The words as the user sees them.  Bash splits COMP_WORDS at the
# characters of COMP_WORDBREAKS too (--state=x is three words, ID:/path
# three, NAME@VERSION three), so glue back what no blank separates.
_sbx_split() {
	local line=${COMP_LINE-} off=0 i w gap
	_sbx_words=() _sbx_cword=0
	for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
		w=${COMP_WORDS[i]}
		gap=0
		while [[ $off -lt ${#line} && ${line:off:1} == [[:space:]] ]]; do
			off=$((off + 1))
			gap=1
		done
		if ((i == 0 || gap || ${#line} == 0)); then
			_sbx_words+=("$w")
		else
			_sbx_words[-1]+=$w
		fi
		off=$((off + ${#w}))
		((i == COMP_CWORD)) && _sbx_cword=$((${#_sbx_words[@]} - 1))
	done
}

_sbx() {
	local _sbx_words _sbx_cword _sbx_cur _sbx_cmd _sbx_name _sbx_sub='' _sbx_session='' _sbx_c=() _sbx_w=()
	local opts args i w prev n=0 opts_done=0 breaks rl p
	_sbx_split
	_sbx_cur=${_sbx_words[_sbx_cword]-}
	_sbx_cmd=${_sbx_words[0]}
	_sbx_name=${_sbx_cmd##*/}
	_sbx_name=${_sbx_name#sbx-}
	opts=_sbx_opts_${_sbx_name}
	args=_sbx_args_${_sbx_name}
	opts=${!opts-}
	args=" ${!args-} "

	# Walk the words before the current one: skip options and their
	# values, count operands; note the session and the subcommand.
	prev=''
	for ((i = 1; i < _sbx_cword; i++)); do
		w=${_sbx_words[i]}
		if ((!opts_done)) && [[ $args == *" $w "* ]]; then
			i=$((i + 1))
			continue
		fi
		if ((!opts_done)) && [[ $w == -?* ]]; then
			[ "$w" = -- ] && opts_done=1
			continue
		fi
		[ "$n" -eq 0 ] && _sbx_sub=$w
		n=$((n + 1))
		# exec and cp stop parsing options at their first operand
		[[ $_sbx_name == exec || $_sbx_name == cp ]] && opts_done=1
	done
	((_sbx_cword > 1)) && prev=${_sbx_words[_sbx_cword - 1]}
	# The session of exec's and kill's --wait/--output/--attach/--exec, wherever it is.
	if [[ $_sbx_name == exec || $_sbx_name == kill ]]; then
		for ((i = 1; i < ${#_sbx_words[@]}; i++)); do
			w=${_sbx_words[i]}
			((i == _sbx_cword)) && continue
			if [[ $args == *" $w "* ]]; then
				i=$((i + 1))
			elif [[ $w != -* ]]; then
				_sbx_session=$w
				break
			fi
		done
	fi

	if ((!opts_done)) && [ -n "$prev" ] && [[ $args == *" $prev "* ]] && ! [[ $_sbx_name == exec && $n -gt 0 ]]; then
		_sbx_value "$prev" ''
	elif ((!opts_done)) && [[ $_sbx_cur == --*=* ]]; then
		_sbx_value "${_sbx_cur%%=*}" "${_sbx_cur%%=*}="
	elif ((!opts_done)) && [[ $_sbx_cur == -* ]]; then
		# shellcheck disable=SC2086
		_sbx_add $opts
		[[ $_sbx_name == exec && $n -gt 0 ]] && _sbx_c=()
	elif [[ $_sbx_name == exec && $n -ge 1 ]]; then
		[ "$n" -eq 1 ] && [ "$opts_done" = 1 ] && _sbx_add --
	else
		_sbx_operand "$n"
	fi

	# Readline replaces only the text after the last word-break character
	# (= : @ ...) of the current word: drop what comes before it.
	breaks=${COMP_WORDBREAKS-$' \t\n"\'@><=;|&(:'}
	rl=$_sbx_cur
	for ((i = ${#_sbx_cur} - 1; i >= 0; i--)); do
		if [[ $breaks == *"${_sbx_cur:i:1}"* ]]; then
			rl=${_sbx_cur:i+1}
			break
		fi
	done
	p=${_sbx_cur:0:${#_sbx_cur}-${#rl}}
	COMPREPLY=()
	for w in "${_sbx_c[@]}"; do
		[[ $w == "$p"* ]] && COMPREPLY+=("${w#"$p"}")
	done
	# A word that wants more after it (ID:, a directory, --opt=) gets no space.
	for w in "${COMPREPLY[@]}"; do
		if [[ $w == *[:/=] ]]; then
			compopt -o nospace 2>/dev/null
			break
		fi
	done
	return 0
}

complete -F _sbx sbx-create sbx-exec sbx-ps sbx-kill sbx-cp sbx-gc sbx-audit sbx-snapshot sbx-template sbx-port sbx-oci
