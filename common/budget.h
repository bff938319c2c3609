/* sbx-cp's per-session transfer budget (policy limits.transfer). */
#ifndef SBX_BUDGET_H
#define SBX_BUDGET_H

#include <stdint.h>

#include "err.h"
#include "session.h"
#include "state.h"

/* The per-session budget (LIB/sessions/ID/transfer.json, under a lock):
 * reserve up to want bytes of what is left, so concurrent copies cannot
 * overdraw it.  *got is what was granted (at most want); exactly is set
 * when anything less than want is an error (code 3). */
int sbx_xfer_reserve(struct sbx_state *st, const struct sbx_session *s, uint64_t want, int exactly, uint64_t *got,
		     struct sbx_err *err);
/* Give back the part of a reservation that was not used. */
int sbx_xfer_release(struct sbx_state *st, const char *id, uint64_t unused, struct sbx_err *err);

#endif
