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

#include "budget.h"
#include "tarcheck.h"

/* Guest paths: absolute, normalized (no "", ".", ".." components, no "//",
 * no trailing "/" except "/" itself), at most SBX_LIMIT_PATH_LEN - 1 bytes.
 * what names the path in the message ("the destination"). */
int sbx_xfer_guest_path_check(const char *path, const char *what, struct sbx_err *err);
/* Is path equal to or below one of the prefixes? */
int sbx_xfer_path_under(const char *path, const struct sbx_limit_paths *prefixes);

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
	int as_root; /* the guest's tar as root, not the session's user (sbx-serve's user "root") */
};
int sbx_cp_upload(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err);
int sbx_cp_download(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err);

#endif
