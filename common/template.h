/* Templates, and who owns them.
 *
 *   TEMPLATES/NAME@VERSION/                the operator's (shipped, built,
 *                                          or published by the operator)
 *   TEMPLATES/tenants/TENANT/NAME@VERSION/ a tenant's own (published by
 *                                          it where sbx.yaml's
 *                                          templates.publishers lets it)
 *
 * each holding vmlinux, initrd.cpio, rootfs.ext4 and manifest.json
 * (TEMPLATES is LIB/templates, or $SBX_TEMPLATES).  NAME takes the newest
 * version.  A template is named by its reference: NAME for the
 * operator's, TENANT/NAME for a tenant's; records carry that reference as
 * the template's name, so it always finds the same owner's template.
 *
 * Visibility: the operator sees its own by NAME and anyone's by
 * TENANT/NAME; a tenant sees the operator's and its own, and nobody
 * else's exists for it (4).  A bare NAME is the operator's when the
 * operator has one, else the tenant's own; since no publish may take a
 * name another owner holds (sbx_template_holder), the two cannot both
 * exist unless a template was copied in by hand, and then the operator's
 * wins: a tenant can never capture an operator name. */
#ifndef SBX_TEMPLATE_H
#define SBX_TEMPLATE_H

#include <time.h>

#include <jansson.h>

#include "err.h"
#include "session.h" /* SBX_TEMPLATE_OPERATOR */
#include "state.h"

#define SBX_TEMPLATE_TENANTS "tenants" /* TEMPLATES/tenants/TENANT/ */

struct sbx_template {
	char name[64], version[64];
	char owner[SBX_ID_MAX + 1]; /* "" for the operator */
	char ref[64];               /* NAME, or OWNER/NAME */
	char dir[600];
	char kernel[700], initrd[700], rootfs[700];
	char created[40];
	char kernel_release[80];
	int snapshot;                   /* manifest.json has "snapshot": restore it (snapshot.h) */
	struct timespec manifest_mtime; /* orders versions made in one second (listings) */
};

/* [OWNER/]NAME[@VERSION] in exactly that owner's namespace (no OWNER:
 * the operator's); 3 for a malformed spec, 4 when there is none. */
int sbx_template_find(struct sbx_state *st, const char *spec, struct sbx_template *t, struct sbx_err *err);
/* -t SPEC as tenant (NULL: the operator) sees it (see above). */
int sbx_template_resolve(struct sbx_state *st, const char *tenant, const char *spec, struct sbx_template *t,
			 struct sbx_err *err);
const char *sbx_templates_dir(struct sbx_state *st, char *buf, size_t n);
/* The namespace directory of owner ("" or NULL: the operator's), made
 * when create; -2 (no error) when it does not exist and create is off. */
int sbx_template_ns(struct sbx_state *st, const char *owner, int create, struct sbx_err *err);
/* Does an owner other than `owner` hold a template called name, as far as
 * `owner` publishing it would shadow one?  For the operator: any tenant's;
 * for a tenant: the operator's.  1 with *who set ("" for the operator). */
int sbx_template_holder(struct sbx_state *st, const char *owner, const char *name, char who[SBX_ID_MAX + 1]);
/* "operator" or the tenant. */
static inline const char *sbx_template_owner_name(const char *owner)
{
	return owner && *owner ? owner : SBX_TEMPLATE_OPERATOR;
}

/* The templates tenant sees (NULL: the operator, who sees every owner's),
 * as JSON objects sorted by owner, name, then age; name (NULL: all) a
 * [OWNER/]NAME[@VERSION] to match, 4 when none does. */
int sbx_template_list(struct sbx_state *st, const char *tenant, const char *name, json_t **out, struct sbx_err *err);
/* Remove [OWNER/]NAME[@VERSION] (every version without one) of tenant's
 * own namespace (NULL: the operator's, or OWNER's when named).  A tenant
 * naming the operator's is 3; one in use by a live session (warm-pool
 * members included) or by a snapshot saved from it is 5, and then
 * nothing is removed.  *removed: JSON array of references.  Audited
 * (template.rm). */
int sbx_template_rm(struct sbx_state *st, const char *tenant, const char *spec, json_t **removed, struct sbx_err *err);
/* sbx_template_rm of each of specs[0..n-1] in turn (sbx-template rm,
 * sbx-snapshot template rm), stopping at the first that fails.  *removed:
 * every reference removed, those before a failure too (never NULL but
 * out of memory). */
int sbx_template_rm_list(struct sbx_state *st, const char *tenant, char *const *specs, int n, json_t **removed,
			 struct sbx_err *err);

#endif
