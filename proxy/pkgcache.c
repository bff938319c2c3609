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
#include "budget.h"
#include "audit.h"
#include "egress.h"
#include "hostconf.h"
#include "policy.h"
#include "util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>
#include <sha1.h>
#include <sha2.h>

#define INDEX_MAX            SBX_PKGCACHE_INDEX_MAX /* an upstream index page or metadata document */
#define LINKS_MAX            200000u                /* links kept from one index page */
#define LINK_BYTES_MAX       (16u << 20)            /* and the bytes they hold */
#define BUDGET_CHUNK         (1u << 20) /* reserved at a time when upstream gives no length */
#define FILE_NAME_MAX        255
#define URL_MAX              4096
#define IO_TIMEOUT_S         60 /* the guest's socket, each read or write */
#define UP_CONNECT_TIMEOUT_S 15
#define UP_LOW_SPEED_S       60 /* upstream below 1 KiB/s this long: give up */
#define BUDGET               "pkgbudget.json"
#define BUDGET_LOCK          "pkgbudget.lock"
#define LOG                  "packages.log"
#define META                 "meta"  /* per entry: its hashes as last verified, and when last used */
#define NAMES                "names" /* what each (registry, package, file) was stored as, for HEAD */
#define CACHE_LOCK           ".lock" /* eviction, per cache scope */

/* ---- process set-up ----------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_rc;
static struct sbx_err once_err;
static uint64_t cache_quota = SBX_PKGCACHE_QUOTA_DEFAULT;
/* sbx.yaml as read at start: a tenant's quotas.cache_bytes overrides
 * packages.cache_quota for that tenant's scope (scope_quota). */
static struct sbx_hostconf hostconf;

/* Upstream fetches in flight in this process (one proxy per session). */
static pthread_mutex_t up_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t up_cv;
static unsigned up_active;

static void init_once(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&up_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		once_rc = sbx_err_set(&once_err, SBX_EXIT_INTERNAL, 0, "cannot initialise libcurl");
		return;
	}
	xmlInitParser();
	if (sbx_hostconf_load(&hostconf, &once_err) < 0) {
		once_rc = -1; /* fail closed: an sbx.yaml we cannot read bounds nothing */
		return;
	}
	if (hostconf.packages.cache_quota)
		cache_quota = hostconf.packages.cache_quota;
}


int sbx_pkgcache_init(struct sbx_err *err)
{
	pthread_once(&once, init_once);
	if (once_rc < 0) {
		if (err)
			*err = once_err;
		return -1;
	}
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

const char *sbx_pkgcache_addr_denied(const struct sockaddr *sa, socklen_t len)
{
	if ((sa->sa_family == AF_INET && len < (socklen_t)sizeof(struct sockaddr_in)) ||
	    (sa->sa_family == AF_INET6 && len < (socklen_t)sizeof(struct sockaddr_in6)))
		return "not an IP address";
	return sbx_egress_denied_here(sa); /* the proxy's own list */
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
	int slot;             /* holds one of the SBX_PKGCACHE_FETCHES_MAX upstream slots */
	uint64_t charged_up;  /* bytes of the index or metadata fetched for this request,
	                       * already charged to the budget */
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
	const char *verified; /* hashed (while downloading), cached (the recorded hash
	                       * of an unchanged inode), rehashed (hashed again) */
	int prepaid;          /* size is already charged: it was downloaded for this request */
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
	if (o->verified)
		json_object_set_new(r, "verified", json_string(o->verified));
	if (c->head)
		json_object_set_new(r, "method", json_string("HEAD"));
	json_object_set_new(r, "status", json_integer(o->status));
	if (o->reason)
		json_object_set_new(r, "reason", json_string(o->reason));
	if (c->upstream[0])
		json_object_set_new(r, "url", json_string(c->upstream));
	return r;
}

/* packages.log is bounded (the guest decides how many requests it makes):
 * past PKGLOG_MAX bytes one last line says so and the rest is not kept;
 * the audit trail's package.fetch records are unaffected.  Check and
 * append under one lock, so concurrent requests cannot pass it together. */
#define PKGLOG_MAX (4u << 20)
static int log_append(int fd, const char *line, size_t n)
{
	/* One proxy serves one session, so one flag: the marker is written
	 * once, and nothing after it. */
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static int full;
	static const char marker[] = "{\"truncated\":true,\"max_bytes\":4194304}\n";
	struct stat st;
	int rc = 0;
	pthread_mutex_lock(&mu);
	if (full)
		;
	else if (fstat(fd, &st) < 0)
		rc = -1;
	else if ((uint64_t)st.st_size + n + sizeof marker <= PKGLOG_MAX)
		rc = sbx_write_all(fd, line, n);
	else {
		full = 1;
		rc = sbx_write_all(fd, marker, sizeof marker - 1);
	}
	pthread_mutex_unlock(&mu);
	return rc;
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
			if (log_append(lfd, s, n + 1) < 0)
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

/* The session's download budget, under its lock: give back `give` bytes
 * reserved earlier and not used, then reserve `take` bytes of
 * max_download, so concurrent requests cannot overdraw it.  0: granted;
 * 1: refused (*used set, nothing reserved); -1: the counter cannot be read
 * or written. */
static int budget_op(const struct conn *c, uint64_t take, uint64_t give, uint64_t *used)
{
	_cleanup_close_ int dfd = session_dir(c);
	if (dfd < 0)
		return -1;
	struct sbx_err ignored = { 0 };
	return sbx_counter_take(dfd, BUDGET, BUDGET_LOCK, c->cfg->pkg->max_download, give, take, 0, NULL, used,
				&ignored);
}

static int budget_take(const struct conn *c, uint64_t n, uint64_t *used)
{
	return budget_op(c, n, 0, used);
}

static uint64_t budget_left(const struct conn *c, uint64_t used)
{
	return used < c->cfg->pkg->max_download ? c->cfg->pkg->max_download - used : 0;
}

/* ---- upstream slots ------------------------------------------------------ */

/* Wait for one of the SBX_PKGCACHE_FETCHES_MAX upstream slots, at most
 * IO_TIMEOUT_S.  0, or -1 when none came free.  A thread that waits is
 * named "pkgcache-wait" meanwhile (ps -L, /proc/PID/task/TID/comm). */
static int slot_take(struct conn *c)
{
	if (c->slot)
		return 0;
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += IO_TIMEOUT_S;
	pthread_mutex_lock(&up_mu);
	int rc = 0;
	char name[17] = "";
	if (up_active >= SBX_PKGCACHE_FETCHES_MAX && prctl(PR_GET_NAME, name) == 0)
		prctl(PR_SET_NAME, "pkgcache-wait");
	while (up_active >= SBX_PKGCACHE_FETCHES_MAX && rc == 0)
		rc = pthread_cond_timedwait(&up_cv, &up_mu, &dl);
	if (name[0])
		prctl(PR_SET_NAME, name);
	if (up_active < SBX_PKGCACHE_FETCHES_MAX) {
		up_active++;
		c->slot = 1;
	}
	pthread_mutex_unlock(&up_mu);
	return c->slot ? 0 : -1;
}

static void slot_give(struct conn *c)
{
	if (!c->slot)
		return;
	pthread_mutex_lock(&up_mu);
	up_active--;
	pthread_cond_signal(&up_cv);
	pthread_mutex_unlock(&up_mu);
	c->slot = 0;
}

/* ---- responses -------------------------------------------------------------- */

static int send_head(struct conn *c, int status, const char *reason, const char *ctype, uint64_t len)
{
	slot_give(c); /* upstream is done with: a slow reader holds no slot */
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

/* Send a generated body after counting it against the budget: what it
 * holds beyond the upstream bytes already charged for it. */
static int serve_body(struct conn *c, struct outcome *o, const char *ctype, const char *body, size_t n)
{
	uint64_t used = 0;
	int b = budget_take(c, c->head || n <= c->charged_up ? 0 : n - c->charged_up, &used);
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

struct links;
struct fetch {
	/* in */
	const char *url;
	const char *accept;
	int fd;       /* >= 0: write the body here (hashing it); else memory */
	uint64_t max; /* body bytes */
	struct conn *budget;  /* non-NULL: reserve every body byte against its max_download */
	struct links *links;  /* non-NULL: parse the body as a PEP 503 page as it arrives,
	                       * into links, instead of keeping it */
	/* out */
	char *mem;
	size_t len, cap;
	uint64_t bytes;
	uint64_t reserved; /* of the budget, for this fetch; bytes of it are used */
	long status;
	int over;         /* the body was larger than max */
	int broke;        /* the budget was spent (1) or cannot be accounted (-1) */
	int oom;
	int started;
	CURL *h;
	htmlParserCtxtPtr html;
	struct index_sax *sax;
	char denied[200]; /* an address the deny list refused */
	char effective[URL_MAX];
	char error[CURL_ERROR_SIZE + 64];
	SHA2_CTX s256, s512;
	SHA1_CTX s1;
	int werr;
};

static int index_feed(struct fetch *f, const char *p, size_t n);

/* Reserve what the body needs beyond what is reserved: at least what
 * arrived, a chunk ahead when it fits.  0, or -1 (f->broke set). */
static int reserve(struct fetch *f, uint64_t upto)
{
	if (!f->budget || upto <= f->reserved)
		return 0;
	uint64_t need = upto - f->reserved, ask = need < BUDGET_CHUNK ? BUDGET_CHUNK : need, used;
	if (ask > f->max - f->reserved)
		ask = f->max - f->reserved;
	int b = budget_take(f->budget, ask, &used);
	if (b == 1 && ask > need)
		b = budget_take(f->budget, ask = need, &used);
	if (b != 0) {
		f->broke = b < 0 ? -1 : 1;
		return -1;
	}
	f->reserved += ask;
	return 0;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct fetch *f = ud;
	size_t n = sz * nm;
	if (!f->started) {
		/* The final response's length, when it gives one: reserved
		 * whole before its first byte is taken. */
		f->started = 1;
		curl_off_t cl = -1;
		char *eff = NULL;
		curl_easy_getinfo(f->h, CURLINFO_EFFECTIVE_URL, &eff);
		snprintf(f->effective, sizeof f->effective, "%s", eff ? eff : f->url);
		if (curl_easy_getinfo(f->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK && cl > 0) {
			if ((uint64_t)cl > f->max) {
				f->over = 1;
				return 0;
			}
			if (reserve(f, (uint64_t)cl) < 0)
				return 0;
		}
	}
	if (f->bytes + n > f->max) {
		f->over = 1;
		return 0;
	}
	if (reserve(f, f->bytes + n) < 0)
		return 0;
	f->bytes += n;
	if (f->links)
		return index_feed(f, p, n) < 0 ? 0 : n;
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
		if (!m) {
			f->oom = 1;
			return 0;
		}
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
	f->h = h;
	CURLcode rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &f->status);
	char *eff = NULL;
	curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eff);
	snprintf(f->effective, sizeof f->effective, "%s", eff ? eff : f->url);
	curl_easy_cleanup(h);
	f->h = NULL;
	curl_slist_free_all(hdr);
	/* What arrived stays charged (the host fetched it, whatever it
	 * turns out to be); the rest of the reservation goes back. */
	if (f->budget && f->reserved > f->bytes) {
		uint64_t used;
		budget_op(f->budget, 0, f->reserved - f->bytes, &used);
		f->reserved = f->bytes;
	}
	if (rc == CURLE_FILESIZE_EXCEEDED)
		f->over = 1;
	if (f->over) {
		snprintf(f->error, sizeof f->error, "larger than %llu bytes", (unsigned long long)f->max);
		return -1;
	}
	if (f->broke) {
		snprintf(f->error, sizeof f->error, "%s",
		         f->broke > 0 ? "packages.max_download spent" : "cannot account against packages.max_download");
		return -1;
	}
	if (f->oom) {
		snprintf(f->error, sizeof f->error, "out of memory");
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
	size_t bytes;   /* held by the links' strings */
	uint32_t *set;  /* open addressing over v by file name: index + 1, 0 empty */
	size_t set_cap; /* a power of two, at least twice n */
};

static void links_free(struct links *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].url);
		free(l->v[i].requires_python);
		free(l->v[i].yanked);
	}
	free(l->v);
	free(l->set);
	memset(l, 0, sizeof *l);
}

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The slot for name in l->set: where it is, or the empty one it would
 * take. */
static size_t set_find(const struct links *l, const char *name)
{
	size_t m = l->set_cap - 1, i = name_hash(name) & m;
	while (l->set[i] && strcmp(l->v[l->set[i] - 1].file, name))
		i = (i + 1) & m;
	return i;
}

static int set_grow(struct links *l)
{
	if (l->set_cap && (l->n + 1) * 2 <= l->set_cap)
		return 0;
	size_t nc = l->set_cap ? l->set_cap * 2 : 128;
	uint32_t *old = l->set;
	l->set = calloc(nc, sizeof *l->set);
	if (!l->set) {
		l->set = old;
		return -1;
	}
	l->set_cap = nc;
	for (size_t i = 0; i < l->n; i++)
		l->set[set_find(l, l->v[i].file)] = (uint32_t)(i + 1);
	free(old);
	return 0;
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
	size_t more = strlen(url) + (rp ? strlen(rp) : 0) + (yanked ? strlen(yanked) : 0) + 3;
	if (l->bytes + more > LINK_BYTES_MAX)
		return 0; /* past the bound: the rest of the page is not offered */
	if (set_grow(l) < 0)
		return -1;
	size_t slot = set_find(l, k.file);
	if (l->set[slot])
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
	l->set[slot] = (uint32_t)l->n;
	l->bytes += more;
	return 0;
}

/* Every <a href> of a PEP 503 page, parsed by libxml2's HTML push parser
 * as the page arrives (entities decoded, malformed markup recovered), with
 * a SAX handler that keeps only the links: no tree is built, so memory is
 * the links (LINKS_MAX, LINK_BYTES_MAX) and the parser's own buffers. */
struct index_sax {
	struct links *l;
	char base[URL_MAX];
	int rc;
};

static void sax_start(void *ud, const xmlChar *name, const xmlChar **atts)
{
	struct index_sax *x = ud;
	if (x->rc < 0 || !name || xmlStrcasecmp(name, BAD_CAST "a") || !atts)
		return;
	const char *href = NULL, *rp = NULL, *y = NULL;
	int has_y = 0, has_href = 0, has_rp = 0;
	for (size_t i = 0; atts[i]; i += 2) {
		const char *k = (const char *)atts[i], *v = (const char *)atts[i + 1];
		if (!strcasecmp(k, "href") && !has_href)
			href = v, has_href = 1;
		else if (!strcasecmp(k, "data-requires-python") && !has_rp)
			rp = v, has_rp = 1;
		else if (!strcasecmp(k, "data-yanked") && !has_y)
			y = v, has_y = 1;
	}
	if (href)
		x->rc = add_link(x->l, x->base, href, rp, y, has_y);
}

static void sax_quiet(void *ud, const xmlError *e)
{
	(void)ud, (void)e; /* a broken page is recovered from, not reported */
}

static int index_begin(struct fetch *f, struct index_sax *x, const char *base)
{
	xmlSAXHandler sax;
	memset(&sax, 0, sizeof sax);
	sax.initialized = XML_SAX2_MAGIC;
	sax.startElement = sax_start;
	sax.serror = (xmlStructuredErrorFunc)sax_quiet;
	x->l = f->links;
	x->rc = 0;
	snprintf(x->base, sizeof x->base, "%s", base);
	f->sax = x;
	f->html = htmlCreatePushParserCtxt(&sax, x, NULL, 0, base, XML_CHAR_ENCODING_NONE);
	if (!f->html)
		return -1;
	htmlCtxtUseOptions(f->html, HTML_PARSE_NONET | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
	                                HTML_PARSE_RECOVER | HTML_PARSE_NOBLANKS);
	return 0;
}

static int index_feed(struct fetch *f, const char *p, size_t n)
{
	if (!f->html) {
		if (!f->sax || index_begin(f, f->sax, f->effective) < 0) {
			f->oom = 1;
			return -1;
		}
	}
	while (n) {
		int k = n > (1u << 20) ? 1 << 20 : (int)n;
		htmlParseChunk(f->html, p, k, 0);
		p += k;
		n -= (size_t)k;
	}
	if (f->sax->rc < 0) {
		f->oom = 1;
		return -1;
	}
	return 0;
}

/* The end of the page: the last links out of the parser.  0, or -1. */
static int index_end(struct fetch *f)
{
	int rc = 0;
	if (f->html) {
		htmlParseChunk(f->html, NULL, 0, 1);
		rc = f->sax->rc;
		if (f->html->myDoc)
			xmlFreeDoc(f->html->myDoc);
		htmlFreeParserCtxt(f->html);
		f->html = NULL;
	}
	return rc;
}

static int parse_index(const char *html, size_t n, const char *base, struct links *out)
{
	struct index_sax x;
	struct fetch f = {.links = out, .sax = &x};
	snprintf(f.effective, sizeof f.effective, "%s", base);
	if (index_begin(&f, &x, base) < 0)
		return -1;
	int rc = n ? index_feed(&f, html, n) : 0;
	return index_end(&f) < 0 || rc < 0 ? -1 : 0;
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

/* Before an index page or metadata document is fetched: a slot, and what
 * is left of the budget (*max: what the fetch may take).  0, or -1 with
 * the refusal already sent. */
static int upstream_begin(struct conn *c, struct outcome *o, const char *what, uint64_t *max)
{
	char msg[600];
	uint64_t used = 0;
	int b = budget_take(c, 0, &used);
	if (b < 0)
		return refuse(c, o, 500, "cannot account the download against packages.max_download", 0), -1;
	uint64_t left = budget_left(c, used);
	if (!left) {
		snprintf(msg, sizeof msg, "packages.max_download of policy %s exceeded: nothing left of %llu for %s",
		         policy_name(c), (unsigned long long)c->cfg->pkg->max_download, what);
		return refuse(c, o, 403, msg, 0), -1;
	}
	if (slot_take(c) < 0) {
		snprintf(msg, sizeof msg, "%u upstream fetches of this session are in flight; try again",
		         SBX_PKGCACHE_FETCHES_MAX);
		return refuse(c, o, 503, msg, 0), -1;
	}
	*max = left < INDEX_MAX ? left : INDEX_MAX;
	return 0;
}

/* A fetch of an index page or metadata document failed on the budget:
 * refuse naming the key.  Else 1: not a budget failure. */
static int refuse_page_budget(struct conn *c, struct outcome *o, const struct fetch *f, const char *what)
{
	char msg[600];
	if (!(f->broke > 0 || (f->over && f->max < INDEX_MAX)))
		return 1;
	snprintf(msg, sizeof msg, "packages.max_download of policy %s exceeded: %s does not fit in what is left of %llu",
	         policy_name(c), what, (unsigned long long)c->cfg->pkg->max_download);
	return refuse(c, o, 403, msg, 0), -1;
}

/* Fetch and parse the project's index from the registry.  0, or -1 with
 * the response already sent (a refusal or an error). */
static int load_index(struct conn *c, struct outcome *o, const char *reg_url, const char *project, struct links *l)
{
	char path[260], what[300];
	snprintf(path, sizeof path, "%s/", project);
	snprintf(what, sizeof what, "the index of %s", project);
	join_url(c->upstream, sizeof c->upstream, reg_url, path);
	uint64_t max;
	if (upstream_begin(c, o, what, &max) < 0)
		return -1;
	struct index_sax x;
	struct fetch f = {.url = c->upstream, .accept = "text/html", .fd = -1, .max = max, .budget = c, .links = l,
	                  .sax = &x};
	char msg[URL_MAX + 400];
	int frc = fetch(&f);
	c->charged_up += f.bytes;
	int prc = index_end(&f);
	if (frc < 0) {
		links_free(l);
		if (refuse_page_budget(c, o, &f, what) < 0)
			return -1;
		if (f.status == 404 || f.status == 410) {
			snprintf(msg, sizeof msg, "no project %s at registry %s", project, c->registry);
			return refuse(c, o, 404, msg, 0), -1;
		}
		snprintf(msg, sizeof msg, "cannot fetch the index of %s from registry %s: %s", project, c->registry,
		         f.error);
		diag(c, "%s (%s)", msg, c->upstream);
		return refuse(c, o, 502, msg, 0), -1;
	}
	if (prc < 0) {
		links_free(l);
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

/* ---- cache entries: verification records, LRU, quota, names ---------------- */

static int subdir(int dir, const char *name)
{
	mkdirat(dir, name, 0700);
	return openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* META/KEY holds the hashes of the entry's inode as it was when last
 * hashed: "1 INO SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS SHA256 SHA512
 * SHA1".  They stand for the content while the inode, size, mtime and
 * ctime are all unchanged (any write or rename of the entry changes its
 * ctime, which no one can set back).  The record's own mtime is when the
 * entry was last used: the eviction order. */
static int meta_read(int dir, const char *key, const struct stat *st, char s256[65], char s512[129], char s1[41])
{
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (md < 0)
		return -1;
	_cleanup_free_ char *t = sbx_read_small_at(md, key, 512, NULL);
	if (!t)
		return -1;
	unsigned v;
	unsigned long long ino, size, ms, mn, cs, cn;
	char h256[65], h512[129], h1[41];
	if (sscanf(t, "%u %llu %llu %llu %llu %llu %llu %64s %128s %40s", &v, &ino, &size, &ms, &mn, &cs, &cn, h256,
	           h512, h1) != 10 ||
	    v != 1 || !hex_ok(h256, 64) || !hex_ok(h512, 128) || !hex_ok(h1, 40))
		return -1;
	if (ino != (unsigned long long)st->st_ino || size != (unsigned long long)st->st_size ||
	    ms != (unsigned long long)st->st_mtim.tv_sec || mn != (unsigned long long)st->st_mtim.tv_nsec ||
	    cs != (unsigned long long)st->st_ctim.tv_sec || cn != (unsigned long long)st->st_ctim.tv_nsec)
		return -1;
	memcpy(s256, h256, 65);
	memcpy(s512, h512, 129);
	memcpy(s1, h1, 41);
	return 0;
}

/* Mark key used now (nanoseconds, not the file system's coarse clock). */
static void lru_touch(int dir, const char *key)
{
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct timespec ts[2];
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[1] = ts[0];
	if (md >= 0)
		utimensat(md, key, ts, AT_SYMLINK_NOFOLLOW);
}

/* Record the hashes of fd (named key) as they are now: st is fd's stat
 * from before it was hashed, and nothing is recorded if it changed since. */
static void meta_write(const struct conn *c, int dir, const char *key, int fd, const struct stat *st,
                       const char *s256, const char *s512, const char *s1)
{
	struct stat now;
	if (fstat(fd, &now) < 0 || now.st_ino != st->st_ino || now.st_size != st->st_size ||
	    now.st_mtim.tv_sec != st->st_mtim.tv_sec || now.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
	    now.st_ctim.tv_sec != st->st_ctim.tv_sec || now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)
		return;
	_cleanup_close_ int md = subdir(dir, META);
	char t[512];
	int w = snprintf(t, sizeof t, "1 %llu %llu %llu %llu %llu %llu %s %s %s\n", (unsigned long long)st->st_ino,
	                 (unsigned long long)st->st_size, (unsigned long long)st->st_mtim.tv_sec,
	                 (unsigned long long)st->st_mtim.tv_nsec, (unsigned long long)st->st_ctim.tv_sec,
	                 (unsigned long long)st->st_ctim.tv_nsec, s256, s512, s1);
	struct sbx_err e = {0};
	if (md < 0 || w <= 0 || (size_t)w >= sizeof t ||
	    sbx_atomic_write_at(md, key, t, (size_t)w, 0600, &e) < 0) {
		diag(c, "cannot record the hashes of cache entry %s: %s", key, md < 0 ? strerror(errno) : e.msg);
		return;
	}
	lru_touch(dir, key);
}

static int entry_name_ok(const char *k)
{
	return (!strncmp(k, "sha256-", 7) && hex_ok(k + 7, 64)) || (!strncmp(k, "sha512-", 7) && hex_ok(k + 7, 128));
}

static void drop_entry(int dir, const char *key)
{
	unlinkat(dir, key, 0);
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (md >= 0)
		unlinkat(md, key, 0);
}

struct lru {
	char key[140];
	uint64_t size;
	uint64_t used; /* ns */
};

static int lru_cmp(const void *a, const void *b)
{
	const struct lru *x = a, *y = b;
	return x->used < y->used ? -1 : x->used > y->used;
}

/* The bytes c's cache scope may keep: its tenant's cache_bytes quota, else
 * packages.cache_quota (the shared scope has only the latter). */
static uint64_t scope_quota(const struct conn *c)
{
	const char *t = c->cfg->tenant;
	if (!t || !*t)
		return cache_quota;
	struct sbx_quota q;
	sbx_hostconf_quota(&hostconf, t, &q);
	return q.cache_bytes ? q.cache_bytes : cache_quota;
}

/* Keep the scope within its quota (scope_quota): remove the
 * least recently used entries, never keep, until the rest fits.  Under
 * the scope's lock, so sessions of a tenant evict one at a time. */
static void evict(const struct conn *c, int dir, const char *keep)
{
	_cleanup_close_ int lk = openat(dir, CACHE_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return;
	int dd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = dd < 0 ? NULL : fdopendir(dd);
	if (!d) {
		if (dd >= 0)
			close(dd);
		return;
	}
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ struct lru *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st, ms;
		if (!entry_name_ok(e->d_name) || fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct lru *nv = realloc(v, nc * sizeof *nv);
			if (!nv)
				return;
			v = nv;
			cap = nc;
		}
		snprintf(v[n].key, sizeof v[n].key, "%s", e->d_name);
		v[n].size = (uint64_t)st.st_size;
		v[n].used = md >= 0 && fstatat(md, e->d_name, &ms, AT_SYMLINK_NOFOLLOW) == 0
		                ? (uint64_t)ms.st_mtim.tv_sec * 1000000000ull + (uint64_t)ms.st_mtim.tv_nsec
		                : 0; /* never recorded: oldest */
		total += v[n].size;
		n++;
	}
	uint64_t quota = scope_quota(c);
	if (total <= quota)
		return;
	qsort(v, n, sizeof *v, lru_cmp);
	for (size_t i = 0; i < n && total > quota; i++) {
		if (keep && !strcmp(v[i].key, keep))
			continue;
		drop_entry(dir, v[i].key);
		total -= v[i].size;
		diag(c, "cache quota %llu bytes: evicted %s (%llu bytes, least recently used)",
		     (unsigned long long)quota, v[i].key, (unsigned long long)v[i].size);
	}
}

/* NAMES/n-HEX: the entry a (registry, kind, package, file or version) was
 * last served from, so that HEAD can be answered from the cache without
 * asking the registry which hash the name stands for. */
static void name_of(const struct conn *c, char out[70])
{
	SHA2_CTX h;
	uint8_t d[32];
	const char *parts[] = {c->reg_url ? c->reg_url : "", c->kind, c->package,
	                       !strcmp(c->kind, "tarball") ? c->version : c->file};
	SHA256Init(&h);
	for (size_t i = 0; i < SBX_ARRAY_LEN(parts); i++)
		SHA256Update(&h, (const uint8_t *)parts[i], strlen(parts[i]) + 1);
	SHA256Final(d, &h);
	memcpy(out, "n-", 2);
	to_hex(d, 32, out + 2);
}

static int name_read(const struct conn *c, int dir, char key[140])
{
	char nm[70];
	name_of(c, nm);
	_cleanup_close_ int nd = openat(dir, NAMES, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ char *t = nd < 0 ? NULL : sbx_read_small_at(nd, nm, 256, NULL);
	if (!t)
		return -1;
	t[strcspn(t, "\n")] = 0;
	if (!entry_name_ok(t))
		return -1;
	snprintf(key, 140, "%s", t);
	return 0;
}

static void name_write(const struct conn *c, int dir, const char *key)
{
	char nm[70], old[140], t[160];
	if (name_read(c, dir, old) == 0 && !strcmp(old, key))
		return;
	name_of(c, nm);
	_cleanup_close_ int nd = subdir(dir, NAMES);
	int w = snprintf(t, sizeof t, "%s\n", key);
	if (nd < 0 || sbx_atomic_write_at(nd, nm, t, (size_t)w, 0600, NULL) < 0)
		diag(c, "cannot record the name of cache entry %s", key);
}

/* The last step of every file served: count it (unless it was counted as
 * it was downloaded), record it (fail closed), send it. */
static int deliver(struct conn *c, struct outcome *o, int fd)
{
	uint64_t used = 0;
	int b = o->prepaid ? 0 : budget_take(c, o->size, &used);
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

/* The cache entry for w: an fd when it verifies (o filled), else -1 (an
 * entry that does not verify is removed).  It is hashed only when its
 * verification record does not match its inode as it is now. */
static int cached(struct conn *c, struct outcome *o, int dir, const struct want *w)
{
	if (!w->key[0])
		return -1;
	_cleanup_close_ int fd = openat(dir, w->key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	char s256[65], s512[129], s1[41];
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	if (meta_read(dir, w->key, &st, s256, s512, s1) == 0) {
		o->verified = "cached";
	} else {
		struct fetch f = {0};
		if (hash_file(fd, &f) < 0)
			return -1;
		hash_fd_done(&f, s256, s512, s1);
		o->verified = "rehashed";
		if (!mismatch(w, s256, s512, s1))
			meta_write(c, dir, w->key, fd, &st, s256, s512, s1);
	}
	if (mismatch(w, s256, s512, s1)) {
		diag(c, "cache entry %s does not verify: removed", w->key);
		drop_entry(dir, w->key);
		o->verified = NULL;
		return -1;
	}
	o->size = (uint64_t)st.st_size;
	snprintf(o->sha256, sizeof o->sha256, "%s", s256);
	return sbx_steal_fd(&fd);
}

/* Download url into an unnamed file of the cache directory.  Every byte is
 * reserved against what is left of the budget before it is taken (the
 * whole Content-Length at once when upstream gives one, so a larger file
 * is refused before its body is fetched), and what arrived stays charged.
 * Every hash the registry published is checked; a verified file with a
 * strong hash is then named in the cache, within the quota.  The fd, or
 * -1 with the refusal already sent (*sent). */
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
	uint64_t left = budget_left(c, used);
	if (!left)
		return refuse_budget(c, o, 0, 1, used), -1;
	if (slot_take(c) < 0) {
		snprintf(msg, sizeof msg, "%u upstream fetches of this session are in flight; try again",
		         SBX_PKGCACHE_FETCHES_MAX);
		return refuse(c, o, 503, msg, 1), -1;
	}
	struct fetch f = {.url = url, .fd = tfd, .max = left, .budget = c};
	if (fetch(&f) < 0) {
		o->size = f.bytes;
		if (f.broke < 0)
			return refuse(c, o, 500, "cannot account the download against packages.max_download", 1), -1;
		if (f.over || f.broke > 0) {
			budget_take(c, 0, &used);
			return refuse_budget(c, o, left, 1, used), -1;
		}
		if (f.status == 404 || f.status == 410)
			snprintf(msg, sizeof msg, "%s: registry %s lists it but it is not there (HTTP %ld)", c->file,
			         c->registry, f.status);
		else
			snprintf(msg, sizeof msg, "cannot fetch %s from registry %s: %s", c->file, c->registry,
			         f.error);
		diag(c, "%s (%s)", msg, url);
		return refuse(c, o, 502, msg, 1), -1;
	}
	slot_give(c);
	o->prepaid = 1;
	char s256[65], s512[129], s1[41];
	hash_fd_done(&f, s256, s512, s1);
	o->size = f.bytes;
	o->verified = "hashed";
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
	if (w->key[0] && f.bytes > scope_quota(c)) {
		diag(c, "%s (%llu bytes) is larger than the cache quota of %llu bytes: served, not kept", w->key,
		     (unsigned long long)f.bytes, (unsigned long long)scope_quota(c));
	} else if (w->key[0]) {
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", tfd);
		/* An entry already there has the same content: same hash. */
		if (fsync(tfd) < 0 || linkat(AT_FDCWD, self, dir, w->key, AT_SYMLINK_FOLLOW) < 0) {
			if (errno != EEXIST)
				diag(c, "cannot keep %s in the cache: %s", w->key, strerror(errno));
		} else {
			/* Linking changed the inode's ctime: record it as it is now. */
			struct stat st;
			if (fstat(tfd, &st) == 0)
				meta_write(c, dir, w->key, tfd, &st, s256, s512, s1);
			evict(c, dir, w->key);
		}
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
		lru_touch(dir, w->key);
	} else {
		o->cache = "miss";
		int sent;
		fd = download(c, o, dir, url, w, &sent);
		if (fd < 0)
			return sent ? 0 : -1;
	}
	if (w->key[0])
		name_write(c, dir, w->key);
	return deliver(c, o, fd);
}

/* HEAD of a file or tarball: from the cache only.  The entry this name was
 * last served from, verified like a hit, answers with its length; anything
 * else is 404, and nothing is fetched, hashed anew for an unchanged entry,
 * or charged. */
static int head_file(struct conn *c)
{
	struct outcome o = {0};
	char key[140], msg[600];
	_cleanup_close_ int dir = cache_dir(c);
	if (dir < 0) {
		diag(c, "cannot open the cache directory: %s", strerror(errno));
		return refuse(c, &o, 500, "cannot open the package cache", 0);
	}
	struct want w = {0};
	_cleanup_close_ int fd = -1;
	if (name_read(c, dir, key) == 0) {
		snprintf(w.key, sizeof w.key, "%s", key);
		snprintf(key[5] == '6' ? w.sha256 : w.sha512, key[5] == '6' ? sizeof w.sha256 : sizeof w.sha512, "%s",
		         key + 7);
		fd = cached(c, &o, dir, &w);
	}
	if (fd < 0) {
		o.cache = "miss";
		snprintf(msg, sizeof msg, "%s is not in the package cache (HEAD is answered from the cache only)",
		         c->file[0] ? c->file : c->package);
		return refuse(c, &o, 404, msg, 0);
	}
	o.cache = "hit";
	o.status = 200;
	o.verdict = "ok";
	record(c, &o, 0);
	return send_head(c, 200, "OK", "application/octet-stream", o.size);
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
	char what[300];
	snprintf(what, sizeof what, "the metadata of %s", pkg);
	uint64_t max;
	if (upstream_begin(c, o, what, &max) < 0)
		return NULL;
	struct fetch f = {.url = c->upstream,
	                  .accept = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8",
	                  .fd = -1,
	                  .max = max,
	                  .budget = c};
	int frc = fetch(&f);
	c->charged_up += f.bytes;
	if (frc < 0) {
		free(f.mem);
		if (refuse_page_budget(c, o, &f, what) < 0)
			return NULL;
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

/* HEAD of an index page or metadata: those are never cached, and HEAD is
 * answered from the cache only. */
static int refuse_head(struct conn *c)
{
	struct outcome o = {0};
	char msg[400];
	snprintf(msg, sizeof msg, "the %s of %s is not cached (HEAD is answered from the cache only; use GET)", c->kind,
	         c->package);
	return refuse(c, &o, 404, msg, 0);
}

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
		if (c->head)
			return refuse_head(c);
		return pypi_index(c, reg_url, norm);
	}
	if (!strcmp(seg[2], "files") && ns == 5 && filename_ok(seg[4])) {
		snprintf(c->kind, sizeof c->kind, "file");
		if (c->head) {
			snprintf(c->file, sizeof c->file, "%s", seg[4]);
			version_from_file(seg[4], c->version, sizeof c->version);
			return head_file(c);
		}
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
		if (c->head)
			return refuse_head(c);
		return npm_metadata(c, reg_url, pkg);
	}
	snprintf(c->kind, sizeof c->kind, "tarball");
	if (!version_ok(seg[ns - 1]))
		return refuse(c, &o, 404, "not a valid version", 0);
	if (c->head) {
		snprintf(c->version, sizeof c->version, "%s", seg[ns - 1]);
		return head_file(c);
	}
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
	int rc = route(&c) < 0 ? -1 : 0;
	slot_give(&c);
	return rc;
}
