/* Unit tests for the HTTP/1.x request head parser (proxy/http.c) that the
 * egress flow check and the package cache share (TAP): what it takes from
 * a head, and the heads it refuses, for either reader.  Each reader's own
 * rules are in test-egress.c and test-pkgcache.c. */
#include <stdio.h>
#include <string.h>

#include "egress.h"
#include "http.h"
#include "pkgcache.h"

#include "tap.h"

static int parse(const char *s, size_t target_max, unsigned flags, struct sbx_http_head *h, int *status)
{
	return sbx_http_head_parse(s, strlen(s), target_max, flags, h, status);
}

/* Refused by the parser, and so by both of its readers. */
static int refused_by_all(const char *s, int want_status)
{
	struct sbx_http_head h;
	struct sbx_http_req r;
	char host[SBX_HOST_LEN];
	int st, st2;
	int a = parse(s, 0, 0, &h, &st) < 0 && st == want_status;
	int b = sbx_http_parse_head(s, strlen(s), &r, &st2) < 0 && st2 == want_status;
	int c = sbx_sniff_host((const uint8_t *)s, strlen(s), host, sizeof host) == SBX_SNIFF_BAD;
	return a && b && c;
}

static void test_fields(void)
{
	struct sbx_http_head h;
	int st;
	const char *g = "POST /a?b=c HTTP/1.1\r\nHost:  a.example:80 \r\nContent-Length: 12\r\n"
			"User-Agent: pip/24.0\r\nUpgrade: websocket\r\n\r\nbody";
	int used = parse(g, 0, 0, &h, &st);
	ok(used == (int)(strlen(g) - 4) && st == 0 && h.len == (size_t)used,
	   "a head's length, its blank line included");
	ok(!strcmp(h.method, "POST") && h.target_len == 6 && !memcmp(h.target, "/a?b=c", 6) && h.minor == 1,
	   "its method, target and version");
	ok(h.host && h.host_len == 12 && !memcmp(h.host, "a.example:80", 12),
	   "Host's value without the white space around it");
	ok(h.length == 12 && !h.chunked && h.upgrade && h.pip, "its framing, Upgrade and pip's User-Agent");
	ok(parse("GET / HTTP/1.0\n\n", 0, 0, &h, &st) == 16 && !h.host && h.length == -1 && h.minor == 0,
	   "bare LF line ends; no Host, no length");
	ok(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, 0, &h, &st) > 0 && h.chunked,
	   "a Transfer-Encoding whose last coding is chunked");
	ok(parse("GET http://a.example/x HTTP/1.1\r\n\r\n", 0, 0, &h, &st) > 0 &&
		   parse("CONNECT a.example:443 HTTP/1.1\r\n\r\n", 0, 0, &h, &st) > 0,
	   "absolute-form and authority-form targets, unless origin-form is asked for");
	ok(parse("GET http://a.example/x HTTP/1.1\r\n\r\n", 0, SBX_HTTP_ORIGIN_FORM, &h, &st) < 0 && st == 400,
	   "origin-form only: an absolute URL is 400");
}

static void test_incomplete(void)
{
	struct sbx_http_head h;
	int st;
	ok(parse("GET / HTTP/1.1\r\nHost: a\r\n", 0, 0, &h, &st) == 0, "no empty line yet: more");
	ok(parse("GET / HTTP/1.1\r\nHost: a\r\n\r", 0, 0, &h, &st) == 0, "half of it: more");
	char big[SBX_HTTP_HEAD_MAX + 16];
	memset(big, 'a', sizeof big);
	memcpy(big, "GET /", 5);
	ok(sbx_http_head_parse(big, SBX_HTTP_HEAD_MAX, 0, 0, &h, &st) < 0 && st == 431,
	   "SBX_HTTP_HEAD_MAX bytes without an end: 431");
	char uri[300];
	snprintf(uri, sizeof uri, "GET /%0200d HTTP/1.1\r\n\r\n", 0);
	ok(parse(uri, 128, 0, &h, &st) < 0 && st == 414 && parse(uri, 0, 0, &h, &st) > 0,
	   "a target of target_max bytes or more: 414; no bound: taken");
}

static void test_refused(void)
{
	/* Where the readers once differed, both now refuse (the stricter). */
	ok(refused_by_all("GET / HTTP/1.1\nHost: a.example\n\r\n", 400),
	   "an empty CRLF line after a bare LF: where the head ends is ambiguous");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nX: a\x7f\r\n\r\n", 400), "DEL in a value");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nX: a\x01\r\n\r\n", 400), "a control in a value");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nX: a\rb\r\n\r\n", 400), "a bare CR");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nA\"b: c\r\n\r\n", 400),
	   "a field name that is no token");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", 400), "two Host fields");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400),
	   "two Content-Length fields, even equal");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1234567890123456\r\n\r\n", 400),
	   "a Content-Length of 16 digits");
	ok(refused_by_all("GET / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
	   "a Transfer-Encoding that does not end in chunked");
	ok(refused_by_all(
		   "GET / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400),
	   "both Transfer-Encoding and Content-Length");
	ok(refused_by_all("GET /a#b HTTP/1.1\r\nHost: a.example\r\n\r\n", 400), "a fragment in the target");
	ok(refused_by_all("GET /\xc3\xa9 HTTP/1.1\r\nHost: a.example\r\n\r\n", 400),
	   "a byte outside ASCII in the target");
	ok(refused_by_all("GET / HTTP/1.x\r\nHost: a.example\r\n\r\n", 505), "a version that is not HTTP/1.digit: 505");
	ok(refused_by_all("GET / HTTP/1.10\r\nHost: a.example\r\n\r\n", 400), "a version that is no version: 400");
	ok(refused_by_all("GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", 505), "HTTP/2.0: 505");
	ok(refused_by_all("GET / HTTP/1.1\r\n Host: a.example\r\n\r\n", 400), "a folded line");
	char many[SBX_HTTP_HEAD_MAX];
	size_t m = (size_t)snprintf(many, sizeof many, "GET / HTTP/1.1\r\nHost: a.example\r\n");
	for (int i = 0; i < SBX_HTTP_HEADERS_MAX; i++)
		m += (size_t)snprintf(many + m, sizeof many - m, "X%d: y\r\n", i);
	snprintf(many + m, sizeof many - m, "\r\n");
	ok(refused_by_all(many, 431), "more than SBX_HTTP_HEADERS_MAX fields: 431");
}

int main(void)
{
	test_fields();
	test_incomplete();
	test_refused();
	return tap_done();
}
