/* The OCI runtime spec's config.json, as sbx-oci reads it.  The bundle
 * is someone else's input (a Slurm user writes it; an engine copies an
 * image's config into it), so the file is bounded, duplicate keys and
 * wrong types refused, and only what a session can honour is kept:
 * process.args/env/cwd/user/terminal/consoleSize/rlimits, root.path,
 * annotations, linux.resources (as a session's shape).  mounts are
 * checked: the guest's own (/proc, /sys, /dev...) and the engine's own
 * files are accepted and not made, anything else refused (oci_linux.c). */
#ifndef SBX_OCI_SPEC_H
#define SBX_OCI_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"

#define SBX_OCI_CONFIG_MAX (1u << 20)   /* bytes of config.json */
#define SBX_OCI_ARGS_MAX 4096u          /* process.args entries */
#define SBX_OCI_ENV_MAX 1024u           /* process.env entries */
#define SBX_OCI_STR_MAX (64u << 10)     /* one arg or env entry */
#define SBX_OCI_ARGV_BYTES (512u << 10) /* args and env together: one exec frame */
#define SBX_OCI_PATH_MAX 4096u          /* root.path, process.cwd */
#define SBX_OCI_ANNOTATIONS_MAX 256u
#define SBX_OCI_UID_MAX 65534u /* what the guest agent takes */
#define SBX_OCI_MOUNTS_MAX 256u

/* linux.resources as a session's shape (resources.* of sbx-policy(5),
 * the same ranges); 0: not given, the policy's value stands. */
struct sbx_oci_resources {
	uint64_t memory;    /* bytes, a whole number of MiB */
	unsigned vcpus;     /* from the CPU quota, rounded up */
	unsigned cpu_milli; /* host CPUs x 1000: quota / period */
	unsigned pids;      /* pids.limit: resources.pids.per_session */
};

#define SBX_OCI_RLIMITS_MAX 16u /* Linux's RLIMIT_NLIMITS */
struct sbx_oci_rlimit {
	uint32_t resource; /* RLIMIT_* */
	uint64_t soft, hard;
};

struct sbx_oci_spec {
	char **args; /* NULL-terminated */
	size_t argc;
	char **env; /* NULL-terminated */
	size_t envc;
	char cwd[SBX_OCI_PATH_MAX + 1];
	uint32_t uid, gid;
	int terminal;
	unsigned rows, cols;                                /* process.consoleSize; 0: not given */
	struct sbx_oci_rlimit rlimits[SBX_OCI_RLIMITS_MAX]; /* process.rlimits, set in the guest */
	unsigned nrlimits;
	char root[SBX_OCI_PATH_MAX + 1];
	int root_readonly;
	json_t *annotations; /* object of strings, never NULL after a parse */
	struct sbx_oci_resources res;
};

/* Parse len bytes of config.json into s (zeroed first).  3 with a message
 * naming the field on anything malformed or over a bound. */
int sbx_oci_spec_parse(const char *buf, size_t len, struct sbx_oci_spec *s, struct sbx_err *err);
/* The same of a process object alone (`exec --process FILE`): args, env,
 * cwd, user, terminal; root and annotations stay empty. */
int sbx_oci_process_parse(const char *buf, size_t len, struct sbx_oci_spec *s, struct sbx_err *err);
/* Read BUNDLE/config.json through bundle_dfd (a regular file, at most
 * SBX_OCI_CONFIG_MAX) and parse it. */
int sbx_oci_spec_load(int bundle_dfd, struct sbx_oci_spec *s, struct sbx_err *err);
void sbx_oci_spec_free(struct sbx_oci_spec *s);

/* oci_linux.c, for sbx_oci_spec_parse: linux.resources into res (NULL:
 * absent), and the mounts array checked (NULL: absent).  3 naming the
 * field on what a session cannot honour. */
int sbx_oci_resources_parse(json_t *r, struct sbx_oci_resources *res, struct sbx_err *err);
int sbx_oci_mounts_check(json_t *m, struct sbx_err *err);

#endif
