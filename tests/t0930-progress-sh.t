#!/bin/bash
# scripts/progress.sh: off a terminal a wrapped step is exactly the step
# (same output, same status, set -e intact); on one (a pty from script(1))
# it draws a line on stderr and erases it, and SBX_NO_PROGRESS turns it off.
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/.." && pwd)
T=$TEST_TMP

# A step that writes to both streams, grows a file, and exits 3.
cat >"$T/step.sh" <<EOF
. "$top/scripts/progress.sh"
step() { echo out; echo err >&2; head -c 300000 /dev/zero >"$T/grown"; sleep \${1:-0}; return 3; }
EOF

bash -c ". '$T/step.sh'; step" >"$T/plain.out" 2>"$T/plain.err"
want=$?
bash -c ". '$T/step.sh'; sbx_progress_run label --watch '$T/grown' -- step" >"$T/wrapped.out" 2>"$T/wrapped.err"
is "$?" "$want" "off a terminal: the step's exit status"
cmp -s "$T/plain.out" "$T/wrapped.out"; ok $? "off a terminal: stdout byte for byte"
cmp -s "$T/plain.err" "$T/wrapped.err"; ok $? "off a terminal: stderr byte for byte"
is "$(bash -c "set -e; . '$T/step.sh'; sbx_progress_run label -- step; echo survived" 2>/dev/null)" "out" \
	"set -e still stops the script at the failing step"
is "$(bash -c ". '$T/step.sh'; x=\$(sbx_progress_run label -- echo data); echo \$x")" "data" \
	"inside \$(...): stdout is the command's"

command -v script >/dev/null || { diag "no script(1): the terminal checks are skipped"; done_testing; }
# script(1) gives the command a pty; its stdout and stderr both land in the
# typescript, so the command's stdout goes to a file instead.
tty_run() { # tty_run ENV-ASSIGNMENTS: the typescript of the wrapped step
	rm -f "$T/grown"
	script -qec "env $1 bash -c \". '$T/step.sh'; sbx_progress_run 'big step' --watch '$T/grown' -- step 3 >'$T/tty.out'\"" \
		/dev/null </dev/null 2>&1
}
ts=$(tty_run TERM=xterm | cat -v | tr '\n' ' ')
like "$ts" '\^Mbig step: ' "on a terminal: the label is drawn after \\r"
like "$ts" 'big step: [0-9.]+KiB, [0-9]+s\^\[\[K' "with the bytes --watch grew by, and the seconds"
like "$ts" '\^M\^\[\[K *$' "and the line is erased at the end"
is "$(cat "$T/tty.out")" "out" "the step's stdout is untouched"
ts=$(tty_run "TERM=xterm SBX_NO_PROGRESS=1" | cat -v)
case $ts in *'big step'*) r=1 ;; *) r=0 ;; esac
ok $r "SBX_NO_PROGRESS=1: nothing drawn on a terminal"
ts=$(tty_run TERM=dumb | cat -v)
case $ts in *'big step'*) r=1 ;; *) r=0 ;; esac
ok $r "TERM=dumb: nothing drawn"
done_testing
