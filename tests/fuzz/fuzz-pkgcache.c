/* libFuzzer target: what the package cache reads from others: the request
 * head the guest sends (hostile), and index pages from a registry. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pkgcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_http_req r;
	int status = 0;
	int used = sbx_http_parse_head((const char *)data, size, &r, &status);
	if (used > 0) {
		/* An accepted head is bounded, terminated and origin-form. */
		if ((size_t)used > size || (size_t)used > SBX_HTTP_HEAD_MAX || r.target[0] != '/' ||
		    strnlen(r.target, sizeof r.target) == sizeof r.target || strchr(r.target, '#') ||
		    strchr(r.target, ' ') || !r.method[0])
			abort();
	} else if (used < 0 && status != 400 && status != 414 && status != 431 && status != 505) {
		abort();
	}
	char name[256], out[256];
	size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
	memcpy(name, data, n);
	name[n] = 0;
	if (sbx_pep503_normalize(name, out, sizeof out) == 0)
		for (const char *q = out; *q; q++)
			if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-'))
				abort();
	size_t links = 0;
	sbx_pkgcache_index_links((const char *)data, size, "http://198.51.100.2/simple/x/", &links);
	return 0;
}
