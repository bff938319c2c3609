/* The HTTP/1.x request head (http.h), and the package cache's reading
 * of it (pkgcache.h).  Pure: egress.c, its fuzz target and the unit tests
 * link it without the cache. */
#include "http.h"
#include "pkgcache.h"

#include <string.h>
#include <strings.h>

static int is_tchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Where the head ends (*end: the byte after its empty line), within
 * SBX_HTTP_HEAD_MAX.  1 found, 0 not in buf yet, -1 when the empty line
 * is CRLF after a line ended by a bare LF: a reader that splits lines at
 * LF ends the head there, one that looks for CRLFCRLF or LFLF reads on. */
static int head_end(const char *buf, size_t n, size_t *end)
{
	size_t lim = n < SBX_HTTP_HEAD_MAX ? n : SBX_HTTP_HEAD_MAX;
	for (size_t i = 0; i + 1 < lim; i++) {
		if (buf[i] != '\n')
			continue;
		if (buf[i + 1] == '\n') {
			*end = i + 2;
			return 1;
		}
		if (buf[i + 1] == '\r' && i + 2 < lim && buf[i + 2] == '\n') {
			if (!i || buf[i - 1] != '\r')
				return -1;
			*end = i + 3;
			return 1;
		}
	}
	return 0;
}

/* METHOD SP request-target SP HTTP/1.x, without its line end.  0, or -1
 * with *status set. */
static int request_line(const char *l, size_t ll, size_t target_max, unsigned flags, struct sbx_http_head *h,
			int *status)
{
	size_t m = 0;
	while (m < ll && l[m] >= 'A' && l[m] <= 'Z')
		m++;
	if (!m || m >= sizeof h->method || m >= ll || l[m] != ' ')
		return -1;
	memcpy(h->method, l, m);
	const char *t = l + m + 1, *le = l + ll;
	const char *sp = memchr(t, ' ', (size_t)(le - t));
	if (!sp || sp == t)
		return -1;
	size_t tl = (size_t)(sp - t);
	if (target_max && tl >= target_max) {
		*status = 414;
		return -1;
	}
	if ((flags & SBX_HTTP_ORIGIN_FORM) && *t != '/')
		return -1;
	for (size_t i = 0; i < tl; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f || t[i] == '#')
			return -1;
	h->target = t;
	h->target_len = tl;
	const char *v = sp + 1;
	if (le - v != 8 || memcmp(v, "HTTP/1.", 7) || v[7] < '0' || v[7] > '9') {
		if (le - v == 8 && !memcmp(v, "HTTP/", 5))
			*status = 505;
		return -1;
	}
	h->minor = (unsigned)(v[7] - '0');
	return 0;
}

/* One "Name: value" line; the fields that frame the request or name its
 * host are taken once each. */
static int field(const char *l, size_t ll, struct sbx_http_head *h)
{
	size_t k = 0;
	while (k < ll && is_tchar((unsigned char)l[k]))
		k++;
	/* A line that starts with a space or tab (obsolete folding), a name
	 * that is not a token or has a space before its colon: refused. */
	if (!k || k >= ll || l[k] != ':')
		return -1;
	const char *v = l + k + 1, *ve = l + ll;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (k == 4 && !strncasecmp(l, "Host", 4)) {
		if (h->host)
			return -1; /* two Host fields: which one a server takes is its choice */
		h->host = v;
		h->host_len = (size_t)(ve - v);
	} else if (k == 14 && !strncasecmp(l, "Content-Length", 14)) {
		if (h->length >= 0 || v == ve || ve - v > 15)
			return -1; /* two lengths: a smuggling attempt or a broken client */
		h->length = 0;
		for (const char *d = v; d < ve; d++) {
			if (*d < '0' || *d > '9')
				return -1;
			h->length = h->length * 10 + (*d - '0');
		}
	} else if (k == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
		/* Once, and its last coding chunked: else where the body ends is
		 * a matter of opinion (RFC 9112 6.3). */
		if (h->chunked || ve - v < 7 || strncasecmp(ve - 7, "chunked", 7) ||
		    (ve - v > 7 && ve[-8] != ' ' && ve[-8] != ','))
			return -1;
		h->chunked = 1;
	} else if (k == 7 && !strncasecmp(l, "Upgrade", 7)) {
		h->upgrade = 1;
	} else if (k == 10 && !strncasecmp(l, "User-Agent", 10)) {
		h->pip = ve - v >= 4 && !strncmp(v, "pip/", 4);
	}
	return 0;
}

int sbx_http_head_parse(const char *buf, size_t n, size_t target_max, unsigned flags, struct sbx_http_head *h,
			int *status)
{
	memset(h, 0, sizeof *h);
	h->length = -1;
	*status = 400;
	size_t end = 0;
	int found = head_end(buf, n, &end);
	if (found < 0)
		return -1;
	if (!found) {
		if (n >= SBX_HTTP_HEAD_MAX) {
			*status = 431;
			return -1;
		}
		return 0; /* not all there yet */
	}
	size_t pos = 0, nh = 0;
	for (int line_no = 0; pos < end; line_no++) {
		const char *l = buf + pos;
		const char *nl = memchr(l, '\n', end - pos);
		size_t ll = (size_t)(nl - l);
		pos += ll + 1;
		if (ll && l[ll - 1] == '\r')
			ll--;
		for (size_t i = 0; i < ll; i++)
			if (((unsigned char)l[i] < 0x20 && l[i] != '\t') || l[i] == 0x7f)
				return -1; /* CR, NUL, DEL, other controls inside a line */
		if (line_no == 0) {
			if (request_line(l, ll, target_max, flags, h, status) < 0)
				return -1;
			continue;
		}
		if (!ll)
			break; /* the empty line: end of the head */
		if (++nh > SBX_HTTP_HEADERS_MAX) {
			*status = 431;
			return -1;
		}
		if (field(l, ll, h) < 0)
			return -1;
	}
	if (h->chunked && h->length >= 0)
		return -1; /* both framings: which one holds is a matter of opinion */
	h->len = end;
	*status = 0;
	return (int)end;
}

/* ---- the package cache's request ---------------------------------------- */

int sbx_http_parse_head(const char *buf, size_t n, struct sbx_http_req *r, int *status)
{
	struct sbx_http_head h;
	memset(r, 0, sizeof *r);
	int used = sbx_http_head_parse(buf, n, sizeof r->target, SBX_HTTP_ORIGIN_FORM, &h, status);
	if (used <= 0)
		return used;
	memcpy(r->method, h.method, sizeof r->method);
	memcpy(r->target, h.target, h.target_len); /* under sizeof r->target: target_max */
	r->minor = h.minor;
	r->has_body = h.length > 0 || h.chunked;
	r->pip = h.pip;
	return used;
}
