/* libFuzzer target: the template spec parser (a spec may come from
 * anyone; the builder trusts only what it accepts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tmplspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_tmplspec s;
	struct sbx_err err = { 0 };
	if (sbx_tmplspec_parse("fuzz.yaml", data, size, &s, &err) == 0) {
		/* What was accepted holds the invariants the builder relies on. */
		for (unsigned i = 0; i < s.nfiles; i++) {
			char why[100], out[SBX_TMPLSPEC_PATH_LEN];
			if (sbx_tmplspec_check_relpath(s.files[i].src, why, sizeof why) < 0 ||
			    s.files[i].dst[0] != '/' || strstr(s.files[i].dst, "/../") ||
			    strstr(s.files[i].dst, "//") ||
			    sbx_tmplspec_check_guestpath(s.files[i].dst, out, sizeof out, why, sizeof why) < 0 ||
			    strcmp(out, s.files[i].dst))
				abort();
		}
		for (unsigned i = 0; i < s.npackages; i++)
			if (sbx_tmplspec_check_package(s.packages[i]) < 0)
				abort();
		if (s.user[0] && sbx_tmplspec_check_spec_user(s.user) < 0) /* a name or a uid */
			abort();
		json_t *j = sbx_tmplspec_json(&s);
		char *t = j ? json_dumps(j, JSON_SORT_KEYS) : NULL;
		if (!t)
			abort();
		free(t);
		json_decref(j);
		sbx_tmplspec_free(&s);
	} else if (err.code != SBX_EXIT_INVALID || !err.msg[0]) {
		abort();
	}
	return 0;
}
