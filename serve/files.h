/* envd's filesystem API and /files in sbx-serve (sbx-serve(8)), done in
 * the guest, never on the host's filesystem.
 *
 * The back runs the guest's own tools (a POSIX sh script over stat, find,
 * mkdir, mv, rm and realpath, which busybox and Debian's coreutils both
 * have) as the user the call names, in an exec of sbx's own; what they
 * print is NUL-delimited records the back parses with bounds
 * (serve_fs_parse, fuzzed).  File bytes cross as tar streams through
 * sbx-cp's checked copies (transfer.h), under the session's files: rules
 * and caps.
 *
 * fsparse.c is pure (fuzzed by tests/fuzz/fuzz-serve.c); files.c is the
 * back's side; front_files.c the front's. */
#ifndef SBX_SERVE_FILES_H
#define SBX_SERVE_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "err.h"

#define SERVE_FS_PATH_MAX 4096
#define SERVE_FS_DEPTH_MAX 64
#define SERVE_FS_ENTRIES_MAX 100000u
#define SERVE_FS_OUT_MAX (32u << 20) /* bytes of the guest's records */

enum serve_fs_call {
	SERVE_FS_STAT = 1,
	SERVE_FS_LIST,
	SERVE_FS_MKDIR,
	SERVE_FS_MOVE,
	SERVE_FS_REMOVE,
	SERVE_FS_RESOLVE, /* /files GET: the real path of a readable file */
	SERVE_FS_PREPARE, /* /files POST: the parent made, the path no directory */
};

/* A call's arguments as the back decodes them from the request's "args"
 * (wire.h): paths made absolute against the user's home and cleaned. */
struct serve_fs_args {
	enum serve_fs_call call;
	char path[SERVE_FS_PATH_MAX];
	char dest[SERVE_FS_PATH_MAX]; /* move */
	unsigned depth;               /* list: 1 to SERVE_FS_DEPTH_MAX */
	int recursive;                /* watch */
};

/* The guest user's home, as E2B's templates (and sbx's) have it. */
const char *serve_fs_home(const char *user);
/* in (n bytes, not NUL-terminated) as an absolute path: "" and "~" are
 * home, "~/x" and a relative x are below it; ".", ".." and "//" cleaned
 * away lexically (".." of "/" is "/"), as envd does.  0, or -1 for a NUL
 * or a result of cap bytes or more. */
int serve_fs_path(const char *in, size_t n, const char *home, char *out, size_t cap);
/* args (an object; NULL: none) for op "fs" (the call named by "call"),
 * "download" or "upload" (call 0). */
int serve_fs_args_decode(json_t *args, const char *user, int is_fs, struct serve_fs_args *a, struct sbx_err *err);

/* The guest's records (n bytes): "E" NUL, "MODE_HEX SIZE UID GID MTIME
 * USER GROUP" NUL, PATH NUL, LINK_TARGET NUL; or "R" NUL, PATH NUL.  With
 * base (a list), each PATH is "./REL" under base; else PATH is the path
 * itself.  A JSON array of envd EntryInfo objects (proto3 JSON) and, for
 * an R record, *real (cap bytes); NULL with err for anything malformed or
 * over max entries. */
/* Bytes as a JSON string: sequences that are not UTF-8 become U+FFFD, as
 * Go's JSON encoder (envd's) writes them. */
json_t *serve_json_bytes(const char *s, size_t n);

json_t *serve_fs_parse(const char *buf, size_t n, const char *base, size_t max, char *real, size_t cap,
		       struct sbx_err *err);
/* A record of `guest-init --watch` (guest-init/watch.c) from buf (n
 * bytes): 1 with *used bytes taken and *ev, {"start": true} or envd's
 * FilesystemEvent ({"name", "type"}, proto3 JSON); 0 when buf holds no
 * whole record yet and is under SERVE_WATCH_REC_MAX bytes; -1 with err
 * for anything else (a guest can print anything). */
#define SERVE_WATCH_REC_MAX (SERVE_FS_PATH_MAX + 2)
int serve_watch_record(const char *buf, size_t n, size_t *used, json_t **ev, struct sbx_err *err);
/* Go's os.FileMode.String() of a Unix st_mode, as envd reports it. */
void serve_fs_perms(uint32_t mode, char out[24]);

/* The back's calls (files.c): answer on sock, or -1 with err (its errnum
 * EACCES: a permission, the guest's or the policy's; EFBIG: a cap). */
struct sbx_state;
struct serve_req;
int serve_files_fs(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err);
int serve_files_download(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err);
int serve_files_upload(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err);
/* WatchDir's and CreateWatcher's: {"ok": true} once the guest watches,
 * then a message per event ({"name", "type"}) and a last one, {"end":
 * true} with how it ended, until the front closes sock. */
int serve_files_watch(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err);

#endif
