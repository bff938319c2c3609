/* What sbx-ps shows, as JSON objects (docs/json.md): a session's record
 * with its live state and host-measured usage, a workspace, the host's
 * capacity.  The commands print these; they compute nothing themselves. */
#ifndef SBX_VIEW_H
#define SBX_VIEW_H

#include <stdint.h>

#include <jansson.h>

#include "capacity.h"
#include "state.h"
#include "workspace.h"

/* One session: NULL when the caller (a tenant) may not see it, an object
 * with state "corrupt" and the error when its record cannot be read. */
json_t *sbx_session_view(struct sbx_state *st, const char *id);
/* One workspace, as of now_ns (idle time, what is left of its retention). */
json_t *sbx_workspace_view(const struct sbx_workspace_info *w, uint64_t now_ns);
/* The host's capacity: {"sessions": {"used", "max"}, ..., "pooled"}. */
json_t *sbx_capacity_view(const struct sbx_capacity *c);
/* The keys of sbx_capacity_view's used/max pairs, in the order shown. */
extern const char *const sbx_capacity_view_keys[4];

#endif
