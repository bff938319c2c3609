#include "template.h"
#include "audit.h"
#include "session.h"
#include "snapshot.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

const char *sbx_templates_dir(struct sbx_state *st, char *buf, size_t n)
{
	const char *e = getenv("SBX_TEMPLATES");
	if (e && *e)
		snprintf(buf, n, "%s", e);
	else
		snprintf(buf, n, "%s/templates", st->lib);
	return buf;
}

int sbx_template_ns(struct sbx_state *st, const char *owner, int create, struct sbx_err *err)
{
	char base[600];
	sbx_templates_dir(st, base, sizeof base);
	if (create && mkdir(base, 0755) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", base);
	int fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -2 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", base);
	if (!owner || !*owner)
		return fd;
	const char *steps[] = { SBX_TEMPLATE_TENANTS, owner };
	for (size_t i = 0; i < SBX_ARRAY_LEN(steps); i++) {
		if (create && mkdirat(fd, steps[i], 0755) < 0 && errno != EEXIST) {
			int e = errno;
			close(fd);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot create the templates of %s", owner);
		}
		int sub = openat(fd, steps[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		int e = errno;
		close(fd);
		if (sub < 0)
			return e == ENOENT ? -2
					   : sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot open the templates of %s",
							 owner);
		fd = sub;
	}
	return fd;
}

/* The manifest of ENTRY into T, and its mtime (when it was written). */
static int load_manifest(int dfd, const char *entry, struct sbx_template *t, struct timespec *mtime)
{
	struct stat sb;
	/* The operator may install a template as a symbolic link. */
	_cleanup_close_ int fd = openat(dfd, entry, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	_cleanup_free_ char *txt = sbx_read_small_at(fd, "manifest.json", 1 << 20, NULL);
	if (!txt || fstatat(fd, "manifest.json", &sb, 0) < 0)
		return -1;
	*mtime = sb.st_mtim;
	json_t *m = json_loads(txt, 0, NULL);
	if (!m)
		return -1;
	const char *created = json_string_value(json_object_get(m, "created"));
	const char *rel = json_string_value(json_object_get(json_object_get(m, "kernel"), "release"));
	snprintf(t->created, sizeof t->created, "%s", created ? created : "");
	snprintf(t->kernel_release, sizeof t->kernel_release, "%s", rel ? rel : "");
	/* A template published from a session (sbx-snapshot save --template)
	 * is a snapshot: sessions from it are restored, not booted. */
	t->snapshot = json_is_object(json_object_get(m, "snapshot"));
	json_decref(m);
	return 0;
}

/* Is A newer than B?  By `created` (UTC, whole seconds, so a string
 * compare orders it); two versions built in the same second by when their
 * manifests were written; then by version, so the choice never depends on
 * readdir order. */
static int newer(const struct sbx_template *a, const struct timespec *am, const struct sbx_template *b,
		 const struct timespec *bm)
{
	int c = strcmp(a->created, b->created);
	if (c)
		return c > 0;
	if (am->tv_sec != bm->tv_sec)
		return am->tv_sec > bm->tv_sec;
	if (am->tv_nsec != bm->tv_nsec)
		return am->tv_nsec > bm->tv_nsec;
	return strcmp(a->version, b->version) > 0;
}

/* [OWNER/]NAME[@VERSION] into its parts; 3 when malformed. */
static int parse_spec(const char *spec, char owner[SBX_ID_MAX + 1], char name[64], char version[64],
		      struct sbx_err *err)
{
	owner[0] = name[0] = version[0] = 0;
	const char *slash = strchr(spec, '/'), *n = spec;
	if (slash) {
		size_t ol = (size_t)(slash - spec);
		if (ol == 0 || ol > SBX_ID_MAX)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid template name '%.80s'", spec);
		memcpy(owner, spec, ol);
		owner[ol] = 0;
		if (sbx_tenant_check(owner, err) < 0)
			return -1;
		n = slash + 1;
	}
	const char *at = strchr(n, '@');
	size_t nl = at ? (size_t)(at - n) : strlen(n);
	if (nl == 0 || nl >= 64)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid template name '%.80s'", spec);
	memcpy(name, n, nl);
	name[nl] = 0;
	if (sbx_id_check(name, "template", err) < 0)
		return -1;
	if (at) {
		if (strlen(at + 1) >= 64 || sbx_id_check(at + 1, "template version", err) < 0)
			return at && strlen(at + 1) >= 64 ? sbx_err_set(err, SBX_EXIT_INVALID, 0,
									"invalid template version '%.80s'", at + 1)
							  : -1;
		snprintf(version, 64, "%s", at + 1);
	}
	/* The reference travels in records as the template's name. */
	if (owner[0] && strlen(owner) + 1 + nl >= 64)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "template name '%.80s' is too long with its owner", spec);
	return 0;
}

static void fill_paths(const char *base, struct sbx_template *t)
{
	snprintf(t->ref, sizeof t->ref, "%s%s%s", t->owner, t->owner[0] ? "/" : "", t->name);
	if (t->owner[0])
		snprintf(t->dir, sizeof t->dir, "%s/" SBX_TEMPLATE_TENANTS "/%s/%s@%s", base, t->owner, t->name,
			 t->version);
	else
		snprintf(t->dir, sizeof t->dir, "%s/%s@%s", base, t->name, t->version);
	snprintf(t->kernel, sizeof t->kernel, "%s/vmlinux", t->dir);
	snprintf(t->initrd, sizeof t->initrd, "%s/initrd.cpio", t->dir);
	snprintf(t->rootfs, sizeof t->rootfs, "%s/rootfs.ext4", t->dir);
}

/* Call cb for every template in one namespace (name/version: only those). */
typedef int (*each_fn)(const struct sbx_template *t, const struct timespec *m, void *ctx);
static int each_in(struct sbx_state *st, const char *owner, const char *name, const char *version, each_fn cb,
		   void *ctx, struct sbx_err *err)
{
	char base[600];
	sbx_templates_dir(st, base, sizeof base);
	int dfd = sbx_template_ns(st, owner, 0, err);
	if (dfd == -1)
		return -1;
	if (dfd == -2)
		return 0;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", base);
	}
	int rc = 0;
	size_t nl = name ? strlen(name) : 0;
	for (struct dirent *de; rc == 0 && (de = readdir(d));) {
		const char *v = strchr(de->d_name, '@');
		if (de->d_name[0] == '.' || !v || v == de->d_name)
			continue;
		if (name && ((size_t)(v - de->d_name) != nl || strncmp(de->d_name, name, nl)))
			continue;
		if (version && version[0] && strcmp(v + 1, version))
			continue;
		struct sbx_template cur = { 0 };
		struct timespec m;
		if ((size_t)(v - de->d_name) >= sizeof cur.name || strlen(v + 1) >= sizeof cur.version ||
		    load_manifest(dirfd(d), de->d_name, &cur, &m) < 0)
			continue; /* half-built or foreign: not a template */
		memcpy(cur.name, de->d_name, (size_t)(v - de->d_name));
		snprintf(cur.version, sizeof cur.version, "%s", v + 1);
		snprintf(cur.owner, sizeof cur.owner, "%s", owner ? owner : "");
		fill_paths(base, &cur);
		rc = cb(&cur, &m, ctx);
	}
	closedir(d);
	return rc;
}

struct best {
	struct sbx_template t;
	struct timespec m;
	int found;
};

static int pick_newest(const struct sbx_template *t, const struct timespec *m, void *ctx)
{
	struct best *b = ctx;
	if (!b->found || newer(t, m, &b->t, &b->m)) {
		b->t = *t;
		b->m = *m;
		b->found = 1;
	}
	return 0;
}

int sbx_template_find(struct sbx_state *st, const char *spec, struct sbx_template *t, struct sbx_err *err)
{
	char owner[SBX_ID_MAX + 1], name[64], version[64], base[600];
	memset(t, 0, sizeof *t);
	if (parse_spec(spec, owner, name, version, err) < 0)
		return -1;
	sbx_templates_dir(st, base, sizeof base);
	if (!owner[0] && access(base, F_OK) < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, errno,
				   "no template '%s': cannot open %s (build one with 'make image' or install.sh)", spec,
				   base);
	struct best b = { .found = 0 };
	if (each_in(st, owner, name, version, pick_newest, &b, err) < 0)
		return -1;
	if (!b.found)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'%s%s", spec, owner[0] ? "" : " in ",
				   owner[0] ? "" : base);
	*t = b.t;
	const char *files[] = { t->kernel, t->initrd, t->rootfs };
	for (size_t i = 0; i < SBX_ARRAY_LEN(files); i++)
		if (access(files[i], R_OK) < 0)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, errno, "template %s@%s is incomplete: %s", t->ref,
					   t->version, files[i]);
	return 0;
}

int sbx_template_resolve(struct sbx_state *st, const char *tenant, const char *spec, struct sbx_template *t,
			 struct sbx_err *err)
{
	char owner[SBX_ID_MAX + 1], name[64], version[64];
	if (parse_spec(spec, owner, name, version, err) < 0)
		return -1;
	/* Another tenant's templates do not exist for a tenant. */
	if (owner[0] && tenant && strcmp(owner, tenant))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec);
	if (owner[0] || !tenant)
		return sbx_template_find(st, spec, t, err);
	struct sbx_err e = { 0 };
	if (sbx_template_find(st, spec, t, &e) == 0)
		return 0;
	if (e.code != SBX_EXIT_NOENT) {
		if (err)
			*err = e;
		return -1;
	}
	char own[200];
	snprintf(own, sizeof own, "%s/%s", tenant, spec);
	if (sbx_template_find(st, own, t, NULL) == 0)
		return 0;
	if (err)
		*err = e;
	return -1;
}

static int found_one(const struct sbx_template *t, const struct timespec *m, void *ctx)
{
	(void)t;
	(void)m;
	*(int *)ctx = 1;
	return 1;
}

int sbx_template_holder(struct sbx_state *st, const char *owner, const char *name, char who[SBX_ID_MAX + 1])
{
	int hit = 0;
	who[0] = 0;
	if (owner && *owner) {
		each_in(st, "", name, NULL, found_one, &hit, NULL);
		return hit;
	}
	int dfd = sbx_template_ns(st, "", 0, NULL);
	if (dfd < 0)
		return 0;
	int tfd = openat(dfd, SBX_TEMPLATE_TENANTS, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	close(dfd);
	DIR *d = tfd >= 0 ? fdopendir(tfd) : NULL;
	if (!d) {
		if (tfd >= 0)
			close(tfd);
		return 0;
	}
	char **ids;
	size_t n;
	if (sbx_dir_ids(d, 1, &ids, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!hit && sbx_tenant_check(ids[i], NULL) == 0) {
			each_in(st, ids[i], name, NULL, found_one, &hit, NULL);
			if (hit)
				snprintf(who, SBX_ID_MAX + 1, "%s", ids[i]);
		}
		free(ids[i]);
	}
	free(ids);
	return hit;
}

/* --- listing and removal -------------------------------------------------- */

struct coll {
	struct sbx_template *v;
	size_t n, cap;
	int oom;
};

static int collect_cb(const struct sbx_template *t, const struct timespec *m, void *ctx)
{
	struct coll *c = ctx;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct sbx_template *nv = realloc(c->v, cap * sizeof *nv);
		if (!nv) {
			c->oom = 1;
			return 1;
		}
		c->v = nv;
		c->cap = cap;
	}
	c->v[c->n] = *t;
	c->v[c->n++].manifest_mtime = *m;
	return 0;
}

/* The owners whose templates tenant sees: the operator's, then its own
 * (the operator: every tenant's too). */
static int owners_seen(struct sbx_state *st, const char *tenant, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char **v = NULL;
	size_t k = 0;
	if (tenant) {
		v = calloc(2, sizeof *v);
		if (!v || !(v[0] = strdup("")) || !(v[1] = strdup(tenant))) {
			if (v)
				free(v[0]);
			free(v);
			return -1;
		}
		*out = v;
		*n = 2;
		return 0;
	}
	int dfd = sbx_template_ns(st, "", 0, NULL);
	int tfd = dfd >= 0 ? openat(dfd, SBX_TEMPLATE_TENANTS, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
	if (dfd >= 0)
		close(dfd);
	DIR *d = tfd >= 0 ? fdopendir(tfd) : NULL;
	char **ids = NULL;
	size_t ni = 0;
	if (d && sbx_dir_ids(d, 1, &ids, &ni) < 0)
		return -1;
	if (!d && tfd >= 0)
		close(tfd);
	v = calloc(ni + 1, sizeof *v);
	if (!v || !(v[k++] = strdup(""))) {
		for (size_t i = 0; i < ni; i++)
			free(ids[i]);
		free(ids);
		free(v);
		return -1;
	}
	for (size_t i = 0; i < ni; i++) {
		if (sbx_tenant_check(ids[i], NULL) == 0)
			v[k++] = ids[i];
		else
			free(ids[i]);
	}
	free(ids);
	*out = v;
	*n = k;
	return 0;
}

static int cmp_tmpl(const void *a, const void *b)
{
	const struct sbx_template *x = a, *y = b;
	int c = strcmp(x->owner, y->owner);
	if (c)
		return c;
	if ((c = strcmp(x->name, y->name)))
		return c;
	/* oldest first, as sbx_template_find picks the newest */
	return newer(x, &x->manifest_mtime, y, &y->manifest_mtime)   ? 1
	       : newer(y, &y->manifest_mtime, x, &x->manifest_mtime) ? -1
								     : 0;
}

/* Every template tenant sees, matching the spec's parts. */
static int gather(struct sbx_state *st, const char *tenant, const char *owner, const char *name, const char *version,
		  struct coll *c, struct sbx_err *err)
{
	char **owners;
	size_t no;
	memset(c, 0, sizeof *c);
	if (owners_seen(st, tenant, &owners, &no) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the templates");
	int rc = 0;
	for (size_t i = 0; i < no; i++) {
		if (rc == 0 && (!owner || !strcmp(owner, owners[i])) &&
		    each_in(st, owners[i], name, version, collect_cb, c, err) < 0)
			rc = -1;
		free(owners[i]);
	}
	free(owners);
	if (rc == 0 && c->oom)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the templates");
	if (rc < 0) {
		free(c->v);
		c->v = NULL;
		c->n = 0;
		return -1;
	}
	if (c->n)
		qsort(c->v, c->n, sizeof *c->v, cmp_tmpl);
	return 0;
}

/* Who uses t: live sessions (warm-pool members and creates in flight
 * included) booted or restored from it, and snapshots saved from such a
 * session.  tenant: only what is that tenant's (a listing must not show
 * others' sessions); NULL: everyone's. */
static json_t *users_of(struct sbx_state *st, const struct sbx_template *t, const char *tenant)
{
	json_t *a = json_array();
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, NULL) == 0) {
		for (size_t i = 0; i < n; i++) {
			struct sbx_session s;
			if (sbx_record_load(st, ids[i], &s, NULL) == 0 && !strcmp(s.tmpl_name, t->ref) &&
			    !strcmp(s.tmpl_version, t->version) && (!tenant || !strcmp(tenant, s.tenant))) {
				const char *live = sbx_session_live_state(st, &s);
				if (sbx_state_live(live) || !strcmp(live, "creating") || !strcmp(live, "pooled"))
					json_array_append_new(a, json_sprintf("session:%s", s.id));
			}
			free(ids[i]);
		}
		free(ids);
	}
	json_t *snaps = sbx_snapshot_of_base(st, t->ref, t->version, tenant);
	size_t k;
	json_t *v;
	json_array_foreach (snaps, k, v)
		json_array_append_new(a, json_sprintf("snapshot:%s", json_string_value(v)));
	json_decref(snaps);
	return a;
}

static json_t *template_json(struct sbx_state *st, const struct sbx_template *t, const char *tenant)
{
	json_t *users = users_of(st, t, tenant);
	return json_pack("{s:i, s:s++, s:s, s:s, s:s, s:s, s:s, s:b, s:i, s:o}", "schema", 1, "template", t->ref, "@",
			 t->version, "name", t->name, "version", t->version, "owner", sbx_template_owner_name(t->owner),
			 "created", t->created, "kernel", t->kernel_release, "snapshot", t->snapshot, "in_use",
			 (int)json_array_size(users), "used_by", users);
}

int sbx_template_list(struct sbx_state *st, const char *tenant, const char *spec, json_t **out, struct sbx_err *err)
{
	char owner[SBX_ID_MAX + 1] = "", name[64] = "", version[64] = "";
	*out = NULL;
	if (spec && parse_spec(spec, owner, name, version, err) < 0)
		return -1;
	if (spec && owner[0] && tenant && strcmp(owner, tenant))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec);
	struct coll c;
	if (gather(st, tenant, spec && owner[0] ? owner : NULL, spec ? name : NULL, version, &c, err) < 0)
		return -1;
	if (spec && !c.n)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec);
	json_t *a = json_array();
	for (size_t i = 0; i < c.n; i++)
		json_array_append_new(a, template_json(st, &c.v[i], tenant));
	free(c.v);
	*out = a;
	return 0;
}

int sbx_template_rm(struct sbx_state *st, const char *tenant, const char *spec, json_t **removed, struct sbx_err *err)
{
	char owner[SBX_ID_MAX + 1], name[64], version[64];
	*removed = NULL;
	if (parse_spec(spec, owner, name, version, err) < 0)
		return -1;
	if (tenant && owner[0] && strcmp(owner, tenant))
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec);
	if (tenant)
		snprintf(owner, sizeof owner, "%s", tenant);
	/* Under the global lock, which sbx-create holds from its last look at
	 * the template to the record that names it. */
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	struct coll c = { 0 };
	if (each_in(st, owner, name, version, collect_cb, &c, err) < 0 || c.oom) {
		free(c.v);
		return c.oom ? sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot remove %s", spec) : -1;
	}
	if (!c.n) {
		struct coll o = { 0 };
		int theirs = tenant && each_in(st, "", name, version, collect_cb, &o, NULL) == 0 && o.n;
		free(o.v);
		if (theirs)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "template %s belongs to the operator; a tenant removes only its own", spec);
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec);
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		json_t *u = users_of(st, &c.v[i], NULL);
		if (json_array_size(u))
			rc = sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
					 "template %s@%s is in use by %s%s; nothing was removed", c.v[i].ref,
					 c.v[i].version, json_string_value(json_array_get(u, 0)),
					 json_array_size(u) > 1 ? " and others" : "");
		json_decref(u);
	}
	_cleanup_close_ int dfd = rc == 0 ? sbx_template_ns(st, owner, 0, err) : -1;
	if (rc == 0 && dfd < 0)
		rc = dfd == -2 ? sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s'", spec) : -1;
	char(*gone)[64] = rc == 0 ? calloc(c.n, sizeof *gone) : NULL;
	if (rc == 0 && !gone)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot remove %s", spec);
	/* Out of sight at once (renamed to what sbx-gc reclaims if we die),
	 * removed after the lock is dropped. */
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		char entry[140];
		snprintf(entry, sizeof entry, "%s@%s", c.v[i].name, c.v[i].version);
		snprintf(gone[i], sizeof gone[i], ".tmp-snap-rm-%08x", arc4random());
		if (renameat(dfd, entry, dfd, gone[i]) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove template %s", entry);
			gone[i][0] = 0;
		}
	}
	close(g);
	g = -1;
	json_t *done = json_array();
	for (size_t i = 0; gone && i < c.n; i++) {
		if (!gone[i][0])
			continue;
		sbx_rm_rf_at(dfd, gone[i]);
		char ref[140];
		snprintf(ref, sizeof ref, "%s@%s", c.v[i].ref, c.v[i].version);
		json_array_append_new(done, json_string(ref));
		json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "template", ref, "name", c.v[i].name, "version",
				      c.v[i].version, "owner", sbx_template_owner_name(c.v[i].owner));
		if (f && c.v[i].owner[0])
			json_object_set_new(f, "tenant", json_string(c.v[i].owner));
		sbx_audit_append(st, "template.rm", f, NULL);
		json_decref(f);
	}
	free(gone);
	free(c.v);
	if (rc < 0) {
		json_decref(done);
		return -1;
	}
	*removed = done;
	return 0;
}

int sbx_template_rm_list(struct sbx_state *st, const char *tenant, char *const *specs, int n, json_t **removed,
			 struct sbx_err *err)
{
	json_t *all = json_array();
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		json_t *one = NULL;
		rc = sbx_template_rm(st, tenant, specs[i], &one, err);
		if (one)
			json_array_extend(all, one);
		json_decref(one);
	}
	*removed = all;
	return rc;
}
