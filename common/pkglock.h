/* What a session may install (sbx-policy(5) packages.lock, pins, allow,
 * deny), compiled: lock files parsed into (name, version, hash) entries,
 * inline pins into (name, version), name patterns per registry type.
 * sbx-create reads the lock files (hostpath.h) and writes the compiled
 * set beside the record as pkgrules.json, whose SHA-256 the record keeps;
 * the package cache (proxy/) loads it back and checks each request
 * against it before anything is fetched upstream.
 *
 * The lock parsers take bytes a tenant wrote, so they are bounded
 * (SBX_PKGLOCK_FILE_MAX bytes, SBX_PKGLOCK_ENTRIES_MAX entries, JSON
 * nesting SBX_PKGLOCK_DEPTH_MAX), allocate only what they keep, and are
 * fuzzed (tests/fuzz/fuzz-pkglock.c).  Every refusal is SBX_EXIT_INVALID
 * and names FILE:LINE (requirements) or FILE and a key path (npm). */
#ifndef SBX_PKGLOCK_H
#define SBX_PKGLOCK_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "err.h"

#define SBX_PKGLOCK_FILE_MAX (8u << 20)
#define SBX_PKGLOCK_ENTRIES_MAX 8192u
#define SBX_PKGLOCK_DEPTH_MAX 32u
#define SBX_PKG_NAME_LEN 215    /* npm's 214 and the NUL; PyPI names are shorter */
#define SBX_PKG_VERSION_LEN 129 /* as the cache takes them (proxy/names.c) */
#define SBX_PKG_HASH_LEN 129    /* hex SHA-512 and the NUL */
#define SBX_PKG_PATTERN_LEN 216

/* Registry types, as enum sbx_registry_type (policy.h) numbers them. */
#define SBX_PKG_TYPES 3
#define SBX_PKG_APT 2

struct sbx_pkgpin {
	char name[SBX_PKG_NAME_LEN];       /* normal form: PEP 503 for pypi, as is for npm */
	char version[SBX_PKG_VERSION_LEN]; /* exact */
	char hash[SBX_PKG_HASH_LEN];       /* hex: sha256 (pypi), sha512 (npm); "" for an inline pin */
};

struct sbx_pkgset {
	struct sbx_pkgpin *v;
	size_t n, cap;
};

void sbx_pkgset_free(struct sbx_pkgset *s);
/* Append (hash "" for none); -1 with errno ENOMEM, or E2BIG past
 * SBX_PKGLOCK_ENTRIES_MAX. */
int sbx_pkgset_add(struct sbx_pkgset *s, const char *name, const char *version, const char *hash);

/* A pip requirements file in hash-checking mode: one pinned requirement
 * per logical line, "NAME[EXTRAS]==VERSION [; MARKER] --hash=sha256:HEX
 * ...", continuation lines, comments; no other options (-r, -e, -i, ...).
 * name is what messages call the file. */
int sbx_pkglock_parse_pip(const char *name, const char *buf, size_t n, struct sbx_pkgset *out, struct sbx_err *err);
/* An npm package-lock.json (or npm-shrinkwrap.json) of lockfileVersion 2
 * or 3: every entry of "packages" under node_modules/ that npm fetches,
 * with its dist integrity's sha512. */
int sbx_pkglock_parse_npm(const char *name, const char *buf, size_t n, struct sbx_pkgset *out, struct sbx_err *err);

/* PEP 503: lower case, runs of "-", "_", "." as one "-"; -1 when s is not
 * a project name (PEP 508: ASCII letters and digits inside, "-_." between). */
int sbx_pkg_pypi_normalize(const char *s, char *out, size_t n);
/* An npm package name as the registry takes it: "name" or "@scope/name",
 * at most 214 bytes, of [a-z0-9-._~] (upper case allowed for old names),
 * not starting with "." or "_". */
bool sbx_pkg_npm_name_ok(const char *s);
/* A Debian package name and version (Debian Policy 5.6.1, 5.6.12). */
bool sbx_pkg_deb_name_ok(const char *s);
bool sbx_pkg_deb_version_ok(const char *s);
/* A version as the cache takes it: [A-Za-z0-9.+!_-], at most 128. */
bool sbx_pkg_version_ok(const char *s);

/* ---- the compiled rules (pkgrules.json) ---- */

struct sbx_pkgrules {
	struct sbx_pkgrules_type {
		char **allow, **deny; /* patterns (fnmatch); allow NULL: every name */
		size_t nallow, ndeny;
		int allow_set;
		/* locked: 0 none, 1 a lock file, 2 inline pins.  With either,
		 * only the names in set are served, at their versions (and,
		 * for a lock, with their hashes). */
		int locked;
		struct sbx_pkgset set;
		char source[256]; /* the lock file's path, "packages.pins" */
		char sha256[65];  /* the lock file's SHA-256 */
	} t[SBX_PKG_TYPES];
};

void sbx_pkgrules_free(struct sbx_pkgrules *r);
/* Does the rule set restrict anything? */
bool sbx_pkgrules_any(const struct sbx_pkgrules *r);
json_t *sbx_pkgrules_json(const struct sbx_pkgrules *r);
/* Back from sbx_pkgrules_json's output (our own file: SBX_EXIT_INTERNAL
 * when it does not fit). */
int sbx_pkgrules_from_json(json_t *o, struct sbx_pkgrules *r, struct sbx_err *err);

/* May name (normal form) of registry type be asked for at all?  NULL when
 * it may, else why not (a static or why's buffer), naming the key. */
const char *sbx_pkgrules_name(const struct sbx_pkgrules *r, int type, const char *name, char *why, size_t n);
/* With a lock or pins for type: is version of name in it?  Always true
 * when type has none. */
bool sbx_pkgrules_version(const struct sbx_pkgrules *r, int type, const char *name, const char *version);
/* With a lock for type: is (name, version, hash) in it (hash hex)? */
bool sbx_pkgrules_file(const struct sbx_pkgrules *r, int type, const char *name, const char *version, const char *hash);
/* The lock's entry for name at version (the first), or NULL. */
const struct sbx_pkgpin *sbx_pkgrules_find(const struct sbx_pkgrules *r, int type, const char *name,
					   const char *version);
/* The glob patterns' matcher: fnmatch, with "*" not crossing "/" for npm
 * (so a pattern "@acme/" followed by "*" is that scope). */
bool sbx_pkg_pattern_match(int type, const char *pattern, const char *name);

#endif
