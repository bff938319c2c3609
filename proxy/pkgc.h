/* The package cache's parts (pkgcache.h), shared among its files and
 * private to proxy/:
 *   pkgcache.c  set-up, one connection's context and records (packages.log,
 *               the audit trail, the download budget), routing, serving
 *   http.c      the request head (http.h, shared with egress.c)
 *   reply.c     responses
 *   names.c     names and encodings, a growing buffer
 *   upstream.c  upstream slots, fetches through libcurl, the deny list
 *   pypi.c      PEP 503 index pages and the files they name
 *   npm.c       npm metadata and tarballs
 *   apt.c       Debian archives: InRelease (gpgv), indexes, .debs
 *   store.c     cache entries: verification records, LRU, quota, names */
#ifndef SBX_PKGC_H
#define SBX_PKGC_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>
#include <libxml/HTMLparser.h>
#include <sha1.h>
#include <sha2.h>

#include "pkgcache.h"

#define INDEX_MAX SBX_PKGCACHE_INDEX_MAX /* an upstream index page or metadata document */
#define FILE_NAME_MAX 255
#define URL_MAX 4096
#define IO_TIMEOUT_S 60 /* the guest's socket, each read or write; the wait for a slot */

/* ---- one connection (pkgcache.c) ---- */

struct conn {
	const struct sbx_pkgcache_cfg *cfg;
	int fd;
	struct sbx_http_req req;
	int head;  /* HEAD: no body */
	int npm;   /* the route is npm's: errors as JSON */
	int index; /* a PyPI index page: errors pip will show (see pc_refuse) */
	/* for the log */
	char registry[16]; /* "pypi/0" */
	const char *reg_url;
	char kind[12]; /* index, file, metadata, tarball */
	char package[220], version[130], file[FILE_NAME_MAX + 1];
	char arch[32]; /* a .deb's architecture */
	int apt_route; /* apt.c: the entry an index being served belongs to */
	char upstream[URL_MAX];
	int slot;            /* holds one of the SBX_PKGCACHE_FETCHES_MAX upstream slots */
	uint64_t charged_up; /* bytes of the index or metadata fetched for this request,
			      * already charged to the budget */
};

struct outcome {
	int status;
	const char *verdict; /* ok, refused, not-found, error */
	const char *reason;
	const char *cache; /* hit, miss, NULL */
	uint64_t size;
	char sha256[65];
	char expected[140];   /* the registry's hash, "sha256:..." */
	const char *verified; /* hashed (while downloading), cached (the recorded hash
			       * of an unchanged inode), rehashed (hashed again) */
	int prepaid;          /* size is already charged: it was downloaded for this request */
};

/* A growing, NUL-terminated buffer (names.c: pc_sb_add); oom set once an
 * allocation failed, after which nothing more is added. */
struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
};

/* ---- one fetch (upstream.c) ---- */

struct links;     /* pypi.c */
struct index_sax; /* pypi.c */
struct fetch {
	/* in */
	const char *url;
	const char *accept;
	int fd;              /* >= 0: write the body here (hashing it); else memory */
	uint64_t max;        /* body bytes */
	struct conn *budget; /* non-NULL: reserve every body byte against its max_download */
	struct links *links; /* non-NULL: parse the body as a PEP 503 page as it arrives,
			      * into links, instead of keeping it */
	/* out */
	struct sbuf body; /* the body, when fd < 0 and links is NULL */
	uint64_t bytes;
	uint64_t reserved; /* of the budget, for this fetch; bytes of it are used */
	long status;
	int over;  /* the body was larger than max */
	int broke; /* the budget was spent (1) or cannot be accounted (-1) */
	int oom;
	int started;
	CURL *h;
	htmlParserCtxtPtr html;
	struct index_sax *sax;
	char denied[200]; /* an address the deny list refused */
	char effective[URL_MAX];
	char error[CURL_ERROR_SIZE + 64];
	SHA2_CTX s256, s512;
	SHA1_CTX s1;
	int werr;
};

/* The registry's hashes of a file (store.c). */
struct want {
	char sha256[65]; /* hex, or "" */
	char sha512[129];
	char sha1[41];
	char key[140]; /* the cache entry's name: "sha256-HEX" / "sha512-HEX"; "" not cacheable */
	/* Optional: a look at the verified file (fd) before it is served,
	 * from the cache or upstream alike; 0 to serve it, else the refusal
	 * is sent (npm.c: packages.npm_scripts). */
	int (*inspect)(struct conn *c, struct outcome *o, int fd);
};

#define SEGS_MAX 12 /* of a request's path (apt's by-hash paths have 9) */
typedef char segment[256];

/* pkgcache.c */
void pc_diag(const struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *pc_policy_name(const struct conn *c);
/* packages.log (every request's outcome) and, for package files (audit),
 * the audit trail; -1 when the audit append failed: not to be served. */
int pc_record(const struct conn *c, const struct outcome *o, int audit);
/* The session's download budget (pkgcache.c: 0 granted, 1 refused, -1). */
int pc_budget_op(const struct conn *c, uint64_t take, uint64_t give, uint64_t *used);
int pc_budget_take(const struct conn *c, uint64_t n, uint64_t *used);
uint64_t pc_budget_left(const struct conn *c, uint64_t used);
/* The bytes c's cache scope may keep. */
uint64_t pc_scope_quota(const struct conn *c);
int pc_refuse_head(struct conn *c);
/* The policy's package rules (pkglock.h) for c->package, and for
 * c->version when set: 0 when they allow it, else 1 with the refusal
 * sent (403 naming the key or the lock and the policy; audit: in the
 * audit trail too). */
int pc_rules_check(struct conn *c, int type, int audit);
/* The lock's or pins' words for c's registry type, for messages:
 * "the lock FILE" or "packages.pins.TYPE". */
const char *pc_rules_source(const struct conn *c, int type, char *buf, size_t n);

/* reply.c */
int pc_send_head(struct conn *c, int status, const char *reason, const char *ctype, uint64_t len);
int pc_send_file(struct conn *c, int fd, uint64_t size);
/* Record the refusal (audit: in the audit trail too) and send it. */
int pc_refuse(struct conn *c, struct outcome *o, int status, const char *msg, int audit);
int pc_serve_body(struct conn *c, struct outcome *o, const char *ctype, const char *body, size_t n);

/* names.c */
int pc_npm_name_ok(const char *s);
int pc_version_ok(const char *s);
int pc_filename_ok(const char *s);
int pc_pct_decode(const char *s, size_t len, char *out, size_t n);
void pc_to_hex(const uint8_t *d, size_t n, char *out);
int pc_hex_ok(const char *s, size_t len);
int pc_b64_decode(const char *s, uint8_t *out, size_t n);
void pc_sb_add(struct sbuf *b, const char *s, size_t n);

/* upstream.c */
void pc_slots_init(void);
int pc_slot_take(struct conn *c);
void pc_slot_give(struct conn *c);
int pc_fetch(struct fetch *f);
void pc_join_url(char *out, size_t n, const char *base, const char *rest);
int pc_resolve_url(const char *base, const char *href, char *out, size_t n);
int pc_upstream_begin(struct conn *c, struct outcome *o, const char *what, uint64_t *max);
int pc_refuse_page_budget(struct conn *c, struct outcome *o, const struct fetch *f, const char *what);

/* pypi.c */
int pc_index_feed(struct fetch *f, const char *p, size_t n);
int pc_route_pypi(struct conn *c, const char *reg_url, segment *seg, unsigned ns);

/* npm.c */
int pc_route_npm(struct conn *c, const char *reg_url, segment *seg, unsigned ns);

/* apt.c: r is the idx-th apt entry (by its place among apt's). */
int pc_route_apt(struct conn *c, const struct sbx_limit_registry *r, unsigned idx, segment *seg, unsigned ns);

/* store.c */
int pc_cache_dir(const struct conn *c);
int pc_subdir(int dir, const char *name);
int pc_serve_file(struct conn *c, struct outcome *o, const char *url, const struct want *w);
int pc_head_file(struct conn *c);

#endif
