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
#include "mon.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#define FWD_MAX 16        /* forwards per session */
#define FWD_CONNS_MAX 128 /* connections at once per forward; SBX_PORT_CONNS_MAX per session */

struct fwd {
	struct src src; /* SRC_PORT_LISTEN: first, so the loop's src is the fwd */
	struct fwd *next;
	uint32_t port;
	char addr[SBX_PORT_ADDR_MAX];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* a unix socket's, "" for TCP */
	dev_t dev;
	ino_t ino;
	unsigned uid;
	unsigned nconns;
	uint64_t accepted, refused;
	char last_error[160];
	int accepting; /* in epoll for EPOLLIN */
};

struct pconn {
	struct src src; /* SRC_PORT_CONN */
	struct pconn *next;
	struct fwd *fwd;
	uint32_t id;
	int connected;        /* the guest said so */
	uint32_t events;      /* in epoll now */
	struct sbx_buf w;     /* from the guest, not yet written to the host socket */
	size_t w_off;
	uint32_t recv_used;   /* bytes from the guest not yet given back */
	uint32_t send_credit; /* bytes the guest still has room for */
	int guest_eof, guest_eof_done, guest_closed;
	int sock_eof, hup;
};

struct mports {
	struct fwd *fwds;
	struct pconn *conns;
	unsigned nfwds, nconns;
	uint32_t next_id;
	int starved; /* a connection waits for the agent queue to drain */
};

static struct mports *ports(struct mon *m)
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

/* End a connection from the host side: the guest hears PORT_CLOSE. */
static void conn_abort(struct mon *m, struct pconn *p, const char *why)
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
			conn_abort(m, p, NULL); /* the host client went away */
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
			return conn_abort(m, p, NULL);
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
		return conn_abort(m, p, NULL);
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
			return conn_abort(m, p, p->guest_eof ? "data after the guest's end of data"
							     : "data beyond the granted window");
		p->recv_used += f->len;
		if (sbx_buf_put(&p->w, f->payload, f->len) < 0)
			return conn_abort(m, p, "out of memory");
		conn_write(m, p);
		break;
	case SBX_F_PORT_WINDOW:
		if (sbx_tlv_as_u32(f->payload, f->len, &more) < 0 || more > SBX_PORT_WINDOW - p->send_credit)
			return conn_abort(m, p, "window beyond what was sent");
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

/* --- forwards: open, remove, list, record -------------------------------- */

/* LIB/sessions/ID/ports.json: what sbx-ps shows, rewritten on each change. */
static void save(struct mon *m)
{
	json_t *a = json_array();
	for (struct fwd *f = m->ports->fwds; a && f; f = f->next)
		json_array_append_new(a, json_pack("{s:i, s:s, s:i}", "guest_port", (int)f->port, "address", f->addr,
						   "uid", (int)f->uid));
	char *txt = a ? json_dumps(a, JSON_COMPACT) : NULL;
	json_decref(a);
	if (txt)
		sbx_atomic_write_at(m->lib_dfd, "ports.json", txt, strlen(txt), 0644, NULL);
	free(txt);
}

static void audit_fwd(struct mon *m, const char *type, const struct fwd *f, unsigned uid, const char *reason)
{
	json_t *af = json_pack("{s:s, s:i, s:s, s:i}", "session", m->s.id, "guest_port", (int)f->port, "address",
			       f->addr, "uid", (int)uid);
	if (af && reason) {
		json_object_set_new(af, "reason", json_string(reason));
		json_object_set_new(af, "accepted", json_integer((json_int_t)f->accepted));
		json_object_set_new(af, "refused", json_integer((json_int_t)f->refused));
	}
	mon_audit(m, type, af, NULL);
	json_decref(af);
}

static void fwd_close(struct mon *m, struct fwd *f, unsigned uid, const char *reason)
{
	struct mports *ps = m->ports;
	for (struct pconn *p = ps->conns, *next; p; p = next) {
		next = p->next;
		if (p->fwd == f)
			conn_abort(m, p, NULL);
	}
	for (struct fwd **pp = &ps->fwds; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	ps->nfwds--;
	close(f->src.fd);
	/* Our socket file only: the one we saw at open, not what took its name. */
	struct stat sb;
	if (f->path[0] && lstat(f->path, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_dev == f->dev &&
	    sb.st_ino == f->ino)
		unlink(f->path);
	audit_fwd(m, "port.close", f, uid, reason);
	free(f);
}

/* The session ends: every forward with it. */
void port_end(struct mon *m, const char *reason)
{
	while (m->ports && m->ports->fwds)
		fwd_close(m, m->ports->fwds, 0, reason);
	if (m->ports) {
		unlinkat(m->lib_dfd, "ports.json", 0);
		free(m->ports);
		m->ports = NULL;
	}
}

static unsigned peer_uid(int fd)
{
	struct ucred cr;
	socklen_t sl = sizeof cr;
	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &sl) == 0 ? (unsigned)cr.uid : (unsigned)-1;
}

/* What the client handed over must be a listening stream socket on
 * loopback or a named unix socket: never a public address, whatever the
 * client says (the fd is the truth, ADDR only a label). */
static int check_listener(int fd, struct fwd *f, char *why, size_t n)
{
	int v = 0;
	socklen_t sl = sizeof v;
	struct sockaddr_storage ss;
	socklen_t al = sizeof ss;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &sl) < 0 || !v)
		return snprintf(why, n, "the socket handed over is not listening"), -1;
	sl = sizeof v;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &sl) < 0 || v != SOCK_STREAM)
		return snprintf(why, n, "the socket handed over is not a stream socket"), -1;
	memset(&ss, 0, sizeof ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &al) < 0)
		return snprintf(why, n, "cannot read the socket's address: %s", strerror(errno)), -1;
	char a[INET6_ADDRSTRLEN];
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
		if ((ntohl(s4->sin_addr.s_addr) >> 24) != 127)
			return snprintf(why, n, "only a loopback address may be forwarded to"), -1;
		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
		snprintf(f->addr, sizeof f->addr, "%s:%u", a, ntohs(s4->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
		if (!IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			return snprintf(why, n, "only a loopback address may be forwarded to"), -1;
		snprintf(f->addr, sizeof f->addr, "[::1]:%u", ntohs(s6->sin6_port));
	} else if (ss.ss_family == AF_UNIX) {
		const struct sockaddr_un *su = (const struct sockaddr_un *)&ss;
		size_t l = al > offsetof(struct sockaddr_un, sun_path) ? al - offsetof(struct sockaddr_un, sun_path) : 0;
		if (!l || su->sun_path[0] != '/' || memchr(su->sun_path, 0, l) == NULL)
			return snprintf(why, n, "a unix socket must have an absolute path"), -1;
		struct stat sb;
		snprintf(f->path, sizeof f->path, "%s", su->sun_path);
		if (lstat(f->path, &sb) < 0 || !S_ISSOCK(sb.st_mode))
			return snprintf(why, n, "the unix socket %s is not there", f->path), -1;
		f->dev = sb.st_dev;
		f->ino = sb.st_ino;
		snprintf(f->addr, sizeof f->addr, "unix:%s", f->path);
	} else {
		return snprintf(why, n, "only loopback TCP or a unix socket may be forwarded to"), -1;
	}
	return 0;
}

static void reply(struct mon *m, struct client *c, uint32_t op, const struct fwd *only)
{
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_PORT, 0);
	sbx_tlv_u32(&b, SBX_T_OP, op);
	for (struct fwd *f = m->ports->fwds; f; f = f->next) {
		if (only && f != only)
			continue;
		struct sbx_port_entry e = { .port = f->port, .conns = f->nconns, .accepted = f->accepted,
					    .refused = f->refused };
		snprintf(e.addr, sizeof e.addr, "%s", f->addr);
		sbx_port_entry_put(&b, &e);
		if (f->last_error[0])
			sbx_tlv_str(&b, SBX_T_MSG, f->last_error);
	}
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

static void open_fwd(struct mon *m, struct client *c, const struct sbx_port_req *r)
{
	struct mports *ps = ports(m);
	int fd = c->port_fd1 - 1;
	char why[200];
	c->port_fd1 = 0;
	if (fd < 0)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "no listening socket came with the request");
	struct fwd *f = ps ? calloc(1, sizeof *f) : NULL;
	if (!f) {
		close(fd);
		return client_error(m, c, 0, SBX_EXIT_INTERNAL, "out of memory");
	}
	f->src = (struct src){ SRC_PORT_LISTEN, fd };
	f->port = r->port;
	f->uid = peer_uid(c->src.fd);
	/* The policy as the session has it now (a claim may have replaced it). */
	struct sbx_policy pol;
	struct sbx_err e = { 0 };
	_cleanup_free_ char *txt = sbx_read_small_at(m->lib_dfd, "policy.json", 1 << 20, NULL);
	json_t *o = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
	int prc = o ? sbx_policy_ports_from_json(o, &pol, &e) : -1;
	json_decref(o);
	int code = SBX_EXIT_INVALID;
	if (prc < 0) {
		snprintf(why, sizeof why, "cannot read the session's policy: %s", e.msg[0] ? e.msg : "policy.json");
		code = SBX_EXIT_INTERNAL;
	} else if (!sbx_policy_port_allowed(&pol, r->port, m->s.tenant)) {
		snprintf(why, sizeof why, "the session's policy does not allow forwarding guest port %u%s", r->port,
			 pol.ports.set ? " (ports:)" : " (a tenant's session needs ports: in its policy)");
	} else if (ps->nfwds >= FWD_MAX) {
		snprintf(why, sizeof why, "the session has %u forwards already", FWD_MAX);
		code = SBX_EXIT_TEMPFAIL;
	} else if (m->agent.fd < 0) {
		snprintf(why, sizeof why, "the guest agent is gone");
		code = SBX_EXIT_NOENT;
	} else if (check_listener(fd, f, why, sizeof why) == 0) {
		/* Ours to accept on without blocking (the client's copy goes). */
		code = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ? SBX_EXIT_INTERNAL : 0;
		if (code)
			snprintf(why, sizeof why, "cannot make the socket nonblocking: %s", strerror(errno));
	}
	if (code) {
		close(fd);
		free(f);
		return client_error(m, c, 0, code, why);
	}
	f->next = ps->fwds;
	ps->fwds = f;
	ps->nfwds++;
	mon_ep_mod(m, &f->src, EPOLLIN, EPOLL_CTL_ADD);
	save(m);
	audit_fwd(m, "port.open", f, f->uid, NULL);
	reply(m, c, SBX_PORT_OPEN, f);
}

static void rm_fwd(struct mon *m, struct client *c, const struct sbx_port_req *r)
{
	struct mports *ps = m->ports;
	unsigned n = 0, uid = peer_uid(c->src.fd);
	for (struct fwd *f = ps ? ps->fwds : NULL, *next; f; f = next) {
		next = f->next;
		if ((r->port && f->port != r->port) || (r->addr[0] && strcmp(f->addr, r->addr)))
			continue;
		fwd_close(m, f, uid, "sbx-port --rm");
		n++;
	}
	if (!n)
		return client_error(m, c, 0, SBX_EXIT_NOENT, "no such forward in the session");
	save(m);
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_PORT, 0);
	sbx_tlv_u32(&b, SBX_T_OP, SBX_PORT_RM);
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

void port_client(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	struct sbx_port_req r;
	const char *why;
	if (sbx_port_req_decode(f->payload, f->len, &r, &why) < 0) {
		if (c->port_fd1)
			close(c->port_fd1 - 1);
		c->port_fd1 = 0;
		return client_error(m, c, 0, SBX_EXIT_INVALID, why);
	}
	switch (r.op) {
	case SBX_PORT_OPEN:
		return open_fwd(m, c, &r);
	case SBX_PORT_RM:
		return rm_fwd(m, c, &r);
	default:
		if (!ports(m))
			return client_error(m, c, 0, SBX_EXIT_INTERNAL, "out of memory");
		return reply(m, c, SBX_PORT_LIST, NULL);
	}
}

/* Reading a client: as mon_read_into, and a listening socket handed over
 * with the bytes (SCM_RIGHTS) kept, one at a time, for the PORT frame
 * that follows (any other fd that comes is closed). */
int port_read_client(struct client *c)
{
	uint8_t tmp[SBX_DATA_CHUNK + SBX_FRAME_HDR];
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} cm;
	for (int i = 0; i < 16; i++) {
		struct iovec iov = { tmp, sizeof tmp };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
				     .msg_controllen = sizeof cm.buf };
		ssize_t r = recvmsg(c->src.fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? 1 : -1;
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t k = 0; k < nfd; k++) {
				int fd;
				memcpy(&fd, CMSG_DATA(h) + k * sizeof(int), sizeof fd);
				if (c->port_fd1)
					close(c->port_fd1 - 1);
				c->port_fd1 = fd + 1;
			}
		}
		if (r == 0)
			return 0;
		if (sbx_buf_put(&c->in, tmp, (size_t)r) < 0)
			return -1;
	}
	return 1;
}
