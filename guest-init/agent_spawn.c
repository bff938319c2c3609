/* guest-init agent: starting an exec: environment, stdio, clone3 into its
 * cgroup, the child (agent.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent.h"
#include "init.h"

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
			else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV &&
				 errno != ETIMEDOUT) {
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
	/* Before the user changes: raising a hard limit needs root. */
	for (unsigned i = 0; i < c->nrl; i++) {
		uint64_t l[2] = { c->rl[i].soft, c->rl[i].hard }; /* ~0 is RLIM_INFINITY */
		if (syscall(SYS_prlimit64, 0, c->rl[i].resource, l, NULL) < 0)
			child_fail("cannot set a resource limit", NULL, errno, 126);
	}
	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0 ||
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
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, pts, cap) != 0 || fcntl(m, F_SETFL, O_NONBLOCK) < 0)
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

static int open_stdio(struct agent *a, struct exec *e, const struct sbx_exec_req *r, struct child_args *c, char *pts,
		      size_t cap)
{
	if (r->flags & SBX_EXEC_PTY) {
		e->pty = 1;
		c->pts = pts;
		return open_pty(e, r, pts, cap);
	}
	if (open_pipe(&e->fd[IO_OUT], &c->fd[IO_OUT], 0) < 0 || open_pipe(&e->fd[IO_ERR], &c->fd[IO_ERR], 0) < 0)
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
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
		cgroup;
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
			 : "0"((long)SYS_clone3), "D"(ca), "S"(sizeof(*ca)), "r"(r12), "r"(r13), [exit] "i"(SYS_exit)
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
					  .stack = (uintptr_t)a->stack,
					  .stack_size = CHILD_STACK,
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
	c.rl = r->rlimits;
	c.nrl = r->nrlimits;
	if (!a->stack) {
		void *s =
			mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
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

void exec_start(struct agent *a, uint32_t stream, const uint8_t *p, uint32_t n)
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
	uint32_t flags = r.flags;
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
	/* Output under the host's credit when it asks; saying so in STARTED
	 * tells it we keep to it (a guest-init before it says nothing). */
	e->out_flow = !!(flags & SBX_EXEC_OUT_WINDOW);
	e->out_credit = e->out_flow ? SBX_OUTPUT_WINDOW : 0;
	size_t off = sbx_frame_begin(&a->out, SBX_F_STARTED, stream);
	sbx_tlv_u32(&a->out, SBX_T_PID, (uint32_t)e->pid);
	if (e->out_flow)
		sbx_tlv_u32(&a->out, SBX_T_FLAGS, SBX_EXEC_OUT_WINDOW);
	sbx_frame_end(&a->out, off);
	a->started = 1;
	for (int io = 0; io < IO_N; io++)
		io_watch(a, e, io);
}
