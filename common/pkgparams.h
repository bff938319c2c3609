/* Where a session's guest finds the package cache (proxy/pkgcache.h), and
 * how guest-init is told: what the session start needs of the cache,
 * without linking it. */
#ifndef SBX_PKGPARAMS_H
#define SBX_PKGPARAMS_H

#include <stddef.h>

#include "session.h"

#define SBX_PKGCACHE_ADDR "10.0.2.2"
#define SBX_PKGCACHE_PORT 3141
#define SBX_PKGCACHE_BASE "http://10.0.2.2:3141"

/* The guest's side, as kernel parameters for guest-init (at most n bytes):
 *   sbx.pkg=offline | sbx.pkg=SBX_PKGCACHE_BASE   where installs go
 *   sbx.pkgpolicy=NAME                            named in refusals
 *   sbx.pkgreg=P,N                                registries per type
 *   sbx.npmscripts=deny                           npm runs no install scripts
 *                                                 (only when the policy says so)
 *   sbx.apt=...                                   apt's sources (below; only
 *                                                 when apt is used or refused)
 * guest-init writes /etc/pip.conf and npmrc from them, and answers
 * installs it must refuse itself on 127.0.0.1:3141. */
void sbx_pkgcache_guest_params(const struct sbx_limit_packages *k, char *buf, size_t n);
/* Room for them (the guest takes at most 511 bytes at a claim) and for
 * the apt word alone, which a create refuses past SBX_PKGPARAMS_APT_MAX:
 *   sbx.apt=SUITE/COMP[+COMP][!],...   the cache's apt entries ('!': an
 *                                       archive the policy named)
 *   sbx.apt=-                           apt is refused by the guest */
#define SBX_PKGPARAMS_MAX 512
#define SBX_PKGPARAMS_APT_MAX 300
/* The apt word ("" when none); its length. */
size_t sbx_pkgcache_apt_word(const struct sbx_limit_packages *k, char *buf, size_t n);

#endif
