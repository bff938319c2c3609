/* apt through the package cache (sbx-policy(5), packages.registries
 * {type: apt}): what a create decides before the session exists.
 *
 * A policy's apt entry is either {type: apt}, the archive the host's own
 * apt uses for the template's Debian suite, or {type: apt, url, keyring},
 * an archive the policy names with the keys that sign it.  Each becomes
 * one record entry (struct sbx_limit_registry) per suite it serves:
 * the host's sources may name SUITE and SUITE-updates at one address and
 * SUITE-security at another; a url serves SUITE alone.  The keyring of
 * each entry is read here, as the caller (a tenant's only beneath its
 * host_paths), and written beside the record as apt-N.gpg, its SHA-256 in
 * the record; the proxy's cache half verifies every Release file with it
 * (gpgv) and never reads a host path for it.
 *
 * The template's suite: "from: debian:SUITE" of its spec, or of the
 * template it was built from, followed through "base" (at most
 * SBX_APTSRC_DEPTH); a template of another kind (busybox, an import)
 * has none, and an apt entry for it is refused (3). */
#ifndef SBX_APTSRC_H
#define SBX_APTSRC_H

#include <stddef.h>

#include "err.h"
#include "policy.h"
#include "session.h"
#include "state.h"
#include "template.h"

#define SBX_APTSRC_DEPTH 8
#define SBX_APTSRC_KEYRING_MAX (1u << 20)
#define SBX_APTSRC_FILE_MAX (1u << 20) /* one host sources file */
#define SBX_APTSRC_KEYRING_FILE "apt-%u.gpg"

/* One deb line of the host's sources. */
struct sbx_aptsrc_entry {
	char uri[SBX_POLICY_URL_LEN];
	char suite[64];
	char components[64];
	char signed_by[SBX_POLICY_PATH_LEN]; /* "" none */
};

struct sbx_aptsrc_list {
	struct sbx_aptsrc_entry v[32];
	unsigned n;
};

/* Parse one sources file's text into l (appending): the one-line format
 * ("deb [opts] URI SUITE COMPONENT...", .list) when deb822 is 0, else
 * deb822 stanzas (.sources).  Only "deb" entries are kept; entries that
 * are disabled, or whose URI is not http(s), are skipped.  -1 with why
 * when the text is malformed (pure; fuzzed). */
int sbx_aptsrc_parse(const char *text, size_t n, int deb822, struct sbx_aptsrc_list *l, char *why, size_t wn);

/* The template's Debian suite into suite; 0 when found, 1 when the
 * template has none (no error set), -1 on error. */
int sbx_aptsrc_suite(struct sbx_state *st, const struct sbx_template *t, char *suite, size_t n, struct sbx_err *err);

/* Keyrings read at create, to be written beside the record. */
struct sbx_aptsrc_keys {
	char *data[16];
	size_t len[16];
	unsigned n;
};
void sbx_aptsrc_keys_free(struct sbx_aptsrc_keys *k);

/* Expand the policy's apt entries into k's registry list (after its pypi
 * and npm entries), reading each keyring into keys.  etc: the host's apt
 * configuration directory ("/etc/apt"; tests give another).  Refusals
 * are SBX_EXIT_INVALID: a template without a suite, a suite the host's
 * sources do not name, a keyring that cannot be read or is armored, more
 * entries than the record holds. */
int sbx_aptsrc_resolve(struct sbx_state *st, const struct sbx_policy *p, const struct sbx_template *t,
		       const char *tenant, const char *etc, struct sbx_limit_packages *k, struct sbx_aptsrc_keys *keys,
		       struct sbx_err *err);

/* Write keys beside the record (dfd: the session's directory). */
int sbx_aptsrc_keys_save(int dfd, const struct sbx_aptsrc_keys *keys, struct sbx_err *err);

#endif
