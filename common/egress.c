/* The pure half of egress.h: parsers of what the guest sends, the
 * allowlist, the deny list.  Every byte here comes from the guest. */
#include "egress.h"
#include "util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

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
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (c == '.' && i && s[i - 1] != '.')))
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
#define NEED(k)                                 \
	do {                                    \
		if ((size_t)(end - p) < (size_t)(k)) \
			return SBX_SNIFF_BAD;   \
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

#define HTTP_HEAD_MAX 8192

static const char *const methods[] = { "GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ",
				       "CONNECT ", "TRACE " };

/* An HTTP/1.x request head and its one Host header (RFC 9112 3.2). */
static enum sbx_sniff sniff_http(const uint8_t *b, size_t n, char *host, size_t hn)
{
	const char *s = (const char *)b;
	int prefix = 0, method = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(methods); i++) {
		size_t ml = strlen(methods[i]);
		if (n >= ml && !memcmp(s, methods[i], ml))
			method = 1;
		else if (n < ml && !memcmp(s, methods[i], n))
			prefix = 1;
	}
	if (!method)
		return prefix ? SBX_SNIFF_MORE : SBX_SNIFF_OTHER;
	size_t lim = n < HTTP_HEAD_MAX ? n : HTTP_HEAD_MAX;
	const char *eoh = memmem(s, lim, "\r\n\r\n", 4);
	if (!eoh)
		eoh = memmem(s, lim, "\n\n", 2);
	if (!eoh)
		return n >= HTTP_HEAD_MAX ? SBX_SNIFF_BAD : SBX_SNIFF_MORE;
	const char *line = memchr(s, '\n', (size_t)(eoh - s) + 2); /* eoh + 2 is in the buffer */
	if (!line)
		return SBX_SNIFF_BAD;
	/* The request line ends in HTTP/1.x. */
	size_t rl = (size_t)(line - s);
	if (rl && s[rl - 1] == '\r')
		rl--;
	if (rl < 9 || memcmp(s + rl - 8, "HTTP/1.", 7))
		return SBX_SNIFF_BAD;
	int found = 0;
	host[0] = 0;
	for (const char *p = line + 1; p < eoh;) {
		const char *nl = memchr(p, '\n', (size_t)(eoh - p) + 1);
		if (!nl)
			nl = eoh;
		size_t ll = (size_t)(nl - p);
		if (ll && p[ll - 1] == '\r')
			ll--;
		if (ll >= 5 && !strncasecmp(p, "host:", 5)) {
			if (found++)
				return SBX_SNIFF_BAD; /* two Host headers: ambiguous */
			const char *v = p + 5, *ve = p + ll;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			/* Drop the port: after the ']' of an IPv6 literal, else after
			 * the only ':'. */
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
			if (set_host(v, (size_t)(ve - v), host, hn, SBX_SNIFF_HTTP) != SBX_SNIFF_HTTP)
				return SBX_SNIFF_BAD;
		}
		p = nl + 1;
	}
	return SBX_SNIFF_HTTP;
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
	static const char *const names[] = { "more", "tls", "http", "other", "bad" };
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
	{ { 192, 168 }, 16, "private (RFC 1918)" },
	{ { 224 }, 4, "multicast" },
	{ { 240 }, 4, "reserved (240.0.0.0/4)" },
};

static const struct block deny6[] = {
	{ { 0 }, 128, "unspecified (::)" },
	{ { [15] = 1 }, 128, "loopback (::1)" },
	{ { 0 }, 96, "IPv4-compatible (::/96)" },
	{ { 0xfc }, 7, "unique local (fc00::/7)" },
	{ { 0xfe, 0x80 }, 10, "link-local (fe80::/10)" },
	{ { 0xfe, 0xc0 }, 10, "site-local (fec0::/10)" },
	{ { 0xff }, 8, "multicast" },
};

const char *sbx_egress_denied(const struct sockaddr *sa)
{
	uint8_t a[16];
	int fam;
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
