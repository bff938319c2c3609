/* The back's filesystem calls and /files (files.h): each an exec of the
 * guest's own tools as the user the call names, or sbx-cp's checked tar
 * copies; nothing here opens a path on the host. */
#include "files.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec_client.h"
#include "execrec.h"
#include "session.h"
#include "transfer.h"
#include "util.h"
#include "wire.h"

#define FS_TIMEOUT_MS 60000
#define MSG_MAX 1024

/* The records of each path named (files.h): a fork of stat per entry, and
 * of readlink per symlink, so every record's fields and name come whole
 * and NUL-delimited whatever bytes the name holds. */
static const char each_sh[] = "for f; do\n"
			      "  s=$(stat -c '%f %s %u %g %Y %U %G' -- \"$f\" 2>/dev/null) || continue\n"
			      "  t=; [ -L \"$f\" ] && t=$(readlink -- \"$f\")\n"
			      "  printf 'E\\0%s\\0%s\\0%s\\0' \"$s\" \"$f\" \"$t\"\n"
			      "done\n";

/* $1 the each script, $2 the call, $3 the path, $4 the depth or the
 * destination.  Statuses 100-107 are ours, mapped in fs_status. */
static const char fs_sh[] =
	"each=$1 op=$2 p=$3 a=$4\n"
	"ex() { [ -e \"$1\" ] || [ -L \"$1\" ]; }\n"
	"case $op in\n"
	"stat) ex \"$p\" || exit 101; exec sh -c \"$each\" sh \"$p\" ;;\n"
	"list) ex \"$p\" || exit 101; [ -d \"$p\" ] || exit 102\n"
	"  cd -- \"$p\" 2>/dev/null && [ -r . ] || exit 107\n"
	"  find . -mindepth 1 -maxdepth \"$a\" -exec sh -c \"$each\" sh {} + 2>/dev/null; exit 0 ;;\n"
	"mkdir) [ -d \"$p\" ] && exit 105; ex \"$p\" && exit 106\n"
	"  mkdir -p -- \"$p\" || exit 104; exec sh -c \"$each\" sh \"$p\" ;;\n"
	"move) ex \"$p\" || exit 101; d=${a%/*}; mkdir -p -- \"${d:-/}\" || exit 104\n"
	"  mv -f -T -- \"$p\" \"$a\" || exit 104; exec sh -c \"$each\" sh \"$a\" ;;\n"
	"remove) rm -rf -- \"$p\" || exit 104 ;;\n"
	"resolve) ex \"$p\" || exit 101; r=$(realpath -- \"$p\" 2>/dev/null) || exit 101\n"
	"  [ -d \"$r\" ] && exit 102; [ -r \"$r\" ] || exit 107; printf 'R\\0%s\\0' \"$r\" ;;\n"
	"prepare) [ -d \"$p\" ] && exit 102; d=${p%/*}; mkdir -p -- \"${d:-/}\" || exit 104\n"
	"  r=$(realpath -- \"${d:-/}\") || exit 104; printf 'R\\0%s\\0' \"$r\" ;;\n"
	"esac\n";

/* ---- running the guest's tools ----------------------------------------- */

struct capture {
	int fd;
	size_t cap;
	char *buf;
	size_t len;
	int over;
};

/* Keep up to cap bytes, read and drop the rest: a guest that talks too
 * much is refused, never followed. */
static void *capture_run(void *arg)
{
	struct capture *c = arg;
	char tmp[65536];
	ssize_t n;
	while ((n = read(c->fd, tmp, sizeof tmp)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (c->over || c->len + (size_t)n > c->cap) {
			c->over = 1;
			continue;
		}
		char *nb = realloc(c->buf, c->len + (size_t)n + 1);
		if (!nb) {
			c->over = 1;
			continue;
		}
		c->buf = nb;
		memcpy(c->buf + c->len, tmp, (size_t)n);
		c->len += (size_t)n;
		c->buf[c->len] = 0;
	}
	return NULL;
}

struct run {
	struct sbx_exec_result res;
	struct capture out, err;
};

static void run_free(struct run *g)
{
	free(g->out.buf);
	free(g->err.buf);
}

/* fs_sh's call op on path and arg, as user ("root", or the session's
 * user), its stdout and stderr kept. */
static int run_fs(struct sbx_state *st, const char *id, const char *user, const char *op, const char *path,
		  const char *arg, struct run *g, struct sbx_err *err)
{
	static char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C", NULL };
	char *argv[] = { "/bin/sh",  "-c",         (char *)fs_sh, "sbx-fs", (char *)each_sh,
			 (char *)op, (char *)path, (char *)arg,   NULL };
	memset(g, 0, sizeof *g);
	struct sbx_exec_opts o = { .in_fd = -1, .tty_fd = -1 };
	o.req.flags = SBX_EXEC_COPY; /* sbx's own, not the user's */
	o.req.timeout_ms = FS_TIMEOUT_MS;
	o.req.argv = argv;
	o.req.argc = 8;
	o.req.env = env;
	o.req.envc = 2;
	o.req.cwd = "/";
	o.req.have_uid = o.req.have_gid = !strcmp(user, "root"); /* uid and gid 0 */
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
	if (pipe2(pe, O_CLOEXEC) < 0) {
		close(po[0]);
		close(po[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
	}
	g->out = (struct capture){ .fd = po[0], .cap = SERVE_FS_OUT_MAX };
	g->err = (struct capture){ .fd = pe[0], .cap = MSG_MAX };
	pthread_t to, te;
	int ok_o = pthread_create(&to, NULL, capture_run, &g->out) == 0;
	int ok_e = ok_o && pthread_create(&te, NULL, capture_run, &g->err) == 0;
	o.out_fd = po[1];
	o.err_fd = pe[1];
	int rc = ok_e ? sbx_exec_run(st, id, &o, &g->res, err)
		      : sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
	close(po[1]);
	close(pe[1]);
	if (ok_o)
		pthread_join(to, NULL);
	if (ok_e)
		pthread_join(te, NULL);
	close(po[0]);
	close(pe[0]);
	if (g->err.buf) {
		sbx_text_clean(g->err.buf);
		for (size_t l = strlen(g->err.buf); l && g->err.buf[l - 1] == ' '; l--)
			g->err.buf[l - 1] = 0; /* the newline, made a space */
	}
	return rc;
}

/* A permission refused, the guest's or the policy's: 3 with EACCES, which
 * the front answers as permission_denied (403), not as bad input. */
__attribute__((format(printf, 2, 3))) static int denied(struct sbx_err *err, const char *fmt, ...)
{
	char m[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s", m);
	err->errnum = EACCES;
	return -1;
}

/* fs_sh's statuses as errors; 0 when it succeeded. */
static int fs_status(const struct run *g, const char *op, const char *path, struct sbx_err *err)
{
	const struct sbx_exit_info *x = &g->res.exit;
	if (x->reason != SBX_R_EXITED)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's tools did not finish (%s)",
				   sbx_reason_name(x->reason));
	const char *m = g->err.buf ? g->err.buf : "";
	switch (x->status) {
	case 0:
		return g->out.over ? sbx_err_set(err, SBX_EXIT_TEMPFAIL, EFBIG, "the answer is over %u bytes",
						 SERVE_FS_OUT_MAX)
				   : 0;
	case 101: return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such file or directory: %s", path);
	case 102:
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "path is %s: %s",
				   !strcmp(op, "list") ? "not a directory" : "a directory", path);
	case 105: return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "directory already exists: %s", path);
	case 106:
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "path already exists but it is not a directory: %s", path);
	case 107: return denied(err, "permission denied: %s", path);
	}
	if (strstr(m, "ermission denied") || strstr(m, "Read-only file system") || strstr(m, "not permitted"))
		return denied(err, "%.300s", m);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s: %.300s", path, *m ? m : "failed in the guest");
}

static int reply(int sock, json_t *j, const int *fds, unsigned nfds)
{
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	int rc = t ? serve_send(sock, t, strlen(t), fds, nfds) : -1;
	free(t);
	return rc;
}

static int visible(struct sbx_state *st, const struct serve_req *r, struct sbx_err *err)
{
	return sbx_id_check(r->id, "sandbox ID", err) < 0 || sbx_session_visible(st, r->id, err) < 0 ? -1 : 0;
}

/* ---- envd's filesystem calls -------------------------------------------- */

int serve_files_fs(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err)
{
	static const char *const ops[] = { [SERVE_FS_STAT] = "stat",
					   [SERVE_FS_LIST] = "list",
					   [SERVE_FS_MKDIR] = "mkdir",
					   [SERVE_FS_MOVE] = "move",
					   [SERVE_FS_REMOVE] = "remove" };
	struct serve_fs_args *a = malloc(sizeof *a);
	if (!a)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	int rc = -1;
	char depth[16];
	struct run g;
	memset(&g, 0, sizeof g);
	if (visible(st, r, err) < 0 || serve_fs_args_decode(r->args, r->user, 1, a, err) < 0)
		goto out;
	snprintf(depth, sizeof depth, "%u", a->depth);
	const char *arg = a->call == SERVE_FS_MOVE ? a->dest : a->call == SERVE_FS_LIST ? depth : "";
	if (run_fs(st, r->id, r->user, ops[a->call], a->path, arg, &g, err) < 0 ||
	    fs_status(&g, ops[a->call], a->path, err) < 0)
		goto out;
	json_t *entries = serve_fs_parse(g.out.buf ? g.out.buf : "", g.out.len,
					 a->call == SERVE_FS_LIST ? a->path : NULL, SERVE_FS_ENTRIES_MAX, NULL, 0, err);
	if (!entries)
		goto out;
	json_t *ans = json_pack("{s:b}", "ok", 1);
	if (a->call == SERVE_FS_LIST) {
		json_object_set_new(ans, "entries", entries);
	} else if (a->call == SERVE_FS_REMOVE) {
		json_decref(entries);
	} else {
		if (json_array_size(entries) != 1) {
			json_decref(entries);
			json_decref(ans);
			sbx_err_set(err, SBX_EXIT_NOENT, ENOENT, "no such file or directory: %s", a->path);
			goto out;
		}
		json_object_set(ans, "entry", json_array_get(entries, 0));
		json_decref(entries);
	}
	rc = reply(sock, ans, NULL, 0);
out:
	run_free(&g);
	free(a);
	return rc;
}

/* ---- /files ----------------------------------------------------------------- */

/* The session's files: rules for a path about to cross, as sbx-cp checks
 * them, but refused as a permission (403), not as bad input. */
static int policy_check(struct sbx_state *st, const char *id, const char *path, int upload, struct sbx_session *s,
			struct sbx_err *err)
{
	if (sbx_xfer_guest_path_check(path, upload ? "the destination" : "the source", err) < 0 ||
	    sbx_session_lookup(st, id, s, err) < 0)
		return -1;
	const struct sbx_limit_paths *ok = upload ? &s->limits.writable : &s->limits.exportable;
	if (!sbx_xfer_path_under(path, ok))
		return denied(err,
			      upload ? "%s is not under a writable path of this sandbox (files.writable)"
				     : "%s is not under an exportable path of this sandbox (files.exportable)",
			      path);
	return 0;
}

struct reader {
	int tar_fd; /* what sbx_cp_download writes */
	int sock;   /* the call's */
	int replied;
	struct sbx_err err;
};

/* The one regular file of the checked tar, its bytes into a pipe the
 * front gets with the answer; the rest of the stream is drained. */
static void *read_one(void *arg)
{
	struct reader *k = arg;
	struct archive *in = archive_read_new();
	struct archive_entry *e;
	if (!in || archive_read_support_format_tar(in) != ARCHIVE_OK ||
	    archive_read_open_fd(in, k->tar_fd, 65536) != ARCHIVE_OK) {
		sbx_err_set(&k->err, SBX_EXIT_INTERNAL, 0, "cannot read the copy");
		goto out;
	}
	int h = archive_read_next_header(in, &e);
	if (h == ARCHIVE_EOF)
		goto out; /* nothing came: sbx_cp_download says why */
	if (h != ARCHIVE_OK || archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e)) {
		sbx_err_set(&k->err, SBX_EXIT_INVALID, 0, "not a regular file");
		goto out;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		sbx_err_set(&k->err, SBX_EXIT_INTERNAL, errno, "pipe");
		goto out;
	}
	int64_t size = archive_entry_size(e);
	k->replied = reply(k->sock, json_pack("{s:b, s:I}", "ok", 1, "size", (json_int_t)size), &p[0], 1) == 0;
	close(p[0]);
	char buf[65536];
	la_ssize_t n;
	while (k->replied && (n = archive_read_data(in, buf, sizeof buf)) > 0)
		if (sbx_write_all(p[1], buf, (size_t)n) < 0)
			break; /* the client went away */
	close(p[1]);
out:
	archive_read_free(in);
	char rest[65536];
	while (read(k->tar_fd, rest, sizeof rest) > 0)
		;
	return NULL;
}

int serve_files_download(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err)
{
	struct serve_fs_args *a = malloc(sizeof *a);
	char real[SBX_LIMIT_PATH_LEN + 1];
	struct run g;
	struct sbx_session s;
	int rc = -1;
	memset(&g, 0, sizeof g);
	if (!a)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	/* The path as the guest resolves it, symlinks and all, is what the
	 * rules are checked against: a link cannot lead out of them. */
	if (visible(st, r, err) < 0 || serve_fs_args_decode(r->args, r->user, 0, a, err) < 0 ||
	    run_fs(st, r->id, r->user, "resolve", a->path, "", &g, err) < 0 ||
	    fs_status(&g, "resolve", a->path, err) < 0)
		goto out;
	json_t *none = serve_fs_parse(g.out.buf ? g.out.buf : "", g.out.len, NULL, 0, real, sizeof real, err);
	if (!none)
		goto out;
	json_decref(none);
	if (!real[0]) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest did not resolve %s", a->path);
		goto out;
	}
	if (policy_check(st, r->id, real, 0, &s, err) < 0)
		goto out;
	int tp[2];
	if (pipe2(tp, O_CLOEXEC) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
		goto out;
	}
	struct reader k = { .tar_fd = tp[0], .sock = sock };
	pthread_t t;
	if (pthread_create(&t, NULL, read_one, &k) != 0) {
		close(tp[0]);
		close(tp[1]);
		sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
		goto out;
	}
	char *msg = NULL;
	json_t *res = NULL;
	struct sbx_cp_opts o = { .session = r->id,
				 .from_fd = -1,
				 .guest_path = real,
				 .to_fd = tp[1],
				 .guest_msg = &msg,
				 .as_root = !strcmp(r->user, "root") };
	int cp = sbx_cp_download(st, &o, &res, err);
	close(tp[1]);
	pthread_join(t, NULL);
	close(tp[0]);
	free(msg);
	json_decref(res);
	if (k.replied)
		rc = cp; /* the bytes went; a failure after them only cut them short */
	else if (cp == 0) {
		*err = k.err;
		if (!err->code)
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest sent nothing for %s", real);
	} else if (err->code == SBX_EXIT_INVALID && strstr(err->msg, "max_"))
		err->errnum = EFBIG;
out:
	run_free(&g);
	free(a);
	return rc;
}

/* The file's bytes from the front's socket into an unlinked temporary
 * file, at most max: its size, or -1. */
static int64_t spool(int from, int fd, uint64_t max, struct sbx_err *err)
{
	char buf[65536];
	uint64_t n = 0;
	for (;;) {
		struct pollfd p = { .fd = from, .events = POLLIN };
		if (poll(&p, 1, 120000) != 1)
			return sbx_err_set(err, SBX_EXIT_INVALID, ETIMEDOUT, "the upload stalled");
		ssize_t k = read(from, buf, sizeof buf);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the upload");
		if (k == 0)
			return (int64_t)n;
		if (n + (uint64_t)k > max)
			return sbx_err_set(err, SBX_EXIT_INVALID, EFBIG,
					   "the file is over files.max_transfer (%llu bytes)", (unsigned long long)max);
		if (sbx_write_all(fd, buf, (size_t)k) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot spool the upload");
		n += (uint64_t)k;
	}
}

struct tarout {
	int data_fd, out_fd;
	int64_t size;
	const char *name;
};

/* One entry, NAME, of size bytes from data_fd: the stream sbx_cp_upload
 * checks again and sends. */
static void *write_one(void *arg)
{
	struct tarout *w = arg;
	struct archive *a = archive_write_new();
	struct archive_entry *e = archive_entry_new();
	if (!a || !e || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    archive_write_open_fd(a, w->out_fd) != ARCHIVE_OK)
		goto out;
	archive_entry_set_pathname(e, w->name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, w->size);
	archive_entry_set_mtime(e, time(NULL), 0);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		goto out;
	char buf[65536];
	ssize_t n;
	while ((n = read(w->data_fd, buf, sizeof buf)) > 0)
		if (archive_write_data(a, buf, (size_t)n) != n)
			goto out;
	archive_write_close(a);
out:
	archive_entry_free(e);
	archive_write_free(a);
	close(w->out_fd);
	return NULL;
}

int serve_files_upload(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err)
{
	struct serve_fs_args *a = malloc(sizeof *a);
	struct run g;
	struct sbx_session s;
	char parent[SBX_LIMIT_PATH_LEN + 1], real[SBX_LIMIT_PATH_LEN + 1];
	int rc = -1, data[2] = { -1, -1 }, tmp = -1;
	memset(&g, 0, sizeof g);
	if (!a)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	if (visible(st, r, err) < 0 || serve_fs_args_decode(r->args, r->user, 0, a, err) < 0 ||
	    policy_check(st, r->id, a->path, 1, &s, err) < 0)
		goto out;
	if (!strcmp(a->path, "/")) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "path is a directory: /");
		goto out;
	}
	const char *name = strrchr(a->path, '/') + 1;
	const char *dir = getenv("TMPDIR");
	if ((tmp = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, data) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the upload");
		goto out;
	}
	/* Ready: the front sends the bytes, then closes its end. */
	if (reply(sock, json_pack("{s:b}", "ok", 1), &data[1], 1) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the front went away");
		goto out;
	}
	close(data[1]);
	data[1] = -1;
	int64_t size = spool(data[0], tmp, s.limits.max_transfer, err);
	close(data[0]); /* a refused upload: the front's next write fails */
	data[0] = -1;
	if (size < 0 || lseek(tmp, 0, SEEK_SET) != 0)
		goto out;
	/* The parent made (as envd does), and as the guest resolves it: the
	 * rules are checked again on where the file really lands, so a
	 * symlinked directory cannot lead out of files.writable. */
	if (run_fs(st, r->id, r->user, "prepare", a->path, "", &g, err) < 0 ||
	    fs_status(&g, "prepare", a->path, err) < 0)
		goto out;
	json_t *none = serve_fs_parse(g.out.buf ? g.out.buf : "", g.out.len, NULL, 0, parent, sizeof parent, err);
	if (!none)
		goto out;
	json_decref(none);
	if (!parent[0] ||
	    snprintf(real, sizeof real, "%s/%s", strcmp(parent, "/") ? parent : "", name) >= (int)sizeof real) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "the guest did not resolve the directory of %s", a->path);
		goto out;
	}
	if (policy_check(st, r->id, real, 1, &s, err) < 0)
		goto out;
	int tp[2];
	if (pipe2(tp, O_CLOEXEC) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
		goto out;
	}
	/* One entry, the base name, into that directory. */
	struct tarout w = { .data_fd = tmp, .out_fd = tp[1], .size = size, .name = name };
	pthread_t t;
	if (pthread_create(&t, NULL, write_one, &w) != 0) {
		close(tp[0]);
		close(tp[1]);
		sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
		goto out;
	}
	char *msg = NULL;
	json_t *res = NULL;
	struct sbx_cp_opts o = { .session = r->id,
				 .from_fd = tp[0],
				 .guest_path = parent,
				 .to_fd = -1,
				 .guest_msg = &msg,
				 .as_root = !strcmp(r->user, "root") };
	int cp = sbx_cp_upload(st, &o, &res, err);
	close(tp[0]);
	pthread_join(t, NULL);
	json_decref(res);
	if (cp < 0) {
		if (msg && strstr(msg, "ermission denied"))
			err->errnum = EACCES;
		else if (msg && strstr(msg, "No space left"))
			err->errnum = ENOSPC;
		else if (err->code == SBX_EXIT_INVALID && strstr(err->msg, "max_"))
			err->errnum = EFBIG;
		free(msg);
		goto out;
	}
	free(msg);
	rc = reply(
		sock,
		json_pack("{s:b, s:{s:s, s:s, s:s}}", "ok", 1, "entry", "path", a->path, "name", name, "type", "file"),
		NULL, 0);
out:
	if (tmp >= 0)
		close(tmp);
	for (int i = 0; i < 2; i++)
		if (data[i] >= 0)
			close(data[i]);
	run_free(&g);
	free(a);
	return rc;
}

/* ---- WatchDir and the watchers ------------------------------------------- */

#define WATCH_STOP_MS 10000 /* a watcher told to stop, killed after this */

struct watch_exec {
	struct sbx_state *st;
	const char *id;
	struct sbx_exec_opts o;
	struct sbx_exec_result res;
	struct sbx_err err;
	int rc;
	pthread_mutex_t mu;
	char exec_id[16]; /* once started */
};

static void watch_started(void *ctx, const char *exec_id)
{
	struct watch_exec *w = ctx;
	pthread_mutex_lock(&w->mu);
	snprintf(w->exec_id, sizeof w->exec_id, "%s", exec_id);
	pthread_mutex_unlock(&w->mu);
}

/* The watcher's exec; its output's write end closes when it ends. */
static void *watch_run(void *arg)
{
	struct watch_exec *w = arg;
	w->rc = sbx_exec_run(w->st, w->id, &w->o, &w->res, &w->err);
	close(w->o.out_fd);
	close(w->o.err_fd);
	close(w->o.in_fd);
	return NULL;
}

static void watch_kill(struct watch_exec *w)
{
	char id[16];
	pthread_mutex_lock(&w->mu);
	snprintf(id, sizeof id, "%s", w->exec_id);
	pthread_mutex_unlock(&w->mu);
	struct sbx_err ignored = { 0 };
	if (id[0])
		sbx_exec_kill(w->st, w->id, id, &ignored);
}

/* The watcher's statuses (guest-init/watch.c) as errors. */
static int watch_status(const struct watch_exec *w, const char *stderr_text, const char *path, struct sbx_err *err)
{
	if (w->rc < 0) {
		*err = w->err;
		return -1;
	}
	const struct sbx_exit_info *x = &w->res.exit;
	if (x->reason == SBX_R_TIMEOUT)
		return 0; /* the call's deadline: the end of the watch */
	if (x->reason != SBX_R_EXITED)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's watcher did not finish (%s)",
				   sbx_reason_name(x->reason));
	switch (x->status) {
	case 0: return 0;
	case 101: return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such directory: %s", path);
	case 102: return sbx_err_set(err, SBX_EXIT_INVALID, 0, "path is not a directory: %s", path);
	case 107: return denied(err, "permission denied: %s", path);
	case 108:
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0,
				   "too many watches in the guest: directories under %s, or watchers at once", path);
	case 109: return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "events were lost: the guest's queue overflowed");
	case 126:
	case 127:
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "this sandbox's guest has no watcher (" SBX_GUEST_TOOL_PATH
				   "): its template predates WatchDir; rebuild it");
	}
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's watcher failed (status %d): %.300s", x->status,
			   stderr_text && *stderr_text ? stderr_text : "no message");
}

/* The exec's deadline: the call's, else the longest the policy allows
 * (a watch lasts until its client goes). */
static uint32_t watch_deadline(struct sbx_state *st, const struct serve_req *r)
{
	struct sbx_session s;
	struct sbx_err ignored = { 0 };
	uint64_t max = sbx_session_lookup(st, r->id, &s, &ignored) == 0 ? s.limits.exec_timeout_max_ms : 0;
	uint64_t t = r->exec_timeout_ms ? r->exec_timeout_ms : max ? max : UINT32_MAX;
	if (max && t > max)
		t = max;
	return t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
}

/* The front went: the watcher's stdin closes (it ends itself), and it is
 * killed if it has not in WATCH_STOP_MS. */
static void watch_stop(int *in_w, uint64_t *stop_at)
{
	if (*in_w >= 0) {
		close(*in_w);
		*in_w = -1;
		*stop_at = sbx_mono_ns() + WATCH_STOP_MS * 1000000ull;
	}
}

/* The guest's records, as they come, to the front, until the watcher's
 * output ends: 1 when the front went first, 0, or -1 with err on a
 * record that is none. */
static int watch_relay(int out, int sock, int *in_w, struct watch_exec *w, int *started, struct sbx_err *err)
{
	static char buf[2 * SERVE_WATCH_REC_MAX];
	size_t len = 0;
	uint64_t stop_at = 0;
	for (;;) {
		int gone = *in_w < 0;
		struct pollfd p[2] = { { .fd = out, .events = POLLIN }, { .fd = gone ? -1 : sock, .events = POLLIN } };
		int k = poll(p, 2, gone ? 1000 : -1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k > 0 && p[1].revents) /* the front closed the call: its client went */
			watch_stop(in_w, &stop_at);
		if (stop_at && sbx_mono_ns() > stop_at) {
			watch_kill(w);
			stop_at = 0;
		}
		if (k <= 0 || !(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t n = read(out, buf + len, sizeof buf - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return *in_w < 0;
		len += (size_t)n;
		size_t off = 0, used;
		json_t *ev;
		int rc;
		while ((rc = serve_watch_record(buf + off, len - off, &used, &ev, err)) == 1) {
			off += used;
			int is_start = json_is_true(json_object_get(ev, "start"));
			if (is_start == *started) { /* events before the start, or two starts */
				json_decref(ev);
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
						   "the guest's watcher sent a malformed record");
			}
			if (is_start) {
				*started = 1;
				json_decref(ev);
				ev = json_pack("{s:b}", "ok", 1);
			}
			if (*in_w < 0)
				json_decref(ev);
			else if (reply(sock, ev, NULL, 0) < 0)
				watch_stop(in_w, &stop_at);
		}
		if (rc < 0)
			return -1;
		memmove(buf, buf + off, len - off);
		len -= off;
	}
}

/* The watcher's exec: argv as the call's user, its stdio the pipes'
 * ends given, its deadline watch_deadline's. */
static void watch_opts(struct watch_exec *w, struct sbx_state *st, const struct serve_req *r, char **argv, int in,
		       int out, int er)
{
	static char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C", NULL };
	pthread_mutex_init(&w->mu, NULL);
	w->st = st;
	w->id = r->id;
	w->o = (struct sbx_exec_opts){
		.in_fd = in, .out_fd = out, .err_fd = er, .tty_fd = -1, .on_started = watch_started, .started_ctx = w
	};
	w->o.req.flags = SBX_EXEC_COPY; /* sbx's own, not the user's */
	w->o.req.timeout_ms = watch_deadline(st, r);
	w->o.req.argv = argv;
	while (argv[w->o.req.argc])
		w->o.req.argc++;
	w->o.req.env = env;
	w->o.req.envc = 2;
	w->o.req.cwd = "/";
	w->o.req.have_uid = w->o.req.have_gid = !strcmp(r->user, "root"); /* uid and gid 0 */
}

int serve_files_watch(struct sbx_state *st, const struct serve_req *r, int sock, struct sbx_err *err)
{
	struct serve_fs_args *a = malloc(sizeof *a);
	struct watch_exec *w = calloc(1, sizeof *w);
	int rc = -1, out[2] = { -1, -1 }, er[2] = { -1, -1 }, in[2] = { -1, -1 };
	if (!a || !w) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		goto out;
	}
	if (visible(st, r, err) < 0 || serve_fs_args_decode(r->args, r->user, 0, a, err) < 0)
		goto out;
	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(er, O_CLOEXEC) < 0 || pipe2(in, O_CLOEXEC) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
		goto out;
	}
	char *argv[] = { SBX_GUEST_TOOL_PATH, "--watch", a->recursive ? "--recursive" : a->path,
			 a->recursive ? a->path : NULL, NULL };
	watch_opts(w, st, r, argv, in[0], out[1], er[1]);
	struct capture ce = { .fd = er[0], .cap = MSG_MAX };
	pthread_t t, te;
	if (pthread_create(&te, NULL, capture_run, &ce) != 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
		goto out;
	}
	if (pthread_create(&t, NULL, watch_run, w) != 0) {
		close(er[1]);
		er[1] = -1;
		pthread_join(te, NULL);
		free(ce.buf);
		sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
		goto out;
	}
	out[1] = er[1] = in[0] = -1; /* the exec's, closed as it ends */
	int started = 0;
	int k = watch_relay(out[0], sock, &in[1], w, &started, err);
	if (in[1] >= 0)
		close(in[1]);
	in[1] = -1;
	if (k < 0) { /* a guest that says nothing sensible is not heard further */
		watch_kill(w);
		char junk[65536];
		while (read(out[0], junk, sizeof junk) > 0)
			;
	}
	pthread_join(t, NULL);
	pthread_join(te, NULL);
	if (ce.buf)
		sbx_text_clean(ce.buf);
	struct sbx_err why = { 0 };
	int ended = watch_status(w, ce.buf, a->path, &why);
	free(ce.buf);
	if (k < 0)
		goto out;
	if (!started) {
		if (ended < 0)
			*err = why;
		else
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest's watcher ended before it watched %s",
				    a->path);
		goto out;
	}
	rc = 0;
	if (!k) /* how it ended, to a front still there */
		reply(sock,
		      ended < 0 ? json_pack("{s:b, s:b, s:i, s:s, s:i}", "end", 1, "ok", 0, "code", why.code, "message",
					    why.msg, "errno", why.errnum)
				: json_pack("{s:b, s:b}", "end", 1, "ok", 1),
		      NULL, 0);
out:
	for (int i = 0; i < 2; i++) {
		int *fds[] = { &out[i], &er[i], &in[i] };
		for (int j = 0; j < 3; j++)
			if (*fds[j] >= 0)
				close(*fds[j]);
	}
	free(a);
	free(w);
	return rc;
}
