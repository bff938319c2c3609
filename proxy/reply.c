/* The package cache's responses to the guest (pkgc.h): heads, files,
 * generated bodies and refusals. */
#include "pkgc.h"
#include "util.h"

#include <errno.h>
#include <string.h>
#include <sys/sendfile.h>

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
