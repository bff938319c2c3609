/* Host cgroups for a session's VMM: a hard CPU cap, a memory limit and a
 * pids limit, on cgroup v2 (unified /sys/fs/cgroup) or v1 (one hierarchy
 * per controller, as on our build machines).  The group is
 * <parent>/<session>, with parent "sbx", or "sbx-<hash of SBX_ROOT>" so test
 * roots never collide with the host's sessions. */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include "err.h"

struct sbx_cg_limits {
	unsigned cpu_milli; /* 1000 = one host CPU; 0 = no cap */
	uint64_t memory;    /* bytes; 0 = no limit */
	unsigned pids;      /* 0 = no limit */
	unsigned weight;    /* CPU weight, cgroup v2's scale (1..10000, 100 = the default); 0 = not set */
};

#define SBX_CG_MAX_FDS 4

/* Create the session's groups with the limits; fds receives open
 * cgroup.procs files that the VMM child writes "0" to before exec. */
int sbx_cgroup_create(const char *session, const struct sbx_cg_limits *l, int fds[SBX_CG_MAX_FDS], int *nfds,
		      struct sbx_err *err);
/* Move the calling process into the session's groups (they must exist):
 * the session's proxy, so that its threads, memory and CPU are the
 * session's.  No groups at all ("none") is success. */
int sbx_cgroup_enter(const char *session, struct sbx_err *err);
/* SIGKILL every process in the session's groups. */
void sbx_cgroup_kill(const char *session);
/* Sessions that have a group under this root's parent (for sbx-gc's orphan
 * search); free each and the array. */
int sbx_cgroup_list(char ***ids, size_t *n);
/* Rename the session's groups (a claimed pool member takes its session's
 * ID).  cgroup v1 allows it within a parent, v2 does not: -1 with errno
 * (EPERM on v2), nothing renamed (a partial rename is undone), and the
 * caller keeps the old name. */
int sbx_cgroup_rename(const char *from, const char *to);
/* Set the CPU cap of the session's groups (1000 = one CPU, 0 = none) and
 * its CPU weight (as in sbx_cg_limits; 0 leaves it as it is).  The weight
 * is a share under contention, not a limit: where it cannot be set, the
 * cap still decides the result. */
int sbx_cgroup_set_cpu(const char *session, unsigned cpu_milli, unsigned weight);
/* A warm-pool member's CPU weight while it boots and waits: a refill does
 * not take CPU from live sessions (a claim sets the default). */
#define SBX_CG_POOL_WEIGHT 10
#define SBX_CG_DEFAULT_WEIGHT 100
/* Remove the session's groups (they must be empty); missing is success. */
int sbx_cgroup_remove(const char *session);
/* Host-measured usage: CPU ns used, memory peak bytes; -1 when unknown. */
int sbx_cgroup_usage(const char *session, uint64_t *cpu_ns, uint64_t *mem_peak);
/* "v1", "v2" or "none". */
const char *sbx_cgroup_mode(void);

#endif
