/* Template specs (sbx-template(1) build -f SPEC): strict YAML, read with
 * the libyaml event API the way policies are (policy.c): unknown or
 * duplicate keys, anchors, aliases, tags, wrong types and values out of
 * range are errors naming file:line:col, code 3.  The builder reads only
 * struct sbx_tmplspec, never the YAML. */
#ifndef SBX_TMPLSPEC_H
#define SBX_TMPLSPEC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <stdbool.h>

#include "err.h"

#define SBX_TMPLSPEC_FILE_MAX (256u << 10) /* bytes of YAML */
#define SBX_TMPLSPEC_PACKAGES_MAX 512
#define SBX_TMPLSPEC_FILES_MAX 64
#define SBX_TMPLSPEC_RUN_MAX 64
#define SBX_TMPLSPEC_ENV_MAX 64
#define SBX_TMPLSPEC_REMOVE_MAX 64
#define SBX_TMPLSPEC_PATH_LEN 256 /* with the NUL */
#define SBX_TMPLSPEC_PKG_LEN 64   /* with the NUL */
#define SBX_TMPLSPEC_CMD_MAX 4096 /* bytes of one run: line */
#define SBX_TMPLSPEC_ENV_VAL_MAX 4096
#define SBX_TMPLSPEC_USER_LEN 33 /* 32 and the NUL */

/* debian:SUITE (debootstrap), TEMPLATE[@VERSION], or busybox (Debian's
 * busybox-static and netbase unpacked, no package manager). */
enum sbx_tmplspec_from { SBX_FROM_DEBIAN, SBX_FROM_TEMPLATE, SBX_FROM_BUSYBOX };

/* The one kernel package a spec's kernel: may name (guest-init's modules
 * and the PVH extraction are made for it). */
#define SBX_TMPLSPEC_KERNEL "linux-image-cloud-amd64"

struct sbx_tmplspec_file {
	char src[SBX_TMPLSPEC_PATH_LEN]; /* relative to the spec's directory */
	char dst[SBX_TMPLSPEC_PATH_LEN]; /* absolute in the guest, normalised */
	int mode;                        /* -1: the source's own */
};

struct sbx_tmplspec_run {
	char *cmd;                        /* one sh -c line */
	char user[SBX_TMPLSPEC_USER_LEN]; /* "": root */
};

struct sbx_tmplspec {
	char source[SBX_TMPLSPEC_PATH_LEN]; /* the file as shown in messages */
	enum sbx_tmplspec_from from;
	char from_ref[128]; /* the suite ("bookworm"), TEMPLATE[@VERSION] or "busybox" */
	/* "": the kernel and initramfs of the base (from: TEMPLATE) or of the
	 * default template; else the Debian kernel package the template's own
	 * vmlinux and initramfs (with this sbx's guest-init) are made from. */
	char kernel[SBX_TMPLSPEC_PKG_LEN];
	char (*remove)[SBX_TMPLSPEC_PATH_LEN]; /* guest paths, normalised */
	unsigned nremove;
	char (*packages)[SBX_TMPLSPEC_PKG_LEN];
	unsigned npackages;
	struct sbx_tmplspec_file *files;
	unsigned nfiles;
	struct sbx_tmplspec_run *run;
	unsigned nrun;
	json_t *env; /* object of strings, never NULL after a parse */
	char user[SBX_TMPLSPEC_USER_LEN];
	char workdir[SBX_TMPLSPEC_PATH_LEN];
};

/* Parse buf (name: for messages).  On error s is left empty (freeable). */
int sbx_tmplspec_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_tmplspec *s, struct sbx_err *err);
/* Read and parse a regular file of at most SBX_TMPLSPEC_FILE_MAX bytes. */
int sbx_tmplspec_load(const char *path, struct sbx_tmplspec *s, struct sbx_err *err);
/* The same from an open fd (O_NONBLOCK: a FIFO answers at once); with
 * redact, messages name the line and the rule but quote nothing of the
 * file (a tenant's, read by root). */
int sbx_tmplspec_load_fd(int fd, const char *path, bool redact, struct sbx_tmplspec *s, struct sbx_err *err);
void sbx_tmplspec_free(struct sbx_tmplspec *s);
/* The spec as canonical JSON (what the version hashes and the manifest
 * records as "spec"). */
json_t *sbx_tmplspec_json(const struct sbx_tmplspec *s);

/* Checks shared with the command line and the builder; 0 or -1 and why. */
int sbx_tmplspec_check_relpath(const char *s, char *why, size_t n);
int sbx_tmplspec_check_guestpath(const char *s, char *out, size_t outn, char *why, size_t n);
int sbx_tmplspec_check_user(const char *s);
/* A spec's own user: a name (sbx_tmplspec_check_user) or a uid up to
 * 65534, in decimal (what a session's user may be: sbx_user_parse). */
int sbx_tmplspec_check_spec_user(const char *v);
int sbx_tmplspec_check_package(const char *s);

#endif
