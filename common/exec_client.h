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
	/* Called once the session has started the command, with its exec
	 * ID (sbx-serve tells its client the pid then); NULL: not called. */
	void (*on_started)(void *ctx, const char *exec_id);
	void *started_ctx;
};

struct sbx_exec_result {
	char exec_id[16];
	struct sbx_exit_info exit;
};

int sbx_exec_run(struct sbx_state *st, const char *session, struct sbx_exec_opts *o, struct sbx_exec_result *r,
		 struct sbx_err *err);

#endif
