/* sbx-monitor: one per session (the conmon / containerd-shim pattern).
 * Parent of the VMM, holder of the session lock for the session's life,
 * owner of the agent channel, server of clients on RUN/sessions/ID/
 * monitor.sock, keeper of every exec's output under LIB/sessions/ID/execs. */
#ifndef SBX_MONITOR_H
#define SBX_MONITOR_H

#include "err.h"

struct sbx_monitor_args {
	const char *id;
	int ready_fd;   /* one JSON line: {"ok":true} or the error, then closed */
	int lock_fd;    /* the session lock, already held (inherited from sbx-create) */
	int secrets_fd; /* one SBX_F_SECRETS frame, then EOF; -1: no secrets */
};

/* Runs the session until it is destroyed or its VM ends; returns the
 * process exit status. */
int sbx_monitor_main(const struct sbx_monitor_args *a);

#endif
