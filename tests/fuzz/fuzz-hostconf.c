/* libFuzzer target: the host configuration loader (sbx.yaml(5)). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostconf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A root must be absolute, not "/", and have no ".." component ("/..rv"
 * is a name like any other). */
static int bad_root(const char *r)
{
	if (r[0] != '/' || !r[1])
		return 1;
	for (const char *p = r; (p = strstr(p, "/..")); p++)
		if (p[3] == '/' || p[3] == 0)
			return 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sbx_hostconf hc;
	struct sbx_err err = { 0 };
	if (sbx_hostconf_parse("fuzz.yaml", data, size, &hc, &err) == 0) {
		if (hc.npool > SBX_POOL_TEMPLATES_MAX)
			abort();
		for (unsigned i = 0; i < hc.npool; i++)
			if (!hc.pool[i].tmpl[0] || hc.pool[i].size > SBX_POOL_SIZE_MAX || !hc.pool[i].vcpus ||
			    hc.pool[i].memory_mib < 64 || !hc.pool[i].disk)
				abort(); /* an accepted file holds only values in range */
		if (hc.paths.nread > SBX_HOSTPATH_ROOTS_MAX || hc.paths.nwrite > SBX_HOSTPATH_ROOTS_MAX ||
		    hc.paths.nenv > SBX_ENV_ALLOW_MAX || hc.quotas.ntenants > SBX_QUOTA_TENANTS_MAX)
			abort();
		for (unsigned i = 0; i < hc.paths.nread; i++)
			if (bad_root(hc.paths.read[i]))
				abort();
		for (unsigned i = 0; i < hc.paths.nwrite; i++)
			if (bad_root(hc.paths.write[i]))
				abort();
	} else if ((err.code != SBX_EXIT_INVALID && err.code != SBX_EXIT_INTERNAL) || !err.msg[0] || hc.npool ||
		   hc.paths.nread || hc.paths.nwrite || hc.paths.nenv || hc.quotas.ntenants) {
		abort(); /* every refusal says why and leaves nothing behind */
	}
	return 0;
}
