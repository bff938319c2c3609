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
	int may_read = !p->pw.sock_eof && p->pw.send_credit && m->agent.fd >= 0;
	if (may_read && agent_full(m)) {
		m->ports->starved = 1;
		may_read = 0;
	}
	uint32_t want = sbx_portwin_events(&p->pw, 0, may_read);
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
	sbx_portwin_free(&p->pw);
	p->fwd->nconns--;
	ps->nconns--;
	/* Not free(p): an event of this turn may still name it. */
	p->src = (struct src){ SRC_DEAD, -1 };
	p->fwd = NULL;
	p->next = ps->dead_conns;
	ps->dead_conns = p;
}

void port_reap(struct mon *m)
{
	struct mports *ps = m->ports;
	if (!ps)
		return;
	while (ps->dead_conns) {
		struct pconn *p = ps->dead_conns;
		ps->dead_conns = p->next;
		free(p);
	}
	while (ps->dead_fwds) {
		struct fwd *f = ps->dead_fwds;
		ps->dead_fwds = f->next;
		free(f);
	}
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
	if (!n)
		return;
	sbx_portwin_credit(&p->pw, &m->aout, p->id, n);
	agent_flush(m);
}

/* Returns -1 when p is gone. */
static int conn_write(struct mon *m, struct pconn *p)
{
	ssize_t wrote = sbx_portwin_flush(&p->pw, p->src.fd, MSG_DONTWAIT);
	if (wrote < 0) {
		port_conn_abort(m, p, NULL); /* the host client went away */
		return -1;
	}
	if (sbx_portwin_drained(&p->pw) && p->guest_closed) {
		conn_free(m, p);
		return -1;
	}
	sbx_portwin_shut(&p->pw, p->src.fd);
	if (!p->guest_closed)
		credit(m, p, (uint32_t)wrote);
	watch(m, p);
	return 0;
}

static int aout_full(void *m)
{
	return agent_full(m);
}

static void conn_read(struct mon *m, struct pconn *p)
{
	if (sbx_portwin_read(&p->pw, p->src.fd, MSG_DONTWAIT, &m->aout, p->id, aout_full, m) < 0) {
		agent_flush(m);
		return port_conn_abort(m, p, NULL);
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
	/* A connection needs the guest as an exec does: a session the idle
	 * policy paused, or one suspended, runs again for it first (during a
	 * suspend, its CONNECT waits in aout and the session resumes when
	 * the suspend is done).  At a bound the connection is closed at once
	 * (and counted), rather than left in the backlog to time out. */
	struct sbx_err werr = { 0 };
	const char *why = susp_wake_guest(m, &werr) < 0      ? werr.msg
			  : m->agent.fd < 0 && !m->susp.busy ? "the guest agent is gone"
			  : f->nconns >= FWD_CONNS_MAX       ? "too many connections through this port"
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
	sbx_portwin_init(&p->pw);
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
		p->pw.hup = 1;
	if (events & EPOLLOUT && conn_write(m, p) < 0)
		return;
	if (events & (EPOLLIN | EPOLLHUP))
		conn_read(m, p);
}

/* After a resume: the agent is back, so connections accepted while it was
 * away read their host sockets again (watch() stopped them). */
void port_rearm(struct mon *m)
{
	for (struct pconn *p = m->ports ? m->ports->conns : NULL; p; p = p->next)
		watch(m, p);
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
	uint32_t code = 0;
	char msg[160] = "";
	if (!p || p->guest_closed)
		return; /* closed already, or never given: see the top */
	switch (f->type) {
	case SBX_F_PORT_CONNECT: p->connected = 1; break;
	case SBX_F_PORT_DATA:
		switch (sbx_portwin_data(&p->pw, f->payload, f->len)) {
		case SBX_PORTWIN_AFTER_EOF: return port_conn_abort(m, p, "data after the guest's end of data");
		case SBX_PORTWIN_OVER: return port_conn_abort(m, p, "data beyond the granted window");
		case SBX_PORTWIN_NOMEM: return port_conn_abort(m, p, "out of memory");
		}
		conn_write(m, p);
		break;
	case SBX_F_PORT_WINDOW:
		if (sbx_portwin_window(&p->pw, f->payload, f->len) < 0)
			return port_conn_abort(m, p, "window beyond what was sent");
		watch(m, p);
		break;
	case SBX_F_PORT_EOF:
		p->pw.peer_eof = 1;
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
		if (sbx_portwin_drained(&p->pw))
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
