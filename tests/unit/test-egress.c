/* Unit tests for the egress parsers and rules (egress.c), TAP. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "egress.h"

#include "tap.h"

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
		uint8_t e[] = { 0, 0, (uint8_t)((nl + 5) >> 8), (uint8_t)(nl + 5), (uint8_t)((nl + 3) >> 8),
				(uint8_t)(nl + 3), 0, (uint8_t)(nl >> 8), (uint8_t)nl };
		memcpy(ext, e, sizeof e);
		memcpy(ext + sizeof e, name, nl);
		el = sizeof e + nl;
	}
	uint8_t body[400];
	size_t bl = 0;
	body[bl++] = 3, body[bl++] = 3;
	memset(body + bl, 0x11, 32), bl += 32;
	body[bl++] = 0;                         /* session id */
	body[bl++] = 0, body[bl++] = 2, body[bl++] = 0x13, body[bl++] = 1; /* suites */
	body[bl++] = 1, body[bl++] = 0;         /* compression */
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
	static const uint8_t q[] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'W', 'e', 'b', 7, 'e',
				     'x', 'a', 'm', 'p', 'l', 'e', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1 };
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
	ok(!deny6("2001:db8::1") && !deny6("64:ff9b::cb00:710a"), "IPv6 documentation and NAT64 of a public one are not");

	printf("1..%d\n", n);
	return failed != 0;
}
