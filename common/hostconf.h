/* The host configuration: /etc/sbx/sbx.yaml, or $SBX_ROOT/etc/sbx/sbx.yaml
 * when SBX_ROOT is set (sbx.yaml(5)).  It says how this host runs sessions,
 * not what a session may do (that is the policy's job); today it holds the
 * warm pool's sizes.  Parsed like a policy, with libyaml's event API
 * against a fixed schema, failing closed: anything it does not understand
 * is SBX_EXIT_INVALID naming the file, line and column.  A missing file is
 * an empty configuration (no pool). */
#ifndef SBX_HOSTCONF_H
#define SBX_HOSTCONF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SBX_HOSTCONF_FILE_MAX (64u << 10)
#define SBX_POOL_TEMPLATES_MAX 16
#define SBX_POOL_SIZE_MAX 64

struct sbx_pool_conf {
	char tmpl[130];      /* NAME, or NAME@VERSION for a pinned version */
	unsigned size;       /* members to keep; 0: none */
	unsigned vcpus;      /* the members' shape: a create is served from the */
	unsigned memory_mib; /* pool only when it asks for exactly this */
	uint64_t disk;       /* bytes of writable disk (resources.disk) */
};

#define SBX_PUBLISHERS_MAX 64

struct sbx_hostconf {
	char source[600]; /* the file read; "" when there was none */
	struct sbx_pool_conf pool[SBX_POOL_TEMPLATES_MAX];
	unsigned npool;
	/* templates.publishers: tenants that may publish templates of their
	 * own (sbx-snapshot save --template); none by default. */
	char publishers[SBX_PUBLISHERS_MAX][64];
	unsigned npublishers;
};

/* Is tenant listed in templates.publishers? */
int sbx_hostconf_publisher(const struct sbx_hostconf *hc, const char *tenant);

/* Where the file is: /etc/sbx/sbx.yaml under SBX_ROOT (if set). */
const char *sbx_hostconf_path(char *buf, size_t n);
/* Read it; a missing file leaves hc empty (npool 0) and succeeds. */
int sbx_hostconf_load(struct sbx_hostconf *hc, struct sbx_err *err);
/* Parse n bytes (name used in messages) into hc, which is reset first. */
int sbx_hostconf_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_hostconf *hc,
		       struct sbx_err *err);
#endif
