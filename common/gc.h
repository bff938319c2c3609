/* sbx-gc: reclaim what no live monitor owns.  Safe at any moment, also
 * next to creates and kills: a session whose lock is held (its monitor is
 * alive, or sbx-create is still setting it up) is never touched. */
#ifndef SBX_GC_H
#define SBX_GC_H

#include <stdint.h>
#include "err.h"
#include "state.h"

struct sbx_gc_opts {
	uint64_t grace_ms; /* keep ended sessions this long for inspection */
	int dry_run;
	int pool_only; /* only the warm pool's upkeep (pool.h) */
};

struct sbx_gc_action {
	const char *action; /* mark-crashed, reclaim, reclaim-orphan-run, ... */
	const char *session;
	char detail[256];
	/* reclaim-workspace: the workspace and its tenant ("" for none);
	 * session is then the last one that used it, or "". */
	const char *workspace, *tenant;
};

typedef void (*sbx_gc_cb)(const struct sbx_gc_action *a, void *ctx);

int sbx_gc_action_reclaims(const char *action);
int sbx_gc_run(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx, struct sbx_err *err);

/* Tell cb (when set) about one action: detail from fmt. */
void sbx_gc_report(sbx_gc_cb cb, void *ctx, const char *action, const char *id, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* The warm pool's upkeep (pool.h), the whole of `sbx-gc --pool-only` and
 * the last step of sbx_gc_run: replace dead members, trim to the
 * configured sizes, then boot the missing ones (one at a time, under
 * RUN/pool.lock).  Actions go to cb: reclaim, pool-trim, pool-add,
 * pool-error. */
int sbx_gc_pool(struct sbx_state *st, int dry_run, sbx_gc_cb cb, void *ctx, struct sbx_err *err);

#endif
