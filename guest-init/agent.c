/* guest-init agent: serves the host over one byte stream (the virtio-serial
 * port as PID 1, an inherited socket in --agent-fd mode).
 *
 * One thread, one epoll loop.  PID 1 must never block on a single exec, so
 * every fd is nonblocking, every child runs in its own session (and cgroup
 * when we are PID 1 on cgroup2), and everything an exec produces goes into
 * one ordered output queue: a stream's output always precedes its EXIT.
 * The host is trusted more than the exec'd code but its frames are still
 * parsed defensively: a bad frame ends the operation it carried, never us. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <linux/random.h>
#include <linux/vm_sockets.h>

#include "init.h"
#include "port.h"
#include "proto.h"

#define MAX_EXECS 256
#define OUTQ_CAP (8u << 20)                 /* stop reading exec output above this */
#define IN_CAP (SBX_FRAME_HDR + SBX_FRAME_MAX)
#define NS_PER_MS 1000000ull
#define DRAIN_GRACE_NS (2000 * NS_PER_MS)  /* see exec_reaped() */
#define RECONNECT_NS (100 * NS_PER_MS)
#define RMDIR_RETRY_NS (10 * NS_PER_MS)
#define RMDIR_TRIES 300
#define CHILD_STACK (256u << 10)
#define CG_ROOT "/sys/fs/cgroup"
#define CG_NAME_MAX 40
#define CG_POOL 3        /* cgroups made ahead of time, see cg_idle() */
#define CG_RM_BACKLOG 16 /* past this, removal stops waiting for idle time */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* ERROR codes follow the commands' exit statuses (design.md). */
enum { ERR_INVALID = 3, ERR_NOEXEC = 4, ERR_CONFLICT = 5, ERR_INTERNAL = 70, ERR_TEMP = 75 };
enum { IO_IN, IO_OUT, IO_ERR, IO_N };
enum { K_HOST = 1, K_SIG, K_IO, K_LISTEN, K_PORT };

enum { CGF_DIR, CGF_KILL, CGF_CPU, CGF_PEAK, CGF_EVENTS, CGF_N };

/* A cgroup with every file the agent uses already open: under TCG each
 * open of a cgroup file costs ~0.1 ms, so they are opened ahead of time. */
struct cg {
	char name[CG_NAME_MAX]; /* under the cgroup root, "" without one */
	uint32_t stream;        /* the stream a pooled cgroup is named for */
	int fd[CGF_N];
};

struct exec {
	int used;
	uint32_t stream, gen;
	pid_t pid;               /* main process, also its process group */
	int pty, reaped, wstatus;
	int fd[IO_N];            /* parent ends; for a pty OUT is the master, IN a dup of it */
	int polled[IO_N];
	struct cg cg;
	struct sbx_buf in;       /* stdin received, not yet written */
	size_t in_off;
	uint32_t credit_used;    /* stdin bytes received and not yet given back by WINDOW */
	int in_eof;
	uint32_t forced;         /* SBX_R_TIMEOUT / SBX_R_KILLED once we killed it */
	struct rusage ru;
	uint64_t t0, t_end, deadline, drain_deadline;
};

struct cg_rm {
	char name[CG_NAME_MAX];
	int tries;
};

struct agent {
	int ep, host, sig, devnull, cgroot, is_pid1;
	uint32_t session_pids; /* pids.max last written on the execs' parent */
	int done, rc;
	int host_down, hello_seen; /* hello_seen: the host has had bytes since our last HELLO */
	int host_out;              /* EPOLLOUT currently requested on the host fd */
	uint64_t host_retry;
	int lfd;                   /* listening for the host (vsock); -1: host is the port */
	unsigned accepted;         /* hosts accepted on lfd */
	uint8_t *in;
	size_t in_len;
	struct sbx_buf out;
	size_t out_off;
	size_t out_frame;          /* start of the frame out_off is in (or at) */
	int paused;
	uint32_t gen, nlive, cg_seq;
	struct exec ex[MAX_EXECS];
	struct cg_rm rm[MAX_EXECS];
	unsigned nrm;
	uint64_t rm_next;
	struct cg pool[CG_POOL];
	unsigned npool;
	uint32_t pool_next;      /* the stream the next pooled cgroup is named for */
	int started;             /* an exec started in this loop round */
	uint64_t pool_retry;
	char *stack;
	int ign[64], nign;       /* signals we inherited as ignored: reset in children */
	struct sbx_gports *ports; /* sbx-port's connections (port.c) */
};

struct child_args {
	char **argv, **envp, **shargv;
	const char *path, *cwd, *pts;
	int fd[IO_N], procs;
	uid_t uid;
	gid_t gid;
	const int *ign;
	int nign;
};

static inline void closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}
#define _cleanup_close_ __attribute__((cleanup(closep)))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- output queue ------------------------------------------------------- */

static size_t outq_pending(const struct agent *a)
{
	return a->out.len - a->out_off;
}

static void send_error(struct agent *a, uint32_t stream, uint32_t code, const char *msg)
{
	size_t off = sbx_frame_begin(&a->out, SBX_F_ERROR, stream);
	sbx_tlv_u32(&a->out, SBX_T_CODE, code);
	sbx_tlv_str(&a->out, SBX_T_MSG, msg);
	sbx_frame_end(&a->out, off);
}

static void send_u32(struct agent *a, uint8_t type, uint32_t stream, uint16_t tag, uint32_t v)
{
	size_t off = sbx_frame_begin(&a->out, type, stream);
	sbx_tlv_u32(&a->out, tag, v);
	sbx_frame_end(&a->out, off);
}

static void send_hello(struct agent *a)
{
	struct utsname u;
	size_t off;

	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	off = sbx_frame_begin(&a->out, SBX_F_HELLO, 0);
	sbx_tlv_u32(&a->out, SBX_T_VERSION, SBX_PROTO_VERSION);
	sbx_tlv_str(&a->out, SBX_T_KERNEL, u.release);
	sbx_tlv_str(&a->out, SBX_T_HOSTNAME, u.nodename);
	sbx_frame_end(&a->out, off);
	a->hello_seen = 0;
}

static void host_lost(struct agent *a, int err)
{
	sbx_gports_reset(a->ports);
	if (a->lfd >= 0) {
		/* Listening (vsock): wait for the next host to connect, e.g.
		 * the monitor of a session restored from a snapshot, whose VMM
		 * has none of the old connections. */
		if (!a->host_down)
			sbx_guest_log("agent: host disconnected (%s)", err ? strerror(err) : "EOF");
		epoll_ctl(a->ep, EPOLL_CTL_DEL, a->host, NULL);
		close(a->host);
		a->host = -1;
		a->host_down = 1;
		a->host_out = 0;
		a->in_len = 0;
		return;
	}
	if (!a->is_pid1) {
		a->done = 1;
		a->rc = err ? -1 : 0;
		if (err)
			sbx_guest_log("agent: host channel: %s", strerror(err));
		return;
	}
	/* virtio-serial reads EOF (and polls HUP) while no host is attached;
	 * after a snapshot restore a new one attaches.  Whatever it sends
	 * starts a new byte stream, so a partial frame must not prefix it. */
	if (!a->host_down)
		sbx_guest_log("agent: host disconnected (%s)", err ? strerror(err) : "EOF");
	a->host_down = 1;
	a->in_len = 0;
	a->host_retry = now_ns() + RECONNECT_NS;
}

/* The host fd is edge-triggered.  EPOLLOUT is asked for only while output
 * waits (every write the host drains would otherwise wake us once more:
 * expensive under TCG), and while the host is away: a virtio-serial port
 * wakes its pollers on reconnect and then polls writable, not readable. */
static void host_interest(struct agent *a)
{
	int want = a->host_down || outq_pending(a);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET | (want ? EPOLLOUT : 0),
				  .data.u64 = K_HOST };

	if (a->host < 0)
		return;
	if (want != a->host_out && epoll_ctl(a->ep, EPOLL_CTL_MOD, a->host, &ev) == 0)
		a->host_out = want;
}

static uint32_t outq_frame_len(const struct agent *a)
{
	const uint8_t *h = a->out.data + a->out_frame;

	return SBX_FRAME_HDR + ((uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24);
}

/* Frames go into the queue whole, so their boundaries can be followed as
 * bytes leave. */
static void outq_sent(struct agent *a)
{
	while (a->out_frame + SBX_FRAME_HDR <= a->out_off && a->out_frame + outq_frame_len(a) <= a->out_off)
		a->out_frame += outq_frame_len(a);
}

/* A new connection starts a new byte stream: the rest of a frame the old
 * one took only part of is dropped, so the new host reads whole frames. */
static void outq_resync(struct agent *a)
{
	if (a->out_off > a->out_frame) {
		a->out_off = a->out_frame + outq_frame_len(a);
		a->out_frame = a->out_off;
	}
}

static void host_flush(struct agent *a)
{
	if (a->out.oom) {
		/* Only reachable when realloc fails, i.e. the guest is out of
		 * memory: frame boundaries are lost, the host will resync. */
		sbx_guest_log("agent: output queue out of memory, dropping it");
		sbx_buf_free(&a->out);
		a->out_off = a->out_frame = 0;
	}
	while (!a->host_down && outq_pending(a)) {
		ssize_t w = write(a->host, a->out.data + a->out_off, outq_pending(a));
		if (w > 0) {
			a->out_off += (size_t)w;
			outq_sent(a);
			a->hello_seen = 1;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			break;
		} else {
			host_lost(a, w < 0 ? errno : EPIPE);
			break;
		}
	}
	if (!outq_pending(a)) {
		if (a->out.cap > (4u << 20))
			sbx_buf_free(&a->out); /* give a burst's memory back */
		sbx_buf_reset(&a->out);
		a->out_off = a->out_frame = 0;
	} else if (a->out_frame > (1u << 20) && a->out_frame > a->out.len / 2) {
		/* Keep the frame being written whole (see outq_resync). */
		memmove(a->out.data, a->out.data + a->out_frame, a->out.len - a->out_frame);
		a->out.len -= a->out_frame;
		a->out_off -= a->out_frame;
		a->out_frame = 0;
	}
	host_interest(a);
}

/* ---- epoll bookkeeping -------------------------------------------------- */

static uint64_t io_tag(const struct agent *a, const struct exec *e, int io)
{
	return K_IO | (uint64_t)io << 8 | (uint64_t)(e - a->ex) << 16 | (uint64_t)e->gen << 32;
}

/* Level-triggered interest in one exec fd: output while the queue has room,
 * stdin while bytes wait for the child. */
static void io_watch(struct agent *a, struct exec *e, int io)
{
	int want = e->fd[io] >= 0 &&
		   (io == IO_IN ? e->in.len > e->in_off : !a->paused);
	struct epoll_event ev = { .events = io == IO_IN ? EPOLLOUT : EPOLLIN,
				  .data.u64 = io_tag(a, e, io) };

	if (want == e->polled[io])
		return;
	if (epoll_ctl(a->ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, e->fd[io], &ev) == 0)
		e->polled[io] = want;
	else
		sbx_guest_log("agent: epoll_ctl: %s", strerror(errno));
}

static void io_close(struct agent *a, struct exec *e, int io)
{
	if (e->fd[io] < 0)
		return;
	/* A pty's IN is a dup of OUT: close alone would not unregister. */
	if (e->polled[io])
		epoll_ctl(a->ep, EPOLL_CTL_DEL, e->fd[io], NULL);
	e->polled[io] = 0;
	close(e->fd[io]);
	e->fd[io] = -1;
}

static void set_paused(struct agent *a, int paused)
{
	a->paused = paused;
	sbx_gports_pause(a->ports, paused);
	for (unsigned i = 0; i < MAX_EXECS; i++) {
		if (!a->ex[i].used)
			continue;
		io_watch(a, &a->ex[i], IO_OUT);
		io_watch(a, &a->ex[i], IO_ERR);
	}
}

/* ---- cgroups ------------------------------------------------------------ */

static void cg_close(struct cg *cg)
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
		[CGF_KILL] = "cgroup.kill", [CGF_CPU] = "cpu.stat",
		[CGF_PEAK] = "memory.peak", [CGF_EVENTS] = "memory.events",
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
		cg->fd[i] = openat(cg->fd[CGF_DIR], files[i],
				   (i == CGF_KILL ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
	return 0;
}

/* Try to remove the oldest cgroup awaiting removal.  A busy one goes to
 * the back of the line and backs off: its processes are not reaped yet. */
static void cg_rmdir_one(struct agent *a)
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
static void cg_remove(struct agent *a, struct cg *cg)
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
static int cg_create(struct agent *a, struct exec *e)
{
	unsigned hit = CG_POOL;

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
	return a->is_pid1 && a->cgroot >= 0 && !a->host_down && a->npool < CG_POOL &&
	       now_ns() >= a->pool_retry;
}

/* Whether cg_idle has work. */
static int cg_idle_work(const struct agent *a)
{
	return cg_pool_wanted(a) || (a->nrm && now_ns() >= a->rm_next);
}

/* One unit of deferred cgroup work, run only when the loop found nothing
 * else to do, so that an EXEC arriving meanwhile waits for at most one
 * mkdir or rmdir.  Refilling the pool comes first: the next exec needs
 * that mkdir anyway, removal can wait.  Only as PID 1: in host mode the
 * tests expect no sbx-exec-* directories but the live ones. */
static void cg_idle(struct agent *a)
{
	if (cg_pool_wanted(a)) {
		struct cg *cg = &a->pool[a->npool];

		/* Bounded: a name taken by a cgroup awaiting removal (a
		 * reused stream number) is skipped, not waited for. */
		for (int i = 0; i < 4; i++) {
			cg->stream = a->pool_next++;
			snprintf(cg->name, sizeof(cg->name), "sbx-exec-%u", cg->stream);
			if (cg_make(a, cg) == 0) {
				a->npool++;
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
static void kill_tree(struct agent *a, struct exec *e)
{
	if (e->cg.fd[CGF_KILL] >= 0 && write(e->cg.fd[CGF_KILL], "1", 1) == 1)
		return;
	if (e->pid > 0)
		kill(-e->pid, SIGKILL);
}

static void exec_stats(struct agent *a, struct exec *e, struct sbx_exit_info *x, int *oom)
{
	char buf[1024];

	if (!e->cg.name[0]) {
		/* Only the main process's own usage: the rest of the tree
		 * was never waited for by us. */
		x->cpu_user_us = (uint64_t)e->ru.ru_utime.tv_sec * 1000000u +
				 (uint64_t)e->ru.ru_utime.tv_usec;
		x->cpu_sys_us = (uint64_t)e->ru.ru_stime.tv_sec * 1000000u +
				(uint64_t)e->ru.ru_stime.tv_usec;
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

/* ---- exec table --------------------------------------------------------- */

static struct exec *exec_find(struct agent *a, uint32_t stream)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used && a->ex[i].stream == stream)
			return &a->ex[i];
	return NULL;
}

static struct exec *exec_alloc(struct agent *a, uint32_t stream)
{
	for (unsigned i = 0; i < MAX_EXECS; i++) {
		struct exec *e = &a->ex[i];
		if (e->used)
			continue;
		memset(e, 0, sizeof(*e));
		e->used = 1;
		e->stream = stream;
		e->gen = ++a->gen;
		for (int io = 0; io < IO_N; io++)
			e->fd[io] = -1;
		for (int j = 0; j < CGF_N; j++)
			e->cg.fd[j] = -1;
		a->nlive++;
		return e;
	}
	return NULL;
}

static void exec_release(struct agent *a, struct exec *e)
{
	for (int io = 0; io < IO_N; io++)
		io_close(a, e, io);
	sbx_buf_free(&e->in);
	cg_close(&e->cg);
	e->used = 0;
	a->nlive--;
}

/* Which writable disks have no space left (SBX_DISK_FULL_*): the root's
 * (an overlay, whose statfs is its upper layer's, the session's disk) and
 * every other read-write ext4 mount (volumes: workspaces).  Checked at an
 * exec's end, so "the exec ran into a full disk" means it left one full;
 * the kernel keeps no count of ENOSPC to ask instead.  Full: less than
 * 1 MiB, or 1% of the disk, available (a write of a few KiB can still
 * fail when ext4's last blocks are its own). */
static int is_full(const char *dir)
{
	struct statfs sf;
	if (statfs(dir, &sf) < 0 || !sf.f_blocks)
		return 0;
	uint64_t avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
	uint64_t pct = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize / 100;
	return avail < (pct < (1u << 20) ? pct : (1u << 20));
}

static uint32_t disks_full(void)
{
	uint32_t full = 0;
	if (is_full("/"))
		full |= SBX_DISK_FULL_SCRATCH;
	FILE *f = fopen("/proc/self/mounts", "re");
	char line[1024];
	while (f && fgets(line, sizeof line, f)) {
		char dev[256], dir[512], type[32], opts[256];
		if (sscanf(line, "%255s %511s %31s %255s", dev, dir, type, opts) != 4 || strcmp(type, "ext4") ||
		    strncmp(opts, "rw", 2) || (opts[2] && opts[2] != ','))
			continue;
		if (is_full(dir))
			full |= SBX_DISK_FULL_VOLUME;
	}
	if (f)
		fclose(f);
	return full;
}

static void exec_finish(struct agent *a, struct exec *e)
{
	struct sbx_exit_info x = { 0 };
	int oom = 0;

	x.wall_us = (e->t_end - e->t0) / 1000u;
	if (WIFEXITED(e->wstatus)) {
		x.status = (uint32_t)WEXITSTATUS(e->wstatus);
		x.reason = SBX_R_EXITED;
	} else {
		x.signo = (uint32_t)WTERMSIG(e->wstatus) & 127u;
		x.status = 128u + x.signo;
		x.reason = SBX_R_SIGNALLED;
	}
	exec_stats(a, e, &x, &oom);
	x.disk_full = disks_full();
	/* What we did to it wins over how it died: we sent that SIGKILL. */
	if (e->forced) {
		x.reason = e->forced;
		x.status = e->forced == SBX_R_TIMEOUT ? 124 : 137;
		x.signo = SIGKILL;
	} else if (x.reason == SBX_R_SIGNALLED && x.signo == SIGKILL && oom) {
		x.reason = SBX_R_OOM;
	}
	sbx_exit_encode(&a->out, e->stream, &x);
	cg_remove(a, &e->cg);
	exec_release(a, e);
}

static void maybe_finish(struct agent *a, struct exec *e)
{
	if (e->reaped && e->fd[IO_OUT] < 0 && e->fd[IO_ERR] < 0)
		exec_finish(a, e);
}

static void exec_reaped(struct agent *a, struct exec *e, int status, const struct rusage *ru)
{
	e->reaped = 1;
	e->wstatus = status;
	e->ru = *ru;
	e->t_end = now_ns();
	/* An exec's tree ends with its main process: whatever it left behind
	 * (background jobs, daemons) dies with it, so nothing outlives the
	 * exec, holds its pipes open or keeps using its limits. */
	kill_tree(a, e);
	e->pid = 0;
	/* Everything still holding the pipes is dead now, so EOF follows
	 * the buffered bytes at once.  The grace period only covers an fd
	 * passed out of the tree (SCM_RIGHTS) or an escapee in host mode. */
	e->drain_deadline = e->t_end + DRAIN_GRACE_NS;
	maybe_finish(a, e);
}

static void exec_kill(struct agent *a, struct exec *e, uint32_t reason)
{
	if (e->reaped || e->forced)
		return;
	e->forced = reason;
	kill_tree(a, e);
	if (e->cg.name[0] && e->pid > 0)
		kill(-e->pid, SIGKILL); /* in case cgroup.kill is missing (< 5.14) */
}

static void reap(struct agent *a)
{
	struct signalfd_siginfo si;
	struct rusage ru;
	pid_t pid;
	int st;

	while (read(a->sig, &si, sizeof(si)) == sizeof(si))
		;
	/* As PID 1 every orphan in the guest is reparented to us: reap them
	 * all, and just forget the ones that are no exec's main process. */
	while ((pid = wait4(-1, &st, WNOHANG | __WALL, &ru)) > 0 || (pid < 0 && errno == EINTR)) {
		for (unsigned i = 0; pid > 0 && i < MAX_EXECS; i++) {
			struct exec *e = &a->ex[i];
			if (e->used && !e->reaped && e->pid == pid) {
				exec_reaped(a, e, st, &ru);
				break;
			}
		}
	}
	if (a->nrm)
		a->rm_next = now_ns(); /* reaped zombies may have emptied some */
}

/* ---- spawning ----------------------------------------------------------- */

static void __attribute__((noreturn)) child_fail(const char *what, const char *arg, int err, int code)
{
	const char *parts[] = { "sbx: ", what, arg ? arg : "", ": ", strerrordesc_np(err), "\n" };
	char msg[PATH_MAX + 256];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		const char *s = parts[i] ? parts[i] : "Unknown error";
		size_t l = strnlen(s, sizeof(msg) - 1 - n);
		memcpy(msg + n, s, l);
		n += l;
	}
	(void)!write(STDERR_FILENO, msg, n);
	_exit(code);
}

static void try_exec(const struct child_args *c, const char *file)
{
	execve(file, c->argv, c->envp);
	if (errno == ENOEXEC) { /* a script without #!: what execvp does */
		c->shargv[1] = (char *)file;
		execve("/bin/sh", c->shargv, c->envp);
		errno = ENOEXEC;
	}
}

/* execvpe, but searching the exec's own PATH (glibc's uses ours). */
static void __attribute__((noreturn)) exec_path(const struct child_args *c)
{
	const char *file = c->argv[0];
	size_t fl = strlen(file);
	char buf[PATH_MAX];
	int err = ENOENT, eacces = 0;

	if (strchr(file, '/')) {
		try_exec(c, file);
		err = errno;
		goto fail;
	}
	for (const char *p = c->path;; p++) {
		const char *q = strchrnul(p, ':');
		size_t dl = (size_t)(q - p);
		if (dl + fl + 2 <= sizeof(buf)) {
			memcpy(buf, p, dl);
			if (dl) /* an empty element is the current directory */
				buf[dl++] = '/';
			memcpy(buf + dl, file, fl + 1);
			/* A failed execve still builds a whole new mm and copies
			 * argv and envp into it before it looks the file up:
			 * under TCG each miss costs about a millisecond, a
			 * lookup tens of microseconds.  Only a name that is
			 * missing skips execve, so errors stay execve's own. */
			if (faccessat(AT_FDCWD, buf, F_OK, 0) == 0)
				try_exec(c, buf);
			if (errno == EACCES)
				eacces = 1;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE &&
				 errno != ENODEV && errno != ETIMEDOUT) {
				err = errno;
				goto fail;
			}
		}
		if (!*q)
			break;
		p = q;
	}
	if (eacces)
		err = EACCES;
fail:
	child_fail(file, NULL, err, err == ENOENT || err == ENOTDIR ? 127 : 126);
}

/* Runs on its own stack in the parent's memory (CLONE_VM|CLONE_VFORK, as
 * posix_spawn does) until execve: no malloc, no stdio, raw set*id syscalls
 * (glibc's wrappers would try to broadcast to threads). */
static int child_main(void *arg)
{
	const struct child_args *c = arg;
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;

	if (c->procs >= 0 && write(c->procs, "0", 1) != 1)
		child_fail("cannot join the exec's cgroup", NULL, errno, 126);
	setsid();
	if (c->pts) {
		int t = open(c->pts, O_RDWR);
		if (t < 0)
			child_fail("cannot open ", c->pts, errno, 126);
		ioctl(t, TIOCSCTTY, 0);
		for (int i = 0; i < 3; i++)
			dup2(t, i);
		if (t > 2)
			close(t);
	} else {
		/* The agent keeps 0-2 occupied, so these never collide. */
		for (int i = 0; i < 3; i++)
			dup2(c->fd[i], i);
	}
	for (int i = 0; i < c->nign; i++)
		sigaction(c->ign[i], &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (syscall(SYS_setgroups, 0, NULL) < 0 ||
	    syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0 ||
	    syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0)
		child_fail("cannot switch user", NULL, errno, 126);
	if (chdir(c->cwd) < 0)
		child_fail("cannot change directory to ", c->cwd, errno, 126);
	exec_path(c);
}

static int has_var(char *const *env, size_t n, const char *name, const char **val)
{
	size_t l = strlen(name);

	for (size_t i = 0; i < n; i++)
		if (!strncmp(env[i], name, l) && env[i][l] == '=') {
			if (val)
				*val = env[i] + l + 1;
			return 1;
		}
	return 0;
}

/* The request's environment plus what a login would have given it. */
static int build_env(const struct sbx_exec_req *r, struct child_args *c)
{
	char **env = calloc(r->envc + 7, sizeof(*env));
	size_t n = r->envc;
	int root = c->uid == 0;

	if (!env)
		return -1;
	memcpy(env, r->env, n * sizeof(*env));
	c->path = DEFAULT_PATH;
	if (!has_var(env, n, "PATH", &c->path))
		env[n++] = (char *)"PATH=" DEFAULT_PATH;
	if (!has_var(env, n, "HOME", NULL))
		env[n++] = root ? (char *)"HOME=/root" : (char *)"HOME=/home/user";
	if (!has_var(env, n, "USER", NULL))
		env[n++] = root ? (char *)"USER=root" : (char *)"USER=user";
	if (!has_var(env, n, "LOGNAME", NULL))
		env[n++] = root ? (char *)"LOGNAME=root" : (char *)"LOGNAME=user";
	if (c->pts && !has_var(env, n, "TERM", NULL))
		env[n++] = (char *)"TERM=xterm-256color";
	/* UTF-8 unless asked otherwise: the C locale is ASCII.  Debian's
	 * libc-bin ships C.UTF-8 (/usr/lib/locale/C.utf8); where a root has no
	 * libc (busybox) the variable is harmless. */
	if (!has_var(env, n, "LANG", NULL) && !has_var(env, n, "LC_ALL", NULL))
		env[n++] = (char *)"LANG=C.UTF-8";
	env[n] = NULL;
	c->envp = env;

	c->shargv = calloc(r->argc + 2, sizeof(*c->shargv));
	if (!c->shargv)
		return -1;
	c->shargv[0] = (char *)"/bin/sh";
	for (size_t i = 1; i < r->argc; i++)
		c->shargv[i + 1] = r->argv[i];
	c->argv = r->argv;
	return 0;
}

static int open_pty(struct exec *e, const struct sbx_exec_req *r, char *pts, size_t cap)
{
	struct winsize ws = { .ws_row = (unsigned short)r->rows, .ws_col = (unsigned short)r->cols };
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (m < 0)
		return -1;
	e->fd[IO_OUT] = m;
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, pts, cap) != 0 ||
	    fcntl(m, F_SETFL, O_NONBLOCK) < 0)
		return -1;
	if ((r->rows || r->cols) && ioctl(m, TIOCSWINSZ, &ws) < 0)
		return -1;
	e->fd[IO_IN] = fcntl(m, F_DUPFD_CLOEXEC, 3);
	return e->fd[IO_IN] < 0 ? -1 : 0;
}

/* The child's end stays blocking: programs do not expect EAGAIN on stdio. */
static int open_pipe(int *parent, int *child, int child_reads)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	*parent = p[child_reads ? 1 : 0];
	*child = p[child_reads ? 0 : 1];
	return fcntl(*parent, F_SETFL, O_NONBLOCK);
}

static int open_stdio(struct agent *a, struct exec *e, const struct sbx_exec_req *r,
		      struct child_args *c, char *pts, size_t cap)
{
	if (r->flags & SBX_EXEC_PTY) {
		e->pty = 1;
		c->pts = pts;
		return open_pty(e, r, pts, cap);
	}
	if (open_pipe(&e->fd[IO_OUT], &c->fd[IO_OUT], 0) < 0 ||
	    open_pipe(&e->fd[IO_ERR], &c->fd[IO_ERR], 0) < 0)
		return -1;
	if (r->flags & SBX_EXEC_STDIN)
		return open_pipe(&e->fd[IO_IN], &c->fd[IO_IN], 1);
	c->fd[IO_IN] = a->devnull;
	return 0;
}

/* clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP): the child is born in
 * its cgroup.  Moving it there afterwards (writing cgroup.procs) takes the
 * cgroup threadgroup rwsem for writing, which waits for an RCU grace
 * period: ~10 ms per exec under TCG, twice the rest of the exec.  glibc
 * has no clone3 wrapper that runs a function on a new stack, hence the
 * few lines of assembly (the child must not return into our frame). */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls,
		set_tid, set_tid_size, cgroup;
};
#define SBX_CLONE_INTO_CGROUP 0x200000000ull

#if defined(__x86_64__) && defined(SYS_clone3)
static pid_t clone3_run(struct clone3_args *ca, int (*fn)(void *), void *arg)
{
	register int (*r12)(void *) __asm__("r12") = fn;
	register void *r13 __asm__("r13") = arg;
	long ret;

	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t" /* child: on the new stack */
			 "mov %%r13, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %%eax, %%edi\n\t"
			 "mov %[exit], %%eax\n\t"
			 "syscall\n\t"
			 "hlt\n"
			 "1:"
			 : "=a"(ret)
			 : "0"((long)SYS_clone3), "D"(ca), "S"(sizeof(*ca)), "r"(r12), "r"(r13),
			   [exit] "i"(SYS_exit)
			 : "rcx", "r11", "memory");
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return (pid_t)ret;
}
#else
static pid_t clone3_run(struct clone3_args *ca, int (*fn)(void *), void *arg)
{
	errno = ENOSYS;
	return -1;
}
#endif

static pid_t spawn_child(struct agent *a, struct exec *e, struct child_args *c)
{
	char path[CG_NAME_MAX + 16];
	pid_t pid = -1;

	if (e->cg.name[0]) {
		int dir = e->cg.fd[CGF_DIR];
		struct clone3_args ca = { .flags = CLONE_VM | CLONE_VFORK | SBX_CLONE_INTO_CGROUP,
					  .exit_signal = SIGCHLD,
					  .stack = (uintptr_t)a->stack, .stack_size = CHILD_STACK,
					  .cgroup = (uint64_t)dir };
		if (dir >= 0 && ((pid = clone3_run(&ca, child_main, c)) >= 0 ||
				 (errno != ENOSYS && errno != E2BIG && errno != EINVAL)))
			return pid;
		/* Older kernel: the child moves itself in before it can
		 * create anything, so nothing escapes the cgroup either. */
		snprintf(path, sizeof(path), "%s/cgroup.procs", e->cg.name);
		c->procs = openat(a->cgroot, path, O_WRONLY | O_CLOEXEC);
	}
	/* vfork semantics either way: no page-table copy, which dominates
	 * exec latency under TCG. */
	return clone(child_main, a->stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, c);
}

/* Returns 0, or an errno with the exec's fds left for exec_release. */
static int write_at(int dfd, const char *file, const char *val)
{
	int fd = openat(dfd, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, val, strlen(val));
	close(fd);
	return w == (ssize_t)strlen(val) ? 0 : -1;
}

/* The host's limits for this exec (it takes them from the session's
 * policy): processes and memory of the exec's own cgroup, and processes of
 * all execs together on their common parent. */
static void cg_limit(struct agent *a, struct exec *e, const struct sbx_exec_req *r)
{
	char v[32];
	if (r->pids_max) {
		snprintf(v, sizeof v, "%u", r->pids_max);
		if (write_at(e->cg.fd[CGF_DIR], "pids.max", v) < 0)
			sbx_guest_log("agent: pids.max: %s", strerror(errno));
	}
	if (r->memory_max) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)r->memory_max);
		if (write_at(e->cg.fd[CGF_DIR], "memory.max", v) < 0)
			sbx_guest_log("agent: memory.max: %s", strerror(errno));
		write_at(e->cg.fd[CGF_DIR], "memory.swap.max", "0");
	}
	if (r->session_pids && r->session_pids != a->session_pids && a->is_pid1) {
		snprintf(v, sizeof v, "%u", r->session_pids);
		if (write_at(a->cgroot, "pids.max", v) == 0)
			a->session_pids = r->session_pids;
	}
}

static int spawn(struct agent *a, struct exec *e, const struct sbx_exec_req *r)
{
	struct child_args c = { .fd = { -1, -1, -1 }, .procs = -1, .ign = a->ign, .nign = a->nign };
	char pts[64];
	int err = 0;

	c.uid = r->have_uid ? r->uid : SBX_GUEST_USER_UID;
	c.gid = r->have_gid ? r->gid : r->have_uid ? r->uid : SBX_GUEST_USER_GID;
	c.cwd = r->cwd ? r->cwd : "/workspace";
	if (!a->stack) {
		void *s = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (s == MAP_FAILED)
			return errno;
		a->stack = s;
	}
	if (open_stdio(a, e, r, &c, pts, sizeof(pts)) < 0 || build_env(r, &c) < 0) {
		err = errno ? errno : ENOMEM;
		goto out;
	}
	/* Without a cgroup the exec still runs: kill_tree falls back to its
	 * process group. */
	if (a->cgroot >= 0 && cg_create(a, e) == 0)
		cg_limit(a, e, r);
	e->t0 = now_ns();
	e->pid = spawn_child(a, e, &c);
	if (e->pid < 0) {
		err = errno;
		e->pid = 0;
	}
out:
	for (int i = 0; i < IO_N; i++)
		if (c.fd[i] >= 0 && c.fd[i] != a->devnull)
			close(c.fd[i]);
	if (c.procs >= 0)
		close(c.procs);
	free(c.envp);
	free(c.shargv);
	return err;
}

/* The session's environment names some values by their secret
 * (SBX_T_ENV_SECRET, env.h on the host): each NAME=SECRET becomes
 * NAME=<the value in /run/secrets/SECRET, less one trailing newline>,
 * appended to the request's environment unless it sets NAME itself. */
static int env_secrets(struct agent *a, struct sbx_exec_req *r, char *why, size_t cap)
{
	const char *dir = a->is_pid1 ? "/run/secrets" : getenv("SBX_AGENT_SECRETS_DIR");
	for (size_t i = 0; i < r->env_secretc; i++) {
		const char *kv = r->env_secret[i], *name = strchr(kv, '=') + 1;
		size_t kl = (size_t)(name - kv) - 1;
		char var[SBX_SECRET_NAME_MAX + 200];
		snprintf(var, sizeof(var), "%.*s", (int)kl, kv);
		if (has_var(r->env, r->envc, var, NULL)) /* never: the host leaves them out */
			continue;
		char path[128], *v = malloc(kl + 1 + SBX_SECRET_VALUE_MAX + 1);
		snprintf(path, sizeof(path), "%s/%s", dir ? dir : "/nonexistent", name);
		int fd = v ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
		ssize_t got = 0, rd = 0;
		while (fd >= 0 && got <= (ssize_t)SBX_SECRET_VALUE_MAX &&
		       (rd = read(fd, v + kl + 1 + got, SBX_SECRET_VALUE_MAX + 1 - (size_t)got)) > 0)
			got += rd;
		if (fd >= 0)
			close(fd);
		if (fd < 0 || rd < 0 || got > (ssize_t)SBX_SECRET_VALUE_MAX || memchr(v + kl + 1, 0, (size_t)got)) {
			snprintf(why, cap, "the environment's %.*s names secret %s, which %s", (int)kl, kv, name,
				 fd < 0 ? "this session does not have" : "cannot be an environment value");
			free(v);
			return -1;
		}
		if (got && v[kl + got] == '\n')
			got--;
		memcpy(v, kv, kl + 1);
		v[kl + 1 + got] = 0;
		char **nv = realloc(r->env, (r->envc + 2) * sizeof(*nv));
		if (!nv) {
			free(v);
			snprintf(why, cap, "out of memory");
			return -1;
		}
		r->env = nv;
		nv[r->envc++] = v;
		nv[r->envc] = NULL;
	}
	return 0;
}

static void exec_start(struct agent *a, uint32_t stream, const uint8_t *p, uint32_t n)
{
	struct sbx_exec_req r;
	const char *why = "malformed exec request";
	struct exec *e;
	int err;

	if (stream == 0) {
		send_error(a, 0, ERR_INVALID, "exec on stream 0");
		return;
	}
	if (exec_find(a, stream)) {
		send_error(a, stream, ERR_CONFLICT, "stream already has a live exec");
		return;
	}
	if (a->nlive >= MAX_EXECS || !(e = exec_alloc(a, stream))) {
		send_error(a, stream, ERR_TEMP, "too many live execs");
		return;
	}
	if (sbx_exec_req_decode(p, n, &r, &why) < 0) {
		send_error(a, stream, ERR_INVALID, why);
		exec_release(a, e);
		return;
	}
	char swhy[200];
	if (env_secrets(a, &r, swhy, sizeof(swhy)) < 0) {
		send_error(a, stream, ERR_INVALID, swhy);
		sbx_exec_req_free(&r);
		exec_release(a, e);
		return;
	}
	err = spawn(a, e, &r);
	if (r.timeout_ms)
		e->deadline = e->t0 + r.timeout_ms * NS_PER_MS;
	sbx_exec_req_free(&r);
	if (err) {
		char msg[128];
		snprintf(msg, sizeof(msg), "cannot start the command: %s", strerror(err));
		send_error(a, stream, err == EAGAIN || err == ENOMEM ? ERR_TEMP : ERR_INTERNAL, msg);
		cg_remove(a, &e->cg);
		exec_release(a, e);
		return;
	}
	send_u32(a, SBX_F_STARTED, stream, SBX_T_PID, (uint32_t)e->pid);
	a->started = 1;
	for (int io = 0; io < IO_N; io++)
		io_watch(a, e, io);
}

/* ---- stdin -------------------------------------------------------------- */

static void give_credit(struct agent *a, struct exec *e, uint32_t n)
{
	uint8_t le[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };

	if (!n)
		return;
	e->credit_used -= n;
	sbx_frame_raw(&a->out, SBX_F_WINDOW, e->stream, le, 4);
}

static void stdin_pump(struct agent *a, struct exec *e)
{
	size_t wrote = 0;

	while (e->fd[IO_IN] >= 0 && e->in.len > e->in_off) {
		ssize_t w = write(e->fd[IO_IN], e->in.data + e->in_off, e->in.len - e->in_off);
		if (w > 0) {
			e->in_off += (size_t)w;
			wrote += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			break;
		} else {
			/* The reader is gone (EPIPE): what it will never read
			 * still counts as consumed, or the host would stall. */
			wrote += e->in.len - e->in_off;
			e->in_off = e->in.len;
			if (!e->pty)
				io_close(a, e, IO_IN);
		}
	}
	if (e->in_off == e->in.len) {
		sbx_buf_free(&e->in);
		e->in_off = 0;
		if (e->in_eof && !e->pty)
			io_close(a, e, IO_IN);
	}
	give_credit(a, e, (uint32_t)wrote);
	io_watch(a, e, IO_IN);
}

static void on_stdin(struct agent *a, struct exec *e, const struct sbx_frame *f)
{
	if (e->in_eof) {
		send_error(a, e->stream, ERR_INVALID, "stdin after end of stdin");
		return;
	}
	if (f->len > SBX_STDIN_WINDOW - e->credit_used) {
		send_error(a, e->stream, ERR_INVALID, "stdin beyond the granted window");
		exec_kill(a, e, SBX_R_KILLED);
		return;
	}
	e->credit_used += f->len;
	if (e->fd[IO_IN] < 0) {
		/* No stdin (or its reader is gone): consume and give it back. */
		give_credit(a, e, f->len);
		return;
	}
	if (sbx_buf_put(&e->in, f->payload, f->len) < 0) {
		send_error(a, e->stream, ERR_INTERNAL, "out of memory for stdin");
		exec_kill(a, e, SBX_R_KILLED);
		return;
	}
	stdin_pump(a, e);
}

/* ---- frames from the host ----------------------------------------------- */

/* RESIZE and SIGNAL carry only u32 TLVs; unknown tags are errors. */
static int get_u32s(const struct sbx_frame *f, uint16_t t1, uint32_t *v1, uint16_t t2, uint32_t *v2)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	int rc, seen = 0;

	sbx_tlv_init(&it, f->payload, f->len);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &n)) == 1) {
		uint32_t *dst = tag == t1 ? v1 : tag == t2 && v2 ? v2 : NULL;
		if (!dst || sbx_tlv_as_u32(val, n, dst) < 0)
			return -1;
		seen |= tag == t1 ? 1 : 2;
	}
	return rc < 0 || !(seen & 1) || (v2 && !(seen & 2)) ? -1 : 0;
}

static void on_exec_frame(struct agent *a, const struct sbx_frame *f)
{
	struct exec *e = exec_find(a, f->stream);
	uint32_t v1 = 0, v2 = 0;

	/* Frames for a stream that just ended race with its EXIT: drop them. */
	if (!e || e->reaped)
		return;
	switch (f->type) {
	case SBX_F_STDIN:
		on_stdin(a, e, f);
		break;
	case SBX_F_STDIN_EOF:
		e->in_eof = 1;
		if (!e->pty && e->in.len == e->in_off)
			io_close(a, e, IO_IN);
		break;
	case SBX_F_RESIZE: {
		if (get_u32s(f, SBX_T_ROWS, &v1, SBX_T_COLS, &v2) < 0 || v1 > 65535 || v2 > 65535) {
			send_error(a, f->stream, ERR_INVALID, "malformed resize");
			break;
		}
		struct winsize ws = { .ws_row = (unsigned short)v1, .ws_col = (unsigned short)v2 };
		if (!e->pty || ioctl(e->fd[IO_OUT] >= 0 ? e->fd[IO_OUT] : e->fd[IO_IN], TIOCSWINSZ, &ws) < 0)
			send_error(a, f->stream, ERR_INVALID, "exec has no terminal");
		break;
	}
	case SBX_F_SIGNAL:
		if (get_u32s(f, SBX_T_SIGNO, &v1, 0, NULL) < 0 || v1 < 1 || v1 > 64)
			send_error(a, f->stream, ERR_INVALID, "malformed signal");
		else if (kill(-e->pid, (int)v1) < 0 && errno != ESRCH)
			send_error(a, f->stream, ERR_INVALID, strerror(errno));
		break;
	case SBX_F_KILL:
		exec_kill(a, e, SBX_R_KILLED);
		break;
	}
}

/* ---- secrets ------------------------------------------------------------ */

/* /run/secrets/NAME on the /run tmpfs (never on disk): files 0400, the
 * directory 0500, both the unprivileged user's; root reads them anyway.
 * Delivered once per boot, before the host reports the session ready. */
static int secrets_write(struct agent *a, const struct sbx_secret_ref *s, int n, const char **why)
{
	const char *dir = a->is_pid1 ? "/run/secrets" : getenv("SBX_AGENT_SECRETS_DIR");
	int dfd, fd;

	if (!dir || !*dir) {
		*why = "no secrets directory (SBX_AGENT_SECRETS_DIR)";
		return -1;
	}
	if (mkdir(dir, 0700) < 0) {
		*why = errno == EEXIST ? "secrets were already delivered" : "cannot create the secrets directory";
		return -1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		*why = "cannot open the secrets directory";
		return -1;
	}
	for (int i = 0; i < n; i++) {
		size_t off = 0;
		fd = openat(dfd, s[i].name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
		if (fd < 0) {
			*why = "cannot create a secret file";
			goto fail;
		}
		while (off < s[i].len) {
			ssize_t w = write(fd, s[i].value + off, s[i].len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				close(fd);
				*why = "cannot write a secret file";
				goto fail;
			}
			off += (size_t)w;
		}
		if (fchmod(fd, 0400) < 0 ||
		    (a->is_pid1 && fchown(fd, SBX_GUEST_USER_UID, SBX_GUEST_USER_GID) < 0)) {
			close(fd);
			*why = "cannot set a secret file's owner";
			goto fail;
		}
		close(fd);
	}
	if ((a->is_pid1 && fchown(dfd, SBX_GUEST_USER_UID, SBX_GUEST_USER_GID) < 0) || fchmod(dfd, 0500) < 0) {
		*why = "cannot set the secrets directory's owner";
		goto fail;
	}
	close(dfd);
	return 0;
fail:
	close(dfd);
	return -1;
}

static void on_secrets(struct agent *a, const struct sbx_frame *f)
{
	struct sbx_secret_ref s[SBX_SECRETS_MAX];
	const char *why = "bad secrets frame";
	int n = f->stream ? -1 : sbx_secrets_decode(f->payload, f->len, s, &why);

	if (n < 0 || secrets_write(a, s, n, &why) < 0) {
		sbx_guest_log("agent: secrets: %s", why);
		send_error(a, 0, ERR_INTERNAL, why);
	} else {
		sbx_frame_raw(&a->out, SBX_F_SECRETS, 0, NULL, 0);
	}
	/* The tmpfs files are now the only copy in the guest. */
	explicit_bzero((void *)f->payload, f->len);
}

static void shutdown_all(struct agent *a)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used && !a->ex[i].reaped)
			exec_kill(a, &a->ex[i], SBX_R_KILLED);
}

/* ---- snapshots ---------------------------------------------------------- */

/* Overwrite, then remove, every secret file: a snapshot holds the guest's
 * memory, and a tmpfs page keeps its bytes after the unlink that frees
 * it.  The directory goes too, so the source can be given them again. */
static int secrets_wipe(struct agent *a, const char **why)
{
	static const uint8_t zero[4096];
	const char *dir = a->is_pid1 ? "/run/secrets" : getenv("SBX_AGENT_SECRETS_DIR");
	struct dirent *de;
	DIR *d;
	int dfd;

	if (!dir || !*dir)
		return 0;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		*why = "cannot open the secrets directory";
		return errno == ENOENT ? 0 : -1;
	}
	fchmod(dfd, 0700); /* 0500 as delivered: no unlink without w */
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		*why = "cannot read the secrets directory";
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fchmodat(dfd, de->d_name, 0600, 0);
		fd = openat(dfd, de->d_name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			for (off_t off = 0; off < st.st_size; off += (off_t)sizeof(zero))
				if (pwrite(fd, zero, st.st_size - off < (off_t)sizeof(zero) ? (size_t)(st.st_size - off)
											  : sizeof(zero), off) < 0)
					break;
		if (fd >= 0)
			close(fd);
		if (unlinkat(dfd, de->d_name, 0) < 0) {
			closedir(d);
			*why = "cannot remove a secret file";
			return -1;
		}
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT) {
		*why = "cannot remove the secrets directory";
		return -1;
	}
	return 0;
}

/* The host is about to save this VM: nothing may be running (an exec's
 * processes and pipes cannot be part of an image another session starts
 * from), and no secret may be in it.  (The port's receive buffers, the
 * last place in the kernel where the secrets frame lay, the host rinses
 * with padding before this frame; any payload here is padding too.) */
static void on_quiesce(struct agent *a, const struct sbx_frame *f)
{
	const char *why = "cannot wipe the secrets";

	if (f->stream) {
		send_error(a, f->stream, ERR_INVALID, "malformed quiesce");
		return;
	}
	if (a->nlive) {
		send_error(a, 0, ERR_CONFLICT, "execs are still running");
		return;
	}
	if (secrets_wipe(a, &why) < 0) {
		sbx_guest_log("agent: quiesce: %s", why);
		send_error(a, 0, ERR_INTERNAL, why);
		return;
	}
	/* Last, so a refusal leaves it mounted; the next frame, whatever it
	 * is, comes after the save and mounts it again (on_frame). */
	if (a->is_pid1 && sbx_guest_ws_down() < 0) {
		sbx_guest_log("agent: quiesce: unmount the workspace: %s", strerror(errno));
		send_error(a, 0, ERR_CONFLICT,
			   errno == EBUSY ? "the workspace is in use (a process keeps files open in it)"
					  : "cannot unmount the workspace");
		return;
	}
	sbx_frame_raw(&a->out, SBX_F_QUIESCE, 0, NULL, 0);
}

static int identity_parse(const struct sbx_frame *f, char *host, size_t cap, const uint8_t **seed,
			  uint32_t *seed_len, uint64_t *t_ns)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	int rc;

	sbx_tlv_init(&it, f->payload, f->len);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &n)) == 1) {
		if (tag == SBX_T_HOSTNAME) {
			if (sbx_tlv_as_str(val, n, host, cap) < 0 || n == 0 || n > 63)
				return -1;
			for (uint32_t i = 0; i < n; i++)
				if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", host[i]))
					return -1;
		} else if (tag == SBX_T_SEED && n >= 16 && n <= 512) {
			*seed = val;
			*seed_len = n;
		} else if (tag != SBX_T_TIME_NS || sbx_tlv_as_u64(val, n, t_ns) < 0) {
			return -1;
		}
	}
	return rc < 0 || !host[0] || !*seed || !*t_ns ? -1 : 0;
}

/* A restored VM (or a warm-pool member being claimed) becomes a session
 * of its own: the host's wall clock (ours stopped when the source was
 * saved), the new hostname, fresh randomness mixed in and the generator
 * reseeded (so two sessions from one snapshot never share a stream), and
 * no trace of the source's execs.  Only as PID 1: in --agent-fd mode this
 * is the host's own system. */
static void on_identity(struct agent *a, const struct sbx_frame *f)
{
	char host[64] = "";
	const uint8_t *seed = NULL;
	uint32_t seed_len = 0;
	uint64_t t_ns = 0;
	struct utsname u;
	size_t off;

	if (f->stream || identity_parse(f, host, sizeof(host), &seed, &seed_len, &t_ns) < 0) {
		send_error(a, f->stream, ERR_INVALID, "malformed identity");
		return;
	}
	if (a->is_pid1) {
		struct timespec ts = { .tv_sec = (time_t)(t_ns / 1000000000u), .tv_nsec = (long)(t_ns % 1000000000u) };
		struct {
			struct rand_pool_info info;
			uint8_t buf[512];
		} rp;
		int fd;

		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			sbx_guest_log("agent: identity: clock: %s", strerror(errno));
		sbx_guest_set_hostname(host);
		rp.info.entropy_count = (int)seed_len * 8;
		rp.info.buf_size = (int)seed_len;
		memcpy(rp.buf, seed, seed_len);
		fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
		if (fd < 0 || ioctl(fd, RNDADDENTROPY, &rp) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
			sbx_guest_log("agent: identity: reseed: %s", strerror(errno));
			if (fd >= 0)
				close(fd);
			explicit_bzero(&rp, sizeof(rp));
			send_error(a, 0, ERR_INTERNAL, "cannot reseed the random number generator");
			return;
		}
		close(fd);
		explicit_bzero(&rp, sizeof(rp));
	}
	explicit_bzero((void *)seed, seed_len);
	/* The new host numbers its execs from 1 and may set other limits:
	 * nothing of the source's exec bookkeeping carries over. */
	shutdown_all(a);
	for (unsigned i = 0; i < a->npool; i++)
		cg_remove(a, &a->pool[i]);
	a->npool = 0;
	a->pool_next = 1;
	a->session_pids = 0;
	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	off = sbx_frame_begin(&a->out, SBX_F_IDENTITY, 0);
	sbx_tlv_str(&a->out, SBX_T_KERNEL, u.release);
	sbx_tlv_str(&a->out, SBX_T_HOSTNAME, u.nodename);
	sbx_frame_end(&a->out, off);
}

/* The clock follows the host's (the monitor's PINGs carry its
 * CLOCK_REALTIME; see monitor/agent.c).  With no exec running it is set;
 * while one runs, an offset is slewed (adjtime: at most 0.5 ms a second,
 * no jump a command could see) unless the guest is half a second or more
 * behind, which is stepped forward; it never steps backwards under a
 * command, which may time itself (make, timeouts).  The channel's latency
 * (a millisecond or so) is below what is corrected. */
#define CLOCK_SLEW_MIN_NS 2000000ll    /* below this: leave it */
#define CLOCK_STEP_NS 500000000ll      /* from here: step */
static void clock_follow(struct agent *a, uint64_t host_ns)
{
	struct timespec now;
	if (!a->is_pid1 || !host_ns || clock_gettime(CLOCK_REALTIME, &now) < 0)
		return;
	int64_t off = (int64_t)(host_ns - ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec));
	int64_t mag = off < 0 ? -off : off;
	if (mag < CLOCK_SLEW_MIN_NS)
		return;
	if (!a->nlive || (mag >= CLOCK_STEP_NS && off > 0)) {
		struct timespec ts = { .tv_sec = (time_t)(host_ns / 1000000000u),
				       .tv_nsec = (long)(host_ns % 1000000000u) };
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			sbx_guest_log("agent: clock: step: %s", strerror(errno));
		return;
	}
	if (mag > CLOCK_STEP_NS)
		off = off < 0 ? -CLOCK_STEP_NS : CLOCK_STEP_NS;
	struct timeval d = { .tv_sec = (time_t)(off / 1000000000), .tv_usec = (suseconds_t)(off % 1000000000 / 1000) };
	if (adjtime(&d, NULL) < 0)
		sbx_guest_log("agent: clock: slew: %s", strerror(errno));
}

static void on_ping(struct agent *a, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	uint64_t t = 0;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &val, &n) == 1)
		if (tag == SBX_T_TIME_NS && sbx_tlv_as_u64(val, n, &t) == 0)
			clock_follow(a, t);
	/* Echoed whatever it holds: the host matches PONGs by stream. */
	sbx_frame_raw(&a->out, SBX_F_PONG, f->stream, f->payload, f->len);
}

static void dispatch(struct agent *a, const struct sbx_frame *f)
{
	/* A save unmounted the workspace (on_quiesce); whatever the host
	 * says next comes after it: the saved guest's next frame (the
	 * monitor sends a PING at least) or a restored one's IDENTITY. */
	if (f->type != SBX_F_QUIESCE)
		sbx_guest_ws_up();
	switch (f->type) {
	case SBX_F_PING:
		on_ping(a, f);
		break;
	case SBX_F_EXEC:
		exec_start(a, f->stream, f->payload, f->len);
		break;
	case SBX_F_STDIN:
	case SBX_F_STDIN_EOF:
	case SBX_F_RESIZE:
	case SBX_F_SIGNAL:
	case SBX_F_KILL:
		if (f->stream == 0)
			send_error(a, 0, ERR_INVALID, "exec operation on stream 0");
		else
			on_exec_frame(a, f);
		break;
	case SBX_F_SECRETS:
		on_secrets(a, f);
		break;
	case SBX_F_PORT_CONNECT:
	case SBX_F_PORT_DATA:
	case SBX_F_PORT_WINDOW:
	case SBX_F_PORT_EOF:
	case SBX_F_PORT_CLOSE:
		sbx_gports_frame(a->ports, f, &a->out);
		break;
	case SBX_F_QUIESCE:
		on_quiesce(a, f);
		break;
	case SBX_F_IDENTITY:
		on_identity(a, f);
		break;
	case SBX_F_SHUTDOWN:
		shutdown_all(a);
		if (a->is_pid1)
			sbx_guest_poweroff();
		a->done = 1;
		break;
	case SBX_F_ERROR:
	case SBX_F_PONG:
		break; /* answering would let two peers bounce errors forever */
	default:
		send_error(a, f->stream, ERR_INVALID, "unexpected frame type");
		break;
	}
}

static void parse_input(struct agent *a)
{
	size_t off = 0;

	while (!a->done && a->in_len - off >= SBX_FRAME_HDR) {
		struct sbx_frame f;
		int bad = sbx_frame_hdr_get(a->in + off, &f, SBX_FRAME_MAX);
		if (f.len > SBX_FRAME_MAX) {
			/* The length is all we have to find the next frame. */
			sbx_guest_log("agent: frame length %u out of bounds: input out of sync", f.len);
			send_error(a, 0, ERR_INVALID, "frame length out of bounds; input dropped");
			a->in_len = 0;
			return;
		}
		if (a->in_len - off - SBX_FRAME_HDR < f.len)
			break;
		f.payload = a->in + off + SBX_FRAME_HDR;
		off += SBX_FRAME_HDR + f.len;
		if (bad)
			send_error(a, f.stream, ERR_INVALID, "malformed frame header");
		else
			dispatch(a, &f);
	}
	if (off) {
		memmove(a->in, a->in + off, a->in_len - off);
		a->in_len -= off;
	}
}

/* The host fd is edge-triggered: read until EAGAIN. */
static void host_read(struct agent *a)
{
	while (!a->done && !a->host_down) {
		ssize_t r = read(a->host, a->in + a->in_len, IN_CAP - a->in_len);
		if (r > 0) {
			a->in_len += (size_t)r;
			parse_input(a);
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			break;
		} else {
			host_lost(a, r < 0 ? errno : 0);
		}
	}
}

/* A host connecting to our vsock listener.  One host at a time: a new one
 * replaces the old, whose VMM may be gone without a word (a restore). */
static void host_accept(struct agent *a)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = K_HOST };
	int fd = accept4(a->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	/* Over vsock only the host (CID 2) speaks for the host. */
	if (ss.ss_family == AF_VSOCK && ((struct sockaddr_vm *)&ss)->svm_cid != VMADDR_CID_HOST) {
		close(fd);
		return;
	}
	if (a->host >= 0) {
		epoll_ctl(a->ep, EPOLL_CTL_DEL, a->host, NULL);
		close(a->host);
	}
	a->host = fd;
	if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		sbx_guest_log("agent: accept: %s", strerror(errno));
		close(fd);
		a->host = -1;
		a->host_down = 1;
		return;
	}
	if (a->accepted++)
		sbx_guest_log("agent: host reconnected");
	a->host_out = 1;
	a->host_down = 0;
	a->in_len = 0;
	outq_resync(a);
	/* A new host (say, after a snapshot restore) needs a readiness signal. */
	if (a->hello_seen)
		send_hello(a);
	host_read(a);
}

static void host_check(struct agent *a)
{
	struct pollfd p = { .fd = a->host, .events = POLLIN | POLLOUT };

	if (poll(&p, 1, 0) < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
		a->host_retry = now_ns() + RECONNECT_NS;
		return;
	}
	sbx_guest_log("agent: host reconnected");
	a->host_down = 0;
	a->host_retry = 0;
	/* A new host (say, after a snapshot restore) needs a readiness signal. */
	if (a->hello_seen)
		send_hello(a);
	host_read(a);
}

/* ---- the loop ----------------------------------------------------------- */

static void on_io(struct agent *a, uint64_t tag)
{
	unsigned idx = (unsigned)(tag >> 16) & 0xffffu, io = (unsigned)(tag >> 8) & 0xffu;
	struct exec *e = idx < MAX_EXECS ? &a->ex[idx] : NULL;
	static uint8_t buf[SBX_DATA_CHUNK];

	if (!e || !e->used || e->gen != (uint32_t)(tag >> 32) || io >= IO_N || e->fd[io] < 0)
		return; /* released earlier in this batch */
	if (io == IO_IN) {
		stdin_pump(a, e);
		return;
	}
	for (int i = 0; i < 4 && outq_pending(a) <= OUTQ_CAP; i++) {
		ssize_t n = read(e->fd[io], buf, sizeof(buf));
		if (n > 0) {
			sbx_frame_raw(&a->out, io == IO_ERR ? SBX_F_STDERR : SBX_F_STDOUT,
				      e->stream, buf, (uint32_t)n);
			if ((size_t)n < sizeof(buf))
				return;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			return;
		} else {
			/* EOF, or EIO from a pty master once the slave side is
			 * closed everywhere. */
			io_close(a, e, io);
			if (e->pty)
				io_close(a, e, IO_IN);
			maybe_finish(a, e);
			return;
		}
	}
}

static void run_deadlines(struct agent *a)
{
	uint64_t now = now_ns();

	for (unsigned i = 0; i < MAX_EXECS; i++) {
		struct exec *e = &a->ex[i];
		if (!e->used)
			continue;
		if (!e->reaped && e->deadline && now >= e->deadline)
			exec_kill(a, e, SBX_R_TIMEOUT);
		if (e->reaped && now >= e->drain_deadline) {
			if (a->paused) { /* the host is behind, not the exec */
				e->drain_deadline = now + RECONNECT_NS;
				continue;
			}
			io_close(a, e, IO_OUT);
			io_close(a, e, IO_ERR);
			maybe_finish(a, e);
		}
	}
	if (a->host_down && a->lfd < 0 && now >= a->host_retry)
		host_check(a);
}

static int next_timeout_ms(const struct agent *a)
{
	uint64_t next = UINT64_MAX, now;

	for (unsigned i = 0; i < MAX_EXECS; i++) {
		const struct exec *e = &a->ex[i];
		if (!e->used)
			continue;
		if (!e->reaped && e->deadline && e->deadline < next)
			next = e->deadline;
		if (e->reaped && e->drain_deadline < next)
			next = e->drain_deadline;
	}
	if (a->rm_next && a->rm_next < next)
		next = a->rm_next;
	if (a->host_down && a->lfd < 0 && a->host_retry < next)
		next = a->host_retry;
	if (next == UINT64_MAX)
		return -1;
	now = now_ns();
	if (next <= now)
		return 0;
	next = (next - now + NS_PER_MS - 1) / NS_PER_MS;
	return next > INT_MAX ? INT_MAX : (int)next;
}

static int handle_events(struct agent *a, int timeout_ms)
{
	struct epoll_event ev[64];
	int n = epoll_wait(a->ep, ev, 64, timeout_ms);

	if (n < 0 && errno != EINTR) {
		sbx_guest_log("agent: epoll_wait: %s", strerror(errno));
		a->done = !a->is_pid1;
		a->rc = -1;
		return -1;
	}
	for (int i = 0; i < n && !a->done; i++) {
		uint64_t tag = ev[i].data.u64;
		switch (tag & 0xff) {
		case K_HOST:
			if (a->host_down && a->lfd < 0)
				host_check(a);
			else if (!a->host_down && ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				host_read(a);
			break;
		case K_LISTEN:
			host_accept(a);
			break;
		case K_SIG:
			reap(a);
			break;
		case K_IO:
			on_io(a, tag);
			break;
		case K_PORT:
			sbx_gports_io(a->ports, tag, ev[i].events, &a->out);
			break;
		}
	}
	return n;
}

static void loop_once(struct agent *a)
{
	int idle = cg_idle_work(a), n;

	/* With deferred cgroup work, look for events without sleeping and
	 * do one unit of that work only when there are none. */
	n = handle_events(a, idle ? 0 : next_timeout_ms(a));
	if (n < 0)
		return;
	/* An exec started in this round has usually finished by the time
	 * clone returns (the vfork child runs first on our one vCPU): one
	 * more look lets STARTED and EXIT leave in one write, i.e. one VM
	 * exit, instead of two. */
	if (a->started && !a->done) {
		a->started = 0;
		handle_events(a, 0);
	}
	if (!a->done)
		run_deadlines(a);
	host_flush(a);
	if (n == 0 && idle && !a->done)
		cg_idle(a);
	else if (a->nrm > CG_RM_BACKLOG && now_ns() >= a->rm_next)
		cg_rmdir_one(a); /* a host that never lets us idle */
	if (!a->paused && outq_pending(a) > OUTQ_CAP)
		set_paused(a, 1);
	else if (a->paused && outq_pending(a) <= OUTQ_CAP / 2)
		set_paused(a, 0);
}

/* ---- setup -------------------------------------------------------------- */

static int agent_init(struct agent *a, int fd, int is_pid1)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = K_HOST };
	struct sigaction sa;
	struct statfs sf;
	const char *cgroot;
	sigset_t ss;
	int listening = 0;
	socklen_t sl = sizeof(listening);

	/* A listening socket (vsock, or a unix socket in --agent-fd mode):
	 * hosts connect to it, one at a time; else fd is the host. */
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl) < 0)
		listening = 0;
	a->host = listening ? -1 : fd;
	a->lfd = listening ? fd : -1;
	a->host_down = listening;
	if (listening) {
		ev.events = EPOLLIN;
		ev.data.u64 = K_LISTEN;
	}
	a->is_pid1 = is_pid1;
	a->cgroot = a->sig = a->ep = a->devnull = -1;
	/* Children get our 0-2 replaced; were one closed, a pipe could land
	 * there and be clobbered by the dup2 dance. */
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			return -1;
	for (int s = 1; s < 64; s++)
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN && s != SIGPIPE)
			a->ign[a->nign++] = s;
	a->ign[a->nign++] = SIGPIPE;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&ss);
	sigaddset(&ss, SIGCHLD);
	sigprocmask(SIG_BLOCK, &ss, NULL);

	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    (a->in = malloc(IN_CAP)) == NULL ||
	    (a->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 ||
	    (a->sig = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC)) < 0 ||
	    (a->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (a->ports = sbx_gports_new(a->ep, K_PORT)) == NULL ||
	    epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -1;
	a->host_out = !listening;
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = K_SIG };
	if (epoll_ctl(a->ep, EPOLL_CTL_ADD, a->sig, &ev) < 0)
		return -1;
	/* Per-exec cgroups at the root as PID 1 of the guest.  In --agent-fd
	 * mode we would be carving up the host's hierarchy, so only under a
	 * cgroup2 directory the tests delegate to us explicitly. */
	/* As PID 1 every exec's cgroup lives under one parent, "execs", whose
	 * pids.max caps the session's processes as a whole. */
	if (is_pid1 && (mkdir(CG_ROOT "/execs", 0755) == 0 || errno == EEXIST)) {
		int sfd = open(CG_ROOT "/execs/cgroup.subtree_control", O_WRONLY | O_CLOEXEC);
		if (sfd >= 0) {
			if (write(sfd, "+cpu +memory +pids", 18) != 18)
				sbx_guest_log("agent: execs subtree_control: %s", strerror(errno));
			close(sfd);
		}
	}
	cgroot = is_pid1 ? CG_ROOT "/execs" : getenv("SBX_AGENT_CGROUP_ROOT");
	if (cgroot && statfs(cgroot, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
		a->cgroot = open(cgroot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgroot && a->cgroot < 0)
		sbx_guest_log("agent: no cgroup2 at %s: execs are killed by process group", cgroot);
	return 0;
}

static void agent_free(struct agent *a)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used)
			exec_release(a, &a->ex[i]);
	sbx_gports_free(a->ports);
	closep(&a->ep);
	closep(&a->sig);
	closep(&a->devnull);
	if (a->lfd >= 0)
		closep(&a->host); /* ours: accepted here (the listener is the caller's) */
	for (unsigned i = 0; i < a->npool; i++)
		cg_close(&a->pool[i]);
	closep(&a->cgroot);
	if (a->stack)
		munmap(a->stack, CHILD_STACK);
	sbx_buf_free(&a->out);
	free(a->in);
	free(a);
}

/* Best effort before returning in --agent-fd mode: the test harness wants
 * the frames it was sent (nothing waits for us as PID 1). */
static void drain_output(struct agent *a)
{
	uint64_t until = now_ns() + 1000 * NS_PER_MS;

	while (!a->host_down && outq_pending(a) && now_ns() < until) {
		struct pollfd p = { .fd = a->host, .events = POLLOUT };
		if (poll(&p, 1, 100) < 0 || (p.revents & (POLLHUP | POLLERR)))
			break;
		host_flush(a);
	}
}

int sbx_agent_run(int fd, int is_pid1)
{
	struct agent *a = calloc(1, sizeof(*a));
	int rc;

	if (!a || agent_init(a, fd, is_pid1) < 0) {
		sbx_guest_log("agent: setup: %s", strerror(errno));
		if (a)
			agent_free(a);
		return -1;
	}
	send_hello(a);
	host_flush(a);
	while (!a->done)
		loop_once(a);
	shutdown_all(a);
	if (a->rc == 0)
		drain_output(a);
	rc = a->rc;
	agent_free(a);
	return rc;
}
