/* Unit tests for the package cache's parsers (TAP): the request head the
 * guest sends, PEP 503 names, index pages, and the deny list for upstream
 * connections.  The cache end to end is tests/t1400-packages.t. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostconf.h"
#include "pkgcache.h"

#include "tap.h"

static int head(const char *s, struct sbx_http_req *r, int *status)
{
	return sbx_http_parse_head(s, strlen(s), r, status);
}

static void test_head(void)
{
	struct sbx_http_req r;
	int st;
	const char *g = "GET /pypi/0/simple/x/ HTTP/1.1\r\nHost: 10.0.2.2:3141\r\nUser-Agent: pip/23.0.1 {}\r\n\r\n";
	ok(head(g, &r, &st) == (int)strlen(g) && !strcmp(r.method, "GET") && !strcmp(r.target, "/pypi/0/simple/x/") &&
		   r.minor == 1 && r.pip && !r.has_body,
	   "a pip request parses");
	ok(head("GET / HTTP/1.0\n\n", &r, &st) == 16 && r.minor == 0, "bare LF line ends");
	ok(head("GET /x HTTP/1.1\r\nHost: a\r\n", &r, &st) == 0, "an incomplete head asks for more");
	ok(head("GET /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &r, &st) > 0 && r.has_body, "a body is noticed");
	ok(head("GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &r, &st) > 0 && r.has_body, "chunked too");
	ok(head("GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &r, &st) < 0 && st == 400,
	   "conflicting Content-Length: 400");
	ok(head("GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", &r, &st) < 0, "a negative length");
	ok(head("GET http://evil/ HTTP/1.1\r\n\r\n", &r, &st) < 0 && st == 400, "absolute-form: 400 (no proxying)");
	ok(head("CONNECT evil:443 HTTP/1.1\r\n\r\n", &r, &st) < 0, "CONNECT: 400");
	ok(head("GET /x#f HTTP/1.1\r\n\r\n", &r, &st) < 0, "a fragment in the target");
	ok(head("GET /x HTTP/2.0\r\n\r\n", &r, &st) < 0 && st == 505, "HTTP/2.0: 505");
	ok(head("GET /x HTTP/1.1\r\n folded\r\n\r\n", &r, &st) < 0, "obsolete line folding");
	ok(head("GET /x HTTP/1.1\r\nBad Header: x\r\n\r\n", &r, &st) < 0, "a space in a header name");
	ok(head("GET /x HTTP/1.1\r\nA: b\rc\r\n\r\n", &r, &st) < 0, "a bare CR inside a line");
	ok(head("GET /x\x01 HTTP/1.1\r\n\r\n", &r, &st) < 0, "a control character in the target");
	ok(head("get /x HTTP/1.1\r\n\r\n", &r, &st) < 0, "a lower-case method");
	char big[SBX_HTTP_HEAD_MAX + 64];
	memset(big, 'a', sizeof big);
	memcpy(big, "GET /", 5);
	big[sizeof big - 1] = 0;
	ok(head(big, &r, &st) < 0 && st == 431, "a head past the bound without an end: 431");
	char uri[4200];
	int w = snprintf(uri, sizeof uri, "GET /%03000d HTTP/1.1\r\n\r\n", 0);
	ok(w > 0 && head(uri, &r, &st) < 0 && st == 414, "a target past the bound: 414");
	char many[SBX_HTTP_HEAD_MAX];
	size_t m = (size_t)snprintf(many, sizeof many, "GET / HTTP/1.1\r\n");
	for (int i = 0; i < SBX_HTTP_HEADERS_MAX + 1; i++)
		m += (size_t)snprintf(many + m, sizeof many - m, "X%d: y\r\n", i);
	snprintf(many + m, sizeof many - m, "\r\n");
	ok(head(many, &r, &st) < 0 && st == 431, "too many headers: 431");
}

static void test_names(void)
{
	char out[256];
	ok(sbx_pep503_normalize("Foo.Bar__baz-Q", out, sizeof out) == 0 && !strcmp(out, "foo-bar-baz-q"),
	   "PEP 503 normalization");
	ok(sbx_pep503_normalize("a", out, sizeof out) == 0 && !strcmp(out, "a"), "one letter");
	const char *bad[] = { "", "-a", "a-", "a/b", "..", "a b", "%2e", "a\nb", "é" };
	int all = 1;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		all &= sbx_pep503_normalize(bad[i], out, sizeof out) < 0;
	ok(all, "names that are not PEP 508 names are refused");
}

static void test_index(void)
{
	const char *page = "<!DOCTYPE html><html><body>"
			   "<a href=\"../../files/a-1.0-py3-none-any.whl#sha256=00\">a</a>"
			   "<a href='https://files.example.org/p/a-1.1.tar.gz#sha256="
			   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' data-yanked>a</a>"
			   "<A HREF=\"a-1.2.zip\" data-requires-python=\"&gt;=3.8\">a</A>"
			   "<a href=\"javascript:alert(1)\">x</a><a href=\"file:///etc/passwd\">y</a>"
			   "<a href=\"../bad name.whl\">z</a><a>no href</a><p><a href=\"deep/a-2.0.tar.gz\"></a>";
	size_t k = 0;
	ok(sbx_pkgcache_index_links(page, strlen(page), "http://198.51.100.2/simple/a/", &k) == 0 && k == 4,
	   "an index page: http(s) links with plain file names only");
	ok(sbx_pkgcache_index_links("", 0, "http://198.51.100.2/simple/a/", &k) <= 0 && k == 0, "an empty page");

	/* A hostile page: 150000 links, a third of them repeats.  Kept once
	 * each (the first wins), found in a hash set, not by a scan per link. */
	size_t cap = 150000 * 64, len = 0;
	char *big = malloc(cap);
	for (int i = 0; big && i < 150000; i++)
		len += (size_t)snprintf(big + len, cap - len, "<a href=\"f/p-%d.whl\">x</a>\n", i % 100000);
	ok(big && sbx_pkgcache_index_links(big, len, "http://198.51.100.2/simple/p/", &k) == 0 && k == 100000,
	   "a page of 150000 links, 50000 of them repeats: 100000 kept");
	free(big);
	/* Links are bounded in bytes too: 2000 links of 4000 bytes each is
	 * 8 MB of URLs, half of what one page may keep; 6000 are not all kept. */
	cap = 6000 * 4100;
	len = 0;
	big = malloc(cap);
	char pad[3990];
	memset(pad, 'q', sizeof pad - 1);
	pad[sizeof pad - 1] = 0;
	for (int i = 0; big && i < 6000; i++)
		len += (size_t)snprintf(big + len, cap - len, "<a href=\"/%.3900s/p-%d.whl\">x</a>", pad, i);
	ok(big && sbx_pkgcache_index_links(big, len, "http://198.51.100.2/simple/p/", &k) == 0 && k > 2000 && k < 6000,
	   "the links kept from one page are bounded in bytes (16 MiB)");
	free(big);
}

static void test_quota_key(void)
{
	static struct sbx_hostconf hc;
	struct sbx_err e = { 0 };
	const char *y = "packages:\n  cache_quota: 2G\n";
	ok(sbx_hostconf_parse("h.yaml", (const uint8_t *)y, strlen(y), &hc, &e) == 0 &&
		   hc.packages.cache_quota == 2ull << 30,
	   "sbx.yaml packages.cache_quota: 2G");
	y = "pool: {templates: {}}\n";
	ok(sbx_hostconf_parse("h.yaml", (const uint8_t *)y, strlen(y), &hc, &e) == 0 && hc.packages.cache_quota == 0,
	   "not set: 0 (the cache's default, SBX_PKGCACHE_QUOTA_DEFAULT)");
	y = "packages: {cache_quota: 512K}\n";
	ok(sbx_hostconf_parse("h.yaml", (const uint8_t *)y, strlen(y), &hc, &e) < 0 && strstr(e.msg, "1M..1P"),
	   "a quota under 1M is refused");
	y = "packages: {cache_quotas: 1G}\n";
	ok(sbx_hostconf_parse("h.yaml", (const uint8_t *)y, strlen(y), &hc, &e) < 0 &&
		   strstr(e.msg, "unknown key 'cache_quotas'"),
	   "an unknown key under packages is refused");
}

static void test_deny(void)
{
	struct sockaddr_in v4 = { .sin_family = AF_INET };
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 };
	const char *deny4[] = { "127.0.0.1",       "10.1.2.3",   "172.16.0.1", "192.168.1.1",
				"169.254.169.254", "100.64.0.1", "0.0.0.0" };
	int all = 1;
	for (size_t i = 0; i < sizeof deny4 / sizeof deny4[0]; i++) {
		inet_pton(AF_INET, deny4[i], &v4.sin_addr);
		all &= sbx_pkgcache_addr_denied((struct sockaddr *)&v4, sizeof v4) != NULL;
	}
	ok(all, "loopback, private, link-local, CGNAT, unspecified IPv4 denied");
	const char *deny6[] = { "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254" };
	all = 1;
	for (size_t i = 0; i < sizeof deny6 / sizeof deny6[0]; i++) {
		inet_pton(AF_INET6, deny6[i], &v6.sin6_addr);
		all &= sbx_pkgcache_addr_denied((struct sockaddr *)&v6, sizeof v6) != NULL;
	}
	ok(all, "IPv6 loopback, link-local, ULA and mapped denied addresses denied");
	inet_pton(AF_INET, "198.51.100.99", &v4.sin_addr);
	ok(sbx_pkgcache_addr_denied((struct sockaddr *)&v4, sizeof v4) == NULL, "a documentation address is not");
	ok(sbx_pkgcache_addr_denied((struct sockaddr *)&v4, 4) != NULL, "a short sockaddr is");
}

int main(void)
{
	test_head();
	test_names();
	test_index();
	test_deny();
	test_quota_key();
	printf("1..%d\n", n);
	return failed != 0;
}
