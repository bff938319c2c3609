/* Building templates from specs (sbx-template build): the spec
 * (tmplspec.h) becomes TEMPLATES/[tenants/T/]NAME@VERSION, atomically.
 *
 * The build works in TEMPLATES/.tmp-build-NAME-RANDOM (locked for as long
 * as the build or any step it started runs, so sbx-gc reclaims it only once
 * it is abandoned), renamed into place at the end; two builds of one name
 * serialize on RUN/template-build-OWNER-NAME.lock.  The steps that are
 * other programs' work (debugfs, debootstrap, apt, mkfs.ext4) run in
 * libexec/sbx/sbx-template-helper; their output is kept in the work
 * directory and its tail is the error message when one fails. */
#ifndef SBX_TMPLBUILD_H
#define SBX_TMPLBUILD_H

#include <jansson.h>

#include "err.h"
#include "gc.h"
#include "state.h"

struct sbx_tmplbuild_opts {
	const char *name;   /* NAME */
	const char *spec;   /* path of the YAML spec, or */
	const char *import; /* a rootfs tarball or image to import (rootfs.h) */
	const char *tenant; /* NULL: the operator's */
	int progress_fd;    /* stderr for step lines on a tty, -1: none */
};

struct sbx_tmplbuild_result {
	char name[64], version[64], ref[140]; /* ref: [TENANT/]NAME@VERSION */
	int existed;                          /* the same content was there */
	unsigned long long size;
};

int sbx_template_build(struct sbx_state *st, const struct sbx_tmplbuild_opts *o, struct sbx_tmplbuild_result *r,
		       struct sbx_err *err);

/* The template's manifest (inspect): [OWNER/]NAME[@VERSION] as tenant sees it. */
int sbx_template_inspect(struct sbx_state *st, const char *tenant, const char *spec, json_t **out, struct sbx_err *err);

/* Remove old versions no session, pool member or snapshot uses, keeping
 * the keep newest of each name (in-use ones never go).  *removed: the
 * references.  Audited as template.rm, one event each. */
int sbx_template_prune(struct sbx_state *st, const char *tenant, unsigned keep, json_t **removed, struct sbx_err *err);

/* sbx-gc: destroy build VMs (sessions tmplbuild-*) whose build is gone,
 * its work directory missing or no longer locked by a live build. */
void sbx_tmplbuild_gc(struct sbx_state *st, int dry_run, sbx_gc_cb cb, void *ctx);

#endif
