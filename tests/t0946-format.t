#!/bin/bash
# Every C file of the tree is as .clang-format lays it out (clang-format 14,
# Debian 12's: scripts/deps.sh installs it), so the layout is the tool's,
# not each author's.  A file that is not is named with the first lines
# that differ; clang-format -i FILE fixes it.
. "$(dirname "$0")/lib.sh"
command -v clang-format >/dev/null || skip_all "clang-format not installed (scripts/deps.sh)"
command -v git >/dev/null || skip_all "git not installed"
top=$(cd "$(dirname "$0")/.." && pwd)
git -C "$top" rev-parse --git-dir >/dev/null 2>&1 || skip_all "not a git checkout"
bad=0 n=0
while read -r f; do
	n=$((n + 1))
	if ! clang-format --style=file "$top/$f" | cmp -s - "$top/$f"; then
		bad=$((bad + 1))
		diag "$f is not as .clang-format lays it out:"
		clang-format --style=file "$top/$f" | diff "$top/$f" - | head -n 6 | sed 's/^/#   /'
	fi
done < <(git -C "$top" ls-files '*.c' '*.h')
is "$bad" 0 "all $n C files of the tree are as .clang-format lays them out"
done_testing
