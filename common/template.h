/* Templates: LIB/templates/NAME@VERSION/{vmlinux,initrd.cpio,rootfs.ext4,
 * manifest.json}, or under $SBX_TEMPLATES.  NAME takes the newest version. */
#ifndef SBX_TEMPLATE_H
#define SBX_TEMPLATE_H

#include "err.h"
#include "state.h"

struct sbx_template {
	char name[64], version[64];
	char dir[600];
	char kernel[700], initrd[700], rootfs[700];
	char created[40];
	char kernel_release[80];
	int snapshot; /* manifest.json has "snapshot": restore it (snapshot.h) */
};

int sbx_template_find(struct sbx_state *st, const char *spec, struct sbx_template *t, struct sbx_err *err);
const char *sbx_templates_dir(struct sbx_state *st, char *buf, size_t n);

#endif
