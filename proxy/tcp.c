/* The session's transparent TCP proxy (egress.h): each connection the
 * guest makes is decided (a cidr rule, or the name it sends first, TLS SNI
 * or HTTP Host), audited, connected out from the host and relayed both
 * ways, an HTTP connection's every request checked (sbx_http_flow). */
#include "px.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif

#define SNIFF_TIMEOUT_MS 5000 /* for the guest's first bytes */
#define CONNECT_TIMEOUT_MS 10000
#define COPY_BUF 65536
#define HALF_CLOSED_IDLE_MS 30000

/* ---- TCP ---- */

/* Connect to the first address that answers within the timeout. */
static int connect_out(struct sockaddr_storage *to, unsigned n, unsigned *used, char *why, size_t wn)
{
	snprintf(why, wn, "no address");
	for (unsigned i = 0; i < n; i++) {
		int fd = socket(to[i].ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			snprintf(why, wn, "socket: %s", strerror(errno));
			continue;
		}
		socklen_t sl = to[i].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
		int r = connect(fd, (struct sockaddr *)&to[i], sl);
		if (r < 0 && errno == EINPROGRESS) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int e = 0;
			socklen_t el = sizeof e;
			r = poll(&pf, 1, CONNECT_TIMEOUT_MS);
			if (r == 0)
				errno = ETIMEDOUT, r = -1;
			else if (r > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e)
				errno = e, r = -1;
			else if (r > 0)
				r = 0;
		}
		if (r == 0) {
			*used = i;
			int fl = fcntl(fd, F_GETFL);
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
			return fd;
		}
		snprintf(why, wn, "connect: %s", strerror(errno));
		close(fd);
	}
	return -1;
}

/* Count n bytes against the session's cap; 0 when over it. */
static int charge(struct sbx_proxy *px, size_t n)
{
	pthread_mutex_lock(&px->mu);
	px->bytes += n;
	int ok = px->bytes <= px->pol.network.max_bytes;
	pthread_mutex_unlock(&px->mu);
	return ok;
}

/* Forward what the flow lets through of the n bytes pending from the
 * guest, keeping the rest.  0, or -1 to stop (*why: the reason, or NULL
 * when the server is gone). */
static int flow_push(struct sbx_proxy *px, struct sbx_http_flow *f, int u, uint8_t *b, size_t *n, int *wait,
		     uint64_t *out, const char **why)
{
	int v = SBX_FLOW_OK;
	size_t k = f ? sbx_http_flow_scan(f, b, *n, &v) : *n;
	*why = NULL;
	if (k) {
		if (!charge(px, k))
			return *why = "network.max_bytes reached", -1;
		if (sbx_write_all(u, b, k) < 0)
			return -1;
		*out += k;
		memmove(b, b + k, *n - k);
		*n -= k;
	}
	*wait = v == SBX_FLOW_WAIT;
	if (v == SBX_FLOW_DENY)
		return *why = f->why, -1;
	return 0;
}

/* Copy both ways until both are done, the guest's bytes through the flow
 * (an HTTP connection's; NULL: opaque), starting with the plen bytes
 * already read into pend (COPY_BUF long).  A request the flow refuses
 * ends the guest's direction there (the server sees the end of the
 * stream), and the answers to the requests before it are still relayed.
 * Returns the reason it stopped early, or NULL. */
static const char *splice_both(struct sbx_proxy *px, int g, int u, struct sbx_http_flow *flow, uint8_t *pend,
			       size_t plen, uint64_t *in, uint64_t *out)
{
	static __thread uint8_t buf[COPY_BUF];
	int gopen = 1, uopen = 1; /* guest -> upstream, upstream -> guest */
	int wait = 0;             /* for the server's answer to an Upgrade */
	const char *why, *refused = NULL;
#define GUEST_BYTES()                                                                                                  \
	do {                                                                                                           \
		if (flow_push(px, flow, u, pend, &plen, &wait, out, &why) < 0) {                                       \
			if (!flow || flow->state != SBX_HTTP_DENIED)                                                   \
				return why;                                                                            \
			refused = why;                                                                                 \
			gopen = 0;                                                                                     \
			shutdown(u, SHUT_WR);                                                                          \
		}                                                                                                      \
	} while (0)
	GUEST_BYTES();
	while (gopen || uopen) {
		int gread = gopen && !wait;
		struct pollfd pf[2] = { { .fd = gread ? g : -1, .events = POLLIN },
					{ .fd = uopen ? u : -1, .events = POLLIN } };
		/* Half-closed, a connection may idle only so long: a peer that
		 * never closes must not hold a connection slot for ever. */
		int r0 = poll(pf, 2, gopen && uopen ? -1 : refused ? SNIFF_TIMEOUT_MS : HALF_CLOSED_IDLE_MS);
		if (r0 < 0) {
			if (errno == EINTR)
				continue;
			return "poll failed";
		}
		if (r0 == 0)
			return refused ? refused : "idle after one side closed";
		for (int k = 0; k < 2; k++) {
			if (!pf[k].revents)
				continue;
			int from = k ? u : g, to = k ? g : u;
			uint8_t *into = k ? buf : pend + plen;
			size_t room = k ? sizeof buf : COPY_BUF - plen;
			ssize_t r = room ? read(from, into, room) : 0;
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				shutdown(to, SHUT_WR);
				if (k)
					uopen = 0;
				else
					gopen = 0;
				if (r < 0)
					return NULL; /* a reset: the end either way */
				continue;
			}
			if (!k) {
				plen += (size_t)r;
				GUEST_BYTES();
				continue;
			}
			*in += (uint64_t)r;
			if (!charge(px, (size_t)r))
				return "network.max_bytes reached";
			if (sbx_write_all(to, buf, (size_t)r) < 0)
				return NULL;
			if (wait && gopen) { /* the answer to an Upgrade: go on, parsing or not */
				sbx_http_flow_response(flow, buf, (size_t)r);
				GUEST_BYTES();
			}
		}
	}
#undef GUEST_BYTES
	return refused;
}

struct attempt {
	char domain[SBX_HOST_LEN];
	char address[INET6_ADDRSTRLEN];
	unsigned port;
	int rule;
	int slot;    /* holds one of max_connections */
	int refused; /* admitted, and a later request refused */
	enum sbx_sniff sniff;
	const char *verdict, *reason;
	char why[400];
};

static json_t *attempt_rec(struct sbx_proxy *px, const struct attempt *a, uint64_t in, uint64_t out, uint64_t t0)
{
	json_t *r = px_rec_new(px, "tcp");
	json_object_set_new(r, "domain", a->domain[0] ? json_string(a->domain) : json_null());
	json_object_set_new(r, "address", json_string(a->address));
	json_object_set_new(r, "port", json_integer(a->port));
	json_object_set_new(r, "verdict", json_string(a->verdict));
	json_object_set_new(r, "reason", a->reason ? json_string(a->reason) : json_null());
	json_object_set_new(r, "sniff", json_string(sbx_sniff_name(a->sniff)));
	if (a->rule >= 0)
		json_object_set_new(r, "rule", json_integer(a->rule));
	json_object_set_new(r, "bytes_in", json_integer((json_int_t)in));
	json_object_set_new(r, "bytes_out", json_integer((json_int_t)out));
	json_object_set_new(r, "duration_ms", json_integer((json_int_t)((sbx_mono_ns() - t0) / 1000000u)));
	return r;
}

/* The verdict of an admitted connection is in the trail before a byte
 * moves; -1 when it cannot be written (the connection is then refused). */
static int connect_audit(struct sbx_proxy *px, const struct attempt *a, uint64_t t0, struct sbx_err *err)
{
	json_t *r = attempt_rec(px, a, 0, 0, t0);
	static const char *const drop[] = { "time", "proto", "bytes_in", "bytes_out", "duration_ms" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(drop); i++)
		json_object_del(r, drop[i]);
	int rc = px_audit(px, "net.connect", r, err);
	json_decref(r);
	return rc;
}

/* A connection's line in net.log; an admitted one's bytes in the trail
 * (net.close).  A refusal is counted instead (px_refusal), and written here
 * only when it is among the second's first. */
static void close_log(struct sbx_proxy *px, const struct attempt *a, uint64_t in, uint64_t out, uint64_t t0)
{
	int allowed = !strcmp(a->verdict, "allow");
	if (!allowed && !px_refusal(px, "tcp", a->verdict, a->domain, a->address, a->port, a->reason))
		return;
	if (allowed && a->refused) /* a later request: the connection was cut there */
		px_refusal(px, "tcp", "deny", a->domain, a->address, a->port, a->reason);
	json_t *r = attempt_rec(px, a, in, out, t0);
	sbx_proxy_log(px, r);
	if (allowed) {
		json_object_del(r, "time");
		json_object_del(r, "proto");
		px_audit(px, "net.close", r, NULL);
	}
	json_decref(r);
}

/* Read what the guest sends first, until it names a host (or cannot). */
static enum sbx_sniff sniff(int fd, uint8_t *buf, size_t *n, char *host)
{
	uint64_t deadline = sbx_mono_ns() + SNIFF_TIMEOUT_MS * 1000000ull;
	enum sbx_sniff k = SBX_SNIFF_MORE;
	*n = 0;
	while (k == SBX_SNIFF_MORE && *n < SBX_SNIFF_MAX) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			break;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		ssize_t got = read(fd, buf + *n, SBX_SNIFF_MAX - *n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		*n += (size_t)got;
		k = sbx_sniff_host(buf, *n, host, SBX_HOST_LEN);
	}
	return k == SBX_SNIFF_MORE ? SBX_SNIFF_OTHER : k;
}

/* Decide; on allow, *ufd is the connection out. */
static void decide(struct sbx_proxy *px, int g, const struct sockaddr_in *dst, struct attempt *a, uint8_t *buf,
		   size_t *n, int *ufd)
{
	unsigned port = ntohs(dst->sin_port);
	a->port = port;
	a->rule = -1;
	a->verdict = "deny";
	px_addr_str((const struct sockaddr *)dst, a->address, sizeof a->address);
	*n = 0;
	*ufd = -1;
	pthread_mutex_lock(&px->mu);
	int over_conn = px->active >= px->pol.network.max_connections;
	int over_bytes = px->bytes >= px->pol.network.max_bytes;
	if (!over_conn && !over_bytes)
		px->active++, a->slot = 1; /* given back unless admitted */
	pthread_mutex_unlock(&px->mu);
	if (over_conn) {
		a->reason = "network.max_connections reached";
		return;
	}
	if (over_bytes) {
		a->reason = "network.max_bytes reached";
		return;
	}
	struct sockaddr_storage to[RESOLVE_MAX];
	unsigned nto = 0;
	/* A raw address: only a cidr rule admits it, and then without a look
	 * at what the guest sends (the server may speak first). */
	int rule = sbx_egress_match_addr(&px->pol, (const struct sockaddr *)dst, port);
	if (rule >= 0) {
		a->rule = rule;
		if ((a->reason = sbx_egress_denied_here((const struct sockaddr *)dst)))
			return;
		memcpy(&to[0], dst, sizeof *dst);
		nto = 1;
	} else {
		a->sniff = sniff(g, buf, n, a->domain);
		if (a->sniff == SBX_SNIFF_BAD) {
			a->domain[0] = 0;
			a->reason = "malformed TLS or HTTP";
			return;
		}
		if (a->sniff == SBX_SNIFF_CONFLICT) {
			a->reason = "the request's target names another host than its Host";
			return;
		}
		struct in6_addr lit;
		if (!a->domain[0] || inet_pton(AF_INET, a->domain, &lit) == 1 ||
		    inet_pton(AF_INET6, a->domain, &lit) == 1) {
			a->domain[0] = 0; /* an address is not a name */
			const char *d = sbx_egress_denied((const struct sockaddr *)dst);
			snprintf(a->why, sizeof a->why, "%s%s%s", "raw address not in any cidr rule",
				 d ? "; and denied: " : "", d ? d : "");
			a->reason = a->why;
			return;
		}
		if ((a->rule = sbx_egress_match_name(&px->pol, a->domain, port)) < 0) {
			a->reason = "not in the allowlist";
			return;
		}
		const char *why = NULL;
		nto = sbx_proxy_resolve(px, a->domain, port, to, RESOLVE_MAX, &why);
		if (!nto) {
			snprintf(a->why, sizeof a->why, "%s", why ? why : "no address");
			a->reason = a->why;
			return;
		}
	}
	unsigned used = 0;
	*ufd = connect_out(to, nto, &used, a->why, sizeof a->why);
	px_addr_str((struct sockaddr *)&to[*ufd >= 0 ? used : 0], a->address, sizeof a->address);
	if (*ufd < 0) {
		a->verdict = "error";
		a->reason = a->why;
		return;
	}
	a->verdict = "allow";
	a->reason = NULL;
}

void *px_tcp_thread(void *arg)
{
	struct conn c = *(struct conn *)arg;
	free(arg);
	struct sbx_proxy *px = c.px;
	uint64_t t0 = sbx_mono_ns(), in = 0, out = 0;
	struct attempt a = { 0 };
	struct sockaddr_in dst = { 0 };
	socklen_t dl = sizeof dst;
	uint8_t *buf = malloc(COPY_BUF); /* the sniffed bytes, then the guest's pending ones */
	struct sbx_http_flow *flow = NULL;
	size_t n = 0;
	int u = -1;
	if (!buf || getsockopt(c.fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) < 0) {
		a.verdict = "error";
		a.reason = "no original destination";
		snprintf(a.address, sizeof a.address, "?");
	} else {
		decide(px, c.fd, &dst, &a, buf, &n, &u);
	}
	struct sbx_err err = { 0 };
	if (u >= 0 && connect_audit(px, &a, t0, &err) < 0) {
		/* Fail closed, as the rest of sbx: no record, no connection. */
		close(u);
		u = -1;
		a.verdict = "error";
		snprintf(a.why, sizeof a.why, "cannot write the audit trail: %s", err.msg);
		a.reason = a.why;
	}
	/* An HTTP connection admitted by its name has every later request
	 * checked for the same name; TLS and cidr-admitted ones are opaque. */
	if (u >= 0 && a.sniff == SBX_SNIFF_HTTP && a.domain[0] && (flow = malloc(sizeof *flow)))
		sbx_http_flow_init(flow, a.domain);
	if (u >= 0 && (a.sniff != SBX_SNIFF_HTTP || flow)) {
		const char *stop = splice_both(px, c.fd, u, flow, buf, n, &in, &out);
		a.refused = flow && flow->state == SBX_HTTP_DENIED;
		if (stop) {
			snprintf(a.why, sizeof a.why, "%s", stop);
			a.reason = a.why;
		}
	}
	if (u >= 0)
		close(u);
	free(flow);
	free(buf);
	close(c.fd);
	/* The slot is free before net.close is in the trail, so whoever reads
	 * that record as "the connection is over" can connect again at once. */
	if (a.slot) {
		pthread_mutex_lock(&px->mu);
		px->active--;
		pthread_mutex_unlock(&px->mu);
	}
	close_log(px, &a, in, out, t0);
	px_side_done(px, &px->threads);
	return NULL;
}

/* A connection over a cap: reset at once, no thread, counted. */
void px_refuse_now(struct sbx_proxy *px, int fd, int kind, const char *reason)
{
	char addr[INET6_ADDRSTRLEN] = "10.0.2.2";
	unsigned port = kind == 1 ? 53 : 3141;
	if (kind == 0) {
		struct sockaddr_in dst = { 0 };
		socklen_t dl = sizeof dst;
		if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) == 0) {
			px_addr_str((struct sockaddr *)&dst, addr, sizeof addr);
			port = ntohs(dst.sin_port);
		} else {
			snprintf(addr, sizeof addr, "?");
			port = 0;
		}
	}
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(fd);
	if (!px_refusal(px, "tcp", "deny", NULL, addr, port, reason))
		return;
	struct attempt a = { .port = port, .rule = -1, .verdict = "deny", .reason = reason };
	snprintf(a.address, sizeof a.address, "%s", addr);
	json_t *r = attempt_rec(px, &a, 0, 0, sbx_mono_ns());
	sbx_proxy_log(px, r);
	json_decref(r);
}
