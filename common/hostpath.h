/* Host paths named by a caller (sbx-create --secret NAME=@FILE and -v,
 * a policy's secrets.from_file and from_env, the host side of sbx-cp), all
 * resolved here so one rule holds for every one of them:
 *
 * - For everyone, operator included, sbx's own state is never a source or a
 *   target: LIB, RUN, the build cache (SBX_CACHE, /var/cache/sbx),
 *   SBX_ROOT/etc/sbx, anything below them and anything that holds them; nor
 *   anything under /proc, /sys or /dev, or on a proc, sysfs or similar
 *   kernel file system.
 * - With a tenant (--tenant, SBX_TENANT), the path must lie beneath a root
 *   that sbx.yaml(5) lists under host_paths.read or host_paths.write
 *   ("{tenant}" standing for the tenant's ID), be free of ".." and contain
 *   no symbolic link below the root; environment variables must be listed
 *   in secrets.env_allow.  Nothing is listed by default.
 *
 * A path that passes is held as a directory fd and a name beneath it, and
 * every later open goes through openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) with O_NOFOLLOW, so a
 * symlink swapped in afterwards is refused rather than followed.
 * Refusals are SBX_EXIT_INVALID and name the key the path came from. */
#ifndef SBX_HOSTPATH_H
#define SBX_HOSTPATH_H

#include <limits.h>
#include <sys/stat.h>

#include "caller.h"
#include "err.h"

#define SBX_HOSTPATH_READ 1u
#define SBX_HOSTPATH_WRITE 2u
/* The operator's path: follow a symlink in the last component (a secret's
 * file, a -v directory), rather than take the link itself (an sbx-cp
 * source, which is copied as a link).  A tenant's never follows. */
#define SBX_HOSTPATH_FOLLOW 4u
/* The last component may be missing (a download's destination); its
 * directory must exist. */
#define SBX_HOSTPATH_MAY_BE_MISSING 8u

struct sbx_hostpath {
	int dir_fd;          /* O_PATH: the root (tenant) or the parent (operator) */
	char rel[PATH_MAX];  /* beneath dir_fd: "." or names without "." or ".." */
	char real[PATH_MAX]; /* the absolute path, for records and messages */
	int exists;          /* the last component exists */
	struct stat st;      /* its lstat, when it exists */
};

/* Resolve path for tenant (NULL or "": the operator) and check it.  key
 * names where the path came from in messages ("-v", "secrets.K.from_file",
 * "sbx-cp source").  Release with sbx_hostpath_close. */
int sbx_hostpath_resolve(const char *tenant, const char *path, unsigned how, const char *key, struct sbx_hostpath *hp,
			 struct sbx_err *err);
void sbx_hostpath_close(struct sbx_hostpath *hp);
static inline void sbx_hostpath_closep(struct sbx_hostpath *hp)
{
	sbx_hostpath_close(hp);
}
#define _cleanup_hostpath_ __attribute__((cleanup(sbx_hostpath_closep)))

/* Open hp's path, or sub (a relative path without ".." or NULL) below it,
 * with oflags | O_NOFOLLOW | O_CLOEXEC, beneath hp->dir_fd and with no
 * symlink anywhere; -1 with errno (ELOOP for a symlink, EXDEV for an escape). */
int sbx_hostpath_openat(const struct sbx_hostpath *hp, const char *sub, int oflags);
/* Is the directory or file st one of sbx's own state directories?  (A tree
 * walk checks each directory it enters: a bind mount of LIB inside an
 * allowed root is refused too.) */
int sbx_hostpath_is_state(const struct stat *st);
/* May tenant read the environment variable name (key as above)? */
int sbx_hostpath_env_ok(const char *tenant, const char *name, const char *key, struct sbx_err *err);

#endif
