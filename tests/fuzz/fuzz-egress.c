/* libFuzzer target for what a guest sends its proxy (egress.c): the first
 * bytes of a TCP connection (TLS ClientHello / HTTP request head, the
 * latter through the parser it shares with the package cache, http.c) and
 * a DNS query, then the answer built from it.  The first byte picks the
 * parser. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "egress.h"
#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	if (data[0] & 1) {
		struct sbx_dns_query q;
		uint8_t out[SBX_DNS_MAX], addrs[8 * 16];
		memset(addrs, 0x5a, sizeof addrs);
		int rc = sbx_dns_parse(p, n, &q);
		if (rc >= 0) {
			size_t len = sbx_dns_answer(p, &q, rc ? rc : (data[0] >> 1) % 6, addrs, 8, out, sizeof out);
			if (len > sizeof out)
				__builtin_trap();
			if (!rc && strlen(q.name) >= sizeof q.name)
				__builtin_trap();
		}
		return 0;
	}
	char host[SBX_HOST_LEN];
	enum sbx_sniff k = sbx_sniff_host(p, n, host, sizeof host);
	if (k == SBX_SNIFF_TLS || k == SBX_SNIFF_HTTP) {
		size_t hl = strlen(host);
		if (hl >= sizeof host)
			__builtin_trap();
		for (size_t i = 0; i < hl; i++)
			if (host[i] >= 'A' && host[i] <= 'Z')
				__builtin_trap(); /* always lowercased */
	}
	/* The request head itself: an accepted one lies within the input and
	 * the bounds, and what it points at is inside it. */
	struct sbx_http_head hd;
	int status;
	int used = sbx_http_head_parse((const char *)p, n, data[0] & 4 ? 64 : 0, data[0] & 8 ? SBX_HTTP_ORIGIN_FORM : 0,
				       &hd, &status);
	if (used > 0) {
		if ((size_t)used > n || (size_t)used > SBX_HTTP_HEAD_MAX || status || !hd.method[0] || !hd.target_len ||
		    hd.target < (const char *)p || hd.target + hd.target_len > (const char *)p + used ||
		    (hd.host && (hd.host < (const char *)p || hd.host + hd.host_len > (const char *)p + used)) ||
		    memchr(hd.target, ' ', hd.target_len) || memchr(hd.target, '#', hd.target_len) ||
		    (hd.chunked && hd.length >= 0) || hd.minor > 9)
			__builtin_trap();
	} else if (used < 0 && status != 400 && status != 414 && status != 431 && status != 505) {
		__builtin_trap();
	} else if (used == 0 && n >= SBX_HTTP_HEAD_MAX) {
		__builtin_trap();
	}
	/* Every request on a connection: the stream fed in pieces (sizes from
	 * the input), as the proxy forwards it; never more than it was given. */
	if (data[0] & 2) {
		struct sbx_http_flow f;
		sbx_http_flow_init(&f, "a.example");
		uint8_t pend[16384];
		size_t plen = 0, at = 0, step = (size_t)(data[0] >> 2) + 1;
		while (at < n) {
			size_t k = n - at < step ? n - at : step;
			if (k > sizeof pend - plen)
				break;
			memcpy(pend + plen, p + at, k);
			plen += k, at += k;
			int v;
			size_t took = sbx_http_flow_scan(&f, pend, plen, &v);
			if (took > plen)
				__builtin_trap();
			memmove(pend, pend + took, plen - took);
			plen -= took;
			if (v == SBX_FLOW_DENY)
				break;
			if (v == SBX_FLOW_WAIT)
				sbx_http_flow_response(&f, p, n < 16 ? n : 16);
		}
	}
	/* The deny list over whatever 16 bytes came in, as v4 and v6. */
	if (n >= 16) {
		struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
		struct sockaddr_in s4 = { .sin_family = AF_INET };
		memcpy(&s6.sin6_addr, p, 16);
		memcpy(&s4.sin_addr, p, 4);
		(void)sbx_egress_denied((struct sockaddr *)&s6);
		(void)sbx_egress_denied((struct sockaddr *)&s4);
	}
	return 0;
}
