#!/bin/bash
# sbx-exec -it: an interactive shell on a pty in the guest.
. "$(dirname "$0")/lib.sh"
require_vm
id=$(sbx-create -q)
python3 "$(dirname "$0")/tools/pty-drive.py" "$id" 1
_fail=$?
_n=7
is "$(sbx-exec -t "$id" -- tty | tr -d '\r' | grep -c '^/dev/pts/')" 1 "-t without -i also gets a pty"
sbx-kill "$id"
done_testing
