/* Between snapshot.c (the store, saving, restoring) and snapshot_list.c
 * (in use, listing, removal, sbx-gc): not part of libsbx's interface. */
#ifndef SBX_SNAPSHOT_INT_H
#define SBX_SNAPSHOT_INT_H

#include <stddef.h>

#include "err.h"
#include "snapshot.h"
#include "state.h"

/* "_" names the snapshots without a tenant, so no tenant may be called
 * that (3). */
int sbx_snapshot_tenant_check(const char *tenant, struct sbx_err *err);
/* LIB/snapshots/TENANT, made (0700) when create; -2 (no error) when it
 * does not exist and create is off. */
int sbx_snapshot_tenant_dir(struct sbx_state *st, const char *tenant, int create, struct sbx_err *err);
/* The snapshot in dirfd/entry, whose name must be its NAME@VERSION. */
int sbx_snapshot_load_entry(int dirfd, const char *entry, struct sbx_snapshot *s);
/* a was taken after b. */
int sbx_snapshot_newer(const struct sbx_snapshot *a, const struct sbx_snapshot *b);
/* s->ref and s->dir, for a snapshot of tenant. */
void sbx_snapshot_set_place(struct sbx_state *st, const char *tenant, struct sbx_snapshot *s);
/* Every snapshot of tenant, matching name (NULL: all) and version (NULL:
 * any), sorted; *out is the caller's to free. */
int sbx_snapshot_collect(struct sbx_state *st, const char *tenant, const char *name, const char *version,
			 struct sbx_snapshot **out, size_t *n, struct sbx_err *err);

#endif
