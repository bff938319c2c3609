/* TEMPORARY STUB (branch tmpl-core): the real unpacker is branch
 * tmpl-import's common/rootfs.c, which replaces this file at merge.  It
 * exists only so sbx-template links; every import fails with 70. */
#include "rootfs.h"

#include <string.h>

int sbx_rootfs_unpack(int root_dfd, const char *path, const struct sbx_rootfs_limits *lim,
		      struct sbx_rootfs_config *cfg, struct sbx_err *err)
{
	(void)root_dfd;
	(void)path;
	(void)lim;
	memset(cfg, 0, sizeof *cfg);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
			   "cannot import: the rootfs unpacker is not built yet (stub until branch tmpl-import)");
}

void sbx_rootfs_config_free(struct sbx_rootfs_config *cfg)
{
	if (cfg) {
		json_decref(cfg->env);
		cfg->env = NULL;
	}
}
