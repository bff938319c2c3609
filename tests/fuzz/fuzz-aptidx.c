/* libFuzzer target: Debian archive metadata as a mirror sends it to the
 * package cache's apt route (aptidx.h).  The same bytes go to both
 * parsers: as a Release text (then every entry is looked up again, by
 * path and by hash, and the list must be sorted and each path once), and
 * as a Packages index, plain or compressed (added twice: the second add
 * must change nothing).  The decompressed bound is lowered so that a
 * bomb costs milliseconds, not the real bound's seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aptidx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char hexd[] = "0123456789abcdef";

static void release(const uint8_t *data, size_t size)
{
	char why[300];
	struct sbx_apt_release r;
	if (sbx_apt_release_parse((const char *)data, size, &r, why, sizeof why) < 0) {
		if (r.files || r.nfiles)
			abort();
		return;
	}
	for (size_t i = 0; i < r.nfiles; i++) {
		const struct sbx_apt_relfile *f = &r.files[i];
		if (i && strcmp(r.files[i - 1].path, f->path) >= 0)
			abort();
		if (sbx_apt_release_find(&r, f->path) != f)
			abort();
		char p[SBX_APT_PATH_MAX + 100];
		const char *slash = strrchr(f->path, '/');
		int dl = slash ? (int)(slash - f->path) + 1 : 0;
		int l = snprintf(p, sizeof p, "%.*sby-hash/SHA256/", dl, f->path);
		for (int k = 0; k < 32; k++) {
			p[l++] = hexd[f->sha256[k] >> 4];
			p[l++] = hexd[f->sha256[k] & 15];
		}
		p[l] = 0;
		const struct sbx_apt_relfile *h = sbx_apt_release_by_hash(&r, p);
		if (!h || memcmp(h->sha256, f->sha256, 32))
			abort();
	}
	sbx_apt_release_free(&r);
}

static void packages(const uint8_t *data, size_t size)
{
	char why[300];
	struct sbx_apt_debmap *m = NULL;
	if (sbx_apt_debmap_add_mem(&m, data, size, why, sizeof why) < 0) {
		if (m)
			abort();
		return;
	}
	size_t n = sbx_apt_debmap_count(m);
	if (sbx_apt_debmap_add_mem(&m, data, size, why, sizeof why) < 0 || sbx_apt_debmap_count(m) != n)
		abort();
	/* Lookups of what the input might name. */
	char key[256];
	size_t kl = size < sizeof key - 1 ? size : sizeof key - 1;
	memcpy(key, data, kl);
	key[kl] = 0;
	sbx_apt_debmap_find(m, key);
	const char *f = memmem(data, size, "Filename: ", 10);
	if (f) {
		f += 10;
		size_t l = 0;
		while (f + l < (const char *)data + size && f[l] != '\n' && l < sizeof key - 1)
			l++;
		memcpy(key, f, l);
		key[l] = 0;
		const struct sbx_apt_deb *d = sbx_apt_debmap_find(m, key);
		if (d && strcmp(d->filename, key))
			abort();
	}
	sbx_apt_debmap_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sbx_apt_debmap_set_bounds(8u << 20, 0, 0);
	release(data, size);
	packages(data, size);
	return 0;
}
