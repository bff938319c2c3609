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

/* ---- responses -------------------------------------------------------------- */

int pc_send_head(struct conn *c, int status, const char *reason, const char *ctype, uint64_t len)
{
	pc_slot_give(c); /* upstream is done with: a slow reader holds no slot */
	char r[256], h[1024];
	size_t i = 0;
	/* A reason phrase is one line of printable text: what pip, npm, curl
	 * and wget print on an error. */
	for (; reason[i] && i < 200; i++)
		r[i] = (unsigned char)reason[i] >= 0x20 && (unsigned char)reason[i] < 0x7f ? reason[i] : '?';
	r[i] = 0;
	int w = snprintf(h, sizeof h,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %llu\r\n"
	                 "Cache-Control: no-store\r\nConnection: close\r\nServer: sbx-pkgcache\r\n\r\n",
	                 status, r, ctype, (unsigned long long)len);
	if (w < 0 || (size_t)w >= sizeof h)
		return -1;
	return sbx_write_all(c->fd, h, (size_t)w);
}

static int send_mem(struct conn *c, int status, const char *reason, const char *ctype, const void *body, size_t n)
{
	if (pc_send_head(c, status, reason, ctype, n) < 0)
		return -1;
	return c->head || !n ? 0 : sbx_write_all(c->fd, body, n);
}

int pc_send_file(struct conn *c, int fd, uint64_t size)
{
	if (pc_send_head(c, 200, "OK", "application/octet-stream", size) < 0)
		return -1;
	if (c->head)
		return 0;
	off_t off = 0;
	while ((uint64_t)off < size) {
		ssize_t w =
		    sendfile(c->fd, fd, &off, size - (uint64_t)off > (1u << 30) ? 1u << 30 : size - (uint64_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
	}
	return 0;
}

/* The standard reason phrase of the statuses pc_refuse() sends. */
static const char *std_reason(int status)
{
	switch (status) {
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	default: return status >= 500 ? "Server Error" : "Client Error";
	}
}

/* An error the guest should read.  pip logs an index page's HTTP error
 * only at debug level and then says just "from versions: none"; what it
 * does print is the Content-Type of a page that is not an index.  So to
 * pip, an index page that cannot be served is a 200 whose Content-Type
 * carries the reason; to everyone else it is an honest 4xx/5xx whose
 * reason phrase (curl, wget, pip downloads) says it, or on npm's routes
 * the body's "error" (which npm prints after the standard phrase). */
int pc_refuse(struct conn *c, struct outcome *o, int status, const char *msg, int audit)
{
	char text[600];
	snprintf(text, sizeof text, "%s", msg);
	for (char *q = text; *q; q++)
		if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f || *q == '"' || *q == '\\')
			*q = '?';
	o->status = status;
	o->reason = text;
	if (!o->verdict)
		o->verdict = status == 404 ? "not-found" : status >= 500 ? "error" : "refused";
	pc_record(c, o, audit);
	if (c->index && c->req.pip && status != 404) {
		char ct[700];
		snprintf(ct, sizeof ct, "text/plain; sbx-refused=\"%s\"", text);
		char body[700];
		int n = snprintf(body, sizeof body, "sbx package cache: %s\n", text);
		return send_mem(c, 200, "Refused", ct, body, (size_t)n);
	}
	if (c->npm) {
		/* npm prints "STATUS REASON - GET URL - ERROR": the reason
		 * phrase is the standard one, so the message is said once. */
		json_t *e = json_pack("{s:s}", "error", text);
		char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
		json_decref(e);
		int rc = send_mem(c, status, c->head ? text : std_reason(status), "application/json", s ? s : "{}",
		                  s ? strlen(s) : 2);
		free(s);
		return rc;
	}
	char body[700];
	int n = snprintf(body, sizeof body, "sbx package cache: %s\n", text);
	return send_mem(c, status, text, "text/plain; charset=utf-8", body, (size_t)n);
}

/* Send a generated body after counting it against the budget: what it
 * holds beyond the upstream bytes already charged for it. */
int pc_serve_body(struct conn *c, struct outcome *o, const char *ctype, const char *body, size_t n)
{
	uint64_t used = 0;
	int b = pc_budget_take(c, c->head || n <= c->charged_up ? 0 : n - c->charged_up, &used);
	char msg[300];
	if (b < 0)
		return pc_refuse(c, o, 500, "cannot account the download against packages.max_download", 0);
	if (b > 0) {
		snprintf(msg, sizeof msg,
		         "packages.max_download of policy %s exceeded: %zu more bytes asked, %llu used of %llu",
		         pc_policy_name(c), n, (unsigned long long)used, (unsigned long long)c->cfg->pkg->max_download);
		return pc_refuse(c, o, 403, msg, 0);
	}
	o->status = 200;
	o->verdict = "ok";
	o->size = n;
	pc_record(c, o, 0);
	return send_mem(c, 200, "OK", ctype, body, n);
}
