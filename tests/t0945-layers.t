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
# The core (issue 36, item 4) includes nothing above it: only the core's
# own headers and the types a session record is made of (session.h,
# env.h, policy.h).  hostconf belongs to it: every command checks
# sbx.yaml as it opens the state (state.c), and it needs only the core.
core="err util units state proto record cli yamlstrict trace hostconf caller"
floor="$core session env policy"
for m in $core; do
	bad=
	for f in "$top/common/$m.c" "$top/common/$m.h"; do
		[ -f "$f" ] || continue
		for h in $(sed -n 's/^#include "\([a-z_0-9]*\)\.h".*/\1/p' "$f"); do
			case " $floor " in *" $h "*) ;; *) bad="$bad $(basename "$f")->$h.h" ;; esac
		done
	done
	is "$bad" "" "core: $m includes nothing above the core"
done
# The daemons are programs of their own: nothing in common/ includes a
# header of monitor/ or proxy/.
daemon_headers=$(cd "$top" && ls monitor/*.h proxy/*.h | xargs -n1 basename | sort -u)
bad=
for h in $daemon_headers; do
	bad="$bad$(cd "$top/common" && grep -l "^#include \"\(\.\./monitor/\|\.\./proxy/\)\{0,1\}$h\"" -- *.c *.h 2>/dev/null |
		sed "s|\$|->$h |" | tr -d '\n')"
done
is "$bad" "" "nothing in common/ includes a header of monitor/ or proxy/"
# The monitor's socket is connected, and its frames read, in one place.
users=$(cd "$top/common" && grep -l 'sbx_monitor_socket\|sbx_monitor_connect' -- *.c | sort | tr '\n' ' ')
is "$users" "destroy.c monclient.c " "only monclient.c connects to a monitor (destroy.c takes its raw socket, as sbx_mon_open would not)"
loops=$(cd "$top/common" && grep -l 'sbx_frame_hdr_get' -- *.c | sort | tr '\n' ' ')
is "$loops" "monclient.c proto.c secrets.c " "only monclient.c decodes frames from a monitor (proto.c is the codec, secrets.c checks a frame it built)"
done_testing
