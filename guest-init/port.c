/* guest-init: the guest end of sbx-port.  The monitor accepts a host
 * connection and sends PORT_CONNECT on a stream of its own numbering; we
 * connect to 127.0.0.1:PORT here and pump bytes both ways as PORT_DATA,
 * each direction under SBX_PORT_WINDOW of credit per connection, so a
 * slow reader on either side stalls only its own connection, never the
 * channel or the execs.  A refused connect, a reset, or a host that breaks
 * the rules (data past its window, data after its EOF) ends that one
 * connection with PORT_CLOSE; frames for streams we do not know (closed
 * already, or never opened) are dropped without a word, so two peers
 * cannot bounce errors and nothing grows. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "init.h"
#include "port.h"
#include "portwin.h"
#include "proto.h"

enum { ERR_INVALID = 3, ERR_NOTFOUND = 4, ERR_INTERNAL = 70, ERR_TEMP = 75 };

struct pconn {
	int used, fd;
	uint32_t id, gen;
	int connecting;
	uint32_t events;       /* what epoll has for fd now */
	struct sbx_portwin pw; /* the bytes both ways and their windows (the peer is the host) */
};

struct sbx_gports {
	int ep;
	uint8_t kind;
	int paused;
	uint32_t gen;
	unsigned nused;
	struct pconn c[SBX_PORT_CONNS_MAX];
};

struct sbx_gports *sbx_gports_new(int ep, uint8_t kind)
{
	struct sbx_gports *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->ep = ep;
	g->kind = kind;
	for (unsigned i = 0; i < SBX_PORT_CONNS_MAX; i++)
		g->c[i].fd = -1;
	return g;
}

static uint64_t tag_of(const struct sbx_gports *g, const struct pconn *c)
{
	return g->kind | (uint64_t)(c - g->c) << 16 | (uint64_t)c->gen << 32;
}

static void watch(struct sbx_gports *g, struct pconn *c)
{
	if (c->fd < 0)
		return;
	uint32_t want = sbx_portwin_events(&c->pw, c->connecting, !c->connecting && !g->paused);
	if (want == c->events)
		return;
	struct epoll_event ev = { .events = want, .data.u64 = tag_of(g, c) };
	int op = !c->events ? EPOLL_CTL_ADD : !want ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
	if (epoll_ctl(g->ep, op, c->fd, &ev) == 0)
		c->events = want;
	else
		sbx_guest_log("port: epoll_ctl: %s", strerror(errno));
}

static void release(struct sbx_gports *g, struct pconn *c)
{
	if (c->fd >= 0)
		close(c->fd); /* closing unregisters it from epoll */
	sbx_portwin_free(&c->pw);
	memset(c, 0, sizeof *c);
	c->fd = -1;
	g->nused--;
}

static void send_close(struct sbx_buf *out, uint32_t id, uint32_t code, const char *msg)
{
	size_t off = sbx_frame_begin(out, SBX_F_PORT_CLOSE, id);
	if (msg) {
		sbx_tlv_u32(out, SBX_T_CODE, code);
		sbx_tlv_str(out, SBX_T_MSG, msg);
	}
	sbx_frame_end(out, off);
}

static void fail(struct sbx_gports *g, struct pconn *c, struct sbx_buf *out, uint32_t code, const char *msg)
{
	send_close(out, c->id, code, msg);
	release(g, c);
}

/* Both directions done and everything written: the connection is over. */
static void maybe_done(struct sbx_gports *g, struct pconn *c, struct sbx_buf *out)
{
	if (c->pw.sock_eof && c->pw.peer_eof_done)
		fail(g, c, out, 0, NULL);
}

static struct pconn *find(struct sbx_gports *g, uint32_t id)
{
	for (unsigned i = 0; i < SBX_PORT_CONNS_MAX; i++)
		if (g->c[i].used && g->c[i].id == id)
			return &g->c[i];
	return NULL;
}

static void pump_out(struct sbx_gports *g, struct pconn *c, struct sbx_buf *out)
{
	ssize_t wrote = sbx_portwin_flush(&c->pw, c->fd, 0);
	if (wrote < 0)
		return fail(g, c, out, ERR_NOTFOUND, "the guest server closed the connection");
	sbx_portwin_shut(&c->pw, c->fd);
	sbx_portwin_credit(&c->pw, out, c->id, (uint32_t)wrote);
	if (c->pw.peer_eof_done && c->pw.sock_eof)
		return maybe_done(g, c, out);
	watch(g, c);
}

static int paused(void *g)
{
	return ((struct sbx_gports *)g)->paused;
}

static void pump_in(struct sbx_gports *g, struct pconn *c, struct sbx_buf *out)
{
	int r = sbx_portwin_read(&c->pw, c->fd, 0, out, c->id, paused, g);
	if (r > 0)
		return maybe_done(g, c, out);
	if (r < 0)
		return fail(g, c, out, ERR_NOTFOUND, "the guest server reset the connection");
	watch(g, c);
}

static void on_connected(struct sbx_gports *g, struct pconn *c, struct sbx_buf *out)
{
	int e = 0;
	socklen_t sl = sizeof e;
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
		e = errno;
	if (e)
		return fail(g, c, out, ERR_NOTFOUND,
			    e == ECONNREFUSED ? "connection refused: nothing listens on the guest port" : strerror(e));
	c->connecting = 0;
	sbx_frame_raw(out, SBX_F_PORT_CONNECT, c->id, NULL, 0);
	pump_out(g, c, out);
}

static void on_connect(struct sbx_gports *g, const struct sbx_frame *f, struct sbx_buf *out)
{
	struct sbx_tlv_it it;
	const uint8_t *v;
	uint16_t tag;
	uint32_t n, port = 0;
	struct pconn *c = find(g, f->stream);
	if (c)
		release(g, c); /* a new host numbering anew (a restore): the old one is gone */
	sbx_tlv_init(&it, f->payload, f->len);
	if (sbx_tlv_next(&it, &tag, &v, &n) != 1 || tag != SBX_T_PORT || sbx_tlv_as_u32(v, n, &port) < 0 || !port ||
	    port > 65535 || sbx_tlv_next(&it, &tag, &v, &n) != 0)
		return send_close(out, f->stream, ERR_INVALID, "malformed port connect");
	for (unsigned i = 0; i < SBX_PORT_CONNS_MAX && !c; i++)
		if (!g->c[i].used)
			c = &g->c[i];
	if (!c)
		return send_close(out, f->stream, ERR_TEMP, "too many forwarded connections in the guest");
	c->used = 1;
	c->id = f->stream;
	c->gen = ++g->gen;
	sbx_portwin_init(&c->pw);
	g->nused++;
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return fail(g, c, out, ERR_TEMP, strerror(errno));
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EINPROGRESS) {
		c->connecting = 1;
		watch(g, c); /* EPOLLOUT says how it went, immediate success included */
		return;
	}
	fail(g, c, out, ERR_NOTFOUND,
	     errno == ECONNREFUSED ? "connection refused: nothing listens on the guest port" : strerror(errno));
}

static void on_data(struct sbx_gports *g, struct pconn *c, const struct sbx_frame *f, struct sbx_buf *out)
{
	switch (sbx_portwin_data(&c->pw, f->payload, f->len)) {
	case SBX_PORTWIN_AFTER_EOF: return fail(g, c, out, ERR_INVALID, "data after the end of the host's data");
	case SBX_PORTWIN_OVER: return fail(g, c, out, ERR_INVALID, "data beyond the granted window");
	case SBX_PORTWIN_NOMEM: return fail(g, c, out, ERR_INTERNAL, "out of memory for forwarded data");
	}
	if (!c->connecting)
		pump_out(g, c, out);
}

void sbx_gports_frame(struct sbx_gports *g, const struct sbx_frame *f, struct sbx_buf *out)
{
	if (f->type == SBX_F_PORT_CONNECT)
		return on_connect(g, f, out);
	struct pconn *c = find(g, f->stream);
	if (!c)
		return; /* closed already, or never ours: see the top */
	switch (f->type) {
	case SBX_F_PORT_DATA: on_data(g, c, f, out); break;
	case SBX_F_PORT_WINDOW:
		if (sbx_portwin_window(&c->pw, f->payload, f->len) < 0)
			return fail(g, c, out, ERR_INVALID, "window beyond what was sent");
		watch(g, c);
		break;
	case SBX_F_PORT_EOF:
		c->pw.peer_eof = 1;
		if (!c->connecting)
			pump_out(g, c, out);
		break;
	case SBX_F_PORT_CLOSE:
		release(g, c); /* the host is done with it: no answer */
		break;
	}
}

void sbx_gports_io(struct sbx_gports *g, uint64_t tag, uint32_t events, struct sbx_buf *out)
{
	unsigned idx = (unsigned)(tag >> 16) & 0xffffu;
	struct pconn *c = idx < SBX_PORT_CONNS_MAX ? &g->c[idx] : NULL;
	if (!c || !c->used || c->gen != (uint32_t)(tag >> 32) || c->fd < 0)
		return; /* released earlier in this batch */
	if (c->connecting) {
		if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
			on_connected(g, c, out);
		return;
	}
	if (events & EPOLLERR)
		return fail(g, c, out, ERR_NOTFOUND, "the guest server reset the connection");
	if (events & EPOLLHUP)
		c->pw.hup = 1;
	uint32_t gen = c->gen;
	if (events & EPOLLOUT)
		pump_out(g, c, out);
	if (c->used && c->gen == gen && events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		pump_in(g, c, out);
}

void sbx_gports_pause(struct sbx_gports *g, int paused)
{
	if (!g)
		return;
	g->paused = paused;
	for (unsigned i = 0; i < SBX_PORT_CONNS_MAX; i++)
		if (g->c[i].used)
			watch(g, &g->c[i]);
}

void sbx_gports_reset(struct sbx_gports *g)
{
	if (!g)
		return;
	for (unsigned i = 0; i < SBX_PORT_CONNS_MAX; i++)
		if (g->c[i].used)
			release(g, &g->c[i]);
}

void sbx_gports_free(struct sbx_gports *g)
{
	if (!g)
		return;
	sbx_gports_reset(g);
	free(g);
}
