/* Install scripts in npm metadata and tarballs (npmtgz.h).  libarchive
 * reads the tarball (gzip'd or not, any tar dialect node-tar writes);
 * jansson the package.json in it. */
#include "npmtgz.h"
#include "util.h"

#include <archive.h>
#include <archive_entry.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The lifecycle scripts npm runs when it installs a package from a
 * registry (prepare only for git and directory sources). */
static const char *const install_scripts[] = { "preinstall", "install", "postinstall" };

static int scripts_named(const json_t *scripts, const char *where, char *why, size_t n)
{
	if (!json_is_object(scripts))
		return 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(install_scripts); i++) {
		const json_t *s = json_object_get(scripts, install_scripts[i]);
		/* Any value but null: what npm makes of a number or a list is
		 * not ours to guess. */
		if (s && !json_is_null(s) && !(json_is_string(s) && !json_string_value(s)[0])) {
			snprintf(why, n, "%s in %s", install_scripts[i], where);
			return 1;
		}
	}
	return 0;
}

int sbx_npm_meta_scripts(const json_t *version, char *why, size_t n)
{
	if (json_is_true(json_object_get(version, "hasInstallScript"))) {
		snprintf(why, n, "hasInstallScript in the registry's metadata");
		return 1;
	}
	if (scripts_named(json_object_get(version, "scripts"), "the registry's metadata", why, n))
		return 1;
	if (json_is_true(json_object_get(version, "gypfile"))) {
		snprintf(why, n, "gypfile in the registry's metadata (a binding.gyp, built by node-gyp)");
		return 1;
	}
	return 0;
}

/* The entry's path as npm unpacks it (node-tar with strip: 1): its
 * components but empty ones and ".", the first dropped.  NULL for a path
 * npm would not unpack at depth one (fewer or more components, or a ".."
 * node-tar refuses); else the rest, pointing into p. */
static const char *stripped(const char *path, char *p, size_t n)
{
	size_t w = 0, comps = 0;
	const char *s = path, *first_end = NULL;
	while (*s) {
		while (*s == '/')
			s++;
		const char *e = strchrnul(s, '/');
		size_t l = (size_t)(e - s);
		if (l == 0)
			break;
		if (l == 2 && !strncmp(s, "..", 2))
			return NULL;
		if (!(l == 1 && *s == '.')) {
			if (w + l + 2 > n)
				return NULL;
			if (w)
				p[w++] = '/';
			memcpy(p + w, s, l);
			w += l;
			if (++comps == 1)
				first_end = p + w;
		}
		s = e;
	}
	p[w] = 0;
	return comps == 2 && first_end ? first_end + 1 : NULL;
}

static int manifest(struct archive *a, struct archive_entry *e, char *why, size_t n)
{
	if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e)) {
		snprintf(why, n, "its package.json is not a regular file in the tarball");
		return -1;
	}
	if (archive_entry_size_is_set(e) && archive_entry_size(e) > (la_int64_t)SBX_NPMTGZ_MANIFEST_MAX) {
		snprintf(why, n, "its package.json is larger than %u bytes", SBX_NPMTGZ_MANIFEST_MAX);
		return -1;
	}
	_cleanup_free_ char *buf = malloc(SBX_NPMTGZ_MANIFEST_MAX + 1);
	if (!buf) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	size_t got = 0;
	for (;;) {
		la_ssize_t r = archive_read_data(a, buf + got, SBX_NPMTGZ_MANIFEST_MAX + 1 - got);
		if (r < 0) {
			snprintf(why, n, "its package.json cannot be read: %s", archive_error_string(a));
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
		if (got > SBX_NPMTGZ_MANIFEST_MAX) {
			snprintf(why, n, "its package.json is larger than %u bytes", SBX_NPMTGZ_MANIFEST_MAX);
			return -1;
		}
	}
	json_t *doc = json_loadb(buf, got, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(doc)) {
		json_decref(doc);
		snprintf(why, n, "its package.json is not a JSON object");
		return -1;
	}
	int rc = scripts_named(json_object_get(doc, "scripts"), "its package.json", why, n);
	json_decref(doc);
	return rc;
}

int sbx_npm_tgz_scripts(int fd, char *why, size_t n)
{
	snprintf(why, n, "?");
	if (lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(why, n, "the tarball cannot be read");
		return -1;
	}
	struct archive *a = archive_read_new();
	if (!a) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	archive_read_support_filter_gzip(a);
	archive_read_support_format_tar(a);
	int rc = 0, saw_manifest = 0;
	if (archive_read_open_fd(a, fd, 64 << 10) != ARCHIVE_OK) {
		snprintf(why, n, "not a tarball npm could unpack: %s", archive_error_string(a));
		rc = -1;
	}
	struct archive_entry *e;
	unsigned entries = 0;
	char p[PATH_MAX];
	while (rc == 0) {
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r < ARCHIVE_WARN) {
			snprintf(why, n, "not a tarball npm could unpack: %s", archive_error_string(a));
			rc = -1;
			break;
		}
		/* Bounded before an entry's data is unpacked (skipping it
		 * unpacks it too), by the size its header declares. */
		la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
		if (++entries > SBX_NPMTGZ_MAX_ENTRIES || size < 0 || size > (la_int64_t)SBX_NPMTGZ_MAX_BYTES ||
		    archive_filter_bytes(a, 0) + size > (la_int64_t)SBX_NPMTGZ_MAX_BYTES) {
			snprintf(why, n, "the tarball is larger than sbx inspects (%u entries, %llu bytes unpacked)",
				 SBX_NPMTGZ_MAX_ENTRIES, (unsigned long long)SBX_NPMTGZ_MAX_BYTES);
			rc = -1;
			break;
		}
		const char *path = archive_entry_pathname(e);
		const char *rest = path ? stripped(path, p, sizeof p) : NULL;
		if (!rest)
			continue;
		if (!strcmp(rest, "binding.gyp")) {
			snprintf(why, n, "a binding.gyp in its tarball (npm runs node-gyp rebuild)");
			rc = 1;
		} else if (!strcmp(rest, "package.json")) {
			/* Every one: a later entry of the same path is the one
			 * unpacked, and a tarball may hold two tops. */
			saw_manifest = 1;
			rc = manifest(a, e, why, n);
		}
	}
	if (rc == 0 && !saw_manifest) {
		snprintf(why, n, "the tarball has no package.json");
		rc = -1;
	}
	archive_read_free(a);
	return rc;
}
