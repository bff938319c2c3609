/* The pull-through package cache: a module of the per-session proxy
 * (proxy/, libexec/sbx/sbx-proxy), serving HTTP/1.1 to the guest on 10.0.2.2:3141
 * for sessions whose policy has packages.mode: allowlist (sbx-policy(5)).
 *
 * The guest names a registry by its type and its position among the
 * policy's registries of that type, and a package (and file) by name:
 *
 *   GET /pypi/N/simple/PROJECT/            PEP 503 index, links rewritten
 *   GET /pypi/N/files/PROJECT/FILENAME     one file named by that index
 *   GET /npm/N/PACKAGE                     npm metadata, tarballs rewritten
 *   GET /npm/N/tarball/PACKAGE/VERSION     that version's tarball
 *
 * Upstream URLs come only from the policy's registry URLs and from what
 * those registries' own index pages name, never from the request, so the
 * cache is no general proxy.  Files are verified against the registry's
 * hash (PyPI #sha256=, npm dist.integrity / dist.shasum), stored
 * content-addressed under LIB/pkgcache/SCOPE/ (as SBX_PKGCACHE_UID), logged to
 * LIB/sessions/ID/packages.log and the audit trail (package.fetch), and
 * counted against packages.max_download.
 *
 * For the proxy ("network"):
 *  - A session whose record has limits.packages.mode == SBX_PKG_ALLOWLIST
 *    needs a NIC and the proxy even when network.egress is none; the
 *    guest may then reach only 10.0.2.2:3141 (TCP).  With mode offline
 *    there is no listener and no NIC is needed for packages: the guest
 *    answers installs itself (guest-init, sbx.pkg=offline).
 *  - Call sbx_pkgcache_init once per process, before the first thread.
 *  - For each connection accepted on 10.0.2.2:3141, one thread calls
 *    sbx_pkgcache_serve(cfg, fd) and then closes fd.  Blocking I/O; the
 *    call applies its own read/write timeouts to fd.
 *  - Bounds (sbx-policy(5), sbx.yaml(5)): HEAD is answered from the
 *    cache only, never from upstream; every byte fetched upstream for the
 *    session (index pages and metadata included) is reserved against
 *    packages.max_download under the budget's lock before it is accepted,
 *    and what a fetch did not use is given back; at most
 *    SBX_PKGCACHE_FETCHES_MAX upstream fetches run at once in one proxy
 *    (one proxy per session), the rest wait; an index page or metadata
 *    document is at most SBX_PKGCACHE_INDEX_MAX bytes and PEP 503 pages
 *    are parsed as they arrive (SAX), keeping only bounded links; each
 *    cache scope keeps at most sbx.yaml's packages.cache_quota bytes,
 *    least recently used entries evicted first; a verified entry is not
 *    hashed again while its inode, size, mtime and ctime are unchanged.
 *  - The thread must run in the host's network namespace: upstream
 *    fetches (libcurl) go out through the host network.  Every address
 *    they connect to is checked against the fixed deny list at connect
 *    time (sbx_pkgcache_addr_denied), registry URLs included.
 */
#ifndef SBX_PKGCACHE_H
#define SBX_PKGCACHE_H

#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>
#include <sys/types.h>

#include "err.h"
#include "jail.h"
#include "pkglock.h"
#include "session.h"

#include "pkgparams.h"
#include "http.h"

#define SBX_PKGCACHE_FETCHES_MAX 4              /* upstream fetches at once, per proxy */
#define SBX_PKGCACHE_INDEX_MAX (32u << 20)      /* an index page or metadata document */
#define SBX_PKGCACHE_QUOTA_DEFAULT (4ull << 30) /* per cache scope, when sbx.yaml sets none */

/* The package cache runs as this uid (the proxy's cache half, proxy.c),
 * which owns every cache scope, LIB/pkgcache/SCOPE (0700); LIB/pkgcache
 * itself stays root's (0700), so no scope reaches another by "..".  Next
 * to the jail's ranges (jail.h): the VMM's base + pid, the proxy's
 * network half base + 2^22 + pid, the monitor's unprivileged half base +
 * 2^23 + pid (pid < 2^22): base + 3 * 2^22 is none of them. */
#define SBX_PKGCACHE_UID (SBX_JAIL_UID_BASE + (3u << 22))

struct sbx_pkgcache_cfg {
	int cache_fd;  /* the session's cache scope (sbx_pkgcache_scope_open) */
	int pkglog_fd; /* the session's packages.log (O_APPEND), opened
			* before the drop; -1: none */
	/* The audit trail and the session's packages.max_download counter,
	 * both the root writer's (proxy.c): an append (-1 when the record is
	 * not in the trail) and a budget operation (give back `give`, then
	 * reserve `take`: 0 granted, 1 refused, -1 not accounted; *used). */
	int (*audit)(void *ctx, const char *type, json_t *fields, struct sbx_err *err);
	int (*budget)(void *ctx, uint64_t take, uint64_t give, uint64_t *used);
	void *ctx;
	const char *session;                  /* session ID */
	const char *tenant;                   /* "" or NULL: none; cached files are shared
					       * only among sessions of the same tenant */
	const struct sbx_limit_packages *pkg; /* the record's limits.packages */
	const struct sbx_pkgrules *rules;     /* its allow, deny, pins and lock
					       * (pkgrules.h); NULL: none */
	const char *base_url;                 /* how the guest reaches the cache, for the links
					       * the cache writes; NULL: SBX_PKGCACHE_BASE */
	int log_fd;                           /* the proxy's diagnostics: one line per internal
					       * problem; -1: none */
	/* apt: each apt entry's keyring (by its place among apt's), read
	 * beside the record before the drop, checked against the record's
	 * SHA-256 of it, and placed in the jail (sbx_jail_system_files) at
	 * this path for gpgv; NULL: none (that entry is refused). */
	const char *apt_keyring[16];
};

/* The jail's directory of apt's keyrings (proxy.c). */
#define SBX_PKGCACHE_APT_KEYS "apt-keys"

/* Once per process, before any thread serves (libcurl, libxml2, and
 * sbx.yaml's packages.cache_quota, read here so a later jail need not
 * see /etc). */
int sbx_pkgcache_init(struct sbx_err *err);

/* As root, before the drop: the cache scope of tenant (NULL or "": the
 * shared one) under lib_fd, made if need be, owned by uid.  A scope an
 * older sbx made (root's) is handed over once, walking it without
 * following a link and leaving alone anything hard-linked elsewhere; the
 * scope itself is handed over last, so an interrupted hand-over is done
 * again.  LIB/pkgcache is made root's and 0700.  The scope's fd, or -1
 * (err). */
int sbx_pkgcache_scope_open(int lib_fd, const char *tenant, uid_t uid, struct sbx_err *err);

/* Serve one connection: one request, one response, then return (the
 * response says Connection: close).  Does not close conn_fd.  Returns 0
 * when a response was sent, -1 when the connection failed or timed out;
 * either way everything worth knowing is already in packages.log and
 * log_fd. */
int sbx_pkgcache_serve(const struct sbx_pkgcache_cfg *cfg, int conn_fd);

/* Why an upstream connection to sa may not be made (NULL: it may): the
 * fixed deny list (sbx_egress_denied: loopback, RFC 1918, 100.64/10,
 * link-local and cloud metadata, fc00::/7, fe80::/10, ...) and the
 * host's own addresses.  Applied to every address libcurl connects to,
 * registry URLs from the policy included. */
const char *sbx_pkgcache_addr_denied(const struct sockaddr *sa, socklen_t len);

/* ---- exposed for tests and fuzzing ---- */

struct sbx_http_req {
	char method[8];
	char target[2048]; /* origin-form: starts with '/', no '#' */
	unsigned minor;    /* HTTP/1.x */
	int has_body;      /* Content-Length other than 0, or Transfer-Encoding */
	int pip;           /* User-Agent: pip/... */
};

/* Parse a request head (http.h, sbx_http_head_parse) as the cache takes
 * it: origin-form only, a target under sizeof target.  Returns the bytes
 * consumed (> 0), 0 when buf holds no complete head yet, -1 when it is
 * malformed or over the bounds (*status gets 400, 414, 431 or 505). */
int sbx_http_parse_head(const char *buf, size_t n, struct sbx_http_req *r, int *status);

/* PEP 503 name normalization: lower case, runs of "-", "_", "." as one
 * "-".  -1 when name is not a valid project name. */
int sbx_pep503_normalize(const char *name, char *out, size_t n);

/* Parse a PEP 503 page (links resolved against base) and count the
 * package files it offers: what the cache would rewrite.  -1 when it does
 * not parse. */
int sbx_pkgcache_index_links(const char *html, size_t n, const char *base, size_t *count);

#endif
