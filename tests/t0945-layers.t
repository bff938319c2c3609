#!/bin/bash
# The client layer of common/ (design.md "Build and test") includes no
# header of the life layer, so a command that only talks to a monitor
# (sbx-exec, sbx-kill, sbx-port) links neither snapshots, the pool, nor
# capacity and gc; and every client of a monitor's socket goes through
# monclient.c (no socket code of its own).
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/.." && pwd)
client="monclient exec_client execrec vmctl portfwd tarcheck transfer"
life="pool snapshot capacity gc"
for m in $client; do
	bad=
	for f in "$top/common/$m.c" "$top/common/$m.h"; do
		[ -f "$f" ] || continue
		for l in $life; do
			grep -q "^#include \"$l\.h\"" "$f" && bad="$bad $(basename "$f")->$l.h"
		done
	done
	is "$bad" "" "client layer: $m includes no life-layer header"
done
# The monitor's socket is connected, and its frames read, in one place.
users=$(cd "$top/common" && grep -l 'sbx_monitor_socket\|sbx_monitor_connect' -- *.c | sort | tr '\n' ' ')
is "$users" "destroy.c monclient.c " "only monclient.c connects to a monitor (destroy.c takes its raw socket, as sbx_mon_open would not)"
loops=$(cd "$top/common" && grep -l 'sbx_frame_hdr_get' -- *.c | sort | tr '\n' ' ')
is "$loops" "monclient.c proto.c secrets.c " "only monclient.c decodes frames from a monitor (proto.c is the codec, secrets.c checks a frame it built)"
done_testing
