/* Exec records: LIB/sessions/ID/execs/eN/{stdout,stderr,result.json}.
 * Read without the monitor, so they answer after the session ended too. */
#ifndef SBX_EXECREC_H
#define SBX_EXECREC_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "state.h"

/* Exec IDs are "e" followed by 1..9 digits. */
int sbx_exec_id_check(const char *id, struct sbx_err *err);
/* One object per exec, oldest first: exec, state (running, ended, lost),
 * and the result's members once it ended. */
int sbx_exec_list(struct sbx_state *st, const char *session, json_t **out, struct sbx_err *err);
/* Wait until the exec has a result (or its session is gone: reason
 * session-lost); timeout_ms 0 waits for ever.  75 on timeout. */
int sbx_exec_wait(struct sbx_state *st, const char *session, const char *exec, unsigned timeout_ms, json_t **result,
		  struct sbx_err *err);
/* Copy the captured stdout and stderr to the fds (-1 skips a stream). */
int sbx_exec_output(struct sbx_state *st, const char *session, const char *exec, int out_fd, int err_fd,
		    struct sbx_err *err);
/* The exec status a shell sees for a result object (124 timeout, 125 lost). */
int sbx_exec_result_status(json_t *result);
/* Ask the session's monitor to end one exec's whole process tree. */
int sbx_exec_kill(struct sbx_state *st, const char *session, const char *exec, struct sbx_err *err);

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
