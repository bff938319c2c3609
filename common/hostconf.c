/* The host configuration loader (sbx.yaml(5)).  Like the policy loader it
 * walks libyaml's event stream against a fixed schema, so an alias is never
 * expanded and a document deeper than the schema is refused at its first
 * extra level.  Anchors, aliases, tags, directives, several documents,
 * unknown or duplicate keys, wrong types and out-of-range numbers are all
 * errors with file:line:col. */
#include "hostconf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "units.h"
#include "yamlstrict.h"
#include "util.h"

#define SCALAR_MAX 256
#define DEPTH_MAX 8

/* Walk a mapping whose keys are any of keys[] (NULL: any name, checked by
 * fn); fn is called with the value's first event current. */
typedef int (*val_fn)(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path);
struct walk {
	val_fn fn;
	void *obj;
};

static int walk_value(struct sbx_yaml *c, int k, const char *key, yaml_mark_t km, const char *path, void *arg)
{
	const struct walk *w = arg;
	(void)k;
	return w->fn(c, key, km, w->obj, path);
}

/* A mapping (yamlstrict.h's walker) of the NULL-terminated keys, or of
 * any names (keys NULL: tenants, templates). */
static int walk_map(struct sbx_yaml *c, const char *path, const char *const *keys, val_fn fn, void *obj)
{
	size_t n = 0;
	while (keys && keys[n])
		n++;
	struct walk w = { fn, obj };
	return sbx_yaml_map(c, path, keys, n, walk_value, &w, NULL);
}

static int pool_value(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_pool_conf *p = obj;
	const char *s = sbx_yaml_scalar(c, path);
	uint64_t v;
	if (!s)
		return -1;
	yaml_mark_t m = c->ev.start_mark;
	if (!strcmp(key, "size")) {
		if (sbx_parse_uint_max(s, SBX_POOL_SIZE_MAX, &v) < 0)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a whole number in 0..%d", path, SBX_YAML_SHOW(s),
					      SBX_POOL_SIZE_MAX);
		p->size = (unsigned)v;
	} else if (!strcmp(key, "vcpus")) {
		if (sbx_parse_uint_max(s, 64, &v) < 0 || v < 1)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a whole number in 1..64", path, SBX_YAML_SHOW(s));
		p->vcpus = (unsigned)v;
	} else if (!strcmp(key, "network")) {
		if (sbx_parse_uint_max(s, SBX_POOL_SIZE_MAX, &v) < 0)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a whole number in 0..%d", path, SBX_YAML_SHOW(s),
					      SBX_POOL_SIZE_MAX);
		p->network = (unsigned)v;
	} else if (!strcmp(key, "memory")) {
		if (sbx_parse_size(s, &v) < 0 || v < 64 * MIB || v > (64ull << 30) || v % MIB)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a size of whole MiB in 64M..64G", path,
					      SBX_YAML_SHOW(s));
		p->memory_mib = (unsigned)(v / MIB);
	} else {
		if (sbx_parse_size(s, &v) < 0 || v < 16 * MIB || v > (1ull << 40))
			return sbx_yaml_failm(c, m, "%s: '%s' is not a size in 16M..1T", path, SBX_YAML_SHOW(s));
		p->disk = v;
	}
	(void)km;
	return 0;
}

/* NAME or NAME@VERSION, each as an ID: 1..63 of [A-Za-z0-9_.-], not
 * starting with '.' or '-' (what sbx_template_find accepts). */
static bool name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 63 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

static int template_entry(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf *hc = obj;
	const char *at = strchr(key, '@');
	size_t nl = at ? (size_t)(at - key) : strlen(key);
	if (!name_ok(key, nl) || (at && !name_ok(at + 1, strlen(at + 1))) || strlen(key) >= sizeof hc->pool[0].tmpl)
		return sbx_yaml_failm(c, km, "'%s' is not a template name (NAME or NAME@VERSION)", SBX_YAML_SHOW(key));
	if (hc->npool == SBX_POOL_TEMPLATES_MAX)
		return sbx_yaml_failm(c, km, "pool.templates: more than %d templates", SBX_POOL_TEMPLATES_MAX);
	struct sbx_pool_conf *p = &hc->pool[hc->npool];
	memset(p, 0, sizeof *p);
	snprintf(p->tmpl, sizeof p->tmpl, "%s", key);
	p->vcpus = 1;
	p->memory_mib = 256;
	p->disk = 1ull << 30;
	p->size = UINT32_MAX; /* required */
	static const char *const keys[] = { "disk", "memory", "network", "size", "vcpus", NULL };
	yaml_mark_t m = c->ev.start_mark;
	if (walk_map(c, path, keys, pool_value, p) < 0)
		return -1;
	if (p->size == UINT32_MAX)
		return sbx_yaml_failm(c, m, "%s: size is required", path);
	if (p->network > p->size)
		return sbx_yaml_failm(c, m, "%s: network (%u) is more than size (%u)", path, p->network, p->size);
	hc->npool++;
	return 0;
}

/* A root: absolute, normalized (no "", "." or ".." component, no trailing
 * "/"), not "/" itself, printable; "{tenant}" only as a whole component. */
static bool root_ok(const char *s)
{
	size_t n = strlen(s);
	if (s[0] != '/' || n < 2 || s[n - 1] == '/')
		return false;
	for (const char *p = s; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f)
			return false;
	for (const char *p = s + 1;;) {
		size_t l = strcspn(p, "/");
		if (!l || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		const char *t = strstr(p, "{tenant}");
		if (t && t < p + l && (t != p || l != 8))
			return false;
		if (!p[l])
			return true;
		p += l + 1;
	}
}

struct seq_ctx {
	char *v; /* n slots of len bytes */
	size_t len;
	unsigned max, *n;
	bool env; /* environment variable names, else roots */
};

static int seq_items(struct sbx_yaml *c, const char *path, struct seq_ctx *q)
{
	if (c->ev.type != YAML_SEQUENCE_START_EVENT)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected a list", path);
	for (;;) {
		if (sbx_yaml_next(c) < 0)
			return -1;
		if (c->ev.type == YAML_SEQUENCE_END_EVENT)
			return 0;
		const char *s = sbx_yaml_scalar(c, path);
		if (!s)
			return -1;
		yaml_mark_t m = c->ev.start_mark;
		bool ok;
		if (q->env) {
			ok = strlen(s) < q->len && ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_');
			for (const char *p = s; ok && *p; p++)
				ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
				     *p == '_';
			if (!ok)
				return sbx_yaml_failm(c, m, "%s: '%s' is not an environment variable name", path,
						      SBX_YAML_SHOW(s));
		} else if (!root_ok(s) || strlen(s) >= q->len) {
			return sbx_yaml_failm(c, m, "%s: '%s' is not an absolute, normalized directory other than /",
					      path, SBX_YAML_SHOW(s));
		}
		for (unsigned i = 0; i < *q->n; i++)
			if (!strcmp(q->v + i * q->len, s))
				return sbx_yaml_failm(c, m, "%s: '%s' is listed twice", path, SBX_YAML_SHOW(s));
		if (*q->n == q->max)
			return sbx_yaml_failm(c, m, "%s: more than %u entries", path, q->max);
		snprintf(q->v + (*q->n)++ * q->len, q->len, "%s", s);
	}
}

static int host_paths_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostpath_conf *hp = obj;
	bool rd = !strcmp(key, "read");
	struct seq_ctx q = { .v = rd ? hp->read[0] : hp->write[0],
			     .len = SBX_HOSTPATH_ROOT_LEN,
			     .max = SBX_HOSTPATH_ROOTS_MAX,
			     .n = rd ? &hp->nread : &hp->nwrite };
	(void)km;
	return seq_items(c, path, &q);
}

static int secrets_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostpath_conf *hp = obj;
	struct seq_ctx q = { .v = hp->env_allow[0],
			     .len = sizeof hp->env_allow[0],
			     .max = SBX_ENV_ALLOW_MAX,
			     .n = &hp->nenv,
			     .env = true };
	(void)key, (void)km;
	return seq_items(c, path, &q);
}

static int pool_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	return walk_map(c, path, NULL, template_entry, obj);
}

/* A quota's values are parsed over UINT32_MAX / UINT64_MAX markers so an
 * entry of tenants[] can tell what it sets. */
static int quota_value(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_quota *q = obj;
	const char *s = sbx_yaml_scalar(c, path);
	uint64_t v;
	if (!s)
		return -1;
	yaml_mark_t m = c->ev.start_mark;
	(void)km;
	if (!strcmp(key, "memory")) {
		if (sbx_parse_size(s, &v) < 0 || v < 64 * MIB || v > (1ull << 50) || v % MIB)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a size of whole MiB from 64M", path,
					      SBX_YAML_SHOW(s));
		q->memory_mib = v / MIB;
		return 0;
	}
	/* Per-session ceilings: the ranges of the policy keys they bound. */
	if (!strcmp(key, "session_disk_bps") || !strcmp(key, "session_network_rate")) {
		int disk = !strcmp(key, "session_disk_bps");
		uint64_t lo = disk ? MIB : 64 * KIB, hi = disk ? 64 * GIB : 4 * GIB;
		if (sbx_parse_size(s, &v) < 0 || v < lo || v > hi)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a size from %s to %s", path, SBX_YAML_SHOW(s),
					      disk ? "1M" : "64K", disk ? "64G" : "4G");
		*(disk ? &q->session_disk_bps : &q->session_network_rate) = v;
		return 0;
	}
	if (!strcmp(key, "session_disk_iops")) {
		if (sbx_parse_uint_max(s, 1000000, &v) < 0 || v < 10)
			return sbx_yaml_failm(c, m, "%s: '%s' is not a whole number in 10..1000000", path,
					      SBX_YAML_SHOW(s));
		q->session_disk_iops = (unsigned)v;
		return 0;
	}
	uint64_t *bytes = !strcmp(key, "workspace_bytes")  ? &q->workspace_bytes
			  : !strcmp(key, "snapshot_bytes") ? &q->snapshot_bytes
			  : !strcmp(key, "cache_bytes")    ? &q->cache_bytes
							   : NULL;
	if (bytes) {
		/* A workspace is at least 16M; a cache or snapshots, any size. */
		uint64_t min = bytes == &q->workspace_bytes ? 16 * MIB : MIB;
		if (sbx_parse_size(s, &v) < 0 || v < min || v > (1ull << 50))
			return sbx_yaml_failm(c, m, "%s: '%s' is not a size from %lluM", path, SBX_YAML_SHOW(s),
					      (unsigned long long)(min / MIB));
		*bytes = v;
		return 0;
	}
	if (sbx_parse_uint_max(s, 1000000, &v) < 0 || v < 1)
		return sbx_yaml_failm(c, m, "%s: '%s' is not a whole number in 1..1000000", path, SBX_YAML_SHOW(s));
	if (!strcmp(key, "vcpus"))
		q->vcpus = (unsigned)v;
	else
		q->sessions = (unsigned)v;
	return 0;
}

static const char *const quota_keys[] = { "cache_bytes",          "memory",   "session_disk_bps", "session_disk_iops",
					  "session_network_rate", "sessions", "snapshot_bytes",   "vcpus",
					  "workspace_bytes",      NULL };

static int quota_tenant(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_quota_conf *qc = obj;
	if (!name_ok(key, strlen(key)))
		return sbx_yaml_failm(c, km, "quotas.tenants: '%s' is not a tenant ID", SBX_YAML_SHOW(key));
	if (qc->ntenants == SBX_QUOTA_TENANTS_MAX)
		return sbx_yaml_failm(c, km, "quotas.tenants: more than %d tenants", SBX_QUOTA_TENANTS_MAX);
	struct sbx_tenant_quota *t = &qc->tenants[qc->ntenants];
	snprintf(t->tenant, sizeof t->tenant, "%s", key);
	t->q.sessions = t->q.vcpus = t->q.session_disk_iops = UINT32_MAX;
	t->q.memory_mib = t->q.workspace_bytes = t->q.snapshot_bytes = t->q.cache_bytes = UINT64_MAX;
	t->q.session_disk_bps = t->q.session_network_rate = UINT64_MAX;
	if (walk_map(c, path, quota_keys, quota_value, &t->q) < 0)
		return -1;
	qc->ntenants++;
	return 0;
}

static int quotas_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_quota_conf *qc = obj;
	(void)km;
	if (!strcmp(key, "per_tenant"))
		return walk_map(c, path, quota_keys, quota_value, &qc->per_tenant);
	return walk_map(c, path, NULL, quota_tenant, qc);
}

int sbx_hostconf_tenant_quota(const char *tenant, struct sbx_quota *q, struct sbx_err *err)
{
	/* Static: up to 64 tenants' entries, too large for the stack. */
	static struct sbx_hostconf hc;
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	sbx_hostconf_quota(&hc, tenant, q);
	return 0;
}

void sbx_hostconf_quota(const struct sbx_hostconf *hc, const char *tenant, struct sbx_quota *q)
{
	*q = hc->quotas.per_tenant;
	for (unsigned i = 0; tenant && i < hc->quotas.ntenants; i++) {
		const struct sbx_tenant_quota *t = &hc->quotas.tenants[i];
		if (strcmp(t->tenant, tenant))
			continue;
		if (t->q.sessions != UINT32_MAX)
			q->sessions = t->q.sessions;
		if (t->q.vcpus != UINT32_MAX)
			q->vcpus = t->q.vcpus;
		if (t->q.memory_mib != UINT64_MAX)
			q->memory_mib = t->q.memory_mib;
		if (t->q.workspace_bytes != UINT64_MAX)
			q->workspace_bytes = t->q.workspace_bytes;
		if (t->q.snapshot_bytes != UINT64_MAX)
			q->snapshot_bytes = t->q.snapshot_bytes;
		if (t->q.cache_bytes != UINT64_MAX)
			q->cache_bytes = t->q.cache_bytes;
		if (t->q.session_disk_bps != UINT64_MAX)
			q->session_disk_bps = t->q.session_disk_bps;
		if (t->q.session_disk_iops != UINT32_MAX)
			q->session_disk_iops = t->q.session_disk_iops;
		if (t->q.session_network_rate != UINT64_MAX)
			q->session_network_rate = t->q.session_network_rate;
	}
}

/* packages: what the package cache (pkgcache.h) may keep on this host. */
static int packages_value(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_packages *p = obj;
	const char *s = sbx_yaml_scalar(c, path);
	uint64_t v;
	if (!s)
		return -1;
	if (sbx_parse_size(s, &v) < 0 || v < MIB || v > (1ull << 50))
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a size in 1M..1P", path, SBX_YAML_SHOW(s));
	p->cache_quota = v; /* the only key */
	(void)key, (void)km;
	return 0;
}

/* audit: max_size (a size, at least 64K so a segment holds a record of
 * the largest size), session_max (as much, for the same reason), reserve
 * (any size, 0 included) and keep (segments). */
static int audit_value(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_audit *a = obj;
	const char *s = sbx_yaml_scalar(c, path);
	uint64_t v;
	(void)km;
	if (!s)
		return -1;
	if (!strcmp(key, "reserve")) {
		if (sbx_parse_size(s, &v) < 0 || v > (1ull << 50))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a size in 0..1P", path,
					      SBX_YAML_SHOW(s));
		a->reserve = v;
		a->reserve_set = 1;
		return 0;
	}
	if (!strcmp(key, "max_size") || !strcmp(key, "session_max")) {
		if (sbx_parse_size(s, &v) < 0 || v < 65536 || v > (1ull << 50))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a size in 64K..1P", path,
					      SBX_YAML_SHOW(s));
		*(key[0] == 'm' ? &a->max_size : &a->session_max) = v;
		return 0;
	}
	if (sbx_parse_uint_max(s, 1000000, &v) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a count of segments in 0..1000000", path,
				      SBX_YAML_SHOW(s));
	a->keep = (unsigned)v;
	a->keep_set = 1;
	return 0;
}

uint64_t sbx_hostconf_reserve(const struct sbx_hostconf_audit *a, uint64_t fs_bytes)
{
	if (a->reserve_set)
		return a->reserve;
	uint64_t pct = fs_bytes / 100 * SBX_AUDIT_RESERVE_PCT;
	return pct < SBX_AUDIT_RESERVE_MIN   ? SBX_AUDIT_RESERVE_MIN
	       : pct > SBX_AUDIT_RESERVE_MAX ? SBX_AUDIT_RESERVE_MAX
					     : pct;
}

/* templates.publishers: a sequence of tenant IDs. */
static int templates_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf *hc = obj;
	(void)key;
	(void)km;
	if (c->ev.type != YAML_SEQUENCE_START_EVENT)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected a list of tenant IDs", path);
	for (;;) {
		if (sbx_yaml_next(c) < 0)
			return -1;
		if (c->ev.type == YAML_SEQUENCE_END_EVENT)
			return 0;
		const char *s = sbx_yaml_scalar(c, path);
		if (!s)
			return -1;
		if (!name_ok(s, strlen(s)) || !strcmp(s, "_") || !strcasecmp(s, "operator"))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a tenant ID", path,
					      SBX_YAML_SHOW(s));
		if (hc->npublishers == SBX_PUBLISHERS_MAX)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: more than %d tenants", path,
					      SBX_PUBLISHERS_MAX);
		snprintf(hc->publishers[hc->npublishers++], sizeof hc->publishers[0], "%s", s);
	}
}

/* serve.users: NAME or UID to a tenant ID. */
static int serve_user(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_serve *sv = obj;
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	size_t kl = strlen(key);
	if (!kl || kl >= sizeof sv->users[0].user ||
	    strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != kl || key[0] == '-')
		return sbx_yaml_failm(c, km, "serve.users: '%s' is not a user name or uid", SBX_YAML_SHOW(key));
	if (!name_ok(s, strlen(s)) || !strcmp(s, "_") || !strcasecmp(s, "operator"))
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a tenant ID", path, SBX_YAML_SHOW(s));
	if (sv->nusers == SBX_SERVE_USERS_MAX)
		return sbx_yaml_failm(c, km, "serve.users: more than %d users", SBX_SERVE_USERS_MAX);
	snprintf(sv->users[sv->nusers].user, sizeof sv->users[0].user, "%s", key);
	snprintf(sv->users[sv->nusers].tenant, sizeof sv->users[0].tenant, "%s", s);
	sv->nusers++;
	return 0;
}

/* serve.tls: cert and key, absolute paths. */
static int serve_tls_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_serve *sv = obj;
	(void)km;
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	char *dst = !strcmp(key, "cert") ? sv->tls_cert : sv->tls_key;
	if (s[0] != '/' || strlen(s) >= sizeof sv->tls_cert)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected an absolute path of at most %zu bytes", path,
				      sizeof sv->tls_cert - 1);
	snprintf(dst, sizeof sv->tls_cert, "%s", s);
	return 0;
}

static int serve_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_serve *sv = obj;
	if (!strcmp(key, "users"))
		return walk_map(c, path, NULL, serve_user, sv);
	if (!strcmp(key, "tls")) {
		/* Half a TLS setup would serve plain HTTP where TLS was meant. */
		static const char *const tkeys[] = { "cert", "key", NULL };
		if (walk_map(c, path, tkeys, serve_tls_key, sv) < 0)
			return -1;
		if (!sv->tls_cert[0] || !sv->tls_key[0])
			return sbx_yaml_failm(c, km, "%s: expected both cert and key", path);
		return 0;
	}
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	if (!strcmp(key, "socket")) {
		if (s[0] != '/' || strlen(s) >= sizeof sv->socket)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected an absolute path of at most %zu bytes",
					      path, sizeof sv->socket - 1);
		snprintf(sv->socket, sizeof sv->socket, "%s", s);
		return 0;
	}
	if (!strcmp(key, "policy")) {
		if (s[0] != '/' || strlen(s) >= sizeof sv->policy)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected an absolute path of at most %zu bytes",
					      path, sizeof sv->policy - 1);
		snprintf(sv->policy, sizeof sv->policy, "%s", s);
		return 0;
	}
	if (!strcmp(key, "rate")) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		if (*end || !*s || v < 1 || v > 100000)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected requests a second, 1 to 100000", path);
		sv->rate = (unsigned)v;
		return 0;
	}
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || !colon[1] || strlen(s) >= sizeof sv->listen ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected ADDRESS:PORT, as 127.0.0.1:49982", path);
	snprintf(sv->listen, sizeof sv->listen, "%s", s);
	return 0;
}

/* oci.policies: NAME to an absolute policy file. */
static int oci_policy_entry(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_oci *o = obj;
	if (!name_ok(key, strlen(key)))
		return sbx_yaml_failm(c, km, "%s: '%s' is not a policy name (1..63 of [A-Za-z0-9_.-])", path,
				      SBX_YAML_SHOW(key));
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	if (s[0] != '/' || strlen(s) >= sizeof o->policies[0].file)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: expected an absolute path of at most %zu bytes", path,
				      sizeof o->policies[0].file - 1);
	if (o->npolicies == SBX_OCI_POLICIES_MAX)
		return sbx_yaml_failm(c, km, "%s: more than %d policies", path, SBX_OCI_POLICIES_MAX);
	snprintf(o->policies[o->npolicies].name, sizeof o->policies[0].name, "%s", key);
	snprintf(o->policies[o->npolicies].file, sizeof o->policies[0].file, "%s", s);
	o->npolicies++;
	return 0;
}

/* oci.templates: NAME to a template, NAME or NAME@VERSION. */
static int oci_template_entry(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_oci *o = obj;
	if (!name_ok(key, strlen(key)))
		return sbx_yaml_failm(c, km, "%s: '%s' is not a name (1..63 of [A-Za-z0-9_.-])", path,
				      SBX_YAML_SHOW(key));
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	const char *at = strchr(s, '@');
	size_t nl = at ? (size_t)(at - s) : strlen(s);
	if (!name_ok(s, nl) || (at && !name_ok(at + 1, strlen(at + 1))) || strlen(s) >= sizeof o->templates[0].tmpl)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a template name (NAME or NAME@VERSION)",
				      path, SBX_YAML_SHOW(s));
	if (o->ntemplates == SBX_OCI_POLICIES_MAX)
		return sbx_yaml_failm(c, km, "%s: more than %d templates", path, SBX_OCI_POLICIES_MAX);
	snprintf(o->templates[o->ntemplates].name, sizeof o->templates[0].name, "%s", key);
	snprintf(o->templates[o->ntemplates].tmpl, sizeof o->templates[0].tmpl, "%s", s);
	o->ntemplates++;
	return 0;
}

const char *sbx_hostconf_oci_template(const struct sbx_hostconf *hc, const char *name)
{
	for (unsigned i = 0; i < hc->oci.ntemplates; i++)
		if (!strcmp(hc->oci.templates[i].name, name))
			return hc->oci.templates[i].tmpl;
	return NULL;
}

static int oci_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf_oci *o = obj;
	if (!strcmp(key, "policies"))
		return walk_map(c, path, NULL, oci_policy_entry, o);
	if (!strcmp(key, "templates"))
		return walk_map(c, path, NULL, oci_template_entry, o);
	const char *s = sbx_yaml_scalar(c, path);
	if (!s)
		return -1;
	if (!name_ok(s, strlen(s)))
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is not a policy name", path, SBX_YAML_SHOW(s));
	snprintf(o->default_policy, sizeof o->default_policy, "%s", s);
	(void)km;
	return 0;
}

const char *sbx_hostconf_oci_policy(const struct sbx_hostconf *hc, const char *name)
{
	for (unsigned i = 0; i < hc->oci.npolicies; i++)
		if (!strcmp(hc->oci.policies[i].name, name))
			return hc->oci.policies[i].file;
	return NULL;
}

static int top_key(struct sbx_yaml *c, const char *key, yaml_mark_t km, void *obj, const char *path)
{
	struct sbx_hostconf *hc = obj;
	if (!strcmp(key, "oci")) {
		static const char *const okeys[] = { "default_policy", "policies", "templates", NULL };
		yaml_mark_t m = c->ev.start_mark;
		if (walk_map(c, path, okeys, oci_key, &hc->oci) < 0)
			return -1;
		/* A default that names nothing would leave every container
		 * without the policy the operator meant. */
		if (hc->oci.default_policy[0] && !sbx_hostconf_oci_policy(hc, hc->oci.default_policy))
			return sbx_yaml_failm(c, m, "oci.default_policy: '%s' is not one of oci.policies",
					      SBX_YAML_SHOW(hc->oci.default_policy));
		return 0;
	}
	if (!strcmp(key, "audit")) {
		static const char *const audit_keys[] = { "keep", "max_size", "reserve", "session_max", NULL };
		return walk_map(c, "audit", audit_keys, audit_value, &hc->audit);
	}
	if (!strcmp(key, "packages")) {
		static const char *const pkg_keys[] = { "cache_quota", NULL };
		return walk_map(c, "packages", pkg_keys, packages_value, &hc->packages);
	}
	if (!strcmp(key, "quotas")) {
		static const char *const keys[] = { "per_tenant", "tenants", NULL };
		return walk_map(c, "quotas", keys, quotas_key, &hc->quotas);
	}
	if (!strcmp(key, "host_paths")) {
		static const char *const keys[] = { "read", "write", NULL };
		return walk_map(c, "host_paths", keys, host_paths_key, &hc->paths);
	}
	if (!strcmp(key, "secrets")) {
		static const char *const keys[] = { "env_allow", NULL };
		return walk_map(c, "secrets", keys, secrets_key, &hc->paths);
	}
	if (!strcmp(key, "serve")) {
		static const char *const skeys[] = { "listen", "policy", "rate", "socket", "tls", "users", NULL };
		return walk_map(c, path, skeys, serve_key, &hc->serve);
	}
	if (!strcmp(key, "templates")) {
		static const char *const tkeys[] = { "publishers", NULL };
		return walk_map(c, path, tkeys, templates_key, hc);
	}
	static const char *const keys[] = { "templates", NULL };
	return walk_map(c, "pool", keys, pool_key, obj);
}

int sbx_hostconf_publisher(const struct sbx_hostconf *hc, const char *tenant)
{
	for (unsigned i = 0; tenant && i < hc->npublishers; i++)
		if (!strcmp(hc->publishers[i], tenant))
			return 1;
	return 0;
}

int sbx_hostconf_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_hostconf *hc, struct sbx_err *err)
{
	memset(hc, 0, sizeof *hc);
	snprintf(hc->source, sizeof hc->source, "%s", name);
	struct sbx_yaml c;
	if (sbx_yaml_open(&c, name, buf, n, DEPTH_MAX, SCALAR_MAX, err) < 0) {
		sbx_yaml_close(&c);
		return -1;
	}
	int rc = -1;
	static const char *const keys[] = { "audit",  "host_paths", "oci",   "packages",  "pool",
					    "quotas", "secrets",    "serve", "templates", NULL };
	if (sbx_yaml_next(&c) < 0 || sbx_yaml_next(&c) < 0)
		goto out;
	if (c.ev.type == YAML_STREAM_END_EVENT) {
		rc = 0; /* nothing but comments: an empty configuration */
		goto out;
	}
	if (sbx_yaml_next(&c) < 0) /* after DOCUMENT-START, the top node */
		goto out;
	if (c.ev.type != YAML_MAPPING_START_EVENT) {
		sbx_yaml_failm(&c, c.ev.start_mark, "the top level must be a mapping");
		goto out;
	}
	if (walk_map(&c, "", keys, top_key, hc) < 0 || sbx_yaml_next(&c) < 0)
		goto out;
	if (c.ev.type != YAML_DOCUMENT_END_EVENT || sbx_yaml_next(&c) < 0)
		goto out;
	if (c.ev.type != YAML_STREAM_END_EVENT) {
		sbx_yaml_failm(&c, c.ev.start_mark, "only one document is allowed");
		goto out;
	}
	rc = 0;
out:
	sbx_yaml_close(&c);
	if (rc < 0) {
		hc->npool = hc->npublishers = 0;
		memset(&hc->serve, 0, sizeof hc->serve); /* nor any user a tenant */
		memset(&hc->paths, 0, sizeof hc->paths); /* a bad file grants nothing */
		memset(&hc->quotas, 0, sizeof hc->quotas);
		memset(&hc->oci, 0, sizeof hc->oci);
	}
	return rc;
}

const char *sbx_hostconf_path(char *buf, size_t n)
{
	const char *root = getenv("SBX_ROOT");
	snprintf(buf, n, "%s/etc/sbx/sbx.yaml", root && *root ? root : "");
	return buf;
}

int sbx_hostconf_load(struct sbx_hostconf *hc, struct sbx_err *err)
{
	char path[600];
	memset(hc, 0, sizeof *hc);
	sbx_hostconf_path(path, sizeof path);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read %s", path);
	if (!S_ISREG(st.st_mode) || st.st_size > SBX_HOSTCONF_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: not a regular file of at most %u bytes", path,
				   SBX_HOSTCONF_FILE_MAX);
	_cleanup_free_ uint8_t *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read %s", path);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read %s", path);
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return sbx_hostconf_parse(path, buf, got, hc, err);
}

int sbx_hostconf_check(struct sbx_err *err)
{
	_cleanup_free_ struct sbx_hostconf *hc = malloc(sizeof *hc); /* tens of KiB: not on the stack */
	if (!hc)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	return sbx_hostconf_load(hc, err);
}
