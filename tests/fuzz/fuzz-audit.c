/* libFuzzer target: the audit verifier over arbitrary bytes as audit.log,
 * with and without an audit.head (the input's first line), and the time
 * parser behind --since/--until.  A log is only as trustworthy as the
 * host, so verify must survive whatever an attacker left in it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct sbx_audit_report r;
	sbx_audit_verify_buf(p, size, NULL, 0, &r);
	if (r.ok && r.line != 0)
		abort();
	if (!r.ok && (r.line == 0 || r.problem == SBX_AUDIT_INTACT))
		abort();

	const char *nl = memchr(p, '\n', size);
	if (nl) {
		size_t hn = (size_t)(nl - p) + 1;
		sbx_audit_verify_buf(p + hn, size - hn, p, hn, &r);
	}

	char t[64];
	size_t tn = size < sizeof t - 1 ? size : sizeof t - 1;
	memcpy(t, p, tn);
	t[tn] = 0;
	uint64_t ns;
	sbx_audit_parse_time(t, 1700000000ull * 1000000000u, &ns, NULL);
	return 0;
}
