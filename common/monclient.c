/* One client of a session monitor's socket: see monclient.h. */
#include "monclient.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sbx_monitor_socket(struct sbx_state *st, const char *id)
{
	_cleanup_close_ int dfd = openat(st->rsessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return -1;
	/* sun_path is 108 bytes; /proc/self/fd keeps it short whatever SBX_ROOT is. */
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/monitor.sock", dfd);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int sbx_monitor_connect(struct sbx_state *st, const char *id, struct sbx_err *err)
{
	if (sbx_session_visible(st, id, err) < 0)
		return -1;
	int fd = sbx_monitor_socket(st, id);
	if (fd >= 0)
		return fd;
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, err) < 0)
		return -1;
	const char *live = sbx_session_live_state(st, &s);
	snprintf(err->session, sizeof err->session, "%s", id);
	if (sbx_state_up(live))
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, errno, "cannot reach the monitor of session %s", id);
	return sbx_err_set(err, SBX_EXIT_NOENT, 0, "session %s is not running (%s%s%s)", id, live,
			   s.end_reason[0] ? ": " : "", s.end_reason);
}

int sbx_mon_open(struct sbx_state *st, const char *id, struct sbx_mon *m, struct sbx_err *err)
{
	memset(m, 0, sizeof *m);
	m->fd = sbx_monitor_connect(st, id, err);
	return m->fd < 0 ? -1 : 0;
}

void sbx_mon_close(struct sbx_mon *m)
{
	if (m->fd >= 0)
		close(m->fd);
	m->fd = -1;
	sbx_buf_free(&m->in);
	sbx_buf_free(&m->out);
	m->out_off = 0;
}

/* What of m->out the socket takes; block: all of it.  fd rides on the
 * first bytes. */
static int flush(struct sbx_mon *m, int block, int fd)
{
	while (m->out_off < m->out.len) {
		ssize_t w = sbx_sendmsg_fds(m->fd, m->out.data + m->out_off, m->out.len - m->out_off, &fd, fd >= 0,
					    MSG_NOSIGNAL | (block ? 0 : MSG_DONTWAIT));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN && !block)
				return 0;
			return -1;
		}
		fd = -1;
		m->out_off += (size_t)w;
	}
	sbx_buf_reset(&m->out);
	m->out_off = 0;
	return 0;
}

int sbx_mon_send(struct sbx_mon *m, int pass_fd)
{
	m->fail = SBX_MON_OK;
	if (m->out.oom) {
		m->fail = SBX_MON_SEND;
		return errno = ENOMEM, -1;
	}
	if (flush(m, 1, pass_fd) < 0) {
		m->fail = SBX_MON_SEND;
		return -1;
	}
	return 0;
}

int sbx_mon_write(struct sbx_mon *m, const void *p, size_t n)
{
	const uint8_t *b = p;
	m->fail = SBX_MON_OK;
	while (n) {
		ssize_t w = send(m->fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			m->fail = SBX_MON_SEND;
			return errno = w < 0 ? errno : EPIPE, -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int failed(struct sbx_mon *m, enum sbx_mon_fail why)
{
	m->fail = why;
	return -1;
}

/* Hand every whole frame read so far to on_frame; 0 when it wants more. */
static int frames(struct sbx_mon *m, sbx_mon_frame_fn on_frame, void *ctx, struct sbx_err *err)
{
	uint32_t max = m->max ? m->max : SBX_FRAME_MAX;
	size_t off = 0;
	int r = 0;
	while (!r && m->in.len - off >= SBX_FRAME_HDR) {
		struct sbx_frame f;
		if (sbx_frame_hdr_get(m->in.data + off, &f, max) < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "malformed frame from the monitor");
			return failed(m, SBX_MON_GARBAGE);
		}
		if (m->in.len - off - SBX_FRAME_HDR < f.len)
			break;
		f.payload = m->in.data + off + SBX_FRAME_HDR;
		off += SBX_FRAME_HDR + f.len;
		r = on_frame(ctx, m, &f, err);
	}
	if (off) { /* (in.data is NULL before the first read) */
		memmove(m->in.data, m->in.data + off, m->in.len - off);
		m->in.len -= off;
	}
	return r < 0 ? failed(m, SBX_MON_REFUSED) : r;
}

/* 1 read some, 0 the monitor is gone, -1 reading failed. */
static int read_more(struct sbx_mon *m)
{
	uint8_t tmp[SBX_DATA_CHUNK + 64];
	ssize_t r = read(m->fd, tmp, sizeof tmp);
	if (r < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : -1;
	if (r == 0)
		return 0;
	return sbx_buf_put(&m->in, tmp, (size_t)r) < 0 ? -1 : 1;
}

int sbx_mon_loop(struct sbx_mon *m, unsigned timeout_ms, sbx_mon_frame_fn on_frame, const struct sbx_mon_fds *fds,
		 void *ctx, struct sbx_err *err)
{
	uint64_t deadline = timeout_ms ? sbx_mono_ns() + (uint64_t)timeout_ms * 1000000u : 0;
	size_t nfds = fds ? fds->n : 0;
	if (nfds > SBX_MON_FDS_MAX)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, EINVAL, "too many fds for the monitor loop");
	m->fail = SBX_MON_OK;
	for (;;) {
		int r = frames(m, on_frame, ctx, err);
		if (r)
			return r;
		int wait = -1;
		if (deadline) {
			uint64_t now = sbx_mono_ns();
			if (now >= deadline) {
				sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "the session's monitor did not answer in time");
				return failed(m, SBX_MON_LATE);
			}
			wait = (int)((deadline - now) / 1000000u) + 1;
		}
		struct pollfd p[1 + SBX_MON_FDS_MAX] = {
			{ .fd = m->fd, .events = POLLIN | (m->out.len ? POLLOUT : 0) },
		};
		if (nfds)
			fds->arm(ctx, m, p + 1);
		int n = poll(p, 1 + nfds, wait);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "poll");
			return failed(m, SBX_MON_POLL);
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR) && read_more(m) <= 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
				    "lost the connection to the session's monitor (the session was destroyed?)");
			return failed(m, SBX_MON_LOST);
		}
		if (nfds && n > 0 && (r = fds->ready(ctx, m, p + 1, err)) != 0)
			return r < 0 ? failed(m, SBX_MON_REFUSED) : r;
		if (m->out.len && flush(m, 0, -1) < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "lost the connection to the session's monitor");
			return failed(m, SBX_MON_LOST);
		}
	}
}

int sbx_mon_call(struct sbx_mon *m, unsigned timeout_ms, sbx_mon_frame_fn on_frame, void *ctx, struct sbx_err *err)
{
	if (sbx_mon_send(m, -1) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send to the session's monitor");
	return sbx_mon_loop(m, timeout_ms, on_frame, NULL, ctx, err);
}

struct next {
	struct sbx_frame *f;
	uint8_t *buf;
};

static int take(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	struct next *x = ctx;
	*x->f = *f;
	memcpy(x->buf, f->payload, f->len);
	x->f->payload = x->buf;
	return 1;
}

int sbx_mon_next(struct sbx_mon *m, unsigned timeout_ms, struct sbx_frame *f, uint8_t *buf, size_t cap,
		 struct sbx_err *err)
{
	struct next x = { f, buf };
	uint32_t max = m->max;
	m->max = cap < SBX_FRAME_MAX ? (uint32_t)cap : SBX_FRAME_MAX;
	int r = sbx_mon_loop(m, timeout_ms, take, NULL, &x, err);
	m->max = max;
	return r > 0 ? 0 : -1;
}

int sbx_mon_error(const struct sbx_frame *f, const char *dflt, struct sbx_err *err)
{
	char msg[400];
	uint32_t code = SBX_EXIT_INTERNAL;
	snprintf(msg, sizeof msg, "%s", dflt);
	sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
	sbx_text_clean(msg);
	return sbx_err_set(err, (int)code, 0, "%s", msg);
}
