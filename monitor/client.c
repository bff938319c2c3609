/* sbx-monitor: clients on monitor.sock: frames, output, catch-up from the files. */
#include "mon.h"

static void client_frame(struct mon *m, void *ctx, const struct sbx_frame *f);

/* --- output to clients ------------------------------------------------- */

void client_flush(struct mon *m, struct client *c)
{
	while (c->out_off < c->out.len) {
		ssize_t w = send(c->src.fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				c->dead = 1;
			break;
		}
		c->out_off += (size_t)w;
		c->q_out += (uint64_t)w;
	}
	/* The output it has read is the guest's to send again. */
	unsigned i = 0;
	uint64_t back = 0;
	while (i < c->nmark && c->mark[i].end <= c->q_out)
		back += c->mark[i++].n;
	if (i) {
		memmove(c->mark, c->mark + i, (c->nmark - i) * sizeof c->mark[0]);
		c->nmark -= i;
		if (c->ex)
			exec_out_credit(m, c->ex, back);
	}
	if (c->out_off == c->out.len) {
		sbx_buf_reset(&c->out);
		c->out_off = 0;
	}
	int want = c->out_off < c->out.len || c->lag;
	if (!c->dead && want != c->want_out) {
		mon_ep_mod(m, &c->src, (c->paused ? 0 : EPOLLIN) | (want ? EPOLLOUT : 0), EPOLL_CTL_MOD);
		c->want_out = want;
	}
}

/* A client that fell behind reads the rest from the exec's files: the
 * monitor never blocks on a slow client and never drops what it stored. */

void client_catch_up(struct mon *m, struct client *c)
{
	struct exec *ex = c->ex;
	uint8_t buf[SBX_DATA_CHUNK];
	while (c->lag && ex && c->out.len - c->out_off < CLIENT_BUF_LOW) {
		int fd = c->lag_out < ex->out_size ? ex->out_fd : ex->err_fd;
		uint64_t *off = c->lag_out < ex->out_size ? &c->lag_out : &c->lag_err;
		uint64_t end = fd == ex->out_fd ? ex->out_size : ex->err_size;
		if (*off >= end) {
			c->lag = 0;
			break;
		}
		size_t want = end - *off < sizeof buf ? (size_t)(end - *off) : sizeof buf;
		ssize_t r = pread(fd, buf, want, (off_t)*off);
		if (r <= 0) {
			c->lag = 0;
			break;
		}
		sbx_frame_raw(&c->out, fd == ex->out_fd ? SBX_F_STDOUT : SBX_F_STDERR, ex->n, buf, (uint32_t)r);
		*off += (uint64_t)r;
	}
	if (!c->lag && ex && ex->done) {
		/* All output is out: now the EXIT it was owed. */
		sbx_buf_put(&c->out, ex->tail.data, ex->tail.len);
		exec_free(m, ex);
	}
}

void client_send(struct mon *m, struct client *c, struct sbx_buf *frame)
{
	sbx_buf_put(&c->out, frame->data, frame->len);
	client_flush(m, c);
}

void client_error(struct mon *m, struct client *c, uint32_t stream, int code, const char *msg)
{
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_ERROR, stream);
	sbx_tlv_u32(&b, SBX_T_CODE, (uint32_t)code);
	sbx_tlv_str(&b, SBX_T_MSG, msg);
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

/* --- frames from clients ----------------------------------------------- */

static void forward_to_guest(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	sbx_frame_raw(&m->aout, f->type, c->ex->n, f->payload, f->len);
	agent_flush(m);
}

void client_resume(struct mon *m, struct client *c)
{
	if (!c->held.len || !c->ex)
		return;
	uint32_t n = (uint32_t)(c->held.len - SBX_FRAME_HDR);
	if (n > c->ex->credit || m->aout.len - m->aout_off >= AGENT_BUF_MAX)
		return;
	c->ex->credit -= n;
	sbx_buf_put(&m->aout, c->held.data, c->held.len);
	sbx_buf_reset(&c->held);
	agent_flush(m);
	c->paused = 0;
	mon_ep_mod(m, &c->src, EPOLLIN | (c->want_out ? EPOLLOUT : 0), EPOLL_CTL_MOD);
	/* Frames that arrived behind the held one are parsed now. */
	if (mon_drain_frames(&c->in, client_frame, m, c, &c->paused) < 0)
		c->dead = 1;
}

static void client_frame(struct mon *m, void *ctx, const struct sbx_frame *f)
{
	struct client *c = ctx;
	if (c->dead)
		return;
	/* A pool member serves only its claim (and sbx-kill); whoever spoke
	 * to the member has nothing to say to the session it became. */
	if (f->type == SBX_F_CLAIM)
		return claim_begin(m, c, f);
	if (c->pool_era && !m->s.pool) {
		/* ... and is hung up on, so an sbx-kill of the member returns. */
		client_error(m, c, f->stream, SBX_EXIT_NOENT, "the pool member was claimed in the meantime");
		c->dead = 1;
		return;
	}
	if ((m->s.pool || m->claim.stage == CLAIM_GUEST) && f->type != SBX_F_SHUTDOWN && f->type != SBX_F_PING)
		return client_error(m, c, f->stream, m->s.pool ? SBX_EXIT_NOENT : SBX_EXIT_TEMPFAIL,
				    m->s.pool ? "a warm-pool member is not a session in use"
					      : "the session is still being created");
	/* A suspended (or idle-paused) session runs again for whatever needs
	 * its guest (suspend.c). */
	if (susp_wake(m, c, f) < 0)
		return;
	switch (f->type) {
	case SBX_F_EXEC: client_exec(m, c, f); return;
	case SBX_F_PING:
		if (m->agent.fd < 0)
			return client_error(m, c, 0, SBX_EXIT_NOENT, "the guest agent is gone");
		c->ping_token = 0x80000000u | (++m->next_ping & 0x7fffffffu);
		sbx_frame_raw(&m->aout, SBX_F_PING, c->ping_token, f->payload, f->len);
		agent_flush(m);
		return;
	case SBX_F_SHUTDOWN:
		c->shutdown_ack = 1;
		m->stopping = 1;
		if (!m->ready)
			m->killed_in_boot = 1;
		return;
	case SBX_F_VMCTL: mon_vmctl(m, c, f); return;
	case SBX_F_PORT: port_client(m, c, f); return;
	default: break;
	}
	if (!c->ex && f->type == SBX_F_KILL) {
		/* sbx-kill --exec: end an exec some other client started. */
		struct exec *ex = f->stream ? exec_find(m, f->stream) : NULL;
		if (!ex || ex->done)
			return client_error(m, c, f->stream, SBX_EXIT_NOENT, "no such running exec");
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		agent_flush(m);
		struct sbx_buf b = { 0 };
		sbx_frame_raw(&b, SBX_F_KILL, ex->n, NULL, 0);
		client_send(m, c, &b);
		sbx_buf_free(&b);
		return;
	}
	if (!c->ex)
		return;
	switch (f->type) {
	case SBX_F_STDIN:
		if (f->len > SBX_DATA_CHUNK)
			return client_error(m, c, f->stream, SBX_EXIT_INVALID, "stdin chunk too large");
		if (f->len <= c->ex->credit && m->aout.len - m->aout_off < AGENT_BUF_MAX) {
			c->ex->credit -= f->len;
			forward_to_guest(m, c, f);
		} else {
			/* Hold it and stop reading this client until the guest
			 * has room: per-exec flow control. */
			sbx_buf_reset(&c->held);
			sbx_frame_raw(&c->held, SBX_F_STDIN, c->ex->n, f->payload, f->len);
			c->paused = 1;
			mon_ep_mod(m, &c->src, c->want_out ? EPOLLOUT : 0, EPOLL_CTL_MOD);
		}
		return;
	case SBX_F_STDIN_EOF:
	case SBX_F_RESIZE:
	case SBX_F_SIGNAL:
	case SBX_F_KILL: forward_to_guest(m, c, f); return;
	default: return;
	}
}

void client_readable(struct mon *m, struct client *c)
{
	int r = port_read_client(c); /* mon_read_into, and a handed-over socket */
	/* Stop parsing while a STDIN frame is held: the rest waits in order. */
	if (c->paused)
		return;
	if (mon_drain_frames(&c->in, client_frame, m, c, &c->paused) < 0 || r <= 0)
		c->dead = 1;
}

void client_drop(struct mon *m, struct client *c)
{
	for (struct client **pp = &m->clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	/* The exec goes on without its client: output still lands on disk and
	 * the guest enforces its timeout. */
	if (c->ex && c->ex->done) {
		exec_free(m, c->ex);
	} else if (c->ex) {
		/* What it never read is consumed all the same. */
		uint64_t back = 0;
		for (unsigned i = 0; i < c->nmark; i++)
			back += c->mark[i].n;
		c->ex->client = NULL;
		exec_out_credit(m, c->ex, back);
	}
	if (m->claim.c == c)
		m->claim.c = NULL;
	if (m->snap.c == c)
		m->snap.c = NULL; /* a save goes on: its directory is sbx-gc's */
	if (m->susp.c == c)
		m->susp.c = NULL; /* and so does a suspend */
	epoll_ctl(m->ep, EPOLL_CTL_DEL, c->src.fd, NULL);
	close(c->src.fd);
	sbx_buf_free(&c->in);
	sbx_buf_free(&c->out);
	sbx_buf_free(&c->held);
	if (c->port_fd1)
		close(c->port_fd1 - 1);
	free(c);
	m->nclients--;
}

/* A peer that is not sbx's own root: told why, if it listens, and
 * dropped.  It never gets a HELLO nor has a frame read. */
static void refuse_peer(int fd, const struct sbx_err *e)
{
	char msg[sizeof e->msg + 64];
	snprintf(msg, sizeof msg, "only sbx's own root may drive a session (%s)", e->msg);
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_ERROR, 0);
	sbx_tlv_u32(&b, SBX_T_CODE, SBX_EXIT_INVALID);
	sbx_tlv_str(&b, SBX_T_MSG, msg);
	sbx_frame_end(&b, off);
	if (!b.oom)
		(void)send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
	sbx_buf_free(&b);
	close(fd);
}

void client_accept(struct mon *m)
{
	for (;;) {
		int fd = accept4(m->listen.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		/* Only sbx's own root drives a session: uid 0 without
		 * capabilities reaches the socket too (N4). */
		struct sbx_err e = { 0 };
		if (m->nclients >= MAX_CLIENTS) {
			close(fd);
			continue;
		}
		if (mon_peer_check(m, fd, &e) < 0) {
			refuse_peer(fd, &e);
			continue;
		}
		struct client *c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			return;
		}
		c->src.kind = SRC_CLIENT;
		c->src.fd = fd;
		c->pool_era = m->s.pool;
		c->next = m->clients;
		m->clients = c;
		m->nclients++;
		mon_ep_mod(m, &c->src, EPOLLIN, EPOLL_CTL_ADD);
		struct sbx_buf b = { 0 };
		size_t off = sbx_frame_begin(&b, SBX_F_HELLO, 0);
		sbx_tlv_u32(&b, SBX_T_VERSION, SBX_PROTO_VERSION);
		sbx_tlv_str(&b, SBX_T_SESSION, m->s.id);
		sbx_frame_end(&b, off);
		client_send(m, c, &b);
		sbx_buf_free(&b);
	}
}
