/* A session's package policy as the guest's package parameters (the
 * sbx.pkg* kernel command line words, and a pool claim's IDENTITY PKG tag):
 * what the boot, a resume and a claim hand the guest; the cache itself is
 * the proxy's (proxy/pkgcache.c). */
#include "pkgparams.h"
#include "policy.h"

#include <stdio.h>

void sbx_pkgcache_guest_params(const struct sbx_limit_packages *k, char *buf, size_t n)
{
	unsigned np = 0, nn = 0;
	for (unsigned i = 0; i < k->nreg; i++)
		*(k->reg[i].type == SBX_REG_NPM ? &nn : &np) += 1;
	/* k->policy is held to [A-Za-z0-9._-] when the record is made. */
	/* sbx.npmscripts=deny only when it is so: a guest-init from before
	 * it refuses words it does not know (a pool member's claim). */
	if (k->mode == SBX_PKG_ALLOWLIST)
		snprintf(buf, n, "sbx.pkg=" SBX_PKGCACHE_BASE " sbx.pkgpolicy=%s sbx.pkgreg=%u,%u%s",
			 k->policy[0] ? k->policy : "defaults", np, nn,
			 k->npm_scripts == SBX_NPM_SCRIPTS_DENY ? " sbx.npmscripts=deny" : "");
	else
		snprintf(buf, n, "sbx.pkg=offline sbx.pkgpolicy=%s", k->policy[0] ? k->policy : "defaults");
}
