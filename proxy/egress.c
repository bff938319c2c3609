/* The pure half of egress.h: parsers of what the guest sends, the
 * allowlist, the deny list.  Every byte here comes from the guest. */
#include "egress.h"
#include "http.h"
#include "util.h"

#include <ifaddrs.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* ---- host names ---- */

/* Store a name (or an IP literal) the guest gave, or refuse it. */
static enum sbx_sniff set_host(const char *s, size_t len, char *host, size_t hn, enum sbx_sniff kind)
{
	if (len && s[len - 1] == '.')
		len--;
	if (!len || len > 253 || len >= hn)
		return SBX_SNIFF_BAD;
	if (s[0] == '[') { /* an IPv6 literal, as a Host header writes it */
		if (s[len - 1] != ']' || len < 3)
			return SBX_SNIFF_BAD;
		char a[64];
		struct in6_addr x;
		if (len - 2 >= sizeof a)
			return SBX_SNIFF_BAD;
		memcpy(a, s + 1, len - 2);
		a[len - 2] = 0;
		if (inet_pton(AF_INET6, a, &x) != 1 || !inet_ntop(AF_INET6, &x, host, (socklen_t)hn))
			return SBX_SNIFF_BAD;
		return kind; /* in canonical form: lowercase, compressed */
	}
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		      (c == '.' && i && s[i - 1] != '.')))
			return SBX_SNIFF_BAD;
		host[i] = c;
	}
	host[len] = 0;
	return kind;
}

static unsigned be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

/* A TLS ClientHello in one record (RFC 8446 4.1.2), its server_name
 * extension (RFC 6066 3).  A hello spread over several records is refused:
 * clients send one. */
static enum sbx_sniff sniff_tls(const uint8_t *b, size_t n, char *host, size_t hn)
{
	if (n < 5)
		return n >= 2 && b[1] != 3 ? SBX_SNIFF_OTHER : SBX_SNIFF_MORE;
	if (b[1] != 3)
		return SBX_SNIFF_OTHER;
	size_t rlen = be16(b + 3);
	if (rlen < 4 || rlen > 16384)
		return SBX_SNIFF_BAD;
	if (n < 5 + rlen)
		return SBX_SNIFF_MORE;
	const uint8_t *p = b + 5, *end = p + rlen;
	if (p[0] != 1) /* client_hello */
		return SBX_SNIFF_BAD;
	size_t hlen = (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
	if (hlen > rlen - 4)
		return SBX_SNIFF_BAD;
	p += 4;
	end = p + hlen;
#define NEED(k)                                                                                                        \
	do {                                                                                                           \
		if ((size_t)(end - p) < (size_t)(k))                                                                   \
			return SBX_SNIFF_BAD;                                                                          \
	} while (0)
	NEED(2 + 32 + 1); /* legacy_version, random, session id length */
	p += 34;
	size_t l = *p++;
	NEED(l + 2);
	p += l;
	l = be16(p);
	p += 2;
	NEED(l + 1);
	p += l;
	l = *p++;
	NEED(l);
	p += l;
	host[0] = 0;
	if (p == end)
		return SBX_SNIFF_TLS; /* no extensions at all */
	NEED(2);
	l = be16(p);
	p += 2;
	NEED(l);
	end = p + l;
	while (p < end) {
		NEED(4);
		unsigned type = be16(p);
		size_t el = be16(p + 2);
		p += 4;
		NEED(el);
		if (type == 0) { /* server_name: a list of (type, name) */
			const uint8_t *q = p, *qe = p + el;
			if (el < 2 || be16(q) != el - 2)
				return SBX_SNIFF_BAD;
			q += 2;
			while (qe - q >= 3) {
				unsigned nt = q[0];
				size_t nl = be16(q + 1);
				q += 3;
				if ((size_t)(qe - q) < nl)
					return SBX_SNIFF_BAD;
				if (nt == 0) /* host_name */
					return set_host((const char *)q, nl, host, hn, SBX_SNIFF_TLS);
				q += nl;
			}
			return q == qe ? SBX_SNIFF_TLS : SBX_SNIFF_BAD;
		}
		p += el;
	}
#undef NEED
	return SBX_SNIFF_TLS;
}

#define HTTP_CHUNK_LINE_MAX 1024

static const char *const methods[] = { "GET ",     "HEAD ",  "POST ",    "PUT ",  "DELETE ",
				       "OPTIONS ", "PATCH ", "CONNECT ", "TRACE " };

/* A host[:port] as Host or an authority writes it, into host without the
 * port.  SBX_SNIFF_HTTP or SBX_SNIFF_BAD. */
static enum sbx_sniff authority(const char *v, const char *ve, char *host, size_t hn)
{
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	/* Drop the port: after the ']' of an IPv6 literal, else after the
	 * only ':'. */
	const char *colon = NULL;
	if (v < ve && *v == '[') {
		const char *rb = memchr(v, ']', (size_t)(ve - v));
		if (!rb)
			return SBX_SNIFF_BAD;
		if (rb + 1 < ve) {
			if (rb[1] != ':')
				return SBX_SNIFF_BAD;
			colon = rb + 1;
		}
	} else {
		colon = memchr(v, ':', (size_t)(ve - v));
	}
	if (colon) {
		unsigned port = 0;
		if (colon + 1 == ve || colon + 6 < ve)
			return SBX_SNIFF_BAD;
		for (const char *d = colon + 1; d < ve; d++) {
			if (*d < '0' || *d > '9')
				return SBX_SNIFF_BAD;
			port = port * 10 + (unsigned)(*d - '0');
		}
		if (!port || port > 65535)
			return SBX_SNIFF_BAD;
		ve = colon;
	}
	return set_host(v, (size_t)(ve - v), host, hn, SBX_SNIFF_HTTP);
}

/* The host a request target names (RFC 9112 3.2): absolute-form's
 * authority, CONNECT's authority-form; "" for origin-form and "*". */
static enum sbx_sniff target_host(const char *t, size_t tl, int connect, char *host, size_t hn)
{
	host[0] = 0;
	if (!tl)
		return SBX_SNIFF_BAD;
	if (connect)
		return memchr(t, '@', tl) ? SBX_SNIFF_BAD : authority(t, t + tl, host, hn);
	if (t[0] == '/' || (tl == 1 && t[0] == '*'))
		return SBX_SNIFF_HTTP;
	const char *sep = tl > 3 ? memmem(t, tl, "://", 3) : NULL;
	if (!sep || sep == t)
		return SBX_SNIFF_BAD; /* neither origin- nor absolute-form */
	for (const char *c = t; c < sep; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '+' ||
		      *c == '-' || *c == '.'))
			return SBX_SNIFF_BAD;
	const char *a = sep + 3, *e = t + tl, *ae = a;
	while (ae < e && *ae != '/' && *ae != '?' && *ae != '#')
		ae++;
	if (ae == a || memchr(a, '@', (size_t)(ae - a)))
		return SBX_SNIFF_BAD; /* no host, or userinfo: a name hidden in it */
	return authority(a, ae, host, hn);
}

static int is_method(const char *s, size_t n, int *prefix, int *connect)
{
	int m = 0;
	*prefix = *connect = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(methods); i++) {
		size_t ml = strlen(methods[i]);
		if (n >= ml && !memcmp(s, methods[i], ml))
			m = 1, *connect = i == 7;
		else if (n < ml && !memcmp(s, methods[i], n))
			*prefix = 1;
	}
	return m;
}

/* An HTTP/1.x request head (http.h) and its host: Host, which an
 * absolute-form or authority-form target must agree with, or that target
 * alone.  SBX_SNIFF_MORE or _OTHER while it may not be HTTP at all (the
 * first bytes of a connection), _CONFLICT when target and Host name two
 * hosts. */
static enum sbx_sniff http_head(const uint8_t *b, size_t n, char *host, size_t hn, struct sbx_http_head *h)
{
	const char *s = (const char *)b;
	int prefix, connect, status;
	host[0] = 0;
	if (!is_method(s, n, &prefix, &connect)) {
		memset(h, 0, sizeof *h);
		return prefix ? SBX_SNIFF_MORE : SBX_SNIFF_OTHER;
	}
	int r = sbx_http_head_parse(s, n, 0, 0, h, &status);
	if (r <= 0)
		return r ? SBX_SNIFF_BAD : SBX_SNIFF_MORE;
	char thost[SBX_HOST_LEN];
	if (target_host(h->target, h->target_len, connect, thost, sizeof thost) != SBX_SNIFF_HTTP)
		return SBX_SNIFF_BAD;
	if (h->host && authority(h->host, h->host + h->host_len, host, hn) != SBX_SNIFF_HTTP)
		return SBX_SNIFF_BAD;
	if (thost[0]) {
		if (host[0] && strcmp(host, thost))
			return SBX_SNIFF_CONFLICT;
		memcpy(host, thost, strlen(thost) + 1);
	}
	return SBX_SNIFF_HTTP;
}

static enum sbx_sniff sniff_http(const uint8_t *b, size_t n, char *host, size_t hn)
{
	struct sbx_http_head h;
	enum sbx_sniff k = http_head(b, n, host, hn, &h);
	if (k != SBX_SNIFF_HTTP && k != SBX_SNIFF_CONFLICT)
		host[0] = 0;
	return k;
}

/* ---- every request on a connection ---- */

void sbx_http_flow_init(struct sbx_http_flow *f, const char *host)
{
	memset(f, 0, sizeof *f);
	snprintf(f->host, sizeof f->host, "%s", host);
	f->state = SBX_HTTP_HEAD;
}

static size_t flow_deny(struct sbx_http_flow *f, size_t off, int *verdict, const char *why, const char *host)
{
	f->state = SBX_HTTP_DENIED;
	if (host && host[0])
		snprintf(f->why, sizeof f->why, "%s (%s)", why, host);
	else
		snprintf(f->why, sizeof f->why, "%s", why);
	*verdict = SBX_FLOW_DENY;
	return off;
}

/* A chunk-size line (RFC 9112 7.1): hex digits, then extensions. */
static int chunk_size(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;
	for (; i < n; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			break;
		if (i >= 15)
			return -1;
		v = v << 4 | (unsigned)d;
	}
	if (!i || (i < n && s[i] != ';' && s[i] != ' ' && s[i] != '\t'))
		return -1;
	*out = v;
	return 0;
}

size_t sbx_http_flow_scan(struct sbx_http_flow *f, const uint8_t *b, size_t n, int *verdict)
{
	size_t off = 0;
	*verdict = SBX_FLOW_OK;
	while (off < n) {
		const uint8_t *p = b + off;
		size_t left = n - off;
		switch (f->state) {
		case SBX_HTTP_HEAD: {
			if (*p == '\r' || *p == '\n') { /* empty lines between requests */
				off++;
				continue;
			}
			char host[SBX_HOST_LEN];
			struct sbx_http_head h;
			enum sbx_sniff k = http_head(p, left, host, sizeof host, &h);
			if (k == SBX_SNIFF_MORE)
				return off;
			if (k == SBX_SNIFF_OTHER || k == SBX_SNIFF_BAD)
				return flow_deny(f, off, verdict,
						 "a request on the connection is not well-formed HTTP/1.x", NULL);
			if (k == SBX_SNIFF_CONFLICT)
				return flow_deny(f, off, verdict, "a request's target names another host than its Host",
						 NULL);
			if (!host[0])
				return flow_deny(f, off, verdict, "a request on the connection names no host", NULL);
			if (strcmp(host, f->host))
				return flow_deny(f, off, verdict, "a request on the connection asks for another host",
						 host);
			f->requests++;
			f->upgrade = h.upgrade;
			off += h.len;
			if (h.chunked)
				f->state = SBX_HTTP_CHUNK_SIZE;
			else if (h.length > 0)
				f->state = SBX_HTTP_BODY, f->left = (uint64_t)h.length;
			else
				f->state = f->upgrade ? SBX_HTTP_UPGRADE_WAIT : SBX_HTTP_HEAD;
			break;
		}
		case SBX_HTTP_BODY: {
			size_t k = left < f->left ? left : (size_t)f->left;
			off += k;
			f->left -= k;
			if (!f->left)
				f->state = f->upgrade ? SBX_HTTP_UPGRADE_WAIT : SBX_HTTP_HEAD;
			break;
		}
		case SBX_HTTP_CHUNK_SIZE:
		case SBX_HTTP_TRAILER: {
			const uint8_t *nl = memchr(p, '\n', left < HTTP_CHUNK_LINE_MAX ? left : HTTP_CHUNK_LINE_MAX);
			if (!nl) {
				if (left >= HTTP_CHUNK_LINE_MAX)
					return flow_deny(f, off, verdict, "a chunked request body is malformed", NULL);
				return off;
			}
			size_t ll = (size_t)(nl - p);
			if (ll && p[ll - 1] == '\r')
				ll--;
			if (memchr(p, '\r', ll) || memchr(p, 0, ll))
				return flow_deny(f, off, verdict, "a chunked request body is malformed", NULL);
			off += (size_t)(nl - p) + 1;
			if (f->state == SBX_HTTP_TRAILER) {
				if (!ll)
					f->state = f->upgrade ? SBX_HTTP_UPGRADE_WAIT : SBX_HTTP_HEAD;
				break;
			}
			uint64_t sz;
			if (chunk_size((const char *)p, ll, &sz) < 0)
				return flow_deny(f, off, verdict, "a chunked request body is malformed", NULL);
			if (sz)
				f->state = SBX_HTTP_CHUNK_DATA, f->left = sz;
			else
				f->state = SBX_HTTP_TRAILER;
			break;
		}
		case SBX_HTTP_CHUNK_DATA: {
			size_t k = left < f->left ? left : (size_t)f->left;
			off += k;
			f->left -= k;
			if (!f->left)
				f->state = SBX_HTTP_CHUNK_END;
			break;
		}
		case SBX_HTTP_CHUNK_END:
			if (p[0] == '\n') {
				off++;
			} else if (p[0] == '\r') {
				if (left < 2)
					return off;
				if (p[1] != '\n')
					return flow_deny(f, off, verdict, "a chunked request body is malformed", NULL);
				off += 2;
			} else {
				return flow_deny(f, off, verdict, "a chunked request body is malformed", NULL);
			}
			f->state = SBX_HTTP_CHUNK_SIZE;
			break;
		case SBX_HTTP_UPGRADE_WAIT: *verdict = SBX_FLOW_WAIT; return off;
		case SBX_HTTP_OPAQUE: return n;
		default: *verdict = SBX_FLOW_DENY; return off;
		}
	}
	if (f->state == SBX_HTTP_UPGRADE_WAIT)
		*verdict = SBX_FLOW_WAIT;
	return off;
}

void sbx_http_flow_response(struct sbx_http_flow *f, const uint8_t *b, size_t n)
{
	if (f->state != SBX_HTTP_UPGRADE_WAIT)
		return;
	/* "HTTP/1.1 101 ": the server switched protocols, and what follows is
	 * no longer HTTP; anything else, and the next request is parsed. */
	int switched = n >= 13 && !memcmp(b, "HTTP/1.", 7) && b[8] == ' ' && !memcmp(b + 9, "101", 3) &&
		       (b[12] == ' ' || b[12] == '\r' || b[12] == '\n');
	f->state = switched ? SBX_HTTP_OPAQUE : SBX_HTTP_HEAD;
}

enum sbx_sniff sbx_sniff_host(const uint8_t *buf, size_t n, char *host, size_t hn)
{
	if (hn)
		host[0] = 0;
	if (!n || hn < SBX_HOST_LEN)
		return n ? SBX_SNIFF_BAD : SBX_SNIFF_MORE;
	if (buf[0] == 0x16)
		return sniff_tls(buf, n, host, hn);
	return sniff_http(buf, n, host, hn);
}

const char *sbx_sniff_name(enum sbx_sniff k)
{
	static const char *const names[] = { "more", "tls", "http", "other", "bad", "conflict" };
	return (unsigned)k < SBX_ARRAY_LEN(names) ? names[k] : "?";
}

/* ---- DNS (RFC 1035 4.1) ---- */

int sbx_dns_parse(const uint8_t *p, size_t n, struct sbx_dns_query *q)
{
	memset(q, 0, sizeof *q);
	if (n < 12)
		return -1;
	q->id = (uint16_t)be16(p);
	q->flags = (uint16_t)be16(p + 2);
	if (q->flags & 0x8000) /* a response: never answer those */
		return -1;
	if ((q->flags >> 11) & 0xf)
		return SBX_DNS_NOTIMP;
	if (be16(p + 4) != 1 || be16(p + 6) || be16(p + 8))
		return SBX_DNS_FORMERR;
	size_t off = 12, nl = 0;
	for (;;) {
		if (off >= n)
			return SBX_DNS_FORMERR;
		unsigned l = p[off++];
		if (!l)
			break;
		if (l > 63 || off + l > n || nl + l + 1 >= sizeof q->name)
			return SBX_DNS_FORMERR; /* no compression in a question */
		if (nl)
			q->name[nl++] = '.';
		for (unsigned i = 0; i < l; i++) {
			char c = (char)p[off + i];
			if (c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
				return SBX_DNS_FORMERR;
			q->name[nl++] = c;
		}
		off += l;
	}
	q->name[nl] = 0;
	if (off + 4 > n)
		return SBX_DNS_FORMERR;
	q->qtype = (uint16_t)be16(p + off);
	q->qclass = (uint16_t)be16(p + off + 2);
	q->qlen = off + 4 - 12;
	return 0;
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

size_t sbx_dns_answer(const uint8_t *req, const struct sbx_dns_query *q, int rcode, const uint8_t *addrs,
		      unsigned naddrs, uint8_t *out, size_t cap)
{
	if (cap < 12 + q->qlen)
		return 0;
	size_t alen = q->qtype == SBX_DNS_AAAA ? 16 : 4;
	put16(out, q->id);
	/* QR, the query's opcode and RD, RA, the rcode. */
	put16(out + 2, 0x8000u | (q->flags & 0x7900u) | 0x0080u | ((unsigned)rcode & 0xf));
	put16(out + 4, q->qlen ? 1 : 0);
	put16(out + 6, 0);
	put16(out + 8, 0);
	put16(out + 10, 0);
	memcpy(out + 12, req + 12, q->qlen);
	size_t off = 12 + q->qlen;
	unsigned an = 0;
	for (unsigned i = 0; rcode == SBX_DNS_NOERROR && q->qlen && i < naddrs && off + 12 + alen <= cap; i++) {
		put16(out + off, 0xc00c); /* the name in the question */
		put16(out + off + 2, q->qtype);
		put16(out + off + 4, 1);
		put16(out + off + 6, 0);
		put16(out + off + 8, 60);
		put16(out + off + 10, (unsigned)alen);
		memcpy(out + off + 12, addrs + i * alen, alen);
		off += 12 + alen;
		an++;
	}
	put16(out + 6, an);
	return off;
}

/* ---- the allowlist ---- */

static int port_ok(const struct sbx_policy_rule *r, unsigned port)
{
	if (!port)
		return 1;
	for (unsigned i = 0; i < r->nports; i++)
		if (r->ports[i] == port)
			return 1;
	return 0;
}

int sbx_egress_match_name(const struct sbx_policy *p, const char *name, unsigned port)
{
	size_t nl = strlen(name);
	for (unsigned i = 0; i < p->network.nallow; i++) {
		const struct sbx_policy_rule *r = &p->network.allow[i];
		if (!r->domain[0] || !port_ok(r, port))
			continue;
		if (r->domain[0] == '*' && r->domain[1] == '.') {
			const char *suf = r->domain + 1; /* ".example.com" */
			size_t sl = strlen(suf);
			if (nl > sl && !strcmp(name + nl - sl, suf))
				return (int)i;
		} else if (!strcmp(name, r->domain)) {
			return (int)i;
		}
	}
	return -1;
}

/* An IPv4-mapped IPv6 address is its IPv4 address. */
static int addr_bytes(const struct sockaddr *sa, uint8_t out[16], int *family)
{
	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		*family = AF_INET;
		return 0;
	}
	if (sa->sa_family != AF_INET6)
		return -1;
	const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (!memcmp(a, mapped, 12)) {
		memcpy(out, a + 12, 4);
		*family = AF_INET;
	} else {
		memcpy(out, a, 16);
		*family = AF_INET6;
	}
	return 0;
}

static int in_block(const uint8_t *a, const uint8_t *net, unsigned prefix)
{
	unsigned whole = prefix / 8, rest = prefix % 8;
	if (memcmp(a, net, whole))
		return 0;
	if (!rest)
		return 1;
	uint8_t mask = (uint8_t)(0xff00u >> rest);
	return (a[whole] & mask) == (net[whole] & mask);
}

int sbx_egress_match_addr(const struct sbx_policy *p, const struct sockaddr *sa, unsigned port)
{
	uint8_t a[16];
	int fam;
	if (addr_bytes(sa, a, &fam) < 0)
		return -1;
	for (unsigned i = 0; i < p->network.nallow; i++) {
		const struct sbx_policy_rule *r = &p->network.allow[i];
		if (!r->domain[0] && r->family == fam && port_ok(r, port) && in_block(a, r->addr, r->prefix))
			return (int)i;
	}
	return -1;
}

/* ---- the deny list ---- */

struct block {
	uint8_t net[16];
	unsigned prefix;
	const char *why;
};

static const struct block deny4[] = {
	{ { 0 }, 8, "this network (0.0.0.0/8)" },
	{ { 10 }, 8, "private (RFC 1918)" },
	{ { 100, 64 }, 10, "shared address space (100.64.0.0/10)" },
	{ { 127 }, 8, "loopback" },
	{ { 169, 254 }, 16, "link-local (169.254.0.0/16, cloud metadata)" },
	{ { 172, 16 }, 12, "private (RFC 1918)" },
	{ { 192, 0, 0 }, 24, "IETF protocol assignments (192.0.0.0/24)" },
	{ { 192, 168 }, 16, "private (RFC 1918)" },
	{ { 198, 18 }, 15, "benchmarking (198.18.0.0/15)" },
	{ { 224 }, 4, "multicast" },
	{ { 240 }, 4, "reserved (240.0.0.0/4)" },
};

static const struct block deny6[] = {
	{ { 0 }, 128, "unspecified (::)" },
	{ { [15] = 1 }, 128, "loopback (::1)" },
	{ { 0 }, 96, "IPv4-compatible (::/96)" },
	{ { [8] = 0xff, [9] = 0xff }, 96, "IPv4-translated (::ffff:0:0:0/96)" },
	{ { 0, 0x64, 0xff, 0x9b, 0, 1 }, 48, "local-use NAT64 (64:ff9b:1::/48)" },
	{ { 0x20, 0x02 }, 16, "6to4 (2002::/16)" },
	{ { 0xfc }, 7, "unique local (fc00::/7)" },
	{ { 0xfe, 0x80 }, 10, "link-local (fe80::/10)" },
	{ { 0xfe, 0xc0 }, 10, "site-local (fec0::/10)" },
	{ { 0xff }, 8, "multicast" },
};

const char *sbx_egress_denied(const struct sockaddr *sa)
{
	uint8_t a[16];
	int fam;
	/* An IPv4-mapped address is refused as such: the proxy and the cache
	 * connect to IPv4 addresses as IPv4. */
	static const uint8_t mapped[16] = { [10] = 0xff, [11] = 0xff };
	if (sa->sa_family == AF_INET6 && in_block(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr, mapped, 96))
		return "IPv4-mapped (::ffff:0:0/96)";
	if (addr_bytes(sa, a, &fam) < 0)
		return "not an IP address";
	if (fam == AF_INET) {
		for (size_t i = 0; i < SBX_ARRAY_LEN(deny4); i++)
			if (in_block(a, deny4[i].net, deny4[i].prefix))
				return deny4[i].why;
		return NULL;
	}
	/* NAT64 (64:ff9b::/96) reaches the IPv4 address inside. */
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
	if (!memcmp(a, nat64, 12)) {
		struct sockaddr_in v4 = { .sin_family = AF_INET };
		memcpy(&v4.sin_addr, a + 12, 4);
		return sbx_egress_denied((struct sockaddr *)&v4);
	}
	for (size_t i = 0; i < SBX_ARRAY_LEN(deny6); i++)
		if (in_block(a, deny6[i].net, deny6[i].prefix))
			return deny6[i].why;
	return NULL;
}

int sbx_egress_in_subnet(const struct sockaddr *sa, const struct sockaddr *ifa, const struct sockaddr *mask)
{
	uint8_t a[16], i[16], m[16];
	int fa, fi, fm;
	if (!ifa || addr_bytes(sa, a, &fa) < 0 || addr_bytes(ifa, i, &fi) < 0 || fa != fi)
		return 0;
	size_t len = fa == AF_INET ? 4 : 16;
	if (!mask || mask->sa_family != ifa->sa_family || addr_bytes(mask, m, &fm) < 0)
		memset(m, 0xff, sizeof m);
	else if (ifa->sa_family == AF_INET6 && fi == AF_INET)
		memcpy(m, ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr + 12, 4); /* a mapped address's */
	for (size_t k = 0; k < len; k++)
		if ((a[k] & m[k]) != (i[k] & m[k]))
			return 0;
	return 1;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return !memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr,
			       4);
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* The deny list, then the host's own addresses and the subnets on its
 * links (their netmasks: a LAN's neighbours are as near as the host;
 * read each time, they change).  Other sessions have no address outside
 * their namespaces. */
const char *sbx_egress_denied_here(const struct sockaddr *sa)
{
	const char *why = sbx_egress_denied(sa);
	if (why)
		return why;
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) < 0)
		return "cannot list the host's addresses";
	for (struct ifaddrs *i = ifa; i && !why; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		if (same_addr(i->ifa_addr, sa))
			why = "an address of the host";
		else if (sbx_egress_in_subnet(sa, i->ifa_addr, i->ifa_netmask))
			why = "on a subnet of the host's own links";
	}
	freeifaddrs(ifa);
	return why;
}
