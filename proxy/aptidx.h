/* Debian archive metadata for the package cache's apt route: the Release
 * text of a suite (what InRelease signs), and the Packages indexes it
 * lists, which say of every .deb in the pool its size and SHA-256.  The
 * cache verifies each file it serves by one or the other, so both parsers
 * fail closed: what they cannot read exactly (a field twice, a path that
 * climbs, a stanza without a hash) refuses the whole text, never a part
 * of it.  Pure: bytes in, structs out (fuzzed: tests/fuzz/fuzz-aptidx.c).
 *
 * The format is deb822 (Debian Policy 5.1): stanzas of "Field: value"
 * lines, continuation lines starting with a space or a tab, stanzas
 * separated by lines that are empty or only blanks.  Field names are
 * compared case-insensitively.  A line starting with '#' is refused: apt
 * reads comments in its sources files, not in these, where "#x: y" would
 * be a field to it.  So is a NUL or a carriage return anywhere (these
 * files have LF line ends). */
#ifndef SBX_APTIDX_H
#define SBX_APTIDX_H

#include <stddef.h>
#include <stdint.h>

/* Release files: the signed text of InRelease, after gpgv verified it and
 * wrote the signed plaintext with --output (no PGP armor). */
#define SBX_APT_RELEASE_MAX (8u << 20) /* bytes of a Release text */
#define SBX_APT_RELFILES_MAX 65536     /* entries in its SHA256 list */
#define SBX_APT_PATH_MAX 4096          /* bytes of a path in it, or of a Filename */

struct sbx_apt_relfile {
	char *path; /* relative to dists/SUITE/ */
	uint64_t size;
	uint8_t sha256[32];
};

struct sbx_apt_release {
	char suite[64], codename[64]; /* "" when absent */
	int by_hash;                  /* Acquire-By-Hash: yes */
	int64_t date, valid_until;    /* seconds since the epoch; 0: absent */
	/* From the SHA256 field only (the cache verifies by SHA-256 alone;
	 * MD5Sum, SHA1 and SHA512 are read past), sorted by path, each path
	 * once. */
	struct sbx_apt_relfile *files;
	size_t nfiles;
};

/* Parse a Release text: a single stanza.  Its SHA256 field is required,
 * each line " HEX SIZE PATH", PATH printable ASCII without empty, "." or
 * ".." components or a leading '/'; the same path twice is refused unless
 * both lines say the same.  Date and Valid-Until are RFC 2822 dates in
 * UTC ("Sat, 10 Aug 2024 09:32:04 UTC"; GMT, Z and +0000 too, the
 * weekday optional); Acquire-By-Hash is yes or no.  Suite and Codename
 * are at most 63 printable characters without blanks.  0, or -1 with a
 * reason in why; *r is zeroed first, and holds nothing to free after -1. */
int sbx_apt_release_parse(const char *buf, size_t n, struct sbx_apt_release *r, char *why, size_t wn);
void sbx_apt_release_free(struct sbx_apt_release *r);
/* The entry for a path relative to dists/SUITE/
 * ("main/binary-amd64/Packages.xz"), or NULL. */
const struct sbx_apt_relfile *sbx_apt_release_find(const struct sbx_apt_release *r, const char *path);
/* A by-hash path "DIR/by-hash/SHA256/HEX" (HEX 64 lowercase hex digits,
 * as apt asks; DIR may be empty, then "by-hash/SHA256/HEX"): the entry in
 * DIR itself (any file name) whose SHA-256 is HEX, or NULL; NULL for any
 * other form. */
const struct sbx_apt_relfile *sbx_apt_release_by_hash(const struct sbx_apt_release *r, const char *path);

/* Packages indexes: a map from pool file name to what the index says of
 * it.  The strings are the index's, checked: filename a path as above,
 * package [a-z0-9][a-z0-9+.-]+, version of [0-9A-Za-z.+~:-], arch of
 * [a-z0-9-]. */
struct sbx_apt_deb {
	const char *filename, *package, *version, *arch;
	uint64_t size;
	uint8_t sha256[32];
};
struct sbx_apt_debmap; /* opaque */

#define SBX_APT_INDEX_MAX_BYTES (512ull << 20) /* decompressed, of one index */
#define SBX_APT_INDEX_MAX_DEBS 400000          /* stanzas of one index */
#define SBX_APT_STANZA_MAX (1u << 20)          /* bytes of one stanza */

/* Read a Packages index from fd's current position: plain or compressed
 * with gzip, xz, lzma, bzip2, zstd or lz4 (libarchive's filters, only
 * those it runs in process, never an external program), adding every
 * stanza's Package, Version, Architecture, Filename, Size and SHA256 to
 * *m (created if *m is NULL; one map can take several indexes).  A stanza
 * missing any of the six is refused, as is a Filename listed twice with
 * anything different (identical duplicates are one entry, so adding an
 * index twice changes nothing).  An empty index adds nothing.  0, or -1
 * (why) when malformed or past the bounds above; on -1 *m is as it was
 * before the call (no half-added index). */
int sbx_apt_debmap_add(struct sbx_apt_debmap **m, int fd, char *why, size_t wn);
/* Same from memory (for tests and fuzzing). */
int sbx_apt_debmap_add_mem(struct sbx_apt_debmap **m, const void *buf, size_t n, char *why, size_t wn);
/* The entry for a Filename ("pool/main/j/jq/jq_1.6-2.1_amd64.deb"), or
 * NULL: a binary search. */
const struct sbx_apt_deb *sbx_apt_debmap_find(const struct sbx_apt_debmap *m, const char *filename);
size_t sbx_apt_debmap_count(const struct sbx_apt_debmap *m);
void sbx_apt_debmap_free(struct sbx_apt_debmap *m);

/* Tests and fuzzing only: lower the three bounds of the Packages reader
 * (0 restores a bound's default above).  Not thread-safe. */
void sbx_apt_debmap_set_bounds(uint64_t max_bytes, size_t max_debs, size_t stanza_max);

#endif
