/* sbx-monitor: sbx-port's forwards.  The sbx-port command binds the host
 * side itself (a loopback TCP port or a unix socket, with the caller's own
 * rights) and hands the listening socket over on monitor.sock as
 * SCM_RIGHTS; the monitor checks what it got (listening, stream, loopback
 * or a named unix socket, nothing else), keeps it for the session's life
 * or until --rm, accepts, and carries each connection as a stream of
 * PORT_* frames over the agent channel.  Every connection has
 * SBX_PORT_WINDOW bytes of credit each way: the monitor reads a host
 * socket only while the guest has room for it, and the guest sends only
 * what the monitor gave back after writing it out, so a slow or stuck
 * connection stalls itself only, and what the monitor holds is bounded by
 * connections x window.  The guest can lie: data beyond its window, after
 * its EOF, for streams it was never given or that are closed; each ends
 * at most its own connection and nothing grows. */
#include "port.h"


struct mports *port_state(struct mon *m)
{
	if (!m->ports)
		m->ports = calloc(1, sizeof *m->ports);
	return m->ports;
}

static int agent_full(const struct mon *m)
{
	return m->aout.len - m->aout_off >= AGENT_BUF_MAX;
}

static void watch(struct mon *m, struct pconn *p)
{
	uint32_t want = 0;
	if (p->w.len > p->w_off)
		want |= EPOLLOUT;
	if (!p->sock_eof && p->send_credit && m->agent.fd >= 0) {
		if (!agent_full(m))
			want |= EPOLLIN;
		else
			m->ports->starved = 1;
	}
	if (p->hup && !(want & EPOLLIN))
		want = 0; /* HUP is reported whatever we ask: see guest-init/port.c */
	if (want == p->events)
		return;
	mon_ep_mod(m, &p->src, want, !p->events ? EPOLL_CTL_ADD : !want ? EPOLL_CTL_DEL : EPOLL_CTL_MOD);
	p->events = want;
}

static void conn_free(struct mon *m, struct pconn *p)
{
	struct mports *ps = m->ports;
	for (struct pconn **pp = &ps->conns; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	close(p->src.fd); /* leaves the epoll set */
	sbx_buf_free(&p->w);
	p->fwd->nconns--;
	ps->nconns--;
	free(p);
}

void port_conn_abort(struct mon *m, struct pconn *p, const char *why)
{
	size_t off = sbx_frame_begin(&m->aout, SBX_F_PORT_CLOSE, p->id);
	if (why) {
		sbx_tlv_u32(&m->aout, SBX_T_CODE, SBX_EXIT_INVALID);
		sbx_tlv_str(&m->aout, SBX_T_MSG, why);
		snprintf(p->fwd->last_error, sizeof p->fwd->last_error, "%s", why);
	}
	sbx_frame_end(&m->aout, off);
	agent_flush(m);
	conn_free(m, p);
}

static struct pconn *conn_find(struct mon *m, uint32_t id)
{
	for (struct pconn *p = m->ports ? m->ports->conns : NULL; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static void credit(struct mon *m, struct pconn *p, uint32_t n)
{
	uint8_t le[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
	if (!n)
		return;
	p->recv_used -= n;
	sbx_frame_raw(&m->aout, SBX_F_PORT_WINDOW, p->id, le, 4);
	agent_flush(m);
}

/* Returns -1 when p is gone. */
static int conn_write(struct mon *m, struct pconn *p)
{
	size_t wrote = 0;
	while (p->w.len > p->w_off) {
		ssize_t w = send(p->src.fd, p->w.data + p->w_off, p->w.len - p->w_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w > 0) {
			p->w_off += (size_t)w;
			wrote += (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			break;
		} else {
			port_conn_abort(m, p, NULL); /* the host client went away */
			return -1;
		}
	}
	if (p->w_off == p->w.len) {
		sbx_buf_reset(&p->w);
		p->w_off = 0;
		if (p->guest_closed) {
			conn_free(m, p);
			return -1;
		}
		if (p->guest_eof && !p->guest_eof_done) {
			shutdown(p->src.fd, SHUT_WR);
			p->guest_eof_done = 1;
		}
	}
	if (!p->guest_closed)
		credit(m, p, (uint32_t)wrote);
	watch(m, p);
	return 0;
}

static void conn_read(struct mon *m, struct pconn *p)
{
	uint8_t buf[SBX_DATA_CHUNK];
	for (int i = 0; i < 4 && p->send_credit && !agent_full(m); i++) {
		size_t want = p->send_credit < sizeof buf ? p->send_credit : sizeof buf;
		ssize_t r = recv(p->src.fd, buf, want, MSG_DONTWAIT);
		if (r > 0) {
			p->send_credit -= (uint32_t)r;
			sbx_frame_raw(&m->aout, SBX_F_PORT_DATA, p->id, buf, (uint32_t)r);
			if ((size_t)r < want)
				break;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			break;
		} else if (r == 0) {
			p->sock_eof = 1;
			sbx_frame_raw(&m->aout, SBX_F_PORT_EOF, p->id, NULL, 0);
			break;
		} else {
			agent_flush(m);
			return port_conn_abort(m, p, NULL);
		}
	}
	agent_flush(m);
	watch(m, p);
}

static void accept_one(struct mon *m, struct fwd *f)
{
	struct mports *ps = m->ports;
	int fd = accept4(f->src.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	f->accepted++;
	/* At a bound the connection is closed at once (and counted), rather
	 * than left in the backlog to time out. */
	const char *why = m->agent.fd < 0		      ? "the guest agent is gone"
			  : f->nconns >= FWD_CONNS_MAX	      ? "too many connections through this port"
			  : ps->nconns >= SBX_PORT_CONNS_MAX ? "too many forwarded connections in the session"
							      : NULL;
	struct pconn *p = why ? NULL : calloc(1, sizeof *p);
	if (!p) {
		close(fd);
		f->refused++;
		snprintf(f->last_error, sizeof f->last_error, "%s", why ? why : "out of memory");
		return;
	}
	p->src = (struct src){ SRC_PORT_CONN, fd };
	p->fwd = f;
	if (!++ps->next_id)
		ps->next_id = 1;
	p->id = ps->next_id;
	p->send_credit = SBX_PORT_WINDOW;
	p->next = ps->conns;
	ps->conns = p;
	ps->nconns++;
	f->nconns++;
	size_t off = sbx_frame_begin(&m->aout, SBX_F_PORT_CONNECT, p->id);
	sbx_tlv_u32(&m->aout, SBX_T_PORT, f->port);
	sbx_frame_end(&m->aout, off);
	agent_flush(m);
	watch(m, p);
}

void port_event(struct mon *m, struct src *s, uint32_t events)
{
	if (s->kind == SRC_PORT_LISTEN) {
		for (int i = 0; i < 16; i++) {
			struct fwd *f = (struct fwd *)s;
			uint64_t before = f->accepted;
			accept_one(m, f);
			if (f->accepted == before)
				break;
		}
		return;
	}
	struct pconn *p = (struct pconn *)s;
	if (events & EPOLLERR)
		return port_conn_abort(m, p, NULL);
	if (events & EPOLLHUP)
		p->hup = 1;
	if (events & EPOLLOUT && conn_write(m, p) < 0)
		return;
	if (events & (EPOLLIN | EPOLLHUP))
		conn_read(m, p);
}

/* After each loop turn: connections that waited for room in the agent queue. */
void port_tick(struct mon *m)
{
	if (!m->ports || !m->ports->starved || agent_full(m))
		return;
	m->ports->starved = 0;
	for (struct pconn *p = m->ports->conns; p; p = p->next)
		watch(m, p);
}

/* --- frames from the guest --------------------------------------------- */

void port_agent_frame(struct mon *m, const struct sbx_frame *f)
{
	struct pconn *p = conn_find(m, f->stream);
	uint32_t more, code = 0;
	char msg[160] = "";
	if (!p || p->guest_closed)
		return; /* closed already, or never given: see the top */
	switch (f->type) {
	case SBX_F_PORT_CONNECT:
		p->connected = 1;
		break;
	case SBX_F_PORT_DATA:
		if (p->guest_eof || f->len > SBX_PORT_WINDOW - p->recv_used)
			return port_conn_abort(m, p, p->guest_eof ? "data after the guest's end of data"
							     : "data beyond the granted window");
		p->recv_used += f->len;
		if (sbx_buf_put(&p->w, f->payload, f->len) < 0)
			return port_conn_abort(m, p, "out of memory");
		conn_write(m, p);
		break;
	case SBX_F_PORT_WINDOW:
		if (sbx_tlv_as_u32(f->payload, f->len, &more) < 0 || more > SBX_PORT_WINDOW - p->send_credit)
			return port_conn_abort(m, p, "window beyond what was sent");
		p->send_credit += more;
		watch(m, p);
		break;
	case SBX_F_PORT_EOF:
		p->guest_eof = 1;
		conn_write(m, p);
		break;
	case SBX_F_PORT_CLOSE:
		sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
		if (code || msg[0]) {
			/* Refused (nothing listens on the guest port) or reset:
			 * the host connection is closed, the forward counts it. */
			sbx_text_clean(msg); /* the guest's words, shown to people */
			if (!p->connected)
				p->fwd->refused++;
			snprintf(p->fwd->last_error, sizeof p->fwd->last_error, "%s", msg[0] ? msg : "refused");
			return conn_free(m, p);
		}
		/* A clean end: what the guest sent before goes out first. */
		p->guest_closed = 1;
		if (p->w.len == p->w_off)
			return conn_free(m, p);
		watch(m, p);
		break;
	}
}

/* Forwarded connections open now (for an idle check: one open is not idle). */
unsigned port_connections(const struct mon *m)
{
	return m->ports ? m->ports->nconns : 0;
}

/* The agent channel is gone: so is every connection over it. */
void port_agent_lost(struct mon *m)
{
	while (m->ports && m->ports->conns)
		conn_free(m, m->ports->conns);
}
