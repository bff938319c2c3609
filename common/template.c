#include "template.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
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

/* The manifest of ENTRY into T, and its mtime (when it was written). */
static int load_manifest(int dfd, const char *entry, struct sbx_template *t, struct timespec *mtime)
{
	struct stat sb;
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

int sbx_template_find(struct sbx_state *st, const char *spec, struct sbx_template *t, struct sbx_err *err)
{
	char base[600], name[64], want[64] = "";
	memset(t, 0, sizeof *t);
	const char *at = strchr(spec, '@');
	size_t nl = at ? (size_t)(at - spec) : strlen(spec);
	if (nl == 0 || nl >= sizeof name)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid template name '%.80s'", spec);
	memcpy(name, spec, nl);
	name[nl] = 0;
	if (sbx_id_check(name, "template", err) < 0)
		return -1;
	if (at) {
		if (sbx_id_check(at + 1, "template version", err) < 0)
			return -1;
		snprintf(want, sizeof want, "%s", at + 1);
	}
	sbx_templates_dir(st, base, sizeof base);
	_cleanup_close_ int dfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, errno,
				   "no template '%s': cannot open %s (build one with 'make image' or install.sh)", spec,
				   base);
	DIR *d = fdopendir(dup(dfd));
	if (!d)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", base);
	struct dirent *de;
	struct sbx_template best = { 0 }, cur;
	struct timespec best_m = { 0 }, cur_m;
	int found = 0;
	while ((de = readdir(d))) {
		const char *v = strchr(de->d_name, '@');
		if (!v || (size_t)(v - de->d_name) != nl || strncmp(de->d_name, name, nl))
			continue;
		if (want[0] && strcmp(v + 1, want))
			continue;
		memset(&cur, 0, sizeof cur);
		if (load_manifest(dfd, de->d_name, &cur, &cur_m) < 0)
			continue; /* half-built or foreign: not a template */
		snprintf(cur.version, sizeof cur.version, "%s", v + 1);
		if (!found || newer(&cur, &cur_m, &best, &best_m)) {
			best = cur;
			best_m = cur_m;
			found = 1;
		}
	}
	closedir(d);
	if (!found)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no template '%s' in %s", spec, base);
	*t = best;
	snprintf(t->name, sizeof t->name, "%s", name);
	snprintf(t->dir, sizeof t->dir, "%s/%s@%s", base, name, t->version);
	snprintf(t->kernel, sizeof t->kernel, "%s/vmlinux", t->dir);
	snprintf(t->initrd, sizeof t->initrd, "%s/initrd.cpio", t->dir);
	snprintf(t->rootfs, sizeof t->rootfs, "%s/rootfs.ext4", t->dir);
	const char *files[] = { t->kernel, t->initrd, t->rootfs };
	for (size_t i = 0; i < SBX_ARRAY_LEN(files); i++)
		if (access(files[i], R_OK) < 0)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, errno, "template %s@%s is incomplete: %s", name,
					   t->version, files[i]);
	return 0;
}
