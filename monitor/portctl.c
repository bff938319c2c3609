/* sbx-monitor: sbx-port's forwards (see port.c for the connections): the
 * listening socket a client hands over, checked; the policy's ports:; the
 * record for sbx-ps (ports.json); the audit trail; --rm, --list and the
 * session's end. */
#include "port.h"

#include <arpa/inet.h>
#include <netinet/in.h>

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
		mon_ports_save(m, txt);
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
			port_conn_abort(m, p, NULL);
	}
	for (struct fwd **pp = &ps->fwds; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	ps->nfwds--;
	close(f->src.fd);
	/* Our socket file only: the one we saw at open, not what took its name. */
	mon_port_unlink(m, f->path, f->dev, f->ino);
	audit_fwd(m, "port.close", f, uid, reason);
	/* As a connection's (port.c): freed after this loop turn. */
	f->src = (struct src){ SRC_DEAD, -1 };
	f->next = ps->dead_fwds;
	ps->dead_fwds = f;
}

/* The session ends: every forward with it. */
void port_end(struct mon *m, const char *reason)
{
	while (m->ports && m->ports->fwds)
		fwd_close(m, m->ports->fwds, 0, reason);
	if (m->ports) {
		mon_ports_save(m, NULL);
		port_reap(m); /* after the loop: no event of a turn is left */
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
static int check_listener(struct mon *m, int fd, struct fwd *f, char *why, size_t n)
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
		size_t l =
			al > offsetof(struct sockaddr_un, sun_path) ? al - offsetof(struct sockaddr_un, sun_path) : 0;
		if (!l || su->sun_path[0] != '/' || memchr(su->sun_path, 0, l) == NULL)
			return snprintf(why, n, "a unix socket must have an absolute path"), -1;
		uint64_t dev, ino;
		snprintf(f->path, sizeof f->path, "%s", su->sun_path);
		if (mon_port_reg(m, fd, f->path, &dev, &ino) < 0)
			return snprintf(why, n, "the unix socket %s is not there", f->path), -1;
		f->dev = (dev_t)dev;
		f->ino = (ino_t)ino;
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
		struct sbx_port_entry e = {
			.port = f->port, .conns = f->nconns, .accepted = f->accepted, .refused = f->refused
		};
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
	struct mports *ps = port_state(m);
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
	_cleanup_free_ char *txt = mon_policy_text(m);
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
	} else if (check_listener(m, fd, f, why, sizeof why) == 0) {
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
	case SBX_PORT_OPEN: return open_fwd(m, c, &r);
	case SBX_PORT_RM: return rm_fwd(m, c, &r);
	default:
		if (!port_state(m))
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
		struct msghdr mh = {
			.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf
		};
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
