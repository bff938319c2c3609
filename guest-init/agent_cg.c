/* guest-init agent: a cgroup per exec, made ahead of time and removed when
 * idle (agent.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent.h"
#include "init.h"

/* ---- cgroups ------------------------------------------------------------ */

void cg_close(struct cg *cg)
{
	for (int i = 0; i < CGF_N; i++) {
		closep(&cg->fd[i]);
		cg->fd[i] = -1;
	}
}

static int cg_read(int fd, char *buf, size_t cap)
{
	ssize_t n;

	if (fd < 0 || (n = pread(fd, buf, cap - 1, 0)) < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

static uint64_t kv_get(const char *buf, const char *key)
{
	size_t kl = strlen(key);

	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoull(p + kl + 1, NULL, 10);
	return 0;
}

/* mkdir cg->name and open its files; a missing file (a controller that
 * could not be enabled) only costs what it would have reported. */
static int cg_make(struct agent *a, struct cg *cg)
{
	static const char *const files[CGF_N] = {
		[CGF_KILL] = "cgroup.kill",
		[CGF_CPU] = "cpu.stat",
		[CGF_PEAK] = "memory.peak",
		[CGF_EVENTS] = "memory.events",
	};

	for (int i = 0; i < CGF_N; i++)
		cg->fd[i] = -1;
	if (mkdirat(a->cgroot, cg->name, 0755) < 0)
		return -1;
	cg->fd[CGF_DIR] = openat(a->cgroot, cg->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg->fd[CGF_DIR] < 0) {
		int err = errno;
		unlinkat(a->cgroot, cg->name, AT_REMOVEDIR);
		errno = err;
		return -1;
	}
	for (int i = CGF_DIR + 1; i < CGF_N; i++)
		cg->fd[i] = openat(cg->fd[CGF_DIR], files[i], (i == CGF_KILL ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
	return 0;
}

/* Try to remove the oldest cgroup awaiting removal.  A busy one goes to
 * the back of the line and backs off: its processes are not reaped yet. */
void cg_rmdir_one(struct agent *a)
{
	struct cg_rm r = a->rm[0];
	int busy = 0;

	memmove(a->rm, a->rm + 1, --a->nrm * sizeof(a->rm[0]));
	if (unlinkat(a->cgroot, r.name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		;
	else if (errno != EBUSY || ++r.tries >= RMDIR_TRIES)
		sbx_guest_log("agent: rmdir cgroup %s: %s", r.name, strerror(errno));
	else
		a->rm[a->nrm++] = r, busy = 1;
	a->rm_next = !a->nrm ? 0 : busy ? now_ns() + RMDIR_RETRY_NS : now_ns();
}

/* Removal waits for idle time (cg_idle): an rmdir costs about a
 * millisecond under TCG, and is retried while it fails with EBUSY, which
 * it does until the killed processes are reaped. */
void cg_remove(struct agent *a, struct cg *cg)
{
	if (!cg->name[0])
		return;
	cg_close(cg);
	if (a->nrm >= MAX_EXECS) {
		sbx_guest_log("agent: too many cgroups awaiting removal, leaving %s", cg->name);
	} else {
		memcpy(a->rm[a->nrm].name, cg->name, sizeof(cg->name));
		a->rm[a->nrm++].tries = 0;
		if (!a->rm_next)
			a->rm_next = now_ns();
	}
	cg->name[0] = 0;
}

/* A fresh cgroup for the exec.  As PID 1, idle time keeps a few made
 * ahead for the streams the host will most likely use next (the monitor
 * numbers them in order), so mkdir and the opens stay off the exec's
 * path.  A miss (say, a new host after a restore numbering from 1) drops
 * the pool and predicts again from there.  Every exec still gets a
 * cgroup nothing ran in before: memory.peak cannot be reset on 6.1. */
int cg_create(struct agent *a, struct exec *e)
{
	unsigned hit = CG_POOL;

	/* The monitor's warm-up is no guess of the next stream's, nor a miss:
	 * it gets a cgroup of its own and leaves the pool as it is. */
	if (e->stream == SBX_WARM_STREAM)
		goto make;
	for (unsigned i = 0; i < a->npool; i++)
		if (a->pool[i].stream == e->stream)
			hit = i;
	if (hit < CG_POOL) {
		e->cg = a->pool[hit];
		/* Streams the host skipped will not come back. */
		for (unsigned i = 0; i < hit; i++)
			cg_remove(a, &a->pool[i]);
		memmove(a->pool, a->pool + hit + 1, (a->npool - hit - 1) * sizeof(a->pool[0]));
		a->npool -= hit + 1;
	} else {
		for (unsigned i = 0; i < a->npool; i++)
			cg_remove(a, &a->pool[i]);
		a->npool = 0;
	}
	if (e->stream >= a->pool_next)
		a->pool_next = e->stream + 1;
	if (hit < CG_POOL)
		return 0;
make:
	e->cg.stream = e->stream;
	for (int i = 0; i < 4; i++) {
		if (i == 0)
			snprintf(e->cg.name, sizeof(e->cg.name), "sbx-exec-%u", e->stream);
		else /* an earlier exec's cgroup is still waiting to be removed */
			snprintf(e->cg.name, sizeof(e->cg.name), "sbx-exec-%u.%u", e->stream, ++a->cg_seq);
		if (cg_make(a, &e->cg) == 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	sbx_guest_log("agent: cgroup %s: %s", e->cg.name, strerror(errno));
	e->cg.name[0] = 0;
	return -1;
}

static int cg_pool_wanted(const struct agent *a)
{
	return a->is_pid1 && a->cgroot >= 0 && !a->host_down && a->npool < CG_POOL && now_ns() >= a->pool_retry;
}

/* Whether cg_idle has work. */
int cg_idle_work(const struct agent *a)
{
	return cg_pool_wanted(a) || (a->nrm && now_ns() >= a->rm_next);
}

/* One unit of deferred cgroup work, run only when the loop found nothing
 * else to do, so that an EXEC arriving meanwhile waits for at most one
 * mkdir or rmdir.  Refilling the pool comes first: the next exec needs
 * that mkdir anyway, removal can wait.  Only as PID 1: in host mode the
 * tests expect no sbx-exec-* directories but the live ones. */
void cg_idle(struct agent *a)
{
	if (cg_pool_wanted(a)) {
		struct cg *cg = &a->pool[a->npool];

		/* Bounded: a name taken (by a cgroup awaiting removal, or one
		 * a restore renumbered) is stepped around, as cg_create does,
		 * never the stream: skipping it made the next exec a miss. */
		cg->stream = a->pool_next;
		for (int i = 0; i < 4; i++) {
			if (i == 0)
				snprintf(cg->name, sizeof(cg->name), "sbx-exec-%u", cg->stream);
			else
				snprintf(cg->name, sizeof(cg->name), "sbx-exec-%u.%u", cg->stream, ++a->cg_seq);
			if (cg_make(a, cg) == 0) {
				a->npool++;
				a->pool_next++;
				return;
			}
			if (errno != EEXIST)
				break;
		}
		sbx_guest_log("agent: cgroup %s: %s", cg->name, strerror(errno));
		a->pool_retry = now_ns() + 1000 * NS_PER_MS; /* no busy loop on ENOSPC & co */
		return;
	}
	if (a->nrm && now_ns() >= a->rm_next)
		cg_rmdir_one(a);
}

/* Kill the exec's whole tree.  Without a cgroup (host mode, cgroup v1, or
 * mkdir failed) the process group is the best we have: the child called
 * setsid(), so its pgid is its pid, but a grandchild that calls setsid()
 * itself escapes.  killpg is only safe while the pid cannot be reused:
 * before the main process is reaped, or right after reaping it. */
void kill_tree(struct agent *a, struct exec *e)
{
	if (e->cg.fd[CGF_KILL] >= 0 && write(e->cg.fd[CGF_KILL], "1", 1) == 1)
		return;
	if (e->pid > 0)
		kill(-e->pid, SIGKILL);
}

void exec_stats(struct agent *a, struct exec *e, struct sbx_exit_info *x, int *oom)
{
	char buf[1024];

	if (!e->cg.name[0]) {
		/* Only the main process's own usage: the rest of the tree
		 * was never waited for by us. */
		x->cpu_user_us = (uint64_t)e->ru.ru_utime.tv_sec * 1000000u + (uint64_t)e->ru.ru_utime.tv_usec;
		x->cpu_sys_us = (uint64_t)e->ru.ru_stime.tv_sec * 1000000u + (uint64_t)e->ru.ru_stime.tv_usec;
		x->mem_peak = (uint64_t)e->ru.ru_maxrss * 1024u;
		return;
	}
	if (cg_read(e->cg.fd[CGF_CPU], buf, sizeof(buf)) == 0) {
		x->cpu_user_us = kv_get(buf, "user_usec");
		x->cpu_sys_us = kv_get(buf, "system_usec");
	}
	if (cg_read(e->cg.fd[CGF_PEAK], buf, sizeof(buf)) == 0)
		x->mem_peak = strtoull(buf, NULL, 10);
	if (cg_read(e->cg.fd[CGF_EVENTS], buf, sizeof(buf)) == 0)
		*oom = kv_get(buf, "oom_kill") > 0;
	/* A contained fork bomb shows here: forks refused by pids.max. */
	int pfd = openat(e->cg.fd[CGF_DIR], "pids.events", O_RDONLY | O_CLOEXEC);
	if (pfd >= 0) {
		if (cg_read(pfd, buf, sizeof(buf)) == 0)
			x->pids_hit = kv_get(buf, "max");
		close(pfd);
	}
}
