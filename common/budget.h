/* sbx-cp's per-session transfer budget (policy limits.transfer). */
#ifndef SBX_BUDGET_H
#define SBX_BUDGET_H

#include <stdint.h>

#include "err.h"
#include "session.h"
#include "state.h"

/* A byte counter in a session directory dfd: file ({"schema":1,
 * "bytes":N}, replaced atomically) under the lock file lock, so
 * concurrent users cannot overdraw it.  Gives back give bytes taken
 * earlier, then takes take bytes when they fit under max (with partial:
 * as many as fit).  0 with *got (may be NULL) what was taken; 1 when take
 * did not fit and nothing was taken; -1 with err when the counter cannot
 * be read or written.  *used: the count after the give. */
int sbx_counter_take(int dfd, const char *file, const char *lock, uint64_t max, uint64_t give, uint64_t take,
		     int partial, uint64_t *got, uint64_t *used, struct sbx_err *err);

/* The per-session budget (LIB/sessions/ID/transfer.json, under a lock):
 * reserve up to want bytes of what is left, so concurrent copies cannot
 * overdraw it.  *got is what was granted (at most want); exactly is set
 * when anything less than want is an error (code 3). */
int sbx_xfer_reserve(struct sbx_state *st, const struct sbx_session *s, uint64_t want, int exactly, uint64_t *got,
		     struct sbx_err *err);
/* Give back the part of a reservation that was not used. */
int sbx_xfer_release(struct sbx_state *st, const char *id, uint64_t unused, struct sbx_err *err);

#endif
