/* guest-init: the agent's shared state and its modules' internal calls.
 *  agent.c       - the output queue, epoll, dispatch, the loop, setup;
 *  agent_cg.c    - cgroups;
 *  agent_exec.c  - the exec table, finishing, stdin, per-exec frames;
 *  agent_spawn.c - spawning;
 *  agent_snap.c  - secrets, quiesce, identity, clock.
 * Only guest-init includes this. */
#ifndef SBX_GUEST_AGENT_H
#define SBX_GUEST_AGENT_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define MAX_EXECS 256
#define OUTQ_CAP (8u << 20) /* stop reading exec output above this */
#define IN_CAP (SBX_FRAME_HDR + SBX_FRAME_MAX)
#define NS_PER_MS 1000000ull
#define DRAIN_GRACE_NS (2000 * NS_PER_MS) /* see exec_reaped() */
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
enum { K_HOST = 1, K_SIG, K_IO, K_LISTEN, K_PORT, K_PKG };

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
	pid_t pid; /* main process, also its process group */
	int pty, reaped, wstatus;
	int fd[IO_N]; /* parent ends; for a pty OUT is the master, IN a dup of it */
	int polled[IO_N];
	struct cg cg;
	struct sbx_buf in; /* stdin received, not yet written */
	size_t in_off;
	uint32_t credit_used; /* stdin bytes received and not yet given back by WINDOW */
	int out_flow;         /* output under the host's credit (SBX_EXEC_OUT_WINDOW) */
	uint32_t out_credit;  /* ... the stdout and stderr bytes we may still send */
	int in_eof;
	uint32_t forced; /* SBX_R_TIMEOUT / SBX_R_KILLED once we killed it */
	struct rusage ru;
	uint64_t t0, t_end, deadline, drain_deadline;
};

struct cg_rm {
	char name[CG_NAME_MAX];
	int tries;
};

struct agent {
	int ep, host, sig, devnull, cgroot, is_pid1;
	int urandom;           /* /dev/urandom for IDENTITY's reseed, opened ahead (PID 1 only) */
	uint32_t session_pids; /* pids.max last written on the execs' parent */
	int done, rc;
	int host_down, hello_seen; /* hello_seen: the host has had bytes since our last HELLO */
	int host_out;              /* EPOLLOUT currently requested on the host fd */
	uint64_t host_retry;
	/* While the first HELLO has not left: when to say so on the console
	 * (a boot that never answers, issue 35 item 7); 0: it left. */
	uint64_t hello_check;
	unsigned hello_reports;
	int lfd;           /* listening for the host (vsock); -1: host is the port */
	int pkg_watched;   /* sbx_guest_pkg_report_fd is in the epoll set */
	unsigned accepted; /* hosts accepted on lfd */
	uint8_t *in;
	size_t in_len;
	struct sbx_buf out;
	size_t out_off;
	size_t out_frame; /* start of the frame out_off is in (or at) */
	/* A save that keeps execs running (on_quiesce): nothing past hold_end
	 * leaves until the host releases it, so what the execs say after our
	 * answer stays in the VM's memory, for whichever host comes next. */
	int held;
	size_t hold_end;
	int paused;
	uint32_t gen, nlive, cg_seq;
	struct exec ex[MAX_EXECS];
	struct cg_rm rm[MAX_EXECS];
	unsigned nrm;
	uint64_t rm_next;
	struct cg pool[CG_POOL];
	unsigned npool;
	uint32_t pool_next; /* the stream the next pooled cgroup is named for */
	int started;        /* an exec started in this loop round */
	uint64_t pool_retry;
	char *stack;
	int ign[64], nign;        /* signals we inherited as ignored: reset in children */
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
	const struct sbx_rlimit *rl; /* the request's rlimits */
	unsigned nrl;
};

static inline void closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}
#define _cleanup_close_ __attribute__((cleanup(closep)))

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* agent.c */
void send_error(struct agent *a, uint32_t stream, uint32_t code, const char *msg);
void send_u32(struct agent *a, uint8_t type, uint32_t stream, uint16_t tag, uint32_t v);
void io_watch(struct agent *a, struct exec *e, int io);
/* The exec's output may go out: no credit, or credit left. */
static inline int out_may_send(const struct exec *e)
{
	return !e->out_flow || e->out_credit > 0;
}
void io_close(struct agent *a, struct exec *e, int io);
void hold_release(struct agent *a);

/* agent_cg.c */
void cg_close(struct cg *cg);
void cg_rmdir_one(struct agent *a);
void cg_remove(struct agent *a, struct cg *cg);
int cg_create(struct agent *a, struct exec *e);
int cg_idle_work(const struct agent *a);
void cg_idle(struct agent *a);
void kill_tree(struct agent *a, struct exec *e);
void exec_stats(struct agent *a, struct exec *e, struct sbx_exit_info *x, int *oom);

/* agent_exec.c */
struct exec *exec_find(struct agent *a, uint32_t stream);
struct exec *exec_alloc(struct agent *a, uint32_t stream);
void exec_release(struct agent *a, struct exec *e);
void maybe_finish(struct agent *a, struct exec *e);
void exec_kill(struct agent *a, struct exec *e, uint32_t reason);
void reap(struct agent *a);
void stdin_pump(struct agent *a, struct exec *e);
void on_exec_frame(struct agent *a, const struct sbx_frame *f);

/* agent_spawn.c */
void exec_start(struct agent *a, uint32_t stream, const uint8_t *p, uint32_t n);

/* agent_snap.c */
void on_secrets(struct agent *a, const struct sbx_frame *f);
void shutdown_all(struct agent *a);
void on_quiesce(struct agent *a, const struct sbx_frame *f);
void on_identity(struct agent *a, const struct sbx_frame *f);
void on_ping(struct agent *a, const struct sbx_frame *f);

#endif
