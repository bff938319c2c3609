/* Unpacking a rootfs tarball or an image into a template's root tree
 * (sbx-template import).  The interface agreed between branches tmpl-core
 * (the caller) and tmpl-import (the implementation, common/rootfs.c). */
#ifndef SBX_ROOTFS_H
#define SBX_ROOTFS_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"

struct sbx_rootfs_limits { uint64_t max_bytes, max_entries; int allow_setuid; };
struct sbx_rootfs_config { json_t *env; char user[64]; char workdir[256]; char format[16]; };
/* Unpack a rootfs tarball (.tar, .tar.gz, .tar.zst; `docker export`) or an image
 * (`docker save` tarball or OCI image layout tarball; layers in order, whiteouts honoured)
 * into the empty directory root_dfd. cfg gets the image config's Env/User/WorkingDir
 * (env NULL when none) and format ("rootfs"|"docker"|"oci"). 3 on a hostile or malformed
 * archive (message says which entry and why), 5 when over a limit. */
int sbx_rootfs_unpack(int root_dfd, const char *path, const struct sbx_rootfs_limits *lim,
                      struct sbx_rootfs_config *cfg, struct sbx_err *err);
void sbx_rootfs_config_free(struct sbx_rootfs_config *cfg);

#endif
