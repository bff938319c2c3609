/* Who is at the other end of a unix socket: sbx's own root, or not.
 *
 * monitor.sock drives a session (EXEC, KILL, save, a claim), and uid 0
 * reaches it through DAC ownership alone, capabilities or not (the
 * proxy's privileged half, a dropped-privilege helper of some daemon).
 * "sbx's own" is what sbx's commands are: the checking process's uid, in
 * its user namespace, and, when that uid is 0, holding CAP_SYS_ADMIN
 * there.  A uid-0 process in a user namespace of its own has every
 * capability in that one, so the namespace is checked as well.
 *
 * The peer is read through a pidfd (SO_PEERPIDFD since Linux 6.5, else
 * pidfd_open of SO_PEERCRED's pid), and /proc/PID is trusted only if that
 * process is still alive once read, so a pid reused meanwhile is not
 * mistaken for the peer.  Without SO_PEERPIDFD a peer that exits between
 * its connect and our pidfd_open can leave its pid to another process:
 * that one must then be sbx's own root as well to pass. */
#ifndef SBX_PEER_H
#define SBX_PEER_H

#include "err.h"

/* 0: the peer of sock is sbx's own; -1 (SBX_EXIT_INVALID, or
 * SBX_EXIT_INTERNAL when it cannot be told) with err saying why not. */
int sbx_peer_check(int sock, struct sbx_err *err);

#endif
