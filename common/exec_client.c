#include "exec_client.h"
#include "execrec.h"
#include "monclient.h"
#include "session.h"
#include "trace.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <jansson.h>

/* Forward the terminal's size to the exec (stream). */
static void send_winsize(struct sbx_mon *m, int tty, uint32_t stream)
{
	struct winsize ws;
	if (tty < 0 || ioctl(tty, TIOCGWINSZ, &ws) < 0)
		return;
	size_t off = sbx_frame_begin(&m->out, SBX_F_RESIZE, stream);
	sbx_tlv_u32(&m->out, SBX_T_ROWS, ws.ws_row);
	sbx_tlv_u32(&m->out, SBX_T_COLS, ws.ws_col);
	sbx_frame_end(&m->out, off);
}

static int has_name(char *const *env, size_t n, const char *kv, size_t nl)
{
	for (size_t i = 0; i < n; i++)
		if (!strncmp(env[i], kv, nl) && env[i][nl] == '=')
			return 1;
	return 0;
}

/* The request as sent: the session's environment (env.h) beneath the
 * exec's own -e, its workdir and user where the exec names none.  req's
 * strings stay the caller's; *env and *sec (arrays only) are ours. */
static int with_session_env(const struct sbx_session *s, struct sbx_exec_req *req, char ***env, char ***sec,
			    struct sbx_err *err)
{
	*env = calloc(s->env.n + req->envc + 1, sizeof **env);
	*sec = calloc(s->env.n + 1, sizeof **sec);
	if (!*env || !*sec)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	size_t n = 0, m = 0;
	for (unsigned i = 0; i < s->env.n; i++) {
		size_t nl;
		const char *v;
		const char *kv = sbx_env_entry(&s->env, i, &nl, &v);
		if (has_name(req->env, req->envc, kv, nl))
			continue; /* sbx-exec -e wins */
		if (s->env.secret & (1ull << i))
			(*sec)[m++] = (char *)kv;
		else
			(*env)[n++] = (char *)kv;
	}
	for (size_t i = 0; i < req->envc; i++)
		(*env)[n++] = req->env[i];
	req->env = *env;
	req->envc = n;
	req->env_secret = *sec;
	req->env_secretc = m;
	if (!req->cwd && s->workdir[0])
		req->cwd = (char *)s->workdir;
	uint32_t uid;
	if (!req->have_uid && s->user[0] && sbx_user_parse(s->user, &uid) == 0) {
		req->uid = req->gid = uid;
		req->have_uid = req->have_gid = 1;
	}
	return 0;
}

/* One exec's stream, as the frame loop sees it. */
struct run {
	struct sbx_exec_opts *o;
	struct sbx_exec_result *r;
	uint32_t stream;
	int started, in_open, sfd;
	struct sbx_trace *tr; /* SBX_TRACE: make bench's exec steps */
};

static int run_frame(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	struct run *x = ctx;
	switch (f->type) {
	case SBX_F_STARTED: {
		struct sbx_tlv_it it;
		uint16_t tag;
		const uint8_t *v;
		uint32_t n;
		x->stream = f->stream;
		x->started = 1;
		sbx_trace_step(x->tr, "started");
		sbx_tlv_init(&it, f->payload, f->len);
		while (sbx_tlv_next(&it, &tag, &v, &n) == 1)
			if (tag == SBX_T_EXEC_ID)
				sbx_tlv_as_str(v, n, x->r->exec_id, sizeof x->r->exec_id);
		if (x->o->on_started)
			x->o->on_started(x->o->started_ctx, x->r->exec_id);
		if (x->o->detach)
			return 1;
		send_winsize(m, x->o->tty_fd, x->stream);
		return 0;
	}
	case SBX_F_STDOUT:
	case SBX_F_STDERR:
		/* Nowhere to write: the command goes on, its output is kept in
		 * the session. */
		(void)sbx_write_all(f->type == SBX_F_STDOUT ? x->o->out_fd : x->o->err_fd, f->payload, f->len);
		return 0;
	case SBX_F_EXIT:
		if (sbx_exit_decode(f->payload, f->len, &x->r->exit) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "malformed exit report");
		sbx_trace_step(x->tr, "exit");
		return 1;
	case SBX_F_ERROR: return sbx_mon_error(f, "the session refused the command", err);
	default: return 0;
	}
}

static void run_arm(void *ctx, struct sbx_mon *m, struct pollfd *p)
{
	struct run *x = ctx;
	p[0] = (struct pollfd){ .fd = x->sfd, .events = POLLIN };
	/* Read stdin only when the last chunk is on its way: the socket's
	 * buffer is the flow control towards the monitor. */
	p[1] = (struct pollfd){ .fd = x->in_open && x->started && !m->out.len ? x->o->in_fd : -1, .events = POLLIN };
}

static int run_ready(void *ctx, struct sbx_mon *m, const struct pollfd *p, struct sbx_err *err)
{
	struct run *x = ctx;
	if (p[0].revents & POLLIN) {
		struct signalfd_siginfo si;
		while (read(x->sfd, &si, sizeof si) == sizeof si) {
			if (!x->stream)
				continue;
			if (si.ssi_signo == SIGWINCH) {
				send_winsize(m, x->o->tty_fd, x->stream);
				continue;
			}
			size_t off = sbx_frame_begin(&m->out, SBX_F_SIGNAL, x->stream);
			sbx_tlv_u32(&m->out, SBX_T_SIGNO, si.ssi_signo);
			sbx_frame_end(&m->out, off);
		}
	}
	if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
		uint8_t buf[SBX_DATA_CHUNK];
		ssize_t n = read(x->o->in_fd, buf, sizeof buf);
		if (n > 0) {
			sbx_frame_raw(&m->out, SBX_F_STDIN, x->stream, buf, (uint32_t)n);
		} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
			sbx_frame_raw(&m->out, SBX_F_STDIN_EOF, x->stream, NULL, 0);
			x->in_open = 0;
		}
	}
	return 0;
}

int sbx_exec_run(struct sbx_state *st, const char *session, struct sbx_exec_opts *o, struct sbx_exec_result *r,
		 struct sbx_err *err)
{
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	_cleanup_trace_ struct sbx_trace tr = { 0 };
	struct run x = { .o = o, .r = r, .in_open = o->in_fd >= 0, .sfd = -1, .tr = &tr };
	sigset_t set, old;

	memset(r, 0, sizeof *r);
	sbx_trace_begin(&tr, "exec.client");
	if (sbx_id_check(session, "session", err) < 0 || sbx_mon_open(st, session, &m, err) < 0)
		return -1;
	sbx_trace_step(&tr, "connect");
	if (o->detach)
		o->req.flags |= SBX_EXEC_DETACH;
	if (x.in_open && !o->detach)
		o->req.flags |= SBX_EXEC_STDIN;
	/* sbx's own execs (sbx-cp's tar) run as sbx means them, whatever
	 * the session's environment says. */
	struct sbx_exec_req req = o->req;
	_cleanup_free_ char **env = NULL, **sec = NULL;
	_cleanup_free_ struct sbx_session *s = NULL;
	if (!(req.flags & SBX_EXEC_COPY)) {
		if (!(s = malloc(sizeof *s)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		if (sbx_record_load(st, session, s, err) < 0 || with_session_env(s, &req, &env, &sec, err) < 0)
			return -1;
	}
	if (sbx_exec_req_encode(&m.out, 0, &req) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, E2BIG, "the command and its environment are too large");
	if (sbx_mon_send(&m, -1) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send the command to the session");
	sbx_trace_step(&tr, "request");
	sigemptyset(&set);
	if (o->forward_signals) {
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGHUP);
	}
	if (o->tty_fd >= 0)
		sigaddset(&set, SIGWINCH);
	sigprocmask(SIG_BLOCK, &set, &old);
	x.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	static const struct sbx_mon_fds fds = { .n = 2, .arm = run_arm, .ready = run_ready };
	int rc = sbx_mon_loop(&m, 0, run_frame, &fds, &x, err) > 0 ? 0 : -1;
	if (x.sfd >= 0) {
		close(x.sfd);
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	sbx_trace_end(&tr, rc == 0 && !o->detach);
	return rc;
}
