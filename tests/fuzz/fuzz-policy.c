/* libFuzzer target: the policy loader, the one parser that reads a file a
 * user may have been handed by someone else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sbx_policy p; /* too big for the fuzzer's stack budget */
	struct sbx_err err = { 0 };
	sbx_policy_defaults(&p);
	if (sbx_policy_parse("fuzz.yaml", data, size, &p, &err) == 0) {
		json_t *j = sbx_policy_json(&p);
		if (!j)
			abort(); /* an accepted policy must always be printable */
		char *s = json_dumps(j, JSON_COMPACT);
		if (!s)
			abort();
		free(s);
		json_decref(j);
	} else if (err.code != SBX_EXIT_INVALID || !err.msg[0]) {
		abort(); /* every refusal is "invalid" and says why */
	}
	/* The unit parsers, on the input as one string. */
	char buf[64];
	size_t n = size < sizeof buf - 1 ? size : sizeof buf - 1;
	memcpy(buf, data, n);
	buf[n] = 0;
	uint64_t v;
	sbx_parse_size(buf, &v);
	sbx_parse_duration_ms(buf, &v);
	sbx_policy_set(&p, "resources.cpu_limit", buf, &err);
	return 0;
}
