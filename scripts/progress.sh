# Progress for the long steps of sbx's shell scripts (downloads, mkfs),
# on a terminal only.  Source it from bash:
#
#   . "$(dirname "$0")/progress.sh"
#   sbx_progress_run LABEL [--watch PATH] [--total BYTES] -- COMMAND [ARG]...
#
# runs COMMAND with its own stdin, stdout, stderr and exit status.  While it
# runs, and only when stderr is a terminal, one line on stderr says LABEL,
# the seconds so far and, with --watch, the bytes PATH (a file or a
# directory) has grown by on disk since the step began, of --total if given:
#
#   build-image.sh: rootfs.ext4: 38.2MiB, 3s
#   build-image.sh: kernel: 61.0MiB / 128.0MiB (47%), 9s      (with --total)
#
# The line appears after the first second (short steps show nothing), is
# redrawn about 5 times a second, and is erased when COMMAND ends, so what
# the script prints is the same as without it.  (When COMMAND fails under
# set -e the shell exits at once; the line then stays, and the error
# follows it.)  Where stderr is not a terminal
# nothing at all changes: COMMAND runs directly, not a byte is added.
# SBX_NO_PROGRESS set to a non-empty value, or TERM=dumb, turns it off on a
# terminal too (as for the commands' own progress, common/progress.h).

# sbx_progress_enabled: is a line on stderr wanted?
sbx_progress_enabled() {
	[ -t 2 ] && [ -z "${SBX_NO_PROGRESS:-}" ] && [ "${TERM:-}" != dumb ]
}

# Bytes PATH takes on disk (allocated, so a sparse image counts what was
# written, not its size); 0 when it does not exist yet.
_sbx_progress_bytes() {
	local b
	b=$(du -sB1 -- "$1" 2>/dev/null | cut -f1)
	printf '%s' "${b:-0}"
}

# Milliseconds on the wall clock (bash 5's EPOCHREALTIME; date before it).
_sbx_progress_ms() {
	if [ -n "${EPOCHREALTIME:-}" ]; then
		local t=${EPOCHREALTIME/[.,]/}
		printf '%s' "$((10#$t / 1000))"
	else
		printf '%s' "$(($(date +%s%N) / 1000000))"
	fi
}

_sbx_progress_iec() {
	numfmt --to=iec-i --suffix=B --format=%.1f "$1" 2>/dev/null || printf '%sB' "$1"
}

# The ticker: redraws until its parent (the shell running COMMAND) is gone
# or it is killed.
_sbx_progress_tick() {
	local label=$1 watch=$2 total=$3 parent=$4 base=$5 t0=$6 now grown line cols
	sleep 1
	while kill -0 "$parent" 2>/dev/null; do
		now=$((($(_sbx_progress_ms) - t0) / 1000))
		line="$label"
		if [ -n "$watch" ]; then
			grown=$(($(_sbx_progress_bytes "$watch") - base))
			[ "$grown" -ge 0 ] || grown=0
			line+=": $(_sbx_progress_iec "$grown")"
			if [ "${total:-0}" -gt 0 ]; then
				line+=" / $(_sbx_progress_iec "$total") ($((grown >= total ? 100 : grown * 100 / total))%)"
			fi
			line+=", ${now}s"
		else
			line+=": ${now}s"
		fi
		# One line that fits: \r cannot redraw a wrapped one.
		cols=$(stty size <&2 2>/dev/null | cut -d' ' -f2)
		# Checked again last thing: nothing drawn after the shell died
		# (over whatever prompt came next).
		kill -0 "$parent" 2>/dev/null || break
		printf '\r%.*s\033[K' "$((${cols:-80} > 1 ? ${cols:-80} - 1 : 79))" "$line" >&2
		sleep 0.2
	done
}

# sbx_progress_run LABEL [--watch PATH] [--total BYTES] -- COMMAND [ARG]...
sbx_progress_run() {
	local label=$1 watch='' total=0 rc=0 ticker base=0
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		--watch) watch=$2; shift 2 ;;
		--total) total=$2; shift 2 ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	if ! sbx_progress_enabled; then
		"$@"
		return
	fi
	# The ticker's stdout goes nowhere: a caller inside $(...) must not
	# wait for it, and stdout carries data only.
	# The start, taken before COMMAND runs, so its first bytes count.
	[ -z "$watch" ] || base=$(_sbx_progress_bytes "$watch")
	_sbx_progress_tick "$label" "$watch" "$total" "$BASHPID" "$base" "$(_sbx_progress_ms)" >/dev/null &
	ticker=$!
	# Not in an || list, which would turn set -e off inside COMMAND (a
	# shell function, say).  When COMMAND fails under set -e the shell
	# exits right here, and the ticker, finding it gone, stops by itself.
	"$@"
	rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	printf '\r\033[K' >&2
	return "$rc"
}
