/* Exec records: LIB/sessions/ID/execs/eN/{stdout,stderr,result.json}.
 * Read without the monitor, so they answer after the session ended too. */
#ifndef SBX_EXECREC_H
#define SBX_EXECREC_H

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

#endif
