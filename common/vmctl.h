/* VMCTL requests to a session's monitor (client layer, over monclient.h):
 * pause, resume, suspend, save, a fresh identity.  sbx-snapshot's save
 * (snapshot.c) sends its SAVE through sbx_vmctl. */
#ifndef SBX_VMCTL_H
#define SBX_VMCTL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "state.h"

/* One VMCTL op (enum sbx_vmctl_op) to session id's monitor, with its PATH
 * and HOSTNAME when not NULL, and MAX_BYTES when not 0 (a save's cap), waiting up to timeout_ms for the answer; the
 * monitor's PROGRESS frames are drawn on progress_fd when it is a terminal
 * (-1: never); MAX_BYTES is TTL_MS for op TTL.  *state (n bytes, may be NULL): the session's state after
 * it.  75 when the monitor did not answer in time. */
int sbx_vmctl(struct sbx_state *st, const char *id, unsigned op, const char *path, const char *hostname,
	      uint64_t max_bytes, int progress_fd, unsigned timeout_ms, char *state, size_t n, struct sbx_err *err);

/* A running session's VM: pause, resume, or a fresh identity (the guest's
 * hostname, clock and RNG; hostname NULL: the session ID).  With tenant,
 * a session of another tenant does not exist (4).  *state: the session's
 * state after it ("running", "paused" or "suspended").  Audited by the monitor
 * (session.pause, session.resume).  SUSPEND: snapshot.h. */
int sbx_session_vmctl(struct sbx_state *st, const char *id, const char *tenant, unsigned op, const char *hostname,
		      char *state, size_t n, struct sbx_err *err);

/* The session ends left_ms from now (VMCTL TTL): its TTL becomes the time
 * it has run plus left_ms, whether it had one or not, and its record says
 * so.  At most SBX_TTL_LEFT_MAX_MS (3); another tenant's session is 4; a
 * session whose TTL counts running time only (lifecycle.ttl_counts) is 5. */
int sbx_session_set_ttl(struct sbx_state *st, const char *id, uint64_t left_ms, struct sbx_err *err);

/* A session suspended to disk runs again (VMCTL RESUME), or, with
 * no_resume (sbx-exec, sbx-cp --no-resume), is 4; any other session is
 * left as it is.  For clients that read the session's files rather than
 * ask its guest (sbx-exec --attach); a guest operation wakes it anyway. */
int sbx_session_wake(struct sbx_state *st, const char *id, int no_resume, struct sbx_err *err);

#endif
