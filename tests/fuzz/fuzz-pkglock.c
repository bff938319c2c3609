/* libFuzzer target: the package lock parsers (pkglock.h).  A tenant
 * writes the lock; sbx-create's child parses it as nobody.  The first
 * byte picks the format (even: pip requirements, odd: package-lock.json);
 * what is accepted must hold the invariants the package cache relies on,
 * and read back through the rules' JSON unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pkglock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int type, const struct sbx_pkgset *s)
{
	if (!s->n || s->n > SBX_PKGLOCK_ENTRIES_MAX)
		abort();
	for (size_t i = 0; i < s->n; i++) {
		const struct sbx_pkgpin *p = &s->v[i];
		char norm[SBX_PKG_NAME_LEN];
		size_t hl = strlen(p->hash);
		if (!sbx_pkg_version_ok(p->version) || hl != (type ? 128u : 64u) ||
		    strspn(p->hash, "0123456789abcdef") != hl)
			abort();
		if (type ? !sbx_pkg_npm_name_ok(p->name)
			 : sbx_pkg_pypi_normalize(p->name, norm, sizeof norm) < 0 || strcmp(norm, p->name))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	int type = data[0] & 1;
	struct sbx_pkgset s;
	struct sbx_err err = { 0 };
	const char *buf = (const char *)data + 1;
	int r = type ? sbx_pkglock_parse_npm("fuzz", buf, size - 1, &s, &err)
		     : sbx_pkglock_parse_pip("fuzz", buf, size - 1, &s, &err);
	if (r < 0) {
		if (err.code != SBX_EXIT_INVALID && err.code != SBX_EXIT_INTERNAL)
			abort();
		return 0;
	}
	check(type, &s);
	struct sbx_pkgrules rules = { 0 }, back;
	rules.t[type].locked = 1;
	rules.t[type].set = s;
	json_t *j = sbx_pkgrules_json(&rules);
	if (!j || sbx_pkgrules_from_json(j, &back, &err) < 0 || back.t[type].set.n != s.n)
		abort();
	for (size_t i = 0; i < s.n; i++) {
		const struct sbx_pkgpin *a = &back.t[type].set.v[i], *b = &s.v[i];
		if (strcmp(a->name, b->name) || strcmp(a->version, b->version) || strcmp(a->hash, b->hash))
			abort();
	}
	json_decref(j);
	sbx_pkgrules_free(&back);
	sbx_pkgrules_free(&rules);
	return 0;
}
