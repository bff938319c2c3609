/* A policy's package rules for one session (pkglock.h has the rules
 * themselves and the lock parsers): compiled at create, kept beside the
 * record as LIB/sessions/ID/pkgrules.json, loaded by the session's proxy. */
#ifndef SBX_PKGRULES_H
#define SBX_PKGRULES_H

#include "err.h"
#include "pkglock.h"
#include "policy.h"
#include "session.h"

#define SBX_PKGRULES_FILE "pkgrules.json"

struct sbx_hostpath;
/* A host file a policy names (a lock, a keyring), read whole as tenant
 * may (hostpath.h; NULL: the operator): a regular file of at most max
 * bytes, refused with SBX_EXIT_INVALID naming key; *buf is malloc'd. */
int sbx_pkgrules_read_file(const char *tenant, const char *path, const char *key, size_t max, char **buf, size_t *n,
			   struct sbx_hostpath *hp, struct sbx_err *err);

/* Compile p's packages.allow, deny, pins and lock into r, reading each
 * lock file as the caller would (hostpath.h: a tenant's only beneath its
 * host_paths) and parsing it in a child that runs as nobody, with no new
 * privileges and bounded memory and CPU.  With any rule, *txt gets the
 * compiled JSON (free it) and k->rules its SHA-256, k->lock each lock's
 * path, SHA-256 and size; without, *txt is NULL and k is untouched.
 * Errors: SBX_EXIT_INVALID for the policy's or the lock's fault. */
int sbx_pkgrules_compile(const struct sbx_policy *p, const char *tenant, struct sbx_pkgrules *r,
			 struct sbx_limit_packages *k, char **txt, struct sbx_err *err);
/* For session.create: {"rules": SHA-256, "locks": {TYPE: {"file",
 * "sha256", "entries"}}}, so a reviewer sees which lock governed the
 * session's installs; NULL when k has no rules. */
json_t *sbx_pkgrules_audit_json(const struct sbx_limit_packages *k);
/* Write txt as SBX_PKGRULES_FILE under the session's directory dfd. */
int sbx_pkgrules_save(int dfd, const char *txt, struct sbx_err *err);
/* The rules of a session whose record's packages are k, from its
 * directory dfd, checked against k->rules (none when k has none). */
int sbx_pkgrules_load(int dfd, const struct sbx_limit_packages *k, struct sbx_pkgrules *r, struct sbx_err *err);

#endif
