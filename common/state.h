/* The state directory: durable records under LIB (/var/lib/sbx), runtime
 * sockets and locks under RUN (/run/sbx).  SBX_ROOT=R moves both to
 * R/var/lib/sbx and R/run/sbx.  Every path below them is opened relative to
 * a directory fd; names that come from users are checked first. */
#ifndef SBX_STATE_H
#define SBX_STATE_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include "err.h"

#define SBX_ID_MAX 63

struct sbx_state {
	char root[512]; /* "" or SBX_ROOT */
	char lib[600], run[600];
	int lib_fd, run_fd;            /* LIB, RUN */
	int sessions_fd, rsessions_fd; /* LIB/sessions, RUN/sessions */
	/* The caller's tenant (sbx_state_scope), "" for the operator.  Every
	 * lookup of a session by ID on the caller's behalf
	 * (sbx_session_lookup) treats another tenant's as nonexistent. */
	char tenant[SBX_ID_MAX + 1];
};

/* Open (creating, mode 0700) the state directories. */
int sbx_state_open(struct sbx_state *st, struct sbx_err *err);
void sbx_state_close(struct sbx_state *st);
/* New work (a create, a claim, a snapshot save, a template build or
 * import, an upload) needs LIB's filesystem to have more free than
 * sbx.yaml's audit.reserve (hostconf.h) plus the need bytes it is known to
 * write there (an upload's size; 0 when not known up front): below it, 75
 * (the trail's appends, which must not fail, go on in the reserve). */
int sbx_state_room(struct sbx_state *st, uint64_t need, struct sbx_err *err);
/* The same, read-only: nothing is created, and what does not exist yet is
 * -1 (sbx-create --dry-run, which creates nothing). */
int sbx_state_peek(struct sbx_state *st, struct sbx_err *err);

/* IDs: 1..63 of [A-Za-z0-9_.-], not starting with '.' or '-'. */
int sbx_id_check(const char *id, const char *what, struct sbx_err *err);
/* A tenant ID: an ID that is none of the reserved names ("_" and "@" name
 * the objects without a tenant, "operator" the owner of shipped
 * templates; compared without case).  3 otherwise. */
int sbx_tenant_check(const char *tenant, struct sbx_err *err);
/* A command run for a host user through sbx-serve (SBX_CALLER set, see
 * hostpath.h) acts as that user's tenant, $SBX_TENANT as the service set
 * it, and as no other: *tenant (NULL: none given) becomes it, and another
 * given is 77 (sbx-serve's "may not").  Otherwise nothing changes. */
int sbx_tenant_pin(const char **tenant, struct sbx_err *err);
/* Scope st to the caller: tenant (--tenant), else $SBX_TENANT when set,
 * else the operator (sbx_tenant_pin first).  A given but invalid tenant
 * (empty included) is 3. */
int sbx_state_scope(struct sbx_state *st, const char *tenant, struct sbx_err *err);
/* The scope's tenant, or NULL for the operator. */
static inline const char *sbx_state_tenant(const struct sbx_state *st)
{
	return st->tenant[0] ? st->tenant : NULL;
}
/* A session's state by name (its record's, or sbx_session_live_state's).
 * Over: crashed, stopped or expired (its record alone is left, until
 * reclaimed). */
int sbx_state_ended(const char *state);
/* A live state in which the session has its VM: running, or paused
 * (sbx-snapshot pause).  A suspended session has none (its monitor lives
 * on, holding the lock; sbx_state_live says so). */
int sbx_state_up(const char *live);
/* A live state in which the session exists and its monitor answers:
 * up, or suspended to disk. */
int sbx_state_live(const char *live);
/* A fresh random ID, "s-" + 12 hex digits, into buf[16]. */
void sbx_id_new(char *buf, size_t n);

/* flock on RUN/lock, for short global steps (ID claim). */
int sbx_lock_global(struct sbx_state *st, struct sbx_err *err);
/* The session lock RUN/sessions/ID/lock, held by the monitor for the
 * session's life.  nonblock: fail with 75 when busy.  Returns the locked fd;
 * -2 (no error set) when nonblock and busy. The file is re-checked after
 * locking so a lock taken on a file that cleanup just unlinked is retried. */
int sbx_lock_session(struct sbx_state *st, const char *id, int nonblock, int create, struct sbx_err *err);
/* Is the session's lock held by someone (its monitor is alive)? */
int sbx_session_locked(struct sbx_state *st, const char *id);

/* The entries of d (closed here) that are valid IDs, directories only if
 * asked, sorted; free each and the array.  -1 (ENOMEM) with nothing kept. */
int sbx_dir_ids(DIR *d, int dirs_only, char ***ids, size_t *n);

/* Write data to dirfd/name atomically: tmp + fsync + renameat + fsync(dir). */
int sbx_atomic_write_at(int dirfd, const char *name, const void *data, size_t n, int mode, struct sbx_err *err);
/* The same for readers (whole, old or new) without the fsyncs: for a file
 * whose loss in a host crash costs nothing, because everything it
 * describes is gone with the crash too. */
int sbx_replace_at(int dirfd, const char *name, const void *data, size_t n, int mode, struct sbx_err *err);
/* Remove dirfd/name and everything below it without following symlinks.
 * Missing is success. */
int sbx_rm_rf_at(int dirfd, const char *name);

/* Identity of a process that survives pid reuse: start time (clock ticks
 * since boot, /proc/PID/stat field 22) and the host boot ID. */
uint64_t sbx_proc_start_time(int pid);
int sbx_boot_id(char *buf, size_t n);

#endif
