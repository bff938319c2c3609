/* File transfer between the host and a session (sbx-cp): tar streams built
 * and parsed with libarchive, carried over an ordinary exec of the guest's
 * busybox tar.  Every stream is checked entry by entry on the host, in both
 * directions: on upload the user's files are not trusted to be sane, on
 * download the guest is hostile.  The checks fail closed. */
#ifndef SBX_TRANSFER_H
#define SBX_TRANSFER_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "session.h"
#include "state.h"

struct archive;
struct archive_entry;

#define SBX_XFER_ENTRIES_MAX 100000u /* entries in one stream */
#define SBX_XFER_NAME_MAX 4095u      /* bytes of a path or link target */
#define SBX_XFER_COMPONENT_MAX 255u  /* bytes of one path component */
#define SBX_XFER_DEPTH_MAX 256u      /* components of one path */
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

/* Guest paths: absolute, normalized (no "", ".", ".." components, no "//",
 * no trailing "/" except "/" itself), at most SBX_LIMIT_PATH_LEN - 1 bytes.
 * what names the path in the message ("the destination"). */
int sbx_xfer_guest_path_check(const char *path, const char *what, struct sbx_err *err);
/* Is path equal to or below one of the prefixes? */
int sbx_xfer_path_under(const char *path, const struct sbx_limit_paths *prefixes);

/* The per-session budget (LIB/sessions/ID/transfer.json, under a lock):
 * reserve up to want bytes of what is left, so concurrent copies cannot
 * overdraw it.  *got is what was granted (at most want); exactly is set
 * when anything less than want is an error (code 3). */
int sbx_xfer_reserve(struct sbx_state *st, const struct sbx_session *s, uint64_t want, int exactly, uint64_t *got,
		     struct sbx_err *err);
/* Give back the part of a reservation that was not used. */
int sbx_xfer_release(struct sbx_state *st, const char *id, uint64_t unused, struct sbx_err *err);

/* The copies themselves.  to_fd receives the tar for a "-" download.  The
 * result (direction, session, paths, totals) is stored in *result for
 * --json; *guest_msg (free it) holds what the guest's tar said on stderr,
 * which the caller shows.  SIGPIPE must be ignored (the guest may stop
 * reading early), and the caller's signal mask is respected: SIGINT, TERM
 * and HUP are forwarded to the guest's tar. */
struct sbx_cp_opts {
	const char *session;
	const char *tenant;      /* whose host paths these are (hostpath.h); NULL: the operator's */
	const char *const *srcs; /* upload: host paths, or NULL with from_fd >= 0 */
	unsigned nsrcs;
	int from_fd;            /* upload: a tar stream (stdin) */
	const char *guest_path; /* upload: the destination; download: the source */
	const char *host_dest;  /* download: a host path, or NULL to write a tar to to_fd */
	int to_fd;
	char **guest_msg;
};
int sbx_cp_upload(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err);
int sbx_cp_download(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err);

#endif
