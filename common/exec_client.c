#include "exec_client.h"
#include "session.h"
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

struct conn {
	int fd;
	struct sbx_buf in, out;
	size_t out_off;
};

static int conn_flush(struct conn *c, int block)
{
	while (c->out_off < c->out.len) {
		ssize_t w = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
				 MSG_NOSIGNAL | (block ? 0 : MSG_DONTWAIT));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && !block)
				return 0;
			return -1;
		}
		c->out_off += (size_t)w;
	}
	sbx_buf_reset(&c->out);
	c->out_off = 0;
	return 0;
}

/* Next whole frame from the connection; 1 got one, 0 need more, -1 bad. */
static int next_frame(struct conn *c, struct sbx_frame *f, size_t *consumed)
{
	if (c->in.len < SBX_FRAME_HDR)
		return 0;
	if (sbx_frame_hdr_get(c->in.data, f, SBX_FRAME_MAX) < 0)
		return -1;
	if (c->in.len - SBX_FRAME_HDR < f->len)
		return 0;
	f->payload = c->in.data + SBX_FRAME_HDR;
	*consumed = SBX_FRAME_HDR + f->len;
	return 1;
}

static void consume(struct conn *c, size_t n)
{
	memmove(c->in.data, c->in.data + n, c->in.len - n);
	c->in.len -= n;
}

static int frame_error(const struct sbx_frame *f, struct sbx_err *err)
{
	char msg[300] = "the session refused the command";
	uint32_t code = SBX_EXIT_INTERNAL;
	sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
	sbx_text_clean(msg); /* it may quote the guest */
	return sbx_err_set(err, (int)code, 0, "%s", msg);
}

static void send_winsize(struct conn *c, int tty, uint32_t stream)
{
	struct winsize ws;
	if (tty < 0 || ioctl(tty, TIOCGWINSZ, &ws) < 0)
		return;
	size_t off = sbx_frame_begin(&c->out, SBX_F_RESIZE, stream);
	sbx_tlv_u32(&c->out, SBX_T_ROWS, ws.ws_row);
	sbx_tlv_u32(&c->out, SBX_T_COLS, ws.ws_col);
	sbx_frame_end(&c->out, off);
}

static int read_more(struct conn *c)
{
	uint8_t tmp[SBX_DATA_CHUNK + 64];
	ssize_t r = read(c->fd, tmp, sizeof tmp);
	if (r < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : -1;
	if (r == 0)
		return 0;
	return sbx_buf_put(&c->in, tmp, (size_t)r) < 0 ? -1 : 1;
}

int sbx_exec_run(struct sbx_state *st, const char *session, struct sbx_exec_opts *o, struct sbx_exec_result *r,
		 struct sbx_err *err)
{
	struct conn c = { .fd = -1 };
	int rc = -1, sfd = -1, in_open = o->in_fd >= 0;
	uint32_t stream = 0;
	sigset_t set, old;

	memset(r, 0, sizeof *r);
	if (sbx_id_check(session, "session", err) < 0)
		return -1;
	if ((c.fd = sbx_monitor_connect(st, session, err)) < 0)
		return -1;
	if (o->detach)
		o->req.flags |= SBX_EXEC_DETACH;
	if (in_open && !o->detach)
		o->req.flags |= SBX_EXEC_STDIN;
	if (sbx_exec_req_encode(&c.out, 0, &o->req) < 0) {
		sbx_err_set(err, SBX_EXIT_INVALID, E2BIG, "the command and its environment are too large");
		goto out;
	}
	if (conn_flush(&c, 1) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send the command to the session");
		goto out;
	}
	sigemptyset(&set);
	if (o->forward_signals) {
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGHUP);
	}
	if (o->tty_fd >= 0)
		sigaddset(&set, SIGWINCH);
	sigprocmask(SIG_BLOCK, &set, &old);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);

	int started = 0;
	uint8_t inbuf[SBX_DATA_CHUNK];
	for (;;) {
		struct sbx_frame f;
		size_t used;
		int got;
		while ((got = next_frame(&c, &f, &used)) == 1) {
			switch (f.type) {
			case SBX_F_STARTED: {
				struct sbx_tlv_it it;
				uint16_t tag;
				const uint8_t *v;
				uint32_t n;
				stream = f.stream;
				started = 1;
				sbx_tlv_init(&it, f.payload, f.len);
				while (sbx_tlv_next(&it, &tag, &v, &n) == 1)
					if (tag == SBX_T_EXEC_ID)
						sbx_tlv_as_str(v, n, r->exec_id, sizeof r->exec_id);
				if (o->detach) {
					rc = 0;
					goto out;
				}
				send_winsize(&c, o->tty_fd, stream);
				break;
			}
			case SBX_F_STDOUT:
			case SBX_F_STDERR:
				if (sbx_write_all(f.type == SBX_F_STDOUT ? o->out_fd : o->err_fd, f.payload, f.len) < 0 &&
				    errno != EPIPE) {
					/* Nowhere to write: the command goes on, its
					 * output is kept in the session. */
				}
				break;
			case SBX_F_EXIT:
				if (sbx_exit_decode(f.payload, f.len, &r->exit) < 0) {
					sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "malformed exit report");
					goto out;
				}
				rc = 0;
				goto out;
			case SBX_F_ERROR:
				frame_error(&f, err);
				goto out;
			default:
				break;
			}
			consume(&c, used);
		}
		if (got < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "malformed frame from the monitor");
			goto out;
		}
		struct pollfd p[3] = {
			{ .fd = c.fd, .events = POLLIN | (c.out.len ? POLLOUT : 0) },
			{ .fd = sfd, .events = POLLIN },
			/* Read stdin only when the last chunk is on its way: the
			 * socket's buffer is the flow control towards the monitor. */
			{ .fd = in_open && started && !c.out.len ? o->in_fd : -1, .events = POLLIN },
		};
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "poll");
			goto out;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int m = read_more(&c);
			if (m <= 0) {
				sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
					    "lost the connection to the session's monitor (the session was destroyed?)");
				goto out;
			}
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == sizeof si) {
				if (!stream)
					continue;
				if (si.ssi_signo == SIGWINCH) {
					send_winsize(&c, o->tty_fd, stream);
					continue;
				}
				size_t off = sbx_frame_begin(&c.out, SBX_F_SIGNAL, stream);
				sbx_tlv_u32(&c.out, SBX_T_SIGNO, si.ssi_signo);
				sbx_frame_end(&c.out, off);
			}
		}
		if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(o->in_fd, inbuf, sizeof inbuf);
			if (n > 0) {
				sbx_frame_raw(&c.out, SBX_F_STDIN, stream, inbuf, (uint32_t)n);
			} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				sbx_frame_raw(&c.out, SBX_F_STDIN_EOF, stream, NULL, 0);
				in_open = 0;
			}
		}
		if (c.out.len && conn_flush(&c, 0) < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "lost the connection to the session's monitor");
			goto out;
		}
	}
out:
	if (sfd >= 0) {
		close(sfd);
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
	close(c.fd);
	sbx_buf_free(&c.in);
	sbx_buf_free(&c.out);
	return rc;
}
