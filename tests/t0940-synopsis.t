#!/bin/bash
# Each command's man page SYNOPSIS and its getopt tables agree: every
# option it takes is shown (long or short), and every flag shown is taken.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "needs python3"
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(python3 "$top/tests/tools/synopsis-check.py" "$top")
printf '%s\n' "$out"
_n=$(printf '%s\n' "$out" | grep -cE '^(not )?ok ')
_fail=$(printf '%s\n' "$out" | grep -c '^not ok ')
done_testing
