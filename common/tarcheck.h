/* The tar stream checker: every entry of a stream sbx-cp carries (or any
 * other tar the host must not trust) checked and sanitized on the host,
 * with bounded memory.  Pure: no state, no guest, no I/O of its own; the
 * fuzzed part of sbx-cp (tests/fuzz/fuzz-tar.c). */
#ifndef SBX_TARCHECK_H
#define SBX_TARCHECK_H

#include <stdint.h>

#include "err.h"

struct archive;
struct archive_entry;

#define SBX_XFER_ENTRIES_MAX 100000u   /* entries in one stream */
#define SBX_XFER_NAME_MAX 4095u        /* bytes of a path or link target */
#define SBX_XFER_COMPONENT_MAX 255u    /* bytes of one path component */
#define SBX_XFER_DEPTH_MAX 256u        /* components of one path */
#define SBX_XFER_NAMES_MAX (64u << 20) /* bytes of all names together */

/* What a stream may hold. */
struct sbx_tar_rules {
	uint64_t max_bytes;   /* sum of regular file sizes */
	unsigned max_entries; /* 0: SBX_XFER_ENTRIES_MAX */
	/* The only top-level name allowed ("" or NULL: any), and whether link
	 * targets must stay inside it (download: the copied tree itself) or
	 * only inside the destination directory (upload). */
	const char *top;
	/* Owner written into sanitized entries (upload: the guest's user). */
	int set_owner;
	unsigned uid, gid;
	/* Modes of what is written on the host: group and other never get
	 * write permission. */
	int host_modes;
	const char *cap_name; /* the policy key max_bytes comes from, for messages */
};

struct sbx_tar_check; /* the state of one stream's check: names seen so far */

struct sbx_tar_check *sbx_tar_check_new(const struct sbx_tar_rules *r);
void sbx_tar_check_free(struct sbx_tar_check *c);
/* Check the next entry of a stream.  Returns 1 with *out a new, sanitized
 * entry (only name, type, mode, size, mtime and link target survive; no
 * setuid, setgid or sticky bit, no owner unless the rules set one, no
 * xattrs or ACLs); 0 when the entry is to be skipped (the "./" of
 * `tar -C dir -c .`); -1 with err set (code 3, naming the entry) when the
 * stream must be refused. */
int sbx_tar_check_entry(struct sbx_tar_check *c, struct archive_entry *in, struct archive_entry **out,
			struct sbx_err *err);
/* Totals of the entries accepted so far. */
struct sbx_tar_totals {
	uint64_t bytes;
	unsigned files, dirs, symlinks, hardlinks;
};
void sbx_tar_check_totals(const struct sbx_tar_check *c, struct sbx_tar_totals *t);

/* Read the whole stream from in, check every entry, and copy the sanitized
 * entries and their data to out (a tar writer or archive_write_disk; NULL
 * only checks).  Stops at the first refused entry or malformed header
 * (libarchive's warnings included): 3; a failed write: 70. */
int sbx_tar_filter(struct sbx_tar_check *c, struct archive *in, struct archive *out, struct sbx_err *err);

#endif
