#!/bin/bash
# A boot that never answers (issue 35, item 7) keeps its whole console:
# the guest boots at the kernel's full log level, and a boot that fails
# leaves the last 256 KiB of its console as LIB/boot-failures/ID.console,
# named in the error (which still ends with the console's last lines); the
# newest 16 such files are kept.  The failure is made by a boot timeout
# shorter than any TCG boot.
. "$(dirname "$0")/lib.sh"
require_vm
F=$SBX_ROOT/var/lib/sbx/boot-failures
id=$(SBX_BOOT_TIMEOUT=1 sbx-create -q --id never-1 2>"$TEST_TMP/err"); rc=$?
is "$rc" 69 "a boot that does not answer within SBX_BOOT_TIMEOUT: 69"
err=$(cat "$TEST_TMP/err")
like "$err" "did not answer within 1 s" "the error says so"
like "$err" "whole console: $F/never-1.console" "and names the whole console"
[ -s "$F/never-1.console" ]; ok $? "which is kept"
grep -q "Linux version" "$F/never-1.console"; ok $? "holding the kernel's own boot messages (no 'quiet')"
[ ! -e "$SBX_ROOT/var/lib/sbx/sessions/never-1" ]; ok $? "nothing else of the session is left"
is "$(stat -c %a "$F")" 700 "the directory is root's alone"
# More failures than are kept: the newest 16 stay.
for i in $(seq 2 18); do
	SBX_BOOT_TIMEOUT=1 sbx-create -q --id "never-$i" >/dev/null 2>&1
	sleep 1.1 # mtimes a second apart: the order is the age
done
is "$(find "$F" -type f | wc -l)" 16 "only the newest 16 consoles are kept"
[ -e "$F/never-18.console" ] && [ ! -e "$F/never-1.console" ]; ok $? "the oldest went first"
id=$(sbx-create -q); ok $? "a session with the default timeout boots"
[ ! -e "$F/$id.console" ]; ok $? "and keeps no console there"
sbx-kill "$id" >/dev/null
done_testing
