/* The pull-through package cache (pkgcache.h): a small HTTP/1.1 server
 * for the guest, libcurl towards the policy's registries, libxml2 for
 * PEP 503 index pages, jansson for npm metadata, libmd for hashes.
 *
 * One request per connection.  Nothing the guest sends becomes part of an
 * upstream URL except a validated, normalized package name appended to a
 * registry URL from the policy; file URLs come from that registry's own
 * index.  Every byte sent to the guest is counted against
 * packages.max_download before it is sent. */
#include "pkgc.h"
#include "hostconf.h"
#include "policy.h"
#include "policy_check.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#define LOG "packages.log"

/* ---- process set-up ----------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_rc;
static struct sbx_err once_err;
static uint64_t cache_quota = SBX_PKGCACHE_QUOTA_DEFAULT;
/* sbx.yaml as read at start: a tenant's quotas.cache_bytes overrides
 * packages.cache_quota for that tenant's scope (scope_quota). */
static struct sbx_hostconf hostconf;

static void init_once(void)
{
	pc_slots_init();
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

/* The bytes c's cache scope may keep: its tenant's cache_bytes quota, else
 * packages.cache_quota (the shared scope has only the latter). */
uint64_t pc_scope_quota(const struct conn *c)
{
	const char *t = c->cfg->tenant;
	if (!t || !*t)
		return cache_quota;
	struct sbx_quota q;
	sbx_hostconf_quota(&hostconf, t, &q);
	return q.cache_bytes ? q.cache_bytes : cache_quota;
}

/* ---- one connection's context -------------------------------------------- */

void pc_diag(const struct conn *c, const char *fmt, ...)
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

const char *pc_policy_name(const struct conn *c)
{
	return c->cfg->pkg && c->cfg->pkg->policy[0] ? c->cfg->pkg->policy : "defaults";
}

/* ---- the session's records ------------------------------------------------ */

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
	if (c->arch[0])
		json_object_set_new(r, "arch", json_string(c->arch));
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
int pc_record(const struct conn *c, const struct outcome *o, int audit)
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
		int lfd = c->cfg->pkglog_fd;
		if (s && lfd >= 0) {
			size_t n = strlen(s);
			s[n] = '\n'; /* one write per line: lines never interleave */
			if (log_append(lfd, s, n + 1) < 0)
				pc_diag(c, "cannot append to %s: %s", LOG, strerror(errno));
			s[n] = 0;
		}
		free(s);
		json_decref(line);
	}
	int rc = 0;
	if (audit) {
		struct sbx_err e = { 0 };
		if (c->cfg->audit(c->cfg->ctx, "package.fetch", r, &e) < 0) {
			pc_diag(c, "cannot append package.fetch to the audit trail: %s", e.msg);
			rc = -1;
		}
	}
	json_decref(r);
	return rc;
}

/* The session's download budget, kept by the root writer (proxy.c) under
 * its lock: give back `give` bytes reserved earlier and not used, then
 * reserve `take` bytes of max_download, so concurrent requests cannot
 * overdraw it.  0: granted; 1: refused (*used set, nothing reserved); -1:
 * the counter cannot be read or written. */
int pc_budget_op(const struct conn *c, uint64_t take, uint64_t give, uint64_t *used)
{
	return c->cfg->budget(c->cfg->ctx, take, give, used);
}

int pc_budget_take(const struct conn *c, uint64_t n, uint64_t *used)
{
	return pc_budget_op(c, n, 0, used);
}

uint64_t pc_budget_left(const struct conn *c, uint64_t used)
{
	return used < c->cfg->pkg->max_download ? c->cfg->pkg->max_download - used : 0;
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

/* ---- the policy's package rules ------------------------------------------- */

const char *pc_rules_source(const struct conn *c, int type, char *buf, size_t n)
{
	const struct sbx_pkgrules_type *y = &c->cfg->rules->t[type];
	if (y->locked == 1)
		snprintf(buf, n, "the lock %s (packages.lock.%s)", y->source, sbx_policy_registry_names[type]);
	else
		snprintf(buf, n, "packages.pins.%s", sbx_policy_registry_names[type]);
	return buf;
}

int pc_rules_check(struct conn *c, int type, int audit)
{
	const struct sbx_pkgrules *r = c->cfg->rules;
	if (!r)
		return 0;
	char why[600], src[400], msg[800];
	const char *no = sbx_pkgrules_name(r, type, c->package, why, sizeof why);
	if (!no && c->version[0] && !sbx_pkgrules_version(r, type, c->package, c->version)) {
		snprintf(why, sizeof why, "%s %s is not in %s", c->package, c->version,
			 pc_rules_source(c, type, src, sizeof src));
		no = why;
	}
	if (!no)
		return 0;
	snprintf(msg, sizeof msg, "%s, in policy %s", no, pc_policy_name(c));
	struct outcome o = { 0 };
	pc_refuse(c, &o, 403, msg, audit);
	return 1;
}

/* ---- routing ------------------------------------------------------------------ */

/* HEAD of an index page or metadata: those are never cached, and HEAD is
 * answered from the cache only. */
int pc_refuse_head(struct conn *c)
{
	struct outcome o = { 0 };
	char msg[400];
	snprintf(msg, sizeof msg, "the %s of %s is not cached (HEAD is answered from the cache only; use GET)", c->kind,
		 c->package);
	return pc_refuse(c, &o, 404, msg, 0);
}

static int route(struct conn *c)
{
	struct outcome o = { 0 };
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
			return pc_refuse(c, &o, 404, "not a package cache URL", 0);
		if (pc_pct_decode(p, len, seg[ns], sizeof seg[ns]) < 0)
			return pc_refuse(c, &o, 400, "bad escape in the URL", 0);
		ns++;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (ns && !seg[ns - 1][0])
		ns--; /* a trailing slash */
	for (unsigned i = 0; i < ns; i++)
		if (!seg[i][0] || !strcmp(seg[i], ".") || !strcmp(seg[i], ".."))
			return pc_refuse(c, &o, 404, "not a package cache URL", 0);
	if (ns < 3 || (strcmp(seg[0], "pypi") && strcmp(seg[0], "npm") && strcmp(seg[0], "apt")))
		return pc_refuse(c, &o, 404, "not a package cache URL (try /pypi/0/simple/NAME/ or /npm/0/NAME)", 0);
	int type = !strcmp(seg[0], "npm") ? SBX_REG_NPM : !strcmp(seg[0], "apt") ? SBX_REG_APT : SBX_REG_PYPI;
	c->npm = type == SBX_REG_NPM;
	char *end;
	unsigned long idx = strtoul(seg[1], &end, 10);
	if (*end || seg[1][0] < '0' || seg[1][0] > '9' || (seg[1][0] == '0' && seg[1][1]) || idx > 64)
		return pc_refuse(c, &o, 404, "not a package cache URL", 0);
	snprintf(c->registry, sizeof c->registry, "%s/%lu", seg[0], idx);
	if (!strcmp(seg[2], "simple") && !c->npm)
		c->index = 1; /* for pc_refuse(): pip reads these */
	char msg[400];
	if (c->cfg->pkg->mode != SBX_PKG_ALLOWLIST) {
		snprintf(msg, sizeof msg, "package installs are refused: packages.mode: offline in policy %s",
			 pc_policy_name(c));
		return pc_refuse(c, &o, 403, msg, 0);
	}
	const struct sbx_limit_registry *r = registry(c, type, (unsigned)idx);
	if (!r) {
		snprintf(msg, sizeof msg, "policy %s has no %s registry number %lu in packages.registries",
			 pc_policy_name(c), seg[0], idx);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	c->reg_url = r->url;
	if (type == SBX_REG_APT)
		return pc_route_apt(c, r, (unsigned)idx, seg, ns);
	return c->npm ? pc_route_npm(c, r->url, seg, ns) : pc_route_pypi(c, r->url, seg, ns);
}

int sbx_pkgcache_serve(const struct sbx_pkgcache_cfg *cfg, int conn_fd)
{
	if (sbx_pkgcache_init(NULL) < 0 || !cfg || !cfg->pkg || cfg->cache_fd < 0 || !cfg->audit || !cfg->budget ||
	    !cfg->session)
		return -1;
	struct conn c = { .cfg = cfg, .fd = conn_fd };
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
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
	struct outcome o = { 0 };
	if (used < 0) {
		char msg[64];
		snprintf(msg, sizeof msg, "%s",
			 status == 431   ? "request head too large"
			 : status == 414 ? "URI too long"
			 : status == 505 ? "HTTP version not supported"
					 : "bad request");
		return pc_refuse(&c, &o, status ? status : 400, msg, 0) < 0 ? -1 : 0;
	}
	c.head = !strcmp(c.req.method, "HEAD");
	if (strcmp(c.req.method, "GET") && !c.head)
		return pc_refuse(&c, &o, 405, "only GET and HEAD", 0) < 0 ? -1 : 0;
	if (c.req.has_body)
		return pc_refuse(&c, &o, 400, "a request body is not accepted", 0) < 0 ? -1 : 0;
	int rc = route(&c) < 0 ? -1 : 0;
	pc_slot_give(&c);
	return rc;
}
