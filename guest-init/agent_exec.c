/* guest-init agent: the exec table, its end and its EXIT, stdin and the
 * frames about one exec (agent.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include "agent.h"

/* ---- exec table --------------------------------------------------------- */

struct exec *exec_find(struct agent *a, uint32_t stream)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used && a->ex[i].stream == stream)
			return &a->ex[i];
	return NULL;
}

struct exec *exec_alloc(struct agent *a, uint32_t stream)
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

void exec_release(struct agent *a, struct exec *e)
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

void maybe_finish(struct agent *a, struct exec *e)
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

void exec_kill(struct agent *a, struct exec *e, uint32_t reason)
{
	if (e->reaped || e->forced)
		return;
	e->forced = reason;
	kill_tree(a, e);
	if (e->cg.name[0] && e->pid > 0)
		kill(-e->pid, SIGKILL); /* in case cgroup.kill is missing (< 5.14) */
}

void reap(struct agent *a)
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

/* ---- stdin -------------------------------------------------------------- */

static void give_credit(struct agent *a, struct exec *e, uint32_t n)
{
	if (!n)
		return;
	e->credit_used -= n;
	sbx_frame_window(&a->out, e->stream, n);
}

void stdin_pump(struct agent *a, struct exec *e)
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

void on_exec_frame(struct agent *a, const struct sbx_frame *f)
{
	struct exec *e = exec_find(a, f->stream);
	uint32_t v1 = 0, v2 = 0;

	/* Output credit counts until the last byte is out, after the
	 * process is reaped too. */
	if (e && f->type == SBX_F_WINDOW) {
		if (f->len != 4 || sbx_tlv_as_u32(f->payload, f->len, &v1) < 0) {
			send_error(a, f->stream, ERR_INVALID, "malformed window");
			return;
		}
		if (v1 == SBX_WINDOW_OFF)
			e->out_flow = 0;
		else
			e->out_credit = v1 > SBX_OUTPUT_WINDOW - e->out_credit ? SBX_OUTPUT_WINDOW : e->out_credit + v1;
		io_watch(a, e, IO_OUT);
		io_watch(a, e, IO_ERR);
		return;
	}
	/* Frames for a stream that just ended race with its EXIT: drop them. */
	if (!e || e->reaped)
		return;
	switch (f->type) {
	case SBX_F_STDIN: on_stdin(a, e, f); break;
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
	case SBX_F_KILL: exec_kill(a, e, SBX_R_KILLED); break;
	}
}
