/* A session's package policy as the guest's package parameters (the
 * sbx.pkg* kernel command line words, and a pool claim's IDENTITY PKG tag):
 * what the boot, a resume and a claim hand the guest; the cache itself is
 * the proxy's (proxy/pkgcache.c). */
#include "pkgparams.h"
#include "policy.h"

#include <stdio.h>

size_t sbx_pkgcache_apt_word(const struct sbx_limit_packages *k, char *buf, size_t n)
{
	size_t w = 0;
	buf[0] = 0;
	for (unsigned i = 0; i < k->nreg && w < n; i++) {
		const struct sbx_limit_registry *r = &k->reg[i];
		if (r->type != SBX_REG_APT || k->mode != SBX_PKG_ALLOWLIST)
			continue;
		w += (size_t)snprintf(buf + w, n - w, "%s%s/", w ? "," : " sbx.apt=", r->suite);
		for (const char *c = r->components; *c && w + 1 < n; c++)
			buf[w++] = *c == ' ' ? '+' : *c;
		if (w < n)
			buf[w] = 0;
		if (!r->host && w + 1 < n)
			buf[w++] = '!', buf[w] = 0;
	}
	if (!w && k->apt_local)
		w = (size_t)snprintf(buf, n, " sbx.apt=-");
	return w < n ? w : n;
}

void sbx_pkgcache_guest_params(const struct sbx_limit_packages *k, char *buf, size_t n)
{
	unsigned np = 0, nn = 0;
	for (unsigned i = 0; i < k->nreg; i++)
		if (k->reg[i].type != SBX_REG_APT)
			*(k->reg[i].type == SBX_REG_NPM ? &nn : &np) += 1;
	char apt[SBX_PKGPARAMS_APT_MAX + 16];
	sbx_pkgcache_apt_word(k, apt, sizeof apt);
	/* k->policy is held to [A-Za-z0-9._-] when the record is made. */
	/* sbx.npmscripts=deny only when it is so: a guest-init from before
	 * it refuses words it does not know (a pool member's claim). */
	if (k->mode == SBX_PKG_ALLOWLIST)
		snprintf(buf, n, "sbx.pkg=" SBX_PKGCACHE_BASE " sbx.pkgpolicy=%s sbx.pkgreg=%u,%u%s%s",
			 k->policy[0] ? k->policy : "defaults", np, nn,
			 k->npm_scripts == SBX_NPM_SCRIPTS_DENY ? " sbx.npmscripts=deny" : "", apt);
	else
		snprintf(buf, n, "sbx.pkg=offline sbx.pkgpolicy=%s%s", k->policy[0] ? k->policy : "defaults", apt);
}
