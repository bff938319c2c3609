/* Unit tests for the egress parsers and rules (egress.c), TAP. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "egress.h"

#include "tap.h"
/* Scan a whole guest stream as the proxy would, in pieces of step bytes;
 * the bytes forwarded, the verdict at the end. */
static size_t flow(const char *host, const char *stream, size_t step, int *verdict, char *why, size_t wn)
{
	struct sbx_http_flow f;
	sbx_http_flow_init(&f, host);
	uint8_t pend[16384];
	size_t plen = 0, fwd = 0, len = strlen(stream), at = 0;
	*verdict = SBX_FLOW_OK;
	while (at < len || plen) {
		size_t k = len - at < step ? len - at : step;
		memcpy(pend + plen, stream + at, k);
		plen += k;
		at += k;
		size_t took = sbx_http_flow_scan(&f, pend, plen, verdict);
		fwd += took;
		memmove(pend, pend + took, plen - took);
		plen -= took;
		if (*verdict == SBX_FLOW_DENY) {
			snprintf(why, wn, "%s", f.why);
			return fwd;
		}
		if (*verdict == SBX_FLOW_WAIT) {
			const char *resp = strstr(stream, "\r\n\r\n101") ? "HTTP/1.1 101 Switching Protocols\r\n"
									 : "HTTP/1.1 200 OK\r\n\r\n";
			sbx_http_flow_response(&f, (const uint8_t *)resp, strlen(resp));
		}
		if (!k && !took)
			break; /* an unfinished request: kept, not forwarded */
	}
	why[0] = 0;
	return fwd;
}

static void sa4(struct sockaddr_in *s, const char *a)
{
	memset(s, 0, sizeof *s);
	s->sin_family = AF_INET;
	inet_pton(AF_INET, a, &s->sin_addr);
}

static enum sbx_sniff sniff(const char *s, char *host)
{
	return sbx_sniff_host((const uint8_t *)s, strlen(s), host, SBX_HOST_LEN);
}

/* A ClientHello in one record with an SNI of name (NULL: no extension). */
static size_t hello(const char *name, uint8_t *b)
{
	uint8_t ext[300];
	size_t el = 0;
	if (name) {
		size_t nl = strlen(name);
		uint8_t e[] = { 0,
				0,
				(uint8_t)((nl + 5) >> 8),
				(uint8_t)(nl + 5),
				(uint8_t)((nl + 3) >> 8),
				(uint8_t)(nl + 3),
				0,
				(uint8_t)(nl >> 8),
				(uint8_t)nl };
		memcpy(ext, e, sizeof e);
		memcpy(ext + sizeof e, name, nl);
		el = sizeof e + nl;
	}
	uint8_t body[400];
	size_t bl = 0;
	body[bl++] = 3, body[bl++] = 3;
	memset(body + bl, 0x11, 32), bl += 32;
	body[bl++] = 0;                                                    /* session id */
	body[bl++] = 0, body[bl++] = 2, body[bl++] = 0x13, body[bl++] = 1; /* suites */
	body[bl++] = 1, body[bl++] = 0;                                    /* compression */
	body[bl++] = (uint8_t)(el >> 8), body[bl++] = (uint8_t)el;
	memcpy(body + bl, ext, el), bl += el;
	size_t hl = 4 + bl;
	b[0] = 0x16, b[1] = 3, b[2] = 1, b[3] = (uint8_t)(hl >> 8), b[4] = (uint8_t)hl;
	b[5] = 1, b[6] = 0, b[7] = (uint8_t)(bl >> 8), b[8] = (uint8_t)bl;
	memcpy(b + 9, body, bl);
	return 9 + bl;
}

static const char *deny4(const char *a)
{
	struct sockaddr_in s = { .sin_family = AF_INET };
	inet_pton(AF_INET, a, &s.sin_addr);
	return sbx_egress_denied((struct sockaddr *)&s);
}

static const char *deny6(const char *a)
{
	struct sockaddr_in6 s = { .sin6_family = AF_INET6 };
	inet_pton(AF_INET6, a, &s.sin6_addr);
	return sbx_egress_denied((struct sockaddr *)&s);
}

int main(void)
{
	char h[SBX_HOST_LEN];
	uint8_t b[1024];

	/* HTTP */
	ok(sniff("GET / HTTP/1.1\r\nHost: Web.Example.TEST:8080\r\n\r\n", h) == SBX_SNIFF_HTTP &&
		   !strcmp(h, "web.example.test"),
	   "HTTP: the Host header, lowercased, without its port");
	ok(sniff("GET / HTTP/1.1\r\nHost: a.example\r\n", h) == SBX_SNIFF_MORE, "an unfinished head asks for more");
	ok(sniff("GE", h) == SBX_SNIFF_MORE, "so does the start of a method");
	ok(sniff("SSH-2.0-OpenSSH\r\n", h) == SBX_SNIFF_OTHER, "another protocol is neither");
	ok(sniff("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", h) == SBX_SNIFF_BAD,
	   "two Host headers are refused");
	ok(sniff("GET / HTTP/1.1\r\nHost: a_b.example\r\n\r\n", h) == SBX_SNIFF_BAD, "a name with '_' is refused");
	ok(sniff("GET / HTTP/1.1\r\nHost: a..example\r\n\r\n", h) == SBX_SNIFF_BAD, "an empty label is refused");
	ok(sniff("GET / HTTP/1.1\r\nHost: [2001:DB8::1]:443\r\n\r\n", h) == SBX_SNIFF_HTTP && !strcmp(h, "2001:db8::1"),
	   "an IPv6 literal comes out in canonical form");
	ok(sniff("GET / HTTP/1.0\r\n\r\n", h) == SBX_SNIFF_HTTP && !h[0], "HTTP/1.0 without Host has no name");
	ok(sniff("GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n", h) == SBX_SNIFF_BAD, "a bad port is refused");

	/* TLS */
	size_t l = hello("Pypi.ORG", b);
	ok(sbx_sniff_host(b, l, h, sizeof h) == SBX_SNIFF_TLS && !strcmp(h, "pypi.org"), "TLS: the SNI, lowercased");
	ok(sbx_sniff_host(b, l - 1, h, sizeof h) == SBX_SNIFF_MORE, "a hello cut short asks for more");
	l = hello(NULL, b);
	ok(sbx_sniff_host(b, l, h, sizeof h) == SBX_SNIFF_TLS && !h[0], "a hello without SNI has no name");
	l = hello("pypi.org", b);
	b[5] = 2; /* not a client_hello */
	ok(sbx_sniff_host(b, l, h, sizeof h) == SBX_SNIFF_BAD, "another handshake message is refused");
	l = hello("pypi.org", b);
	b[8] += 1; /* the handshake claims more than the record holds */
	ok(sbx_sniff_host(b, l, h, sizeof h) == SBX_SNIFF_BAD, "a hello longer than its record is refused");

	/* DNS */
	static const uint8_t q[] = {
		0x12, 0x34, 0x01, 0x00, 0,   1,   0,   0, 0,   0,   0,   0,   3, 'W', 'e', 'b', 7,
		'e',  'x',  'a',  'm',  'p', 'l', 'e', 4, 't', 'e', 's', 't', 0, 0,   1,   0,   1
	};
	struct sbx_dns_query dq;
	ok(sbx_dns_parse(q, sizeof q, &dq) == 0 && !strcmp(dq.name, "web.example.test") && dq.qtype == SBX_DNS_A &&
		   dq.id == 0x1234,
	   "DNS: a query's name (lowercased), type and id");
	uint8_t out[SBX_DNS_MAX], addr[4] = { 203, 0, 113, 10 };
	size_t al = sbx_dns_answer(q, &dq, SBX_DNS_NOERROR, addr, 1, out, sizeof out);
	ok(al == sizeof q + 16 && out[0] == 0x12 && out[1] == 0x34 && (out[2] & 0x80) && out[7] == 1 &&
		   !memcmp(out + al - 4, addr, 4),
	   "an answer: same id, QR set, one A record with the address");
	al = sbx_dns_answer(q, &dq, SBX_DNS_REFUSED, addr, 1, out, sizeof out);
	ok(al == sizeof q && (out[3] & 0xf) == SBX_DNS_REFUSED && out[7] == 0, "a refusal carries no record");
	uint8_t r[sizeof q];
	memcpy(r, q, sizeof q);
	r[2] |= 0x80;
	ok(sbx_dns_parse(r, sizeof r, &dq) == -1, "a response is never answered");
	r[2] = 0x01, r[12] = 0xc0;
	ok(sbx_dns_parse(r, sizeof r, &dq) == SBX_DNS_FORMERR, "a compression pointer in the question is FORMERR");
	ok(sbx_dns_parse(q, 20, &dq) == SBX_DNS_FORMERR, "so is a cut question");

	/* The allowlist */
	struct sbx_policy p;
	struct sbx_err e = { 0 };
	static const char pol[] = "network:\n  egress: allowlist\n  allow:\n"
				  "    - {domain: pypi.org, ports: [443]}\n"
				  "    - {domain: \"*.example.com\"}\n"
				  "    - {cidr: 203.0.113.0/24, ports: [8443]}\n";
	sbx_policy_defaults(&p);
	ok(sbx_policy_parse("t.yaml", (const uint8_t *)pol, strlen(pol), &p, &e) == 0, "a policy with rules");
	ok(sbx_egress_match_name(&p, "pypi.org", 443) == 0, "an exact name on its port");
	ok(sbx_egress_match_name(&p, "pypi.org", 80) < 0, "not on another port");
	ok(sbx_egress_match_name(&p, "evilpypi.org", 443) < 0 && sbx_egress_match_name(&p, "pypi.org.evil", 443) < 0,
	   "names that only look alike do not match");
	ok(sbx_egress_match_name(&p, "a.b.example.com", 80) == 1, "a wildcard matches names below it");
	ok(sbx_egress_match_name(&p, "example.com", 80) < 0 && sbx_egress_match_name(&p, "xexample.com", 80) < 0,
	   "but not the name itself or a longer label");
	ok(sbx_egress_match_name(&p, "pypi.org", 0) == 0, "port 0 means any (the resolver)");
	struct sockaddr_in s = { .sin_family = AF_INET };
	inet_pton(AF_INET, "203.0.113.77", &s.sin_addr);
	ok(sbx_egress_match_addr(&p, (struct sockaddr *)&s, 8443) == 2, "an address in a cidr rule, on its port");
	ok(sbx_egress_match_addr(&p, (struct sockaddr *)&s, 443) < 0, "not on another port");
	struct sockaddr_in6 m = { .sin6_family = AF_INET6 };
	inet_pton(AF_INET6, "::ffff:203.0.113.77", &m.sin6_addr);
	ok(sbx_egress_match_addr(&p, (struct sockaddr *)&m, 8443) == 2, "its IPv4-mapped form too");

	/* The deny list */
	ok(deny4("127.0.0.1") && deny4("10.1.2.3") && deny4("172.31.0.1") && deny4("192.168.1.1") &&
		   deny4("100.64.0.1") && deny4("0.1.2.3") && deny4("224.0.0.1") && deny4("255.255.255.255"),
	   "loopback, RFC 1918, shared, 0/8, multicast and broadcast are denied");
	ok(deny4("169.254.169.254") && strstr(deny4("169.254.169.254"), "metadata"), "so is the metadata address");
	ok(!deny4("203.0.113.10") && !deny4("198.51.100.1") && !deny4("8.8.8.8") && !deny4("172.32.0.1"),
	   "public and documentation addresses are not");
	ok(deny6("::1") && deny6("::") && deny6("fd00::1") && deny6("fe80::1") && deny6("ff02::1") &&
		   deny6("::ffff:127.0.0.1") && deny6("64:ff9b::a00:1") && deny6("::10.0.0.1"),
	   "IPv6: loopback, ULA, link-local, multicast, mapped, NAT64 and compatible forms of denied ones");
	ok(!deny6("2001:db8::1") && !deny6("64:ff9b::cb00:710a"),
	   "IPv6 documentation and NAT64 of a public one are not");

	ok(deny4("192.0.0.8") && deny4("198.18.0.1") && deny4("198.19.255.255") && !deny4("198.20.0.1") &&
		   !deny4("192.0.1.1"),
	   "IETF protocol assignments (192.0.0.0/24) and benchmarking (198.18.0.0/15) are denied, no more");
	ok(deny6("64:ff9b:1::1") && deny6("2002:c000:201::1") && deny6("::ffff:8.8.8.8") && deny6("::ffff:0:808:808"),
	   "local-use NAT64, 6to4, IPv4-mapped and IPv4-translated are denied, even of public addresses");
	{
		struct sockaddr_in a, i, mk;
		sa4(&i, "192.0.2.10"), sa4(&mk, "255.255.255.0");
		sa4(&a, "192.0.2.200");
		int in = sbx_egress_in_subnet((struct sockaddr *)&a, (struct sockaddr *)&i, (struct sockaddr *)&mk);
		sa4(&a, "192.0.3.1");
		int outside =
			sbx_egress_in_subnet((struct sockaddr *)&a, (struct sockaddr *)&i, (struct sockaddr *)&mk);
		ok(in && !outside,
		   "an on-link subnet holds its neighbours (192.0.2.200 in 192.0.2.10/24), not the next one");
		sa4(&mk, "255.255.255.255");
		sa4(&a, "192.0.2.11");
		outside = sbx_egress_in_subnet((struct sockaddr *)&a, (struct sockaddr *)&i, (struct sockaddr *)&mk);
		in = sbx_egress_in_subnet((struct sockaddr *)&i, (struct sockaddr *)&i, NULL);
		ok(!outside && in, "a /32 (or no netmask) is the address alone");
		struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 }, i6 = { .sin6_family = AF_INET6 },
				    m6 = { .sin6_family = AF_INET6 };
		inet_pton(AF_INET6, "2001:db8:1:2::5", &i6.sin6_addr);
		inet_pton(AF_INET6, "ffff:ffff:ffff:ffff::", &m6.sin6_addr);
		inet_pton(AF_INET6, "2001:db8:1:2:aaaa::1", &a6.sin6_addr);
		in = sbx_egress_in_subnet((struct sockaddr *)&a6, (struct sockaddr *)&i6, (struct sockaddr *)&m6);
		inet_pton(AF_INET6, "2001:db8:1:3::1", &a6.sin6_addr);
		outside = sbx_egress_in_subnet((struct sockaddr *)&a6, (struct sockaddr *)&i6, (struct sockaddr *)&m6);
		int fam = sbx_egress_in_subnet((struct sockaddr *)&a, (struct sockaddr *)&i6, (struct sockaddr *)&m6);
		ok(in && !outside && !fam, "IPv6 on-link /64s likewise; families never mix");
	}

	/* Absolute-form and authority-form targets */
	ok(sniff("GET http://other.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", h) == SBX_SNIFF_CONFLICT,
	   "an absolute-form target for another host than Host is a conflict");
	ok(sniff("GET http://A.example:80/x HTTP/1.1\r\nHost: a.example\r\n\r\n", h) == SBX_SNIFF_HTTP &&
		   !strcmp(h, "a.example"),
	   "one that agrees with Host is not");
	ok(sniff("GET http://b.example/ HTTP/1.0\r\n\r\n", h) == SBX_SNIFF_HTTP && !strcmp(h, "b.example"),
	   "without Host, the target's authority is the host");
	ok(sniff("GET http://a.example@b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", h) == SBX_SNIFF_BAD,
	   "userinfo in a target is refused");
	ok(sniff("CONNECT other.example:443 HTTP/1.1\r\nHost: a.example\r\n\r\n", h) == SBX_SNIFF_CONFLICT,
	   "so is a CONNECT to another host");
	ok(sniff("GET x HTTP/1.1\r\nHost: a.example\r\n\r\n", h) == SBX_SNIFF_BAD,
	   "a target neither origin- nor absolute-form is refused");
	ok(sniff("GET / HTTP/1.1\r\nHost : b.example\r\n\r\n", h) == SBX_SNIFF_BAD &&
		   sniff("GET / HTTP/1.1\r\nX: y\r\n Host: b.example\r\n\r\n", h) == SBX_SNIFF_BAD &&
		   sniff("GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", h) == SBX_SNIFF_BAD,
	   "space before a colon, folded fields and bare CRs are refused");
	ok(sniff("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", h) ==
			   SBX_SNIFF_BAD &&
		   sniff("POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", h) ==
			   SBX_SNIFF_BAD &&
		   sniff("POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", h) ==
			   SBX_SNIFF_BAD,
	   "ambiguous framing is refused (CL and TE, two CLs, TE not ending in chunked)");

	/* Every request on the connection */
	int v;
	char why[400];
	const char *two = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.example\r\n\r\n";
	size_t fwd = flow("a.example", two, 7, &v, why, sizeof why);
	ok(v == SBX_FLOW_OK && fwd == strlen(two), "keep-alive requests for the admitted host all go through");
	const char *sw = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET / HTTP/1.1\r\nHost: other.example\r\n\r\n";
	fwd = flow("a.example", sw, 1000, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY && fwd == strlen("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n") &&
		   strstr(why, "other.example"),
	   "a pipelined request for another host is refused, and not one byte of it forwarded");
	fwd = flow("a.example", sw, 3, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY && fwd == strlen("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"),
	   "likewise when it arrives a few bytes at a time (keep-alive)");
	const char *abs2 = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET http://other.example/ HTTP/1.1\r\nHost: "
			   "a.example\r\n\r\n";
	fwd = flow("a.example", abs2, 1000, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY && strstr(why, "target"), "a later absolute-form request for another host is refused");
	const char *nohost = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET / HTTP/1.0\r\n\r\n";
	flow("a.example", nohost, 1000, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY, "a later request without any host is refused");
	const char *cl = "POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 39\r\n\r\n"
			 "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n"
			 "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";
	fwd = flow("a.example", cl, 5, &v, why, sizeof why);
	ok(v == SBX_FLOW_OK && fwd == strlen(cl), "a body is skipped by its Content-Length (a request inside is data)");
	const char *ch = "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "5;x=y\r\nhello\r\n0\r\nTrailer: 1\r\n\r\n"
			 "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n";
	flow("a.example", ch, 4, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY && strstr(why, "other.example"),
	   "a chunked body is followed to its end, and the request after it is checked");
	const char *badch = "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
	flow("a.example", badch, 100, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY, "a malformed chunk size is refused");
	const char *up = "GET /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\r\n101"
			 "\x81\x05hello not http";
	fwd = flow("a.example", up, 1000, &v, why, sizeof why);
	ok(v == SBX_FLOW_OK && fwd == strlen(up), "after a 101 to an Upgrade, the stream is opaque");
	const char *noup = "GET /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\r\n"
			   "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n";
	flow("a.example", noup, 1000, &v, why, sizeof why);
	ok(v == SBX_FLOW_DENY, "an Upgrade the server does not take leaves the stream HTTP, checked");

	printf("1..%d\n", n);
	return failed != 0;
}
