/* The pull-through package cache (pkgcache.h): a small HTTP/1.1 server
 * for the guest, libcurl towards the policy's registries, libxml2 for
 * PEP 503 index pages, jansson for npm metadata, libmd for hashes.
 *
 * One request per connection.  Nothing the guest sends becomes part of an
 * upstream URL except a validated, normalized package name appended to a
 * registry URL from the policy; file URLs come from that registry's own
 * index.  Every byte sent to the guest is counted against
 * packages.max_download before it is sent. */
#include "pkgcache.h"
#include "audit.h"
#include "egress.h"
#include "policy.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <sha1.h>
#include <sha2.h>

#define INDEX_MAX            (64u << 20) /* an upstream index page or metadata document */
#define LINKS_MAX            200000u     /* links kept from one index page */
#define FILE_NAME_MAX        255
#define URL_MAX              4096
#define IO_TIMEOUT_S         60 /* the guest's socket, each read or write */
#define UP_CONNECT_TIMEOUT_S 15
#define UP_LOW_SPEED_S       60 /* upstream below 1 KiB/s this long: give up */
#define BUDGET               "pkgbudget.json"
#define BUDGET_LOCK          "pkgbudget.lock"
#define LOG                  "packages.log"

/* ---- process set-up ----------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_rc;

static void init_once(void)
{
	once_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
	xmlInitParser();
}

int sbx_pkgcache_init(struct sbx_err *err)
{
	pthread_once(&once, init_once);
	if (once_rc < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot initialise libcurl");
	return 0;
}

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

/* ---- names ------------------------------------------------------------------ */

int sbx_pep503_normalize(const char *name, char *out, size_t n)
{
	size_t len = strlen(name), o = 0;
	if (!len || len > 200 || n < 2)
		return -1;
	/* PEP 508: letters and digits at both ends, ".-_" between. */
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && !(i > 0 && i < len - 1 && strchr("._-", c)))
			return -1;
		if (!alnum) {
			if (o && out[o - 1] == '-')
				continue;
			c = '-';
		} else if (c >= 'A' && c <= 'Z') {
			c = (char)(c - 'A' + 'a');
		}
		if (o + 1 >= n)
			return -1;
		out[o++] = c;
	}
	out[o] = 0;
	return 0;
}

/* npm package names: "name" or "@scope/name", URL-safe characters only. */
static int npm_name_ok(const char *s)
{
	size_t len = strlen(s);
	if (!len || len > 214)
		return 0;
	const char *name = s;
	if (*s == '@') {
		const char *sl = strchr(s, '/');
		if (!sl || sl == s + 1 || strchr(sl + 1, '/'))
			return 0;
		for (const char *q = s + 1; q < sl; q++)
			if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
			      strchr("-._~", *q)))
				return 0;
		if (s[1] == '.' || s[1] == '_')
			return 0;
		name = sl + 1;
	}
	if (!*name || *name == '.' || *name == '_')
		return 0;
	for (const char *q = name; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
		      strchr("-._~", *q)))
			return 0;
	return 1;
}

/* Versions (npm semver, PEP 440) and file names end up in URLs and paths
 * we write: a plain character set, no leading dot. */
static int plain_ok(const char *s, size_t max, const char *extra)
{
	size_t len = strlen(s);
	if (!len || len > max || *s == '.')
		return 0;
	for (const char *q = s; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
		      strchr(extra, *q)))
			return 0;
	return 1;
}

static int version_ok(const char *s)
{
	return plain_ok(s, 128, ".+-_~!");
}
static int filename_ok(const char *s)
{
	return plain_ok(s, FILE_NAME_MAX, ".+-_~!");
}

static int unhex(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* Percent-decode one path segment into out; -1 on a bad escape, a NUL or
 * a control character, or when it does not fit. */
static int pct_decode(const char *s, size_t len, char *out, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -1;
			int h = unhex(s[i + 1]), l = unhex(s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = h * 16 + l;
			i += 2;
		}
		if (c < 0x20 || c == 0x7f || o + 1 >= n)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = 0;
	return 0;
}

static void to_hex(const uint8_t *d, size_t n, char *out)
{
	static const char x[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = x[d[i] >> 4];
		out[2 * i + 1] = x[d[i] & 15];
	}
	out[2 * n] = 0;
}

static int hex_ok(const char *s, size_t len)
{
	if (strlen(s) != len)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* Standard base64 (npm's integrity), into at most n bytes; the length, or
 * -1. */
static int b64_decode(const char *s, uint8_t *out, size_t n)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t acc = 0;
	int bits = 0;
	size_t o = 0;
	for (; *s && *s != '='; s++) {
		const char *p = memchr(a, *s, 64);
		if (!p || !*s)
			return -1;
		acc = (acc << 6) | (uint32_t)(p - a);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o >= n)
				return -1;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	while (*s == '=')
		s++;
	return *s ? -1 : (int)o;
}

/* ---- the deny list ------------------------------------------------------ */

static int host_owns(const struct sockaddr *sa)
{
	struct ifaddrs *ifs = NULL;
	int own = 0;
	if (getifaddrs(&ifs) < 0)
		return 1; /* cannot tell: fail closed */
	for (struct ifaddrs *i = ifs; i && !own; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family)
			continue;
		if (sa->sa_family == AF_INET)
			own = ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
			      ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		else
			own = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
			              &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
	}
	freeifaddrs(ifs);
	return own;
}

const char *sbx_pkgcache_addr_denied(const struct sockaddr *sa, socklen_t len)
{
	if ((sa->sa_family == AF_INET && len < (socklen_t)sizeof(struct sockaddr_in)) ||
	    (sa->sa_family == AF_INET6 && len < (socklen_t)sizeof(struct sockaddr_in6)))
		return "not an IP address";
	const char *why = sbx_egress_denied(sa); /* the one fixed list */
	if (why)
		return why;
	return host_owns(sa) ? "the host's own address" : NULL;
}

/* ---- one connection's context -------------------------------------------- */

struct conn {
	const struct sbx_pkgcache_cfg *cfg;
	int fd;
	struct sbx_http_req req;
	int head;  /* HEAD: no body */
	int npm;   /* the route is npm's: errors as JSON */
	int index; /* a PyPI index page: errors pip will show (see refuse) */
	/* for the log */
	char registry[16]; /* "pypi/0" */
	const char *reg_url;
	char kind[12]; /* index, file, metadata, tarball */
	char package[220], version[130], file[FILE_NAME_MAX + 1];
	char upstream[URL_MAX];
};

static void diag(const struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diag(const struct conn *c, const char *fmt, ...)
{
	if (c->cfg->log_fd < 0)
		return;
	char line[1024], ts[40];
	sbx_fmt_time(sbx_now_ns(), ts, sizeof ts);
	int w = snprintf(line, sizeof line, "%s pkgcache %s: ", ts, c->cfg->session);
	va_list ap;
	va_start(ap, fmt);
	if (w > 0 && (size_t)w < sizeof line)
		w += vsnprintf(line + w, sizeof line - (size_t)w, fmt, ap);
	va_end(ap);
	if (w < 0)
		return;
	if ((size_t)w >= sizeof line - 1)
		w = (int)sizeof line - 2;
	line[w++] = '\n';
	sbx_write_all(c->cfg->log_fd, line, (size_t)w);
}

static const char *policy_name(const struct conn *c)
{
	return c->cfg->pkg && c->cfg->pkg->policy[0] ? c->cfg->pkg->policy : "defaults";
}

/* ---- the session's records ------------------------------------------------ */

struct outcome {
	int status;
	const char *verdict; /* ok, refused, not-found, error */
	const char *reason;
	const char *cache; /* hit, miss, NULL */
	uint64_t size;
	char sha256[65];
	char expected[140]; /* the registry's hash, "sha256:..." */
};

static int session_dir(const struct conn *c)
{
	char p[128];
	snprintf(p, sizeof p, "sessions/%s", c->cfg->session);
	return openat(c->cfg->st->lib_fd, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

static json_t *record_json(const struct conn *c, const struct outcome *o)
{
	json_t *r = json_pack("{s:s, s:s, s:s, s:s}", "session", c->cfg->session, "kind", c->kind, "registry",
	                      c->registry, "verdict", o->verdict);
	if (!r)
		return NULL;
	if (c->cfg->tenant && c->cfg->tenant[0])
		json_object_set_new(r, "tenant", json_string(c->cfg->tenant));
	if (c->reg_url)
		json_object_set_new(r, "registry_url", json_string(c->reg_url));
	if (c->package[0])
		json_object_set_new(r, "package", json_string(c->package));
	if (c->version[0])
		json_object_set_new(r, "version", json_string(c->version));
	if (c->file[0])
		json_object_set_new(r, "file", json_string(c->file));
	json_object_set_new(r, "size", json_integer((json_int_t)o->size));
	if (o->sha256[0])
		json_object_set_new(r, "sha256", json_string(o->sha256));
	if (o->expected[0])
		json_object_set_new(r, "registry_hash", json_string(o->expected));
	if (o->cache)
		json_object_set_new(r, "cache", json_string(o->cache));
	json_object_set_new(r, "status", json_integer(o->status));
	if (o->reason)
		json_object_set_new(r, "reason", json_string(o->reason));
	if (c->upstream[0])
		json_object_set_new(r, "url", json_string(c->upstream));
	return r;
}

/* packages.log (every request's outcome) and, for package files, the
 * audit trail.  The audit append fails closed: -1 means the file must not
 * be served. */
static int record(const struct conn *c, const struct outcome *o, int audit)
{
	json_t *r = record_json(c, o);
	if (!r)
		return -1;
	char ts[40];
	sbx_fmt_time(sbx_now_ns(), ts, sizeof ts);
	json_t *line = json_deep_copy(r);
	if (line) {
		json_object_set_new(line, "time", json_string(ts));
		char *s = json_dumps(line, JSON_COMPACT);
		_cleanup_close_ int dfd = session_dir(c);
		_cleanup_close_ int lfd =
		    dfd < 0 ? -1 : openat(dfd, LOG, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s && lfd >= 0) {
			size_t n = strlen(s);
			s[n] = '\n'; /* one write per line: lines never interleave */
			if (sbx_write_all(lfd, s, n + 1) < 0)
				diag(c, "cannot append to %s: %s", LOG, strerror(errno));
			s[n] = 0;
		} else {
			diag(c, "cannot open %s: %s", LOG, strerror(errno));
		}
		free(s);
		json_decref(line);
	}
	int rc = 0;
	if (audit) {
		struct sbx_err e = {0};
		if (sbx_audit_append(c->cfg->st, "package.fetch", r, &e) < 0) {
			diag(c, "cannot append package.fetch to the audit trail: %s", e.msg);
			rc = -1;
		}
	}
	json_decref(r);
	return rc;
}

/* The session's download budget: reserve n bytes of max_download, so
 * concurrent requests cannot overdraw it.  0: granted; 1: refused
 * (*used set); -1: the counter cannot be read or written. */
static int budget_take(const struct conn *c, uint64_t n, uint64_t *used)
{
	_cleanup_close_ int dfd = session_dir(c);
	if (dfd < 0)
		return -1;
	_cleanup_close_ int lk = openat(dfd, BUDGET_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return -1;
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, BUDGET, 4096, NULL);
	uint64_t u = 0;
	if (txt) {
		json_t *o = json_loads(txt, 0, NULL);
		json_int_t v = json_integer_value(json_object_get(o, "bytes"));
		json_decref(o);
		if (!o || v < 0)
			return -1;
		u = (uint64_t)v;
	} else if (errno != ENOENT) {
		return -1;
	}
	*used = u;
	uint64_t max = c->cfg->pkg->max_download;
	if (n > max || u > max - n)
		return 1;
	if (!n)
		return 0; /* only asked what is used */
	char out[96];
	int w = snprintf(out, sizeof out, "{\"schema\":1,\"bytes\":%llu}\n", (unsigned long long)(u + n));
	return sbx_atomic_write_at(dfd, BUDGET, out, (size_t)w, 0600, NULL) < 0 ? -1 : 0;
}

/* ---- responses -------------------------------------------------------------- */

static int send_head(struct conn *c, int status, const char *reason, const char *ctype, uint64_t len)
{
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
	if (send_head(c, status, reason, ctype, n) < 0)
		return -1;
	return c->head || !n ? 0 : sbx_write_all(c->fd, body, n);
}

static int send_file(struct conn *c, int fd, uint64_t size)
{
	if (send_head(c, 200, "OK", "application/octet-stream", size) < 0)
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

/* An error the guest should read.  pip logs an index page's HTTP error
 * only at debug level and then says just "from versions: none"; what it
 * does print is the Content-Type of a page that is not an index.  So to
 * pip, an index page that cannot be served is a 200 whose Content-Type
 * carries the reason; to everyone else it is an honest 4xx/5xx whose
 * reason phrase (curl, wget, pip downloads) and body (npm's "error") say
 * it. */
static int refuse(struct conn *c, struct outcome *o, int status, const char *msg, int audit)
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
	record(c, o, audit);
	if (c->index && c->req.pip && status != 404) {
		char ct[700];
		snprintf(ct, sizeof ct, "text/plain; sbx-refused=\"%s\"", text);
		char body[700];
		int n = snprintf(body, sizeof body, "sbx package cache: %s\n", text);
		return send_mem(c, 200, "Refused", ct, body, (size_t)n);
	}
	if (c->npm) {
		json_t *e = json_pack("{s:s}", "error", text);
		char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
		json_decref(e);
		int rc = send_mem(c, status, text, "application/json", s ? s : "{}", s ? strlen(s) : 2);
		free(s);
		return rc;
	}
	char body[700];
	int n = snprintf(body, sizeof body, "sbx package cache: %s\n", text);
	return send_mem(c, status, text, "text/plain; charset=utf-8", body, (size_t)n);
}

/* Send a generated body after counting it against the budget. */
static int serve_body(struct conn *c, struct outcome *o, const char *ctype, const char *body, size_t n)
{
	uint64_t used = 0;
	int b = budget_take(c, c->head ? 0 : n, &used);
	char msg[300];
	if (b < 0)
		return refuse(c, o, 500, "cannot account the download against packages.max_download", 0);
	if (b > 0) {
		snprintf(msg, sizeof msg,
		         "packages.max_download of policy %s exceeded: %zu more bytes asked, %llu used of %llu",
		         policy_name(c), n, (unsigned long long)used, (unsigned long long)c->cfg->pkg->max_download);
		return refuse(c, o, 403, msg, 0);
	}
	o->status = 200;
	o->verdict = "ok";
	o->size = n;
	record(c, o, 0);
	return send_mem(c, 200, "OK", ctype, body, n);
}

/* ---- upstream ------------------------------------------------------------ */

struct fetch {
	/* in */
	const char *url;
	const char *accept;
	int fd;       /* >= 0: write the body here (hashing it); else memory */
	uint64_t max; /* body bytes */
	/* out */
	char *mem;
	size_t len, cap;
	uint64_t bytes;
	long status;
	int over;         /* the body was larger than max */
	char denied[200]; /* an address the deny list refused */
	char effective[URL_MAX];
	char error[CURL_ERROR_SIZE + 64];
	SHA2_CTX s256, s512;
	SHA1_CTX s1;
	int werr;
};

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct fetch *f = ud;
	size_t n = sz * nm;
	if (f->bytes + n > f->max) {
		f->over = 1;
		return 0;
	}
	f->bytes += n;
	if (f->fd >= 0) {
		if (sbx_write_all(f->fd, p, n) < 0) {
			f->werr = errno;
			return 0;
		}
		SHA256Update(&f->s256, (const uint8_t *)p, n);
		SHA512Update(&f->s512, (const uint8_t *)p, n);
		SHA1Update(&f->s1, (const uint8_t *)p, n);
		return n;
	}
	if (f->len + n + 1 > f->cap) {
		size_t nc = f->cap ? f->cap : 65536;
		while (nc < f->len + n + 1)
			nc *= 2;
		char *m = realloc(f->mem, nc);
		if (!m)
			return 0;
		f->mem = m;
		f->cap = nc;
	}
	memcpy(f->mem + f->len, p, n);
	f->len += n;
	f->mem[f->len] = 0;
	return n;
}

/* Every connection libcurl opens, redirects included, is checked here
 * against the deny list, on the address it is about to connect to (no
 * DNS rebinding between a check and the connect). */
static curl_socket_t on_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct fetch *f = ud;
	const char *why =
	    purpose != CURLSOCKTYPE_IPCXN ? "not a TCP connection" : sbx_pkgcache_addr_denied(&a->addr, a->addrlen);
	if (why) {
		char ip[INET6_ADDRSTRLEN] = "?";
		if (a->family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&a->addr)->sin_addr, ip, sizeof ip);
		else if (a->family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a->addr)->sin6_addr, ip, sizeof ip);
		snprintf(f->denied, sizeof f->denied, "%s (%s)", ip, why);
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* 0: a 2xx answer was read completely; -1: f->error says why. */
static int fetch(struct fetch *f)
{
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(f->error, sizeof f->error, "cannot start libcurl");
		return -1;
	}
	char cerr[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = NULL;
	char accept[256];
	snprintf(accept, sizeof accept, "Accept: %s", f->accept ? f->accept : "*/*");
	hdr = curl_slist_append(hdr, accept);
	SHA256Init(&f->s256);
	SHA512Init(&f->s512);
	SHA1Init(&f->s1);
	curl_easy_setopt(h, CURLOPT_URL, f->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never a proxy from the environment */
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)UP_CONNECT_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)UP_LOW_SPEED_S);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "sbx-pkgcache/1");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_socket);
	curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, f);
	curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max);
	if (f->fd < 0)
		curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""); /* pages may come compressed; files as they are */
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &f->status);
	char *eff = NULL;
	curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eff);
	snprintf(f->effective, sizeof f->effective, "%s", eff ? eff : f->url);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
	if (rc == CURLE_FILESIZE_EXCEEDED)
		f->over = 1;
	if (f->over) {
		snprintf(f->error, sizeof f->error, "larger than %llu bytes", (unsigned long long)f->max);
		return -1;
	}
	if (f->denied[0]) {
		snprintf(f->error, sizeof f->error, "address %s is on the deny list", f->denied);
		return -1;
	}
	if (rc != CURLE_OK) {
		snprintf(f->error, sizeof f->error, "%s",
		         f->werr   ? strerror(f->werr)
		         : cerr[0] ? cerr
		                   : curl_easy_strerror(rc));
		return -1;
	}
	if (f->status < 200 || f->status > 299) {
		snprintf(f->error, sizeof f->error, "upstream answered HTTP %ld", f->status);
		return -1;
	}
	return 0;
}

/* base + "/" + rest, with base's trailing slashes dropped. */
static void join_url(char *out, size_t n, const char *base, const char *rest)
{
	size_t bl = strlen(base);
	while (bl && base[bl - 1] == '/')
		bl--;
	snprintf(out, n, "%.*s/%s", (int)bl, base, rest);
}

/* href resolved against the page's URL; http(s) only. */
static int resolve_url(const char *base, const char *href, char *out, size_t n)
{
	CURLU *u = curl_url();
	char *s = NULL;
	int rc = -1;
	if (u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, href, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && strlen(s) < n &&
	    (!strncmp(s, "https://", 8) || !strncmp(s, "http://", 7))) {
		snprintf(out, n, "%s", s);
		rc = 0;
	}
	curl_free(s);
	curl_url_cleanup(u);
	return rc;
}

/* ---- the registry ------------------------------------------------------- */

/* The idx-th registry of that type in the policy, or NULL. */
static const struct sbx_limit_registry *registry(const struct conn *c, int type, unsigned idx)
{
	const struct sbx_limit_packages *k = c->cfg->pkg;
	for (unsigned i = 0, seen = 0; i < k->nreg; i++)
		if (k->reg[i].type == type && seen++ == idx)
			return &k->reg[i];
	return NULL;
}

/* ---- PyPI index pages ------------------------------------------------------ */

struct link {
	char file[FILE_NAME_MAX + 1];
	char *url;
	char sha256[65]; /* "" when the index names none */
	char *requires_python;
	char *yanked; /* NULL: not yanked */
};

struct links {
	struct link *v;
	size_t n, cap;
};

static void links_free(struct links *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].url);
		free(l->v[i].requires_python);
		free(l->v[i].yanked);
	}
	free(l->v);
	memset(l, 0, sizeof *l);
}

static int add_link(struct links *l, const char *base, const char *href, const char *rp, const char *yanked,
                    int has_yanked)
{
	if (l->n >= LINKS_MAX)
		return 0;
	char url[URL_MAX];
	if (resolve_url(base, href, url, sizeof url) < 0)
		return 0; /* not a file we could fetch: leave it out */
	struct link k = {0};
	/* The file name is the URL path's last component. */
	const char *path_end = url + strcspn(url, "?");
	const char *slash = path_end;
	while (slash > url && slash[-1] != '/')
		slash--;
	if (pct_decode(slash, (size_t)(path_end - slash), k.file, sizeof k.file) < 0 || !filename_ok(k.file))
		return 0;
	const char *frag = strchr(href, '#');
	if (frag && !strncmp(frag, "#sha256=", 8) && hex_ok(frag + 8, 64))
		snprintf(k.sha256, sizeof k.sha256, "%s", frag + 8);
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i].file, k.file))
			return 0; /* the first link for a name wins */
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 64;
		struct link *v = realloc(l->v, nc * sizeof *v);
		if (!v)
			return -1;
		l->v = v;
		l->cap = nc;
	}
	k.url = strdup(url);
	k.requires_python = rp ? strdup(rp) : NULL;
	k.yanked = has_yanked ? strdup(yanked ? yanked : "") : NULL;
	if (!k.url || (rp && !k.requires_python) || (has_yanked && !k.yanked)) {
		free(k.url);
		free(k.requires_python);
		free(k.yanked);
		return -1;
	}
	l->v[l->n++] = k;
	return 0;
}

/* Every <a href> of a PEP 503 page, parsed by libxml2's HTML parser
 * (entities decoded, malformed markup recovered), walked without
 * recursion. */
static int parse_index(const char *html, size_t n, const char *base, struct links *out)
{
	if (n > INT_MAX)
		return -1;
	htmlDocPtr doc = htmlReadMemory(html, (int)n, base, NULL,
	                                HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
	                                    HTML_PARSE_RECOVER | HTML_PARSE_NOBLANKS);
	if (!doc)
		return -1;
	int rc = 0;
	xmlNodePtr cur = xmlDocGetRootElement(doc);
	while (cur && rc == 0) {
		if (cur->type == XML_ELEMENT_NODE && !xmlStrcasecmp(cur->name, BAD_CAST "a")) {
			xmlChar *href = xmlGetProp(cur, BAD_CAST "href");
			xmlChar *rp = xmlGetProp(cur, BAD_CAST "data-requires-python");
			xmlAttrPtr ya = xmlHasProp(cur, BAD_CAST "data-yanked");
			xmlChar *y = ya ? xmlGetProp(cur, BAD_CAST "data-yanked") : NULL;
			if (href)
				rc = add_link(out, base, (const char *)href, (const char *)rp, (const char *)y,
				              ya != NULL);
			xmlFree(href);
			xmlFree(rp);
			xmlFree(y);
		}
		if (cur->children && cur->type == XML_ELEMENT_NODE) {
			cur = cur->children;
			continue;
		}
		while (cur && !cur->next)
			cur = cur->parent && cur->parent->type == XML_ELEMENT_NODE ? cur->parent : NULL;
		if (cur)
			cur = cur->next;
	}
	xmlFreeDoc(doc);
	return rc;
}

int sbx_pkgcache_index_links(const char *html, size_t n, const char *base, size_t *count)
{
	struct links l = {0};
	int rc = parse_index(html, n, base, &l);
	*count = l.n;
	links_free(&l);
	return rc;
}

struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t nc = b->cap ? b->cap : 4096;
		while (nc < b->n + n + 1)
			nc *= 2;
		char *p = realloc(b->p, nc);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = nc;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_esc(struct sbuf *b, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': sb_str(b, "&amp;"); break;
		case '<': sb_str(b, "&lt;"); break;
		case '>': sb_str(b, "&gt;"); break;
		case '"': sb_str(b, "&quot;"); break;
		case '\'': sb_str(b, "&#39;"); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				sb_add(b, s, 1);
		}
	}
}

/* Fetch and parse the project's index from the registry.  0, or -1 with
 * the response already sent (a refusal or an error). */
static int load_index(struct conn *c, struct outcome *o, const char *reg_url, const char *project, struct links *l)
{
	char path[260];
	snprintf(path, sizeof path, "%s/", project);
	join_url(c->upstream, sizeof c->upstream, reg_url, path);
	struct fetch f = {.url = c->upstream, .accept = "text/html", .fd = -1, .max = INDEX_MAX};
	char msg[URL_MAX + 400];
	if (fetch(&f) < 0) {
		free(f.mem);
		if (f.status == 404 || f.status == 410) {
			snprintf(msg, sizeof msg, "no project %s at registry %s", project, c->registry);
			return refuse(c, o, 404, msg, 0), -1;
		}
		snprintf(msg, sizeof msg, "cannot fetch the index of %s from registry %s: %s", project, c->registry,
		         f.error);
		diag(c, "%s (%s)", msg, c->upstream);
		return refuse(c, o, 502, msg, 0), -1;
	}
	int rc = parse_index(f.mem ? f.mem : "", f.len, f.effective, l);
	free(f.mem);
	if (rc < 0) {
		snprintf(msg, sizeof msg, "the index of %s from registry %s does not parse", project, c->registry);
		return refuse(c, o, 502, msg, 0), -1;
	}
	return 0;
}

static int pypi_index(struct conn *c, const char *reg_url, const char *project)
{
	struct outcome o = {0};
	struct links l = {0};
	if (load_index(c, &o, reg_url, project, &l) < 0)
		return 0;
	struct sbuf b = {0};
	sb_str(&b, "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\">"
	           "<title>Links for ");
	sb_esc(&b, project);
	sb_str(&b, "</title></head><body><h1>Links for ");
	sb_esc(&b, project);
	sb_str(&b, "</h1>\n");
	for (size_t i = 0; i < l.n; i++) {
		const struct link *k = &l.v[i];
		if (c->cfg->pkg->require_hashes && !k->sha256[0])
			continue; /* it would be refused: do not offer it */
		sb_str(&b, "<a href=\"/");
		sb_esc(&b, c->registry);
		sb_str(&b, "/files/");
		sb_esc(&b, project);
		sb_str(&b, "/");
		sb_esc(&b, k->file);
		if (k->sha256[0]) {
			sb_str(&b, "#sha256=");
			sb_str(&b, k->sha256);
		}
		sb_str(&b, "\"");
		if (k->requires_python) {
			sb_str(&b, " data-requires-python=\"");
			sb_esc(&b, k->requires_python);
			sb_str(&b, "\"");
		}
		if (k->yanked) {
			sb_str(&b, " data-yanked=\"");
			sb_esc(&b, k->yanked);
			sb_str(&b, "\"");
		}
		sb_str(&b, ">");
		sb_esc(&b, k->file);
		sb_str(&b, "</a><br>\n");
	}
	sb_str(&b, "</body></html>\n");
	links_free(&l);
	if (b.oom) {
		free(b.p);
		return refuse(c, &o, 500, "out of memory", 0);
	}
	int rc = serve_body(c, &o, "text/html; charset=utf-8", b.p, b.n);
	free(b.p);
	return rc;
}

/* The version in a file name: a wheel's second field, an sdist's part
 * after the project name. */
static void version_from_file(const char *file, char *out, size_t n)
{
	static const char *const ext[] = {".whl", ".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tgz", ".egg"};
	char f[FILE_NAME_MAX + 1];
	snprintf(f, sizeof f, "%s", file);
	out[0] = 0;
	size_t fl = strlen(f);
	for (size_t i = 0; i < SBX_ARRAY_LEN(ext); i++) {
		size_t el = strlen(ext[i]);
		if (fl > el && !strcasecmp(f + fl - el, ext[i])) {
			f[fl - el] = 0;
			if (i == 0) {
				char *d1 = strchr(f, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
				if (d1 && d2) {
					*d2 = 0;
					snprintf(out, n, "%s", d1 + 1);
				}
				return;
			}
			char *d = strrchr(f, '-');
			if (d)
				snprintf(out, n, "%s", d + 1);
			return;
		}
	}
}

/* ---- files -------------------------------------------------------------------- */

/* The cache directory this session may share: its tenant's, or the one
 * for sessions without a tenant. */
static int cache_dir(const struct conn *c)
{
	char p[128];
	const char *t = c->cfg->tenant;
	if (t && *t && sbx_id_check(t, "tenant", NULL) < 0)
		return -1;
	mkdirat(c->cfg->st->lib_fd, "pkgcache", 0700);
	_cleanup_close_ int base =
	    openat(c->cfg->st->lib_fd, "pkgcache", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (base < 0)
		return -1;
	if (t && *t)
		snprintf(p, sizeof p, "tenant-%s", t);
	else
		snprintf(p, sizeof p, "shared");
	mkdirat(base, p, 0700);
	return openat(base, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

struct want {
	char sha256[65]; /* hex, or "" */
	char sha512[129];
	char sha1[41];
	char key[140]; /* the cache entry's name: "sha256-HEX" / "sha512-HEX"; "" not cacheable */
};

static void hash_fd_done(struct fetch *f, char s256[65], char s512[129], char s1[41])
{
	uint8_t d[64];
	SHA256Final(d, &f->s256);
	to_hex(d, 32, s256);
	SHA512Final(d, &f->s512);
	to_hex(d, 64, s512);
	SHA1Final(d, &f->s1);
	to_hex(d, 20, s1);
}

/* Hash an open file from the start. */
static int hash_file(int fd, struct fetch *f)
{
	SHA256Init(&f->s256);
	SHA512Init(&f->s512);
	SHA1Init(&f->s1);
	char buf[65536];
	off_t off = 0;
	for (;;) {
		ssize_t r = pread(fd, buf, sizeof buf, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (!r)
			return 0;
		SHA256Update(&f->s256, (uint8_t *)buf, (size_t)r);
		SHA512Update(&f->s512, (uint8_t *)buf, (size_t)r);
		SHA1Update(&f->s1, (uint8_t *)buf, (size_t)r);
		off += r;
	}
}

/* Which of the registry's hashes the content fails; NULL when none. */
static const char *mismatch(const struct want *w, const char *s256, const char *s512, const char *s1)
{
	if (w->sha256[0] && strcmp(w->sha256, s256))
		return "sha256";
	if (w->sha512[0] && strcmp(w->sha512, s512))
		return "sha512";
	if (w->sha1[0] && strcmp(w->sha1, s1))
		return "sha1";
	return NULL;
}

static int refuse_budget(struct conn *c, struct outcome *o, uint64_t need, int more, uint64_t used)
{
	char msg[600];
	uint64_t max = c->cfg->pkg->max_download, left = used < max ? max - used : 0;
	o->verdict = "refused";
	if (more)
		snprintf(msg, sizeof msg,
		         "packages.max_download of policy %s exceeded: %s is larger than the %llu bytes left of %llu",
		         policy_name(c), c->file, (unsigned long long)left, (unsigned long long)max);
	else
		snprintf(msg, sizeof msg,
		         "packages.max_download of policy %s exceeded: %s (%llu bytes) does not fit in the %llu bytes "
		         "left of %llu",
		         policy_name(c), c->file, (unsigned long long)need, (unsigned long long)left,
		         (unsigned long long)max);
	return refuse(c, o, 403, msg, 1);
}

/* The last step of every file served: count it, record it (fail closed),
 * send it. */
static int deliver(struct conn *c, struct outcome *o, int fd)
{
	uint64_t used = 0;
	int b = budget_take(c, c->head ? 0 : o->size, &used);
	if (b < 0)
		return refuse(c, o, 500, "cannot account the download against packages.max_download", 1);
	if (b > 0)
		return refuse_budget(c, o, o->size, 0, used);
	o->status = 200;
	o->verdict = "ok";
	if (record(c, o, 1) < 0)
		return refuse(c, o, 500, "cannot record the download in the audit trail", 0);
	return send_file(c, fd, o->size);
}

/* The cache entry for w, opened and hashed again now: an fd when it still
 * verifies (o filled), else -1 (an entry that does not verify is
 * removed). */
static int cached(struct conn *c, struct outcome *o, int dir, const struct want *w)
{
	if (!w->key[0])
		return -1;
	_cleanup_close_ int fd = openat(dir, w->key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	struct fetch f = {0};
	char s256[65], s512[129], s1[41];
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || hash_file(fd, &f) < 0)
		return -1;
	hash_fd_done(&f, s256, s512, s1);
	if (mismatch(w, s256, s512, s1)) {
		diag(c, "cache entry %s does not verify: removed", w->key);
		unlinkat(dir, w->key, 0);
		return -1;
	}
	o->size = (uint64_t)st.st_size;
	snprintf(o->sha256, sizeof o->sha256, "%s", s256);
	return sbx_steal_fd(&fd);
}

/* Download url into an unnamed file of the cache directory, at most what
 * is left of the budget (a larger file is refused without downloading
 * all of it), and check every hash the registry published; a verified
 * file with a strong hash is then named in the cache.  The fd, or -1 with
 * the refusal already sent (*sent). */
static int download(struct conn *c, struct outcome *o, int dir, const char *url, const struct want *w, int *sent)
{
	char msg[URL_MAX + 512];
	*sent = 1;
	_cleanup_close_ int tfd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (tfd < 0) {
		diag(c, "cannot create a file in the cache: %s", strerror(errno));
		return refuse(c, o, 500, "cannot write to the package cache", 1), -1;
	}
	uint64_t used = 0;
	if (budget_take(c, 0, &used) < 0)
		return refuse(c, o, 500, "cannot account the download against packages.max_download", 1), -1;
	uint64_t left = used < c->cfg->pkg->max_download ? c->cfg->pkg->max_download - used : 0;
	if (!left)
		return refuse_budget(c, o, 0, 1, used), -1;
	struct fetch f = {.url = url, .fd = tfd, .max = left};
	if (fetch(&f) < 0) {
		o->size = f.bytes;
		if (f.over)
			return refuse_budget(c, o, left, 1, used), -1;
		if (f.status == 404 || f.status == 410)
			snprintf(msg, sizeof msg, "%s: registry %s lists it but it is not there (HTTP %ld)", c->file,
			         c->registry, f.status);
		else
			snprintf(msg, sizeof msg, "cannot fetch %s from registry %s: %s", c->file, c->registry,
			         f.error);
		diag(c, "%s (%s)", msg, url);
		return refuse(c, o, 502, msg, 1), -1;
	}
	char s256[65], s512[129], s1[41];
	hash_fd_done(&f, s256, s512, s1);
	o->size = f.bytes;
	snprintf(o->sha256, sizeof o->sha256, "%s", s256);
	const char *bad = mismatch(w, s256, s512, s1);
	if (bad) {
		int k = !strcmp(bad, "sha256") ? 0 : !strcmp(bad, "sha512") ? 1 : 2;
		const char *want[] = {w->sha256, w->sha512, w->sha1}, *got[] = {s256, s512, s1};
		o->verdict = "hash-mismatch";
		snprintf(msg, sizeof msg,
		         "%s mismatch: %s from registry %s is not the file its index names (%s %s, got %s)", bad,
		         c->file, c->registry, bad, want[k], got[k]);
		return refuse(c, o, 502, msg, 1), -1;
	}
	if (w->key[0]) {
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", tfd);
		/* An entry already there has the same content: same hash. */
		if (fsync(tfd) < 0 || (linkat(AT_FDCWD, self, dir, w->key, AT_SYMLINK_FOLLOW) < 0 && errno != EEXIST))
			diag(c, "cannot keep %s in the cache: %s", w->key, strerror(errno));
	}
	*sent = 0;
	return sbx_steal_fd(&tfd);
}

/* Serve one package file: from the cache when an entry under the
 * registry's hash exists and still verifies, else from upstream into the
 * cache.  Every path ends in exactly one response and one record. */
static int serve_file(struct conn *c, struct outcome *o, const char *url, const struct want *w)
{
	snprintf(c->upstream, sizeof c->upstream, "%s", url);
	if (w->sha256[0])
		snprintf(o->expected, sizeof o->expected, "sha256:%s", w->sha256);
	else if (w->sha512[0])
		snprintf(o->expected, sizeof o->expected, "sha512:%s", w->sha512);
	else if (w->sha1[0])
		snprintf(o->expected, sizeof o->expected, "sha1:%s", w->sha1);
	if (!w->sha256[0] && !w->sha512[0] && c->cfg->pkg->require_hashes) {
		char msg[600];
		snprintf(
		    msg, sizeof msg,
		    "%s: registry %s names no sha256 or sha512 for it and packages.require_hashes is set in policy %s",
		    c->file, c->registry, policy_name(c));
		return refuse(c, o, 403, msg, 1);
	}
	_cleanup_close_ int dir = cache_dir(c);
	if (dir < 0) {
		diag(c, "cannot open the cache directory: %s", strerror(errno));
		return refuse(c, o, 500, "cannot open the package cache", 1);
	}
	_cleanup_close_ int fd = cached(c, o, dir, w);
	if (fd >= 0) {
		o->cache = "hit";
		return deliver(c, o, fd);
	}
	o->cache = "miss";
	int sent;
	fd = download(c, o, dir, url, w, &sent);
	if (fd < 0)
		return sent ? 0 : -1;
	return deliver(c, o, fd);
}

static int pypi_file(struct conn *c, const char *reg_url, const char *project, const char *file)
{
	struct outcome o = {0};
	struct links l = {0};
	snprintf(c->file, sizeof c->file, "%s", file);
	version_from_file(file, c->version, sizeof c->version);
	if (load_index(c, &o, reg_url, project, &l) < 0)
		return 0;
	const struct link *k = NULL;
	for (size_t i = 0; i < l.n && !k; i++)
		if (!strcmp(l.v[i].file, file))
			k = &l.v[i];
	if (!k) {
		char msg[600];
		snprintf(msg, sizeof msg, "the index of %s at registry %s has no file %s", project, c->registry, file);
		links_free(&l);
		return refuse(c, &o, 404, msg, 0);
	}
	struct want w = {0};
	if (k->sha256[0]) {
		snprintf(w.sha256, sizeof w.sha256, "%s", k->sha256);
		snprintf(w.key, sizeof w.key, "sha256-%s", k->sha256);
	}
	char url[URL_MAX];
	snprintf(url, sizeof url, "%s", k->url);
	links_free(&l);
	return serve_file(c, &o, url, &w);
}

/* ---- npm -------------------------------------------------------------------- */

/* The package's metadata document from the registry, parsed.  NULL with
 * the response already sent. */
static json_t *npm_load(struct conn *c, struct outcome *o, const char *reg_url, const char *pkg)
{
	char path[260], msg[URL_MAX + 300];
	/* A scoped name travels as @scope%2fname, as npm itself sends it. */
	const char *sl = strchr(pkg, '/');
	if (sl)
		snprintf(path, sizeof path, "%.*s%%2f%s", (int)(sl - pkg), pkg, sl + 1);
	else
		snprintf(path, sizeof path, "%s", pkg);
	join_url(c->upstream, sizeof c->upstream, reg_url, path);
	struct fetch f = {.url = c->upstream,
	                  .accept = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8",
	                  .fd = -1,
	                  .max = INDEX_MAX};
	if (fetch(&f) < 0) {
		free(f.mem);
		if (f.status == 404 || f.status == 410) {
			snprintf(msg, sizeof msg, "no package %s at registry %s", pkg, c->registry);
			return refuse(c, o, 404, msg, 0), NULL;
		}
		snprintf(msg, sizeof msg, "cannot fetch the metadata of %s from registry %s: %s", pkg, c->registry,
		         f.error);
		diag(c, "%s (%s)", msg, c->upstream);
		return refuse(c, o, 502, msg, 0), NULL;
	}
	json_error_t je;
	json_t *doc = json_loadb(f.mem ? f.mem : "", f.len, 0, &je);
	free(f.mem);
	if (!json_is_object(doc) || !json_is_object(json_object_get(doc, "versions"))) {
		json_decref(doc);
		snprintf(msg, sizeof msg, "the metadata of %s from registry %s is not an npm document", pkg,
		         c->registry);
		return refuse(c, o, 502, msg, 0), NULL;
	}
	/* Keep the effective URL for resolving relative tarball links. */
	snprintf(c->upstream, sizeof c->upstream, "%s", f.effective);
	return doc;
}

static int npm_metadata(struct conn *c, const char *reg_url, const char *pkg)
{
	struct outcome o = {0};
	json_t *doc = npm_load(c, &o, reg_url, pkg);
	if (!doc)
		return 0;
	json_t *vs = json_object_get(doc, "versions"), *v;
	const char *ver;
	void *tmp;
	const char *base = c->cfg->base_url ? c->cfg->base_url : SBX_PKGCACHE_BASE;
	json_object_foreach_safe(vs, tmp, ver, v)
	{
		json_t *dist = json_object_get(v, "dist");
		if (!version_ok(ver) || !json_is_object(dist)) {
			json_object_del(vs, ver); /* nothing we could serve */
			continue;
		}
		char url[URL_MAX];
		snprintf(url, sizeof url, "%s/%s/tarball/%s/%s", base, c->registry, pkg, ver);
		json_object_set_new(dist, "tarball", json_string(url));
	}
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!s)
		return refuse(c, &o, 500, "out of memory", 0);
	int rc = serve_body(c, &o, "application/json", s, strlen(s));
	free(s);
	return rc;
}

static int npm_tarball(struct conn *c, const char *reg_url, const char *pkg, const char *ver)
{
	struct outcome o = {0};
	char msg[600];
	snprintf(c->version, sizeof c->version, "%s", ver);
	json_t *doc = npm_load(c, &o, reg_url, pkg);
	if (!doc)
		return 0;
	json_t *dist = json_object_get(json_object_get(json_object_get(doc, "versions"), ver), "dist");
	const char *tb = json_string_value(json_object_get(dist, "tarball"));
	if (!tb) {
		json_decref(doc);
		snprintf(msg, sizeof msg, "registry %s has no version %s of %s", c->registry, ver, pkg);
		return refuse(c, &o, 404, msg, 0);
	}
	char url[URL_MAX];
	int bad_url = resolve_url(c->upstream, tb, url, sizeof url) < 0;
	struct want w = {0};
	/* integrity: space-separated "algo-base64" entries (SRI); the
	 * strongest we know wins.  shasum: hex SHA-1. */
	const char *integ = json_string_value(json_object_get(dist, "integrity"));
	const char *shasum = json_string_value(json_object_get(dist, "shasum"));
	char ibuf[1024];
	snprintf(ibuf, sizeof ibuf, "%s", integ ? integ : "");
	for (char *save = NULL, *t = strtok_r(ibuf, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		uint8_t d[64];
		char *q = strchr(t, '?');
		if (q)
			*q = 0; /* SRI options */
		if (!strncmp(t, "sha512-", 7) && b64_decode(t + 7, d, sizeof d) == 64)
			to_hex(d, 64, w.sha512);
		else if (!strncmp(t, "sha256-", 7) && b64_decode(t + 7, d, sizeof d) == 32)
			to_hex(d, 32, w.sha256);
		else if (!strncmp(t, "sha1-", 5) && b64_decode(t + 5, d, sizeof d) == 20 && !w.sha1[0])
			to_hex(d, 20, w.sha1);
	}
	if (shasum && hex_ok(shasum, 40))
		snprintf(w.sha1, sizeof w.sha1, "%s", shasum);
	/* Cache entries are named by a strong hash only: a SHA-1 collision
	 * must not let one tarball stand for another. */
	if (w.sha512[0])
		snprintf(w.key, sizeof w.key, "sha512-%s", w.sha512);
	else if (w.sha256[0])
		snprintf(w.key, sizeof w.key, "sha256-%s", w.sha256);
	const char *slash = strrchr(url, '/');
	snprintf(c->file, sizeof c->file, "%s", bad_url || !slash ? "?" : slash + 1);
	json_decref(doc);
	if (bad_url) {
		snprintf(msg, sizeof msg, "registry %s gives %s@%s a tarball URL that is not http(s)", c->registry, pkg,
		         ver);
		return refuse(c, &o, 502, msg, 1);
	}
	return serve_file(c, &o, url, &w);
}

/* ---- routing ------------------------------------------------------------------ */

#define SEGS_MAX 8

typedef char segment[256];

/* /pypi/N/simple/PROJECT/ and /pypi/N/files/PROJECT/FILE. */
static int route_pypi(struct conn *c, const char *reg_url, segment *seg, unsigned ns)
{
	struct outcome o = {0};
	static const char usage[] = "not a package cache URL: /pypi/N/simple/PROJECT/ or /pypi/N/files/PROJECT/FILE";
	char norm[210];
	if (ns < 4 || sbx_pep503_normalize(seg[3], norm, sizeof norm) < 0)
		return refuse(c, &o, 404, usage, 0);
	snprintf(c->package, sizeof c->package, "%s", norm);
	if (!strcmp(seg[2], "simple") && ns == 4) {
		snprintf(c->kind, sizeof c->kind, "index");
		return pypi_index(c, reg_url, norm);
	}
	if (!strcmp(seg[2], "files") && ns == 5 && filename_ok(seg[4])) {
		snprintf(c->kind, sizeof c->kind, "file");
		return pypi_file(c, reg_url, norm, seg[4]);
	}
	return refuse(c, &o, 404, usage, 0);
}

/* /npm/N/PKG, /npm/N/@SCOPE/NAME (or @SCOPE%2fNAME, as npm sends it),
 * /npm/N/tarball/PKG/VERSION. */
static int route_npm(struct conn *c, const char *reg_url, segment *seg, unsigned ns)
{
	struct outcome o = {0};
	char pkg[220];
	unsigned first = 2, last = ns;
	int tarball = !strcmp(seg[2], "tarball") && ns >= 5;
	if (tarball) {
		first = 3;
		last = ns - 1;
	}
	if (last - first == 2 && seg[first][0] == '@')
		snprintf(pkg, sizeof pkg, "%s/%s", seg[first], seg[first + 1]);
	else if (last - first == 1)
		snprintf(pkg, sizeof pkg, "%s", seg[first]);
	else
		pkg[0] = 0;
	if (!npm_name_ok(pkg))
		return refuse(c, &o, 404, "not a package cache URL: /npm/N/PACKAGE or /npm/N/tarball/PACKAGE/VERSION",
		              0);
	snprintf(c->package, sizeof c->package, "%s", pkg);
	if (!tarball) {
		snprintf(c->kind, sizeof c->kind, "metadata");
		return npm_metadata(c, reg_url, pkg);
	}
	snprintf(c->kind, sizeof c->kind, "tarball");
	if (!version_ok(seg[ns - 1]))
		return refuse(c, &o, 404, "not a valid version", 0);
	return npm_tarball(c, reg_url, pkg, seg[ns - 1]);
}

static int route(struct conn *c)
{
	struct outcome o = {0};
	char path[sizeof c->req.target];
	snprintf(path, sizeof path, "%s", c->req.target);
	path[strcspn(path, "?")] = 0;
	/* Split on '/', decoding each segment on its own, so an encoded '/'
	 * stays inside its segment. */
	segment seg[SEGS_MAX];
	unsigned ns = 0;
	const char *p = path + 1;
	snprintf(c->kind, sizeof c->kind, "request");
	for (;;) {
		size_t len = strcspn(p, "/");
		if (ns == SEGS_MAX)
			return refuse(c, &o, 404, "not a package cache URL", 0);
		if (pct_decode(p, len, seg[ns], sizeof seg[ns]) < 0)
			return refuse(c, &o, 400, "bad escape in the URL", 0);
		ns++;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (ns && !seg[ns - 1][0])
		ns--; /* a trailing slash */
	for (unsigned i = 0; i < ns; i++)
		if (!seg[i][0] || !strcmp(seg[i], ".") || !strcmp(seg[i], ".."))
			return refuse(c, &o, 404, "not a package cache URL", 0);
	if (ns < 3 || (strcmp(seg[0], "pypi") && strcmp(seg[0], "npm")))
		return refuse(c, &o, 404, "not a package cache URL (try /pypi/0/simple/NAME/ or /npm/0/NAME)", 0);
	int type = !strcmp(seg[0], "npm") ? SBX_REG_NPM : SBX_REG_PYPI;
	c->npm = type == SBX_REG_NPM;
	char *end;
	unsigned long idx = strtoul(seg[1], &end, 10);
	if (*end || seg[1][0] < '0' || seg[1][0] > '9' || (seg[1][0] == '0' && seg[1][1]) || idx > 64)
		return refuse(c, &o, 404, "not a package cache URL", 0);
	snprintf(c->registry, sizeof c->registry, "%s/%lu", seg[0], idx);
	if (!strcmp(seg[2], "simple") && !c->npm)
		c->index = 1; /* for refuse(): pip reads these */
	char msg[400];
	if (c->cfg->pkg->mode != SBX_PKG_ALLOWLIST) {
		snprintf(msg, sizeof msg, "package installs are refused: packages.mode: offline in policy %s",
		         policy_name(c));
		return refuse(c, &o, 403, msg, 0);
	}
	const struct sbx_limit_registry *r = registry(c, type, (unsigned)idx);
	if (!r) {
		snprintf(msg, sizeof msg, "policy %s has no %s registry number %lu in packages.registries",
		         policy_name(c), seg[0], idx);
		return refuse(c, &o, 404, msg, 0);
	}
	c->reg_url = r->url;
	return c->npm ? route_npm(c, r->url, seg, ns) : route_pypi(c, r->url, seg, ns);
}

int sbx_pkgcache_serve(const struct sbx_pkgcache_cfg *cfg, int conn_fd)
{
	if (sbx_pkgcache_init(NULL) < 0 || !cfg || !cfg->pkg || !cfg->st || !cfg->session)
		return -1;
	struct conn c = {.cfg = cfg, .fd = conn_fd};
	struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
	setsockopt(conn_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(conn_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	snprintf(c.registry, sizeof c.registry, "-");
	snprintf(c.kind, sizeof c.kind, "request");
	char buf[SBX_HTTP_HEAD_MAX + 1];
	size_t n = 0;
	int status = 0, used;
	for (;;) {
		ssize_t r = recv(conn_fd, buf + n, sizeof buf - 1 - n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1; /* gone, or silent past the timeout */
		n += (size_t)r;
		used = sbx_http_parse_head(buf, n, &c.req, &status);
		if (used != 0)
			break;
	}
	struct outcome o = {0};
	if (used < 0) {
		char msg[64];
		snprintf(msg, sizeof msg, "%s",
		         status == 431   ? "request head too large"
		         : status == 414 ? "URI too long"
		         : status == 505 ? "HTTP version not supported"
		                         : "bad request");
		return refuse(&c, &o, status ? status : 400, msg, 0) < 0 ? -1 : 0;
	}
	c.head = !strcmp(c.req.method, "HEAD");
	if (strcmp(c.req.method, "GET") && !c.head)
		return refuse(&c, &o, 405, "only GET and HEAD", 0) < 0 ? -1 : 0;
	if (c.req.has_body)
		return refuse(&c, &o, 400, "a request body is not accepted", 0) < 0 ? -1 : 0;
	return route(&c) < 0 ? -1 : 0;
}
