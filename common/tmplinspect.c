/* sbx-template inspect and prune: a template's manifest as JSON (with who
 * uses it), and the removal of old unused versions.  Apart from the
 * builder (tmplbuild.c), which they share only tmplbuild.h with. */
#include "tmplbuild.h"
#include "template.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- inspect and prune ------------------------------------------------------ */

static const char *jstr(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));
	return v ? v : "";
}

/* One shape for every template, whoever made it (tmplbuild, the shipped
 * scripts, sbx-snapshot save --template): docs/schema/template-inspect.json. */
static json_t *inspect_json(const struct sbx_template *t, json_t *m, int d, json_t *used_by /* stolen */)
{
	unsigned long long size = 0;
	json_t *files = json_array();
	static const char *const names[] = { "vmlinux", "initrd.cpio", "rootfs.ext4", "memory.zst", "scratch.zst" };
	json_t *mf = json_object_get(m, "files");
	for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
		struct stat sb;
		if (fstatat(d, names[i], &sb, 0) < 0)
			continue;
		size += (unsigned long long)sb.st_size;
		json_array_append_new(files,
				      json_pack("{s:s, s:I, s:s}", "name", names[i], "size", (json_int_t)sb.st_size,
						"sha256", jstr(json_object_get(mf, names[i]), "sha256")));
	}
	json_t *pk = json_array(), *v;
	size_t i;
	json_array_foreach (json_object_get(m, "packages"), i, v)
		json_array_append_new(pk,
				      json_pack("{s:s, s:s}", "name", jstr(v, "name"), "version", jstr(v, "version")));
	json_t *env = json_array();
	const char *k;
	json_object_foreach (json_object_get(m, "env"), k, v)
		if (json_is_string(v))
			json_array_append_new(env, json_pack("{s:s, s:s}", "name", k, "value", json_string_value(v)));
	json_t *src = json_object_get(m, "source");
	const char *kind = json_is_object(src) ? jstr(src, "kind") : t->snapshot ? "session" : "script";
	json_t *base = json_object_get(m, "base");
	char ref[140];
	snprintf(ref, sizeof ref, "%s@%s", t->ref, t->version);
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:b, s:s, s:I, s:s, s:{s:s, s:s, s:s, s:s}, s:o, s:o,"
			 " s:o, s:s, s:s, s:i, s:o}",
			 "schema", 1, "template", ref, "name", t->name, "version", t->version, "owner",
			 sbx_template_owner_name(t->owner), "created", t->created, "kernel", t->kernel_release,
			 "snapshot", t->snapshot, "base", json_is_string(base) ? json_string_value(base) : "",
			 "size_bytes", (json_int_t)size, "content_sha256", jstr(m, "content_sha256"), "source", "kind",
			 kind, "path", jstr(src, "path"), "sha256", jstr(src, "sha256"), "format", jstr(src, "format"),
			 "packages", pk, "files", files, "env", env, "user", jstr(m, "user"), "workdir",
			 jstr(m, "workdir"), "in_use", (int)json_array_size(used_by), "used_by", used_by);
}

int sbx_template_inspect(struct sbx_state *st, const char *tenant, const char *spec, json_t **out, struct sbx_err *err)
{
	struct sbx_template t;
	*out = NULL;
	if (sbx_template_resolve(st, tenant, spec, &t, err) < 0)
		return -1;
	_cleanup_close_ int d = open(t.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_free_ char *txt = d < 0 ? NULL : sbx_read_small_at(d, "manifest.json", 1 << 20, NULL);
	json_t *m = txt ? json_loads(txt, 0, NULL) : NULL;
	if (!json_is_object(m)) {
		json_decref(m);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot read the manifest of %s@%s", t.ref, t.version);
	}
	char ref[140];
	snprintf(ref, sizeof ref, "%s@%s", t.ref, t.version);
	json_t *users = NULL, *used_by = NULL;
	if (sbx_template_list(st, tenant, ref, &users, NULL) == 0)
		used_by = json_object_get(json_array_get(users, 0), "used_by");
	json_t *j = inspect_json(&t, m, d, json_is_array(used_by) ? json_incref(used_by) : json_array());
	json_decref(users);
	json_decref(m);
	if (!j)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot inspect %s", ref);
	*out = j;
	return 0;
}

int sbx_template_prune(struct sbx_state *st, const char *tenant, unsigned keep, json_t **removed, struct sbx_err *err)
{
	json_t *all;
	*removed = NULL;
	if (sbx_template_list(st, tenant, NULL, &all, err) < 0)
		return -1;
	const char *mine = sbx_template_owner_name(tenant);
	json_t *done = json_array();
	size_t n = json_array_size(all);
	int rc = 0;
	/* sorted by owner, name, then age (oldest first) */
	for (size_t i = 0; rc == 0 && i < n; i++) {
		json_t *t = json_array_get(all, i);
		const char *owner = json_string_value(json_object_get(t, "owner"));
		const char *name = json_string_value(json_object_get(t, "name"));
		if (!owner || !name || strcmp(owner, mine))
			continue;
		size_t newer = 0;
		for (size_t j = i + 1; j < n; j++) {
			json_t *u = json_array_get(all, j);
			if (!strcmp(owner, json_string_value(json_object_get(u, "owner")) ?: "") &&
			    !strcmp(name, json_string_value(json_object_get(u, "name")) ?: ""))
				newer++;
		}
		if (newer < keep || json_integer_value(json_object_get(t, "in_use")) > 0)
			continue;
		char spec[200];
		snprintf(spec, sizeof spec, "%s@%s", name, json_string_value(json_object_get(t, "version")));
		json_t *gone = NULL;
		struct sbx_err e = { 0 };
		if (sbx_template_rm(st, tenant, spec, &gone, &e) < 0) {
			/* taken into use since the listing: kept */
			if (e.code != SBX_EXIT_CONFLICT) {
				if (err)
					*err = e;
				rc = -1;
			}
			continue;
		}
		json_array_extend(done, gone);
		json_decref(gone);
	}
	json_decref(all);
	if (rc < 0) {
		json_decref(done);
		return -1;
	}
	*removed = done;
	return 0;
}
