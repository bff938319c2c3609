/* Snapshots in use, listed, removed, and sbx-gc's leftovers: snapshot.h.
 * The store (names, places, manifests), saving and restoring are in
 * snapshot.c; what both use is in snapshot_int.h. */
#include "snapshot.h"
#include "snapshot_int.h"
#include "audit.h"
#include "session.h"
#include "util.h"
#include "zstream.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <sha2.h>

/* --- in use, listing, removal --------------------------------------------- */

/* Live sessions restored from ref (warm-pool members included). */
static json_t *users_of(struct sbx_state *st, const char *ref)
{
	json_t *a = json_array();
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, NULL) < 0)
		return a;
	for (size_t i = 0; i < n; i++) {
		struct sbx_session s;
		if (sbx_record_load(st, ids[i], &s, NULL) == 0 && !strcmp(s.snapshot, ref)) {
			const char *live = sbx_session_live_state(st, &s);
			if (sbx_state_live(live) || !strcmp(live, "creating") || !strcmp(live, "pooled"))
				json_array_append_new(a, json_string(s.id));
		}
		free(ids[i]);
	}
	free(ids);
	return a;
}

json_t *sbx_snapshot_of_base(struct sbx_state *st, const char *tmpl_ref, const char *version, const char *tenant)
{
	json_t *a = json_array();
	_cleanup_close_ int top = openat(st->lib_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = top >= 0 ? fdopendir(dup(top)) : NULL;
	char **dirs = NULL;
	size_t nd = 0;
	if (!d || sbx_dir_ids(d, 1, &dirs, &nd) < 0)
		return a;
	for (size_t i = 0; i < nd; i++) {
		const char *t = !strcmp(dirs[i], SBX_SNAPSHOT_NO_TENANT) ? "" : dirs[i];
		struct sbx_snapshot *v;
		size_t n;
		if ((!tenant || !strcmp(tenant, t)) && (!*t || sbx_snapshot_tenant_check(t, NULL) == 0) &&
		    sbx_snapshot_collect(st, t, NULL, NULL, &v, &n, NULL) == 0) {
			for (size_t k = 0; k < n; k++)
				if (!strcmp(v[k].tmpl_name, tmpl_ref) && !strcmp(v[k].tmpl_version, version))
					json_array_append_new(a, json_string(v[k].ref));
			free(v);
		}
		free(dirs[i]);
	}
	free(dirs);
	return a;
}

static json_t *snapshot_json(struct sbx_state *st, const struct sbx_snapshot *s)
{
	json_t *users = users_of(st, s->ref);
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", s->tmpl_name, s->tmpl_version);
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:i, s:i, s:I, s:b, s:s, s:s, s:s, s:i,"
			 " s:o}",
			 "schema", 1, "snapshot", s->ref, "name", s->name, "version", s->version, "tenant", s->tenant,
			 "created", s->created, "template", tmpl, "size_bytes", (json_int_t)s->size, "session",
			 s->source, "kernel", s->kernel, "vcpus", (int)s->vcpus, "memory_mib", (int)s->memory_mib,
			 "disk_bytes", (json_int_t)s->disk_bytes, "network", s->mac[0] != 0, "vmm", s->vmm, "accel",
			 s->accel, "content_sha256", s->content_sha256, "in_use", (int)json_array_size(users),
			 "used_by", users);
}

static int cmp_snap(const void *a, const void *b)
{
	const struct sbx_snapshot *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	return sbx_snapshot_newer(x, y) ? 1 : sbx_snapshot_newer(y, x) ? -1 : 0;
}

/* Every snapshot of tenant, matching name (NULL: all), sorted. */
int sbx_snapshot_collect(struct sbx_state *st, const char *tenant, const char *name, const char *version,
			 struct sbx_snapshot **out, size_t *n, struct sbx_err *err)
{
	*out = NULL;
	*n = 0;
	int dfd = sbx_snapshot_tenant_dir(st, tenant, 0, err);
	if (dfd == -1)
		return -1;
	if (dfd == -2)
		return 0;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the snapshots");
	}
	size_t cap = 0;
	for (struct dirent *de; (de = readdir(d));) {
		struct sbx_snapshot s;
		if (de->d_name[0] == '.' || sbx_snapshot_load_entry(dirfd(d), de->d_name, &s) < 0)
			continue;
		if ((name && strcmp(s.name, name)) || (version && version[0] && strcmp(s.version, version)))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			struct sbx_snapshot *nv = realloc(*out, cap * sizeof **out);
			if (!nv) {
				closedir(d);
				free(*out);
				*out = NULL;
				return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the snapshots");
			}
			*out = nv;
		}
		sbx_snapshot_set_place(st, tenant, &s);
		(*out)[(*n)++] = s;
	}
	closedir(d);
	if (*n)
		qsort(*out, *n, sizeof **out, cmp_snap);
	return 0;
}

int sbx_snapshot_list(struct sbx_state *st, const char *tenant, const char *name, json_t **out, struct sbx_err *err)
{
	char nm[64] = "", ver[64] = "";
	*out = NULL;
	if (sbx_snapshot_tenant_check(tenant, err) < 0 || (name && sbx_snapshot_spec(name, nm, ver, err) < 0))
		return -1;
	struct sbx_snapshot *v;
	size_t n;
	if (sbx_snapshot_collect(st, tenant, name ? nm : NULL, ver, &v, &n, err) < 0)
		return -1;
	if (name && !n)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no snapshot %s%s", name,
				   tenant && *tenant ? " of this tenant" : "");
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, snapshot_json(st, &v[i]));
	free(v);
	*out = a;
	return 0;
}

int sbx_snapshot_rm(struct sbx_state *st, const char *tenant, const char *spec, int force, json_t **removed,
		    struct sbx_err *err)
{
	char name[64], version[64];
	*removed = NULL;
	if (sbx_snapshot_tenant_check(tenant, err) < 0 || sbx_snapshot_spec(spec, name, version, err) < 0)
		return -1;
	/* Under the global lock, which sbx-create holds from its last look at
	 * the snapshot to the record that names it: a restore either sees
	 * the snapshot gone or is seen using it. */
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	struct sbx_snapshot *v;
	size_t n;
	if (sbx_snapshot_collect(st, tenant, name, version, &v, &n, err) < 0)
		return -1;
	if (!n)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no snapshot %s%s", spec,
				   tenant && *tenant ? " of this tenant" : "");
	json_t **users = calloc(n, sizeof *users);
	if (!users) {
		free(v);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot remove %s", spec);
	}
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		users[i] = users_of(st, v[i].ref);
		if (!force && json_array_size(users[i]) && rc == 0) {
			size_t k = json_array_size(users[i]);
			rc = sbx_err_set(
				err, SBX_EXIT_CONFLICT, 0,
				"snapshot %s is in use by session %s%s (%zu in all); end them with sbx-kill, or "
				"use --force",
				v[i].ref, json_string_value(json_array_get(users[i], 0)), k > 1 ? " and others" : "",
				k);
		}
	}
	_cleanup_close_ int tdir = rc == 0 ? sbx_snapshot_tenant_dir(st, tenant, 0, err) : -1;
	if (rc == 0 && tdir < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the snapshots");
	char(*gone)[160] = rc == 0 ? calloc(n, sizeof *gone) : NULL;
	if (rc == 0 && !gone)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot remove %s", spec);
	/* Out of sight at once (renamed), removed after the lock is dropped. */
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char entry[140];
		snprintf(entry, sizeof entry, "%s@%s", v[i].name, v[i].version);
		snprintf(gone[i], sizeof gone[i], ".rm-%s-%08x", entry, arc4random());
		if (renameat(tdir, entry, tdir, gone[i]) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove snapshot %s", v[i].ref);
			gone[i][0] = 0;
		}
	}
	close(g);
	g = -1;
	json_t *done = json_array();
	for (size_t i = 0; gone && i < n; i++) {
		if (!gone[i][0])
			continue;
		sbx_rm_rf_at(tdir, gone[i]);
		json_array_append_new(done, json_string(v[i].ref));
		json_t *f = json_pack("{s:s, s:s, s:s, s:b, s:O}", "snapshot", v[i].ref, "name", v[i].name, "version",
				      v[i].version, "forced", force && json_array_size(users[i]) > 0, "in_use_by",
				      users[i]);
		if (f && v[i].tenant[0])
			json_object_set_new(f, "tenant", json_string(v[i].tenant));
		sbx_audit_append(st, "snapshot.rm", f, NULL);
		json_decref(f);
	}
	for (size_t i = 0; i < n; i++)
		json_decref(users[i]);
	free(users);
	free(gone);
	free(v);
	if (rc < 0) {
		json_decref(done);
		return -1;
	}
	*removed = done;
	return 0;
}
