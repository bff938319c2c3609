/* The package cache's npm routes (pkgcache.h): metadata documents with
 * their tarball URLs rewritten to name the cache, and the tarballs,
 * checked against dist.integrity / dist.shasum. */
#include "npmtgz.h"
#include "pkgc.h"
#include "policy.h"
#include "util.h"

#include <fcntl.h>
#include <string.h>

#define NPM_META "npm-meta" /* each npm package's metadata as last served with a tarball */

/* ---- npm -------------------------------------------------------------------- */

/* NPM_META/m-HEX: the metadata document of (registry, package) as it was
 * when one of its tarballs was last served, so that what the cache holds
 * can still be installed while the registry cannot be reached.  Kept only
 * beside a tarball served (not for every name a guest asks about), as the
 * registry sent it: it names the hashes the cached tarballs are checked
 * against, never their bytes. */
static void npm_meta_name(const char *reg_url, const char *pkg, char out[70])
{
	SHA2_CTX h;
	uint8_t d[32];
	SHA256Init(&h);
	SHA256Update(&h, (const uint8_t *)reg_url, strlen(reg_url) + 1);
	SHA256Update(&h, (const uint8_t *)pkg, strlen(pkg) + 1);
	SHA256Final(d, &h);
	memcpy(out, "m-", 2);
	pc_to_hex(d, 32, out + 2);
}

static void npm_meta_keep(const struct conn *c, const char *reg_url, const char *pkg, const char *doc)
{
	char nm[70];
	npm_meta_name(reg_url, pkg, nm);
	_cleanup_close_ int dir = pc_cache_dir(c);
	_cleanup_close_ int md = dir < 0 ? -1 : pc_subdir(dir, NPM_META);
	if (md < 0 || sbx_atomic_write_at(md, nm, doc, strlen(doc), 0600, NULL) < 0)
		pc_diag(c, "cannot keep the metadata of %s for when registry %s is unreachable", pkg, c->registry);
}

static char *npm_meta_stale(const struct conn *c, const char *reg_url, const char *pkg, size_t *len)
{
	char nm[70];
	npm_meta_name(reg_url, pkg, nm);
	_cleanup_close_ int dir = pc_cache_dir(c);
	_cleanup_close_ int md = dir < 0 ? -1 : openat(dir, NPM_META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return md < 0 ? NULL : sbx_read_small_at(md, nm, INDEX_MAX, len);
}

/* The package's metadata document from the registry, parsed.  NULL with
 * the response already sent.  When the registry gives no answer at all
 * (refused, timed out: not an HTTP error, a deny or a budget), the
 * document kept with its last tarball served stands in (*stale set). */
static json_t *npm_load(struct conn *c, struct outcome *o, const char *reg_url, const char *pkg, int *stale)
{
	*stale = 0;
	char path[260], msg[URL_MAX + 300];
	/* A scoped name travels as @scope%2fname, as npm itself sends it. */
	const char *sl = strchr(pkg, '/');
	if (sl)
		snprintf(path, sizeof path, "%.*s%%2f%s", (int)(sl - pkg), pkg, sl + 1);
	else
		snprintf(path, sizeof path, "%s", pkg);
	pc_join_url(c->upstream, sizeof c->upstream, reg_url, path);
	char what[300];
	snprintf(what, sizeof what, "the metadata of %s", pkg);
	uint64_t max;
	if (pc_upstream_begin(c, o, what, &max) < 0)
		return NULL;
	struct fetch f = { .url = c->upstream,
			   .accept = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8",
			   .fd = -1,
			   .max = max,
			   .budget = c };
	int frc = pc_fetch(&f);
	c->charged_up += f.bytes;
	if (frc < 0) {
		free(f.body.p);
		if (pc_refuse_page_budget(c, o, &f, what) < 0)
			return NULL;
		if (f.status == 404 || f.status == 410) {
			snprintf(msg, sizeof msg, "no package %s at registry %s", pkg, c->registry);
			return pc_refuse(c, o, 404, msg, 0), NULL;
		}
		if (f.status == 0 && !f.denied[0] && !f.over && !f.broke && !f.oom) {
			size_t n = 0;
			_cleanup_free_ char *kept = npm_meta_stale(c, reg_url, pkg, &n);
			json_t *doc = kept ? json_loadb(kept, n, 0, NULL) : NULL;
			if (json_is_object(doc) && json_is_object(json_object_get(doc, "versions"))) {
				pc_diag(c,
					"registry %s unreachable (%s): the metadata of %s as kept with its last "
					"tarball",
					c->registry, f.error, pkg);
				*stale = 1;
				o->cache = "stale";
				return doc; /* c->upstream stays the registry's URL of it */
			}
			json_decref(doc);
		}
		snprintf(msg, sizeof msg, "cannot fetch the metadata of %s from registry %s: %s", pkg, c->registry,
			 f.error);
		pc_diag(c, "%s (%s)", msg, c->upstream);
		return pc_refuse(c, o, 502, msg, 0), NULL;
	}
	json_error_t je;
	json_t *doc = json_loadb(f.body.p ? f.body.p : "", f.body.n, 0, &je);
	free(f.body.p);
	if (!json_is_object(doc) || !json_is_object(json_object_get(doc, "versions"))) {
		json_decref(doc);
		snprintf(msg, sizeof msg, "the metadata of %s from registry %s is not an npm document", pkg,
			 c->registry);
		return pc_refuse(c, o, 502, msg, 0), NULL;
	}
	/* Keep the effective URL for resolving relative tarball links. */
	snprintf(c->upstream, sizeof c->upstream, "%s", f.effective);
	return doc;
}

/* With a lock or pins, only their versions are listed: a tag that names
 * another is dropped, and "latest" names a listed one (npm resolves a bare
 * name through it). */
static void tags_fit(json_t *doc)
{
	json_t *vs = json_object_get(doc, "versions"), *tags = json_object_get(doc, "dist-tags"), *v;
	const char *k;
	void *tmp;
	if (!json_is_object(tags)) {
		json_object_set_new(doc, "dist-tags", json_object());
		tags = json_object_get(doc, "dist-tags");
	}
	json_object_foreach_safe (tags, tmp, k, v)
		if (!json_is_string(v) || !json_object_get(vs, json_string_value(v)))
			json_object_del(tags, k);
	const char *last = NULL;
	json_object_foreach (vs, k, v)
		last = k;
	if (!json_object_get(tags, "latest") && last)
		json_object_set_new(tags, "latest", json_string(last));
}

static int npm_metadata(struct conn *c, const char *reg_url, const char *pkg)
{
	struct outcome o = { 0 };
	int stale;
	json_t *doc = npm_load(c, &o, reg_url, pkg, &stale);
	if (!doc)
		return 0;
	json_t *vs = json_object_get(doc, "versions"), *v;
	const char *ver;
	void *tmp;
	const char *base = c->cfg->base_url ? c->cfg->base_url : SBX_PKGCACHE_BASE;
	const struct sbx_pkgrules *r = c->cfg->rules;
	json_object_foreach_safe (vs, tmp, ver, v) {
		json_t *dist = json_object_get(v, "dist");
		if (!pc_version_ok(ver) || !json_is_object(dist) || !sbx_pkgrules_version(r, SBX_REG_NPM, pkg, ver)) {
			json_object_del(vs, ver); /* nothing we could serve */
			continue;
		}
		char url[URL_MAX];
		snprintf(url, sizeof url, "%s/%s/tarball/%s/%s", base, c->registry, pkg, ver);
		json_object_set_new(dist, "tarball", json_string(url));
	}
	if (r && r->t[SBX_REG_NPM].locked)
		tags_fit(doc);
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!s)
		return pc_refuse(c, &o, 500, "out of memory", 0);
	int rc = pc_serve_body(c, &o, "application/json", s, strlen(s));
	free(s);
	return rc;
}

/* With a lock: the tarball is the lock's, by its sha512 alone (what the
 * registry says must agree, and is then not needed).  -1 when the
 * registry names another sha512. */
static int lock_want(const struct conn *c, const char *pkg, const char *ver, struct want *w)
{
	const struct sbx_pkgrules *r = c->cfg->rules;
	if (!r || r->t[SBX_REG_NPM].locked != 1)
		return 0;
	const struct sbx_pkgpin *p = sbx_pkgrules_find(r, SBX_REG_NPM, pkg, ver);
	if (!p || !p->hash[0] || (w->sha512[0] && strcmp(w->sha512, p->hash)))
		return -1;
	memset(w, 0, sizeof *w);
	snprintf(w->sha512, sizeof w->sha512, "%s", p->hash);
	return 0;
}

/* packages.npm_scripts: deny. */
static int refuse_scripts(struct conn *c, struct outcome *o, const char *why)
{
	char msg[700];
	snprintf(msg, sizeof msg, "%s@%s has an install script (%s) and policy %s sets packages.npm_scripts: deny",
		 c->package, c->version, why, pc_policy_name(c));
	return pc_refuse(c, o, 403, msg, 1);
}

/* The tarball is what npm runs from, whatever the metadata said: its
 * package.json and a binding.gyp are looked at before it is served. */
static int inspect_scripts(struct conn *c, struct outcome *o, int fd)
{
	char why[300];
	int r = sbx_npm_tgz_scripts(fd, why, sizeof why);
	if (r == 0)
		return 0;
	if (r > 0)
		return refuse_scripts(c, o, why), 1;
	char msg[700];
	snprintf(msg, sizeof msg,
		 "%s@%s cannot be checked for install scripts (%s), and policy %s sets packages.npm_scripts: deny",
		 c->package, c->version, why, pc_policy_name(c));
	return pc_refuse(c, o, 403, msg, 1), 1;
}

static int npm_tarball(struct conn *c, const char *reg_url, const char *pkg, const char *ver)
{
	struct outcome o = { 0 };
	char msg[600];
	snprintf(c->version, sizeof c->version, "%s", ver);
	int stale;
	json_t *doc = npm_load(c, &o, reg_url, pkg, &stale);
	if (!doc)
		return 0;
	o.cache = NULL; /* the tarball's own: hit or miss */
	json_t *vdoc = json_object_get(json_object_get(doc, "versions"), ver);
	json_t *dist = json_object_get(vdoc, "dist");
	const char *tb = json_string_value(json_object_get(dist, "tarball"));
	if (!tb) {
		json_decref(doc);
		snprintf(msg, sizeof msg, "registry %s has no version %s of %s", c->registry, ver, pkg);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	int no_scripts = c->cfg->pkg->npm_scripts == SBX_NPM_SCRIPTS_DENY;
	char why[300];
	if (no_scripts && sbx_npm_meta_scripts(vdoc, why, sizeof why)) {
		json_decref(doc);
		return refuse_scripts(c, &o, why); /* before anything is downloaded */
	}
	char url[URL_MAX];
	int bad_url = pc_resolve_url(c->upstream, tb, url, sizeof url) < 0;
	struct want w = { 0 };
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
		if (!strncmp(t, "sha512-", 7) && pc_b64_decode(t + 7, d, sizeof d) == 64)
			pc_to_hex(d, 64, w.sha512);
		else if (!strncmp(t, "sha256-", 7) && pc_b64_decode(t + 7, d, sizeof d) == 32)
			pc_to_hex(d, 32, w.sha256);
		else if (!strncmp(t, "sha1-", 5) && pc_b64_decode(t + 5, d, sizeof d) == 20 && !w.sha1[0])
			pc_to_hex(d, 20, w.sha1);
	}
	if (shasum && pc_hex_ok(shasum, 40))
		snprintf(w.sha1, sizeof w.sha1, "%s", shasum);
	if (lock_want(c, pkg, ver, &w) < 0) {
		json_decref(doc);
		char src[400];
		snprintf(msg, sizeof msg,
			 "registry %s gives %s@%s an integrity that is not the one %s names, in policy %s", c->registry,
			 pkg, ver, pc_rules_source(c, SBX_REG_NPM, src, sizeof src), pc_policy_name(c));
		return pc_refuse(c, &o, 403, msg, 1);
	}
	if (no_scripts)
		w.inspect = inspect_scripts;
	/* Cache entries are named by a strong hash only: a SHA-1 collision
	 * must not let one tarball stand for another. */
	if (w.sha512[0])
		snprintf(w.key, sizeof w.key, "sha512-%s", w.sha512);
	else if (w.sha256[0])
		snprintf(w.key, sizeof w.key, "sha256-%s", w.sha256);
	const char *slash = strrchr(url, '/');
	snprintf(c->file, sizeof c->file, "%s", bad_url || !slash ? "?" : slash + 1);
	_cleanup_free_ char *keep = stale || bad_url ? NULL : json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (bad_url) {
		snprintf(msg, sizeof msg, "registry %s gives %s@%s a tarball URL that is not http(s)", c->registry, pkg,
			 ver);
		return pc_refuse(c, &o, 502, msg, 1);
	}
	int rc = pc_serve_file(c, &o, url, &w);
	if (keep && o.status == 200 && w.key[0])
		npm_meta_keep(c, reg_url, pkg, keep);
	return rc;
}

/* npm's own tarball path, /npm/N/[@SCOPE/]NAME/-/NAME-VERSION.tgz: a
 * lock's resolved URL on the public registry, which npm ci moves onto the
 * registry it is given (replace-registry-host).  The version, into ver,
 * from the file name; -1 when it is not that name's. */
static int dash_version(const char *pkg, const char *file, char *ver, size_t n)
{
	const char *sl = strrchr(pkg, '/'), *base = sl ? sl + 1 : pkg;
	size_t bl = strlen(base), fl = strlen(file);
	if (fl <= bl + 5 || strncmp(file, base, bl) || file[bl] != '-' || strcmp(file + fl - 4, ".tgz"))
		return -1;
	snprintf(ver, n, "%.*s", (int)(fl - bl - 5), file + bl + 1);
	return pc_version_ok(ver) ? 0 : -1;
}

/* /npm/N/PKG, /npm/N/@SCOPE/NAME (or @SCOPE%2fNAME, as npm sends it),
 * /npm/N/tarball/PKG/VERSION, /npm/N/PKG/-/NAME-VERSION.tgz. */
int pc_route_npm(struct conn *c, const char *reg_url, segment *seg, unsigned ns)
{
	struct outcome o = { 0 };
	char pkg[220], ver[130];
	unsigned first = 2, last = ns;
	int tarball = !strcmp(seg[2], "tarball") && ns >= 5;
	int dash = !tarball && ns >= 5 && !strcmp(seg[ns - 2], "-");
	if (tarball) {
		first = 3;
		last = ns - 1;
	} else if (dash) {
		last = ns - 2;
	}
	if (last - first == 2 && seg[first][0] == '@')
		snprintf(pkg, sizeof pkg, "%s/%s", seg[first], seg[first + 1]);
	else if (last - first == 1)
		snprintf(pkg, sizeof pkg, "%s", seg[first]);
	else
		pkg[0] = 0;
	if (!pc_npm_name_ok(pkg))
		return pc_refuse(c, &o, 404,
				 "not a package cache URL: /npm/N/PACKAGE or /npm/N/tarball/PACKAGE/VERSION", 0);
	snprintf(c->package, sizeof c->package, "%s", pkg);
	if (!tarball && !dash) {
		snprintf(c->kind, sizeof c->kind, "metadata");
		if (pc_rules_check(c, SBX_REG_NPM, 0))
			return 0; /* before anything is fetched */
		if (c->head)
			return pc_refuse_head(c);
		return npm_metadata(c, reg_url, pkg);
	}
	snprintf(c->kind, sizeof c->kind, "tarball");
	if (dash ? dash_version(pkg, seg[ns - 1], ver, sizeof ver) < 0 : !pc_version_ok(seg[ns - 1]))
		return pc_refuse(c, &o, 404, "not a valid version", 0);
	if (!dash)
		snprintf(ver, sizeof ver, "%s", seg[ns - 1]);
	snprintf(c->version, sizeof c->version, "%s", ver);
	if (pc_rules_check(c, SBX_REG_NPM, 1))
		return 0;
	if (c->head)
		return pc_head_file(c);
	return npm_tarball(c, reg_url, pkg, ver);
}
