/* Persistent workspaces: a named, tenant-owned ext4 volume that outlives
 * sessions and is attached writable at /workspace (sbx-create --workspace).
 *
 *   LIB/workspaces/TENANT/NAME/   ("@" for sessions without a tenant: not a
 *     lock                         valid tenant ID, so no tenant reaches it)
 *     workspace.json
 *     disk.img
 *
 * One running session at a time: its monitor holds an OFD write lock on
 * `lock` for its whole life, so a crash frees it.  Locks are tested with
 * F_OFD_GETLK, which takes nothing, and taken (never waited for) under the
 * global lock, which sbx-gc also holds while it removes one: so a test
 * never makes an attach fail and an attach never meets half a removal. */
#ifndef SBX_WORKSPACE_H
#define SBX_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>
#include "err.h"
#include "state.h"

#define SBX_WORKSPACE_GUEST "/workspace"
/* The guest user execs run as by default (guest-init/init.h), who owns
 * the workspace's root directory. */
#define SBX_WORKSPACE_UID 1000u
#define SBX_WORKSPACE_GID 1000u

struct sbx_workspace_info {
	char name[SBX_ID_MAX + 1];
	char tenant[SBX_ID_MAX + 1]; /* "" for none */
	uint64_t size;               /* the image's size in bytes: its cap */
	uint64_t used;               /* host bytes allocated */
	uint64_t retention_ms;
	uint64_t created_ns, last_used_ns;
	char session[SBX_ID_MAX + 1]; /* the session that attached it last */
	int in_use;                   /* a live monitor holds it */
	int unreadable;               /* workspace.json missing or corrupt */
};

/* A workspace attached by a monitor. */
struct sbx_workspace {
	int lock_fd, dir_fd; /* -1 when not attached */
	char disk[1200];     /* absolute path of disk.img */
	int created;         /* made by this attach */
	uint64_t grown_from; /* grown by this attach from this size; 0: not */
	struct sbx_workspace_info info;
};

/* A workspace name: the ID allowlist (3 otherwise). */
int sbx_workspace_check(const char *name, struct sbx_err *err);
/* sbx-create's early check, under the global lock and before anything
 * exists: 5 naming the session when a live one holds it.  Creates nothing. */
int sbx_workspace_probe(struct sbx_state *st, const char *tenant, const char *name, struct sbx_err *err);
/* The monitor: take the workspace for session (5 when another holds it),
 * creating it (size bytes) on first use or growing it to size when it is
 * smaller, and record the session and the time.  w->lock_fd stays held
 * until sbx_workspace_release. */
int sbx_workspace_attach(struct sbx_state *st, const char *tenant, const char *name, uint64_t size,
			 uint64_t retention_ms, const char *session, struct sbx_workspace *w, struct sbx_err *err);
/* Record the end of use (last_used), hand the image back to root and drop
 * the lock.  discard: the session never came up, so a workspace this attach
 * created is removed again.  Safe to call twice. */
void sbx_workspace_release(struct sbx_state *st, struct sbx_workspace *w, int discard);
/* Every workspace (of tenant, when not NULL; "" = those without a tenant),
 * sorted by tenant then name.  Free *out. */
int sbx_workspace_list(struct sbx_state *st, const char *tenant, struct sbx_workspace_info **out, size_t *n,
		       struct sbx_err *err);
/* sbx-gc: remove the workspace if it is not in use and has been idle past
 * its retention (now, wall clock ns).  Takes the global lock itself.
 * Returns 1 when removed (or, with dry_run, when it would be), 0 when
 * kept; info is filled either way. */
int sbx_workspace_reap(struct sbx_state *st, const char *tenant, const char *name, uint64_t now, int dry_run,
		       struct sbx_workspace_info *info);

#endif
