/* The package cache's HTTP side (pkgcache.h): the guest's request head,
 * parsed within fixed bounds, and every response sent back to it. */
#include "pkgc.h"
#include "util.h"

#include <errno.h>
#include <string.h>
#include <sys/sendfile.h>

/* ---- the request head ----------------------------------------------------- */

static int is_tchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* METHOD SP request-target SP HTTP/1.x, without its line end.  0, or -1
 * with *status set. */
static int parse_request_line(const char *l, size_t ll, struct sbx_http_req *r, int *status)
{
	size_t m = 0;
	while (m < ll && l[m] >= 'A' && l[m] <= 'Z')
		m++;
	if (!m || m >= sizeof r->method || m >= ll || l[m] != ' ')
		return -1;
	memcpy(r->method, l, m);
	const char *t = l + m + 1, *le = l + ll;
	const char *sp = memchr(t, ' ', (size_t)(le - t));
	if (!sp || sp == t)
		return -1;
	size_t tl = (size_t)(sp - t);
	if (tl >= sizeof r->target) {
		*status = 414;
		return -1;
	}
	if (*t != '/')
		return -1; /* origin-form only: no absolute URLs, no CONNECT */
	for (size_t i = 0; i < tl; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f || t[i] == '#')
			return -1;
	memcpy(r->target, t, tl);
	const char *v = sp + 1;
	if (le - v != 8 || memcmp(v, "HTTP/1.", 7) || v[7] < '0' || v[7] > '9') {
		if (le - v == 8 && !memcmp(v, "HTTP/", 5))
			*status = 505;
		return -1;
	}
	r->minor = (unsigned)(v[7] - '0');
	return 0;
}

/* One "Name: value" line; the few headers we act on.  *clen is the
 * Content-Length seen so far (-1: none). */
static int parse_header(const char *l, size_t ll, struct sbx_http_req *r, long long *clen)
{
	if (l[0] == ' ' || l[0] == '\t')
		return -1; /* obsolete line folding */
	size_t k = 0;
	while (k < ll && is_tchar((unsigned char)l[k]))
		k++;
	if (!k || k >= ll || l[k] != ':')
		return -1;
	const char *v = l + k + 1, *ve = l + ll;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	for (const char *q = v; q < ve; q++)
		if ((unsigned char)*q == 0x7f)
			return -1;
	if (k == 14 && !strncasecmp(l, "Content-Length", 14)) {
		long long x = 0;
		if (v == ve || ve - v > 18)
			return -1;
		for (const char *q = v; q < ve; q++) {
			if (*q < '0' || *q > '9')
				return -1;
			x = x * 10 + (*q - '0');
		}
		if (*clen >= 0 && *clen != x)
			return -1; /* two lengths: a smuggling attempt or a broken client */
		*clen = x;
		if (x)
			r->has_body = 1;
	} else if (k == 17 && !strncasecmp(l, "Transfer-Encoding", 17)) {
		r->has_body = 1;
	} else if (k == 10 && !strncasecmp(l, "User-Agent", 10)) {
		r->pip = ve - v >= 4 && !strncmp(v, "pip/", 4);
	}
	return 0;
}

int sbx_http_parse_head(const char *buf, size_t n, struct sbx_http_req *r, int *status)
{
	memset(r, 0, sizeof *r);
	*status = 400;
	size_t end = 0;
	for (size_t i = 0; i < n && !end; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < n && buf[i + 1] == '\n')
			end = i + 2;
		else if (i + 2 < n && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			end = i + 3;
	}
	if (!end || end > SBX_HTTP_HEAD_MAX) {
		if (end || n >= SBX_HTTP_HEAD_MAX) {
			*status = 431;
			return -1;
		}
		return 0; /* not all there yet */
	}
	size_t pos = 0, nh = 0;
	long long clen = -1;
	for (int line_no = 0; pos < end; line_no++) {
		const char *l = buf + pos;
		const char *nl = memchr(l, '\n', end - pos);
		size_t ll = (size_t)(nl - l);
		pos += ll + 1;
		if (ll && l[ll - 1] == '\r')
			ll--;
		for (size_t i = 0; i < ll; i++)
			if ((unsigned char)l[i] < 0x20 && l[i] != '\t')
				return -1; /* CR, NUL, other controls inside a line */
		if (line_no == 0) {
			if (parse_request_line(l, ll, r, status) < 0)
				return -1;
			continue;
		}
		if (!ll)
			break; /* the empty line: end of the head */
		if (++nh > SBX_HTTP_HEADERS_MAX) {
			*status = 431;
			return -1;
		}
		if (parse_header(l, ll, r, &clen) < 0)
			return -1;
	}
	*status = 0;
	return (int)end;
}
