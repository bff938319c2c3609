/* The client side of an exec: talk to the session's monitor, stream the
 * command's output to the given fds, feed stdin, forward signals and
 * window-size changes, and return how the command ended. */
#ifndef SBX_EXEC_CLIENT_H
#define SBX_EXEC_CLIENT_H

#include "err.h"
#include "proto.h"
#include "state.h"

struct sbx_exec_opts {
	struct sbx_exec_req req; /* argv, env, cwd, timeout, flags, uid */
	int in_fd;               /* stdin to send, -1 for none */
	int out_fd, err_fd;      /* where output goes */
	int tty_fd;              /* terminal whose size to follow, -1 for none */
	int detach;              /* return once started */
	int forward_signals;     /* INT, TERM, HUP to the guest command */
};

struct sbx_exec_result {
	char exec_id[16];
	struct sbx_exit_info exit;
};

int sbx_exec_run(struct sbx_state *st, const char *session, struct sbx_exec_opts *o, struct sbx_exec_result *r,
		 struct sbx_err *err);

/* Attach to an exec (sbx-exec --attach): copy what it has written so far
 * from its files (LIB/sessions/ID/execs/EXEC/{stdout,stderr}, what the
 * monitor stores and catches lagging clients up from), then follow them
 * until its result is written.  Readers only: any number may follow one
 * exec, and leaving stops nothing.  The output is what the session keeps
 * (secrets scrubbed, up to the policy's output caps). */
struct sbx_attach_opts {
	uint64_t since_out, since_err; /* bytes of each stream to skip */
	int out_fd, err_fd;            /* where each stream goes */
	int detach_signals;            /* SIGINT, SIGTERM, SIGHUP stop following */
};
/* 0: the exec ended, *status as a foreground exec's (124 timeout, 125 the
 * session was lost, *lost set); a positive signal number: it detached the
 * caller, the exec goes on; -1: err (4 for an exec that is not the
 * caller's to see, as for its session). */
int sbx_exec_attach(struct sbx_state *st, const char *session, const char *exec, const struct sbx_attach_opts *o,
		    int *status, int *lost, struct sbx_err *err);

#endif
