/* sbx-cp's copies: guest path rules, and the upload and download over
 * the guest's tar (transfer.h). */
#include "transfer.h"
#include "exec_client.h"
#include "hostpath.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <archive.h>
#include <archive_entry.h>

/* ---- guest paths -------------------------------------------------------- */

int sbx_xfer_guest_path_check(const char *path, const char *what, struct sbx_err *err)
{
	size_t n = strlen(path);
	if (path[0] != '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s %s is not an absolute guest path", what, path);
	if (n >= SBX_LIMIT_PATH_LEN)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s %.64s... is too long", what, path);
	if (n > 1 && path[n - 1] == '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s %s ends in '/'", what, path);
	for (const char *s = path + 1; n > 1;) {
		size_t l = strcspn(s, "/");
		if (l == 0 || (l == 1 && s[0] == '.') || (l == 2 && !memcmp(s, "..", 2)))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s %s is not normalized (no //, . or ..)", what,
					   path);
		if (!s[l])
			break;
		s += l + 1;
	}
	return 0;
}

int sbx_xfer_path_under(const char *path, const struct sbx_limit_paths *prefixes)
{
	for (unsigned i = 0; i < prefixes->n; i++) {
		const char *p = prefixes->path[i];
		size_t l = strlen(p);
		if (!strcmp(p, "/"))
			return 1;
		if (!strncmp(path, p, l) && (path[l] == 0 || path[l] == '/'))
			return 1;
	}
	return 0;
}

/* ---- running the guest's tar --------------------------------------------- */

#define GUEST_MSG_MAX 4096

/* The guest's stderr, kept up to GUEST_MSG_MAX bytes and the rest read and
 * dropped: a hostile guest cannot fill the host's memory through it. */
struct errcap {
	int fd;
	char buf[GUEST_MSG_MAX + 1];
	size_t len;
};

static void *errcap_run(void *arg)
{
	struct errcap *e = arg;
	char tmp[4096];
	ssize_t n;
	while ((n = read(e->fd, tmp, sizeof tmp)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		size_t keep = GUEST_MSG_MAX - e->len < (size_t)n ? GUEST_MSG_MAX - e->len : (size_t)n;
		memcpy(e->buf + e->len, tmp, keep);
		e->len += keep;
	}
	e->buf[e->len] = 0;
	return NULL;
}

/* Run argv in the session as its default user (or root) with stdin from
 * in_fd and stdout to out_fd; *msg gets the guest's stderr. */
static int run_guest(struct sbx_state *st, const char *session, char **argv, int as_root, int in_fd, int out_fd,
		     struct sbx_exec_result *r, char **msg, struct sbx_err *err)
{
	/* busybox tar skips symlinks with ".." in the target unless told;
	 * every link target was checked on the host to stay inside. */
	static char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "EXTRACT_UNSAFE_SYMLINKS=1", NULL };
	struct sbx_exec_opts o = { .in_fd = in_fd, .out_fd = out_fd, .tty_fd = -1, .forward_signals = 1 };
	o.req.flags = SBX_EXEC_COPY;                    /* listed as sbx's own, not the user's */
	o.req.have_uid = o.req.have_gid = as_root != 0; /* uid and gid 0 */
	size_t argc = 0;
	while (argv[argc])
		argc++;
	o.req.argv = argv;
	o.req.argc = argc;
	o.req.env = env;
	o.req.envc = 2;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
	struct errcap *ec = calloc(1, sizeof *ec);
	pthread_t t;
	if (!ec || (ec->fd = p[0], pthread_create(&t, NULL, errcap_run, ec)) != 0) {
		free(ec);
		close(p[0]);
		close(p[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start a thread");
	}
	o.err_fd = p[1];
	int rc = sbx_exec_run(st, session, &o, r, err);
	close(p[1]);
	pthread_join(t, NULL);
	close(p[0]);
	/* Shown on a terminal: nothing but printable text and newlines. */
	for (size_t i = 0; i < ec->len; i++)
		if ((ec->buf[i] < 0x20 && ec->buf[i] != '\n') || ec->buf[i] == 0x7f)
			ec->buf[i] = '?';
	*msg = ec->len ? strdup(ec->buf) : NULL;
	free(ec);
	return rc;
}

static int guest_failed(const struct sbx_exec_result *r)
{
	return r->exit.reason != SBX_R_EXITED || r->exit.status;
}

static int tar_failed(const struct sbx_exec_result *r, const char *what, const char *msg, struct sbx_err *err)
{
	char last[300] = "";
	if (msg) {
		/* the last line is the one that says why */
		size_t n = strlen(msg);
		while (n && msg[n - 1] == '\n')
			n--;
		size_t b = n;
		while (b && msg[b - 1] != '\n')
			b--;
		snprintf(last, sizeof last, ": %.*s", (int)(n - b), msg + b);
	}
	if (r->exit.reason != SBX_R_EXITED)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s in the guest ended (%s, signal %u)%s", what,
				   sbx_reason_name(r->exit.reason), r->exit.signo, last);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "%s in the guest failed (status %u)%s", what, r->exit.status,
			   last);
}

static json_t *result_json(const char *dir, const char *session, json_t *srcs, const char *dest,
			   const struct sbx_tar_totals *t)
{
	return json_pack("{s:i, s:s, s:s, s:o, s:s, s:I, s:I, s:I, s:I, s:I}", "schema", 1, "direction", dir, "session",
			 session, "sources", srcs, "destination", dest, "files", (json_int_t)t->files, "dirs",
			 (json_int_t)t->dirs, "symlinks", (json_int_t)t->symlinks, "hardlinks",
			 (json_int_t)t->hardlinks, "bytes", (json_int_t)t->bytes);
}

static int load_session(struct sbx_state *st, const char *id, struct sbx_session *s, struct sbx_err *err)
{
	if (sbx_session_lookup(st, id, s, err) < 0) {
		snprintf(err->session, sizeof err->session, "%s", id);
		return -1;
	}
	return 0;
}

/* A tar writer on an fd that can be cut: once cut, what libarchive still
 * writes (the end-of-archive marker on free) is dropped, so a reader never
 * takes a stream we abandoned for a complete one.  (archive_write_fail
 * does the same but leaks the writer's buffers.) */
struct sink {
	int fd;
	int cut;
};

static la_ssize_t sink_write(struct archive *a, void *data, const void *buf, size_t n)
{
	struct sink *k = data;
	if (k->cut)
		return (la_ssize_t)n;
	if (sbx_write_all(k->fd, buf, n) < 0) {
		archive_set_error(a, errno, "write");
		return -1;
	}
	return (la_ssize_t)n;
}

static struct archive *tar_writer(struct sink *k)
{
	struct archive *a = archive_write_new();
	if (a && (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
		  archive_write_open2(a, k, NULL, sink_write, NULL, NULL) != ARCHIVE_OK)) {
		archive_write_free(a);
		return NULL;
	}
	return a;
}

/* ---- upload ---------------------------------------------------------------- */

struct item {
	char *host;                    /* for messages */
	const struct sbx_hostpath *hp; /* what it is opened beneath (hostpath.h) */
	char *sub;                     /* below hp's path; NULL: hp's path itself */
	struct archive_entry *e;
};

struct items {
	struct item *v;
	size_t n, cap;
};

static void items_free(struct items *it)
{
	for (size_t i = 0; i < it->n; i++) {
		free(it->v[i].host);
		free(it->v[i].sub);
		archive_entry_free(it->v[i].e);
	}
	free(it->v);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in a host directory, sorted so a copy is reproducible. */
static char **list_dir(const struct sbx_hostpath *hp, const char *sub, size_t *n)
{
	int fd = sbx_hostpath_openat(hp, sub, O_RDONLY | O_DIRECTORY);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	char **v = NULL;
	size_t cap = 0;
	struct dirent *de;
	*n = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (*n + 1 >= cap) {
			cap = cap ? cap * 2 : 16;
			char **nv = realloc(v, cap * sizeof *nv);
			if (!nv)
				goto oom;
			v = nv;
		}
		if (!(v[(*n)++] = strdup(de->d_name)))
			goto oom;
	}
	closedir(d);
	if (v)
		qsort(v, *n, sizeof *v, cmp_name);
	else
		v = calloc(1, sizeof *v);
	return v;
oom:
	closedir(d);
	for (size_t i = 0; v && i < *n; i++)
		free(v[i]);
	free(v);
	errno = ENOMEM;
	return NULL;
}

/* Check a host file or tree, as tar would see it, and list what to send.
 * Everything is opened beneath hp with no symlink followed (hostpath.h):
 * a link is sent as a link, and one swapped in for a directory meanwhile
 * is refused, not followed. */
static int add_tree(struct sbx_tar_check *c, struct items *it, const struct sbx_hostpath *hp, const char *sub,
		    const char *name, struct sbx_err *err)
{
	_cleanup_free_ char *host = NULL;
	if (asprintf(&host, "%s%s%s", hp->real, sub ? "/" : "", sub ? sub : "") < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list %s", hp->real);
	struct stat sb;
	_cleanup_close_ int fd = sbx_hostpath_openat(hp, sub, O_PATH);
	if (fd < 0 || fstat(fd, &sb) < 0)
		return sbx_err_set(err,
				   errno == ENOENT                    ? SBX_EXIT_NOENT
				   : errno == ELOOP || errno == EXDEV ? SBX_EXIT_INVALID
								      : SBX_EXIT_INTERNAL,
				   errno, "cannot read %s", host);
	if (S_ISDIR(sb.st_mode) && sbx_hostpath_is_state(&sb))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: sbx's own state is never a source", host);
	struct archive_entry *raw = archive_entry_new(), *e = NULL;
	if (!raw)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read %s", host);
	archive_entry_copy_stat(raw, &sb);
	archive_entry_set_pathname(raw, name);
	if (S_ISLNK(sb.st_mode)) {
		char target[SBX_XFER_NAME_MAX + 2];
		ssize_t n = readlinkat(fd, "", target, sizeof target - 1);
		if (n < 0) {
			archive_entry_free(raw);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the symlink %s", host);
		}
		target[n] = 0;
		archive_entry_set_symlink(raw, target);
	}
	int ok = sbx_tar_check_entry(c, raw, &e, err);
	archive_entry_free(raw);
	if (ok < 0)
		return sbx_err_wrap(err, "%s: ", host);
	if (it->n == it->cap) {
		size_t nc = it->cap ? it->cap * 2 : 64;
		struct item *nv = realloc(it->v, nc * sizeof *nv);
		if (!nv) {
			archive_entry_free(e);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list %s", host);
		}
		it->v = nv;
		it->cap = nc;
	}
	struct item *x = &it->v[it->n++];
	x->e = e;
	x->hp = hp;
	x->host = host;
	host = NULL;
	if (!(x->sub = sub ? strdup(sub) : NULL) && sub)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list %s", x->host);
	if (!S_ISDIR(sb.st_mode))
		return 0;
	size_t n;
	char **names = list_dir(hp, sub, &n);
	if (!names)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the directory %s", x->host);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *h = NULL, *nm = NULL;
		if (rc == 0 && (asprintf(&h, "%s%s%s", sub ? sub : "", sub ? "/" : "", names[i]) < 0 ||
				asprintf(&nm, "%s/%s", name, names[i]) < 0))
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list %s", hp->real);
		if (rc == 0)
			rc = add_tree(c, it, hp, h, nm, err);
		free(names[i]);
	}
	free(names);
	return rc;
}

/* The top-level name a host source gets in the guest: the last component
 * of its real path ("dir/" is "dir"; "." is the directory's real name). */
static int top_name(const struct sbx_hostpath *hp, char *out, size_t n, struct sbx_err *err)
{
	const char *b = strrchr(hp->real, '/') + 1;
	if (!*b)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot copy / itself; name a directory below it");
	snprintf(out, n, "%s", b);
	return 0;
}

struct producer {
	struct items *it;
	int fd;
	struct sbx_err err;
	int rc;
};

static int send_file(struct archive *a, const struct item *x, struct sbx_err *err)
{
	int64_t left = archive_entry_size(x->e);
	_cleanup_close_ int fd = sbx_hostpath_openat(x->hp, x->sub, O_RDONLY | O_NOCTTY | O_NONBLOCK);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, fd < 0 ? errno : 0,
				   "cannot read %s (changed during the copy?)", x->host);
	char buf[65536];
	/* At most the size that was checked and sent in the header: a file
	 * that grew meanwhile is cut, one that shrank is padded by libarchive. */
	while (left > 0) {
		ssize_t n = read(fd, buf, left < (int64_t)sizeof buf ? (size_t)left : sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", x->host);
		if (n == 0)
			break;
		if (archive_write_data(a, buf, (size_t)n) != n)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, archive_errno(a), "cannot send %s: %s", x->host,
					   archive_error_string(a));
		left -= n;
	}
	return 0;
}

static void *produce(void *arg)
{
	struct producer *p = arg;
	struct sink k = { .fd = p->fd };
	struct archive *a = tar_writer(&k);
	p->rc = -1;
	if (!a) {
		sbx_err_set(&p->err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start the tar stream");
		goto out;
	}
	for (size_t i = 0; i < p->it->n; i++) {
		const struct item *x = &p->it->v[i];
		if (archive_write_header(a, x->e) != ARCHIVE_OK) {
			sbx_err_set(&p->err, SBX_EXIT_INTERNAL, archive_errno(a), "cannot send %s: %s", x->host,
				    archive_error_string(a));
			goto out;
		}
		if (archive_entry_filetype(x->e) == AE_IFREG && !archive_entry_hardlink(x->e) &&
		    archive_entry_size(x->e) > 0 && send_file(a, x, &p->err) < 0)
			goto out;
		if (archive_write_finish_entry(a) != ARCHIVE_OK) {
			sbx_err_set(&p->err, SBX_EXIT_INTERNAL, archive_errno(a), "cannot send %s", x->host);
			goto out;
		}
	}
	if (archive_write_close(a) != ARCHIVE_OK) {
		sbx_err_set(&p->err, SBX_EXIT_INTERNAL, archive_errno(a), "cannot end the tar stream");
		goto out;
	}
	p->rc = 0;
out:
	k.cut = p->rc < 0; /* no end-of-archive marker on a cut stream */
	archive_write_free(a);
	close(p->fd);
	return NULL;
}

/* A tar from from_fd, checked and rewritten into an unlinked temporary
 * file: the guest must see nothing of a stream that turns out hostile at
 * its last entry. */
static int spool(struct sbx_tar_check *c, int from_fd, struct sbx_err *err)
{
	const char *dir = getenv("TMPDIR");
	int fd = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create a temporary file in %s",
				   dir && *dir ? dir : "/tmp");
	struct archive *in = archive_read_new(), *out = archive_write_new();
	int rc = -1;
	if (!in || !out || archive_read_support_format_tar(in) != ARCHIVE_OK ||
	    archive_write_set_format_pax_restricted(out) != ARCHIVE_OK ||
	    archive_write_open_fd(out, fd) != ARCHIVE_OK) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot set up libarchive");
	} else if (archive_read_open_fd(in, from_fd, 65536) != ARCHIVE_OK) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot read a tar stream from standard input: %s",
			    archive_error_string(in));
	} else if (sbx_tar_filter(c, in, out, err) == 0) {
		if (archive_write_close(out) != ARCHIVE_OK)
			sbx_err_set(err, SBX_EXIT_INTERNAL, archive_errno(out), "cannot write the temporary file");
		else if (lseek(fd, 0, SEEK_SET) == 0)
			rc = 0;
	}
	archive_write_free(out); /* the file is dropped on failure */
	archive_read_free(in);
	if (rc < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* $1 the destination, $2 the one source's name ("" for several sources or
 * a tar stream).  An existing directory receives the sources; otherwise
 * the one source becomes the destination, extracted beside it first so a
 * failed copy leaves nothing under the final name.  Statuses 100-102 are
 * ours, mapped to messages on the host. */
static const char upload_sh[] =
	"d=$1 n=$2\n"
	"if [ -d \"$d\" ]; then cd -- \"$d\" 2>/dev/null || exit 100; exec tar -x -o -f -; fi\n"
	"[ -n \"$n\" ] || exit 101\n"
	"p=${d%/*}; cd -- \"${p:-/}\" 2>/dev/null || exit 100\n"
	"t=$(mktemp -d .sbx-cp.XXXXXX 2>/dev/null) || exit 102\n"
	"if tar -x -o -f - -C \"$t\" && mv -f -- \"$t/$n\" \"${d##*/}\"; then rmdir \"$t\"; exit 0; fi\n"
	"rm -rf \"$t\"; exit 1\n";

static int upload_status(const struct sbx_exec_result *r, const char *dest, const char *msg, struct sbx_err *err)
{
	if (!guest_failed(r))
		return 0;
	if (r->exit.reason == SBX_R_EXITED) {
		switch (r->exit.status) {
		case 100:
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "the destination %s or its directory does not exist in the guest (or is not "
					   "accessible)",
					   dest);
		case 101:
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "the destination %s is not a directory in the guest (several sources or a "
					   "tar stream need one)",
					   dest);
		case 102:
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot create files beside %s in the guest",
					   dest);
		}
	}
	return tar_failed(r, "tar", msg, err);
}

static int check_dest(const struct sbx_session *s, const char *dest, struct sbx_err *err)
{
	if (sbx_xfer_guest_path_check(dest, "the destination", err) < 0)
		return -1;
	if (!sbx_xfer_path_under(dest, &s->limits.writable))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "the destination %s is not under a writable path of session %s (files.writable)",
				   dest, s->id);
	return 0;
}

/* "DIR/" is DIR, and says it must be a directory. */
static int strip_slash(const char *in, char *out, size_t n)
{
	snprintf(out, n, "%s", in);
	size_t l = strlen(out);
	int had = 0;
	while (l > 1 && out[l - 1] == '/') {
		out[--l] = 0;
		had = 1;
	}
	return had;
}

int sbx_cp_upload(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err)
{
	struct sbx_session s;
	char dest[SBX_LIMIT_PATH_LEN + 1];
	int want_dir = strip_slash(o->guest_path, dest, sizeof dest);
	if (load_session(st, o->session, &s, err) < 0 || check_dest(&s, dest, err) < 0)
		return -1;
	struct sbx_tar_rules rules = {
		.max_bytes = s.limits.max_transfer, .set_owner = 1, .uid = 1000, .gid = 1000, .cap_name = "max_transfer"
	};
	struct sbx_tar_check *c = sbx_tar_check_new(&rules);
	struct items it = { 0 };
	char name[SBX_XFER_COMPONENT_MAX + 1] = "";
	int in_fd = -1, rc = -1;
	uint64_t reserved = 0;
	struct sbx_hostpath *hps = NULL; /* one per source */
	json_t *srcs = json_array();
	if (!c || !srcs) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start the copy");
		goto out;
	}
	if (o->from_fd >= 0) {
		json_array_append_new(srcs, json_string("-"));
		if ((in_fd = spool(c, o->from_fd, err)) < 0)
			goto out;
	} else {
		if (!(hps = calloc(o->nsrcs ? o->nsrcs : 1, sizeof *hps))) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start the copy");
			goto out;
		}
		for (unsigned i = 0; i < o->nsrcs; i++)
			hps[i].dir_fd = -1;
		for (unsigned i = 0; i < o->nsrcs; i++) {
			json_array_append_new(srcs, json_string(o->srcs[i]));
			if (sbx_hostpath_resolve(o->tenant, o->srcs[i], SBX_HOSTPATH_READ, "sbx-cp source", &hps[i],
						 err) < 0 ||
			    top_name(&hps[i], name, sizeof name, err) < 0 ||
			    add_tree(c, &it, &hps[i], NULL, name, err) < 0)
				goto out;
		}
		if (o->nsrcs != 1 || want_dir)
			name[0] = 0;
	}
	struct sbx_tar_totals t;
	sbx_tar_check_totals(c, &t);
	/* The bytes land in the session's disk image, on LIB's filesystem. */
	if (sbx_state_room(st, t.bytes, err) < 0 || sbx_xfer_reserve(st, &s, t.bytes, 1, &reserved, err) < 0)
		goto out;

	struct producer p = { .it = &it, .fd = -1 };
	pthread_t pt;
	int producing = 0;
	if (o->from_fd < 0) {
		int pp[2];
		if (pipe2(pp, O_CLOEXEC) < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
			goto out;
		}
		in_fd = pp[0];
		p.fd = pp[1];
		if (pthread_create(&pt, NULL, produce, &p) != 0) {
			close(pp[1]);
			sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
			goto out;
		}
		producing = 1;
	}
	char *argv[] = { "/bin/sh", "-c", (char *)upload_sh, "sbx-cp", dest, name, NULL };
	struct sbx_exec_result r;
	int ran = run_guest(st, o->session, argv, o->as_root, in_fd, -1, &r, o->guest_msg, err);
	/* The guest may stop reading early: closing our end turns the
	 * producer's next write into EPIPE, so the join cannot hang. */
	close(in_fd);
	in_fd = -1;
	if (producing)
		pthread_join(pt, NULL);
	if (ran < 0) {
		if (!r.exec_id[0]) /* nothing reached the guest */
			sbx_xfer_release(st, s.id, reserved, NULL);
		goto out;
	}
	/* A guest that stopped reading (EPIPE) has its own story to tell;
	 * a host file we could not read is ours. */
	if (producing && p.rc < 0 && p.err.errnum != EPIPE) {
		*err = p.err;
		goto out;
	}
	if (upload_status(&r, dest, *o->guest_msg, err) < 0)
		goto out;
	if (producing && p.rc < 0) {
		*err = p.err;
		goto out;
	}
	*result = result_json("upload", s.id, srcs, dest, &t);
	srcs = NULL;
	rc = 0;
out:
	if (rc < 0)
		snprintf(err->session, sizeof err->session, "%s", o->session);
	if (in_fd >= 0)
		close(in_fd);
	json_decref(srcs);
	items_free(&it);
	for (unsigned i = 0; hps && i < o->nsrcs; i++)
		sbx_hostpath_close(&hps[i]);
	free(hps);
	sbx_tar_check_free(c);
	return rc;
}

/* ---- download ------------------------------------------------------------ */

/* $1 the source's directory, $2 its name.  "./NAME" so a name starting
 * with '-' is not an option; the host strips the "./". */
static const char download_sh[] = "cd -- \"$1\" 2>/dev/null || exit 100\n"
				  "[ -e \"$2\" ] || [ -L \"$2\" ] || exit 101\n"
				  "exec tar -c -f - \"./$2\"\n";

struct consumer {
	struct sbx_tar_check *c;
	int fd;             /* the guest's stdout */
	int to_fd;          /* "-": the tar goes here */
	int tmp_fd, cwd_fd; /* a directory: extract under tmp_fd */
	pthread_t main;
	int aborted;
	struct sbx_err err;
	int rc;
};

static struct archive *disk_writer(void)
{
	struct archive *w = archive_write_disk_new();
	/* Times and (sanitized) modes; never owners, and libarchive's own
	 * checks behind ours: no symlink followed, no "..", no absolute name. */
	if (w && archive_write_disk_set_options(w, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
							   ARCHIVE_EXTRACT_SECURE_SYMLINKS |
							   ARCHIVE_EXTRACT_SECURE_NODOTDOT |
							   ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS) != ARCHIVE_OK) {
		archive_write_free(w);
		return NULL;
	}
	return w;
}

static void *consume(void *arg)
{
	struct consumer *k = arg;
	struct archive *in = archive_read_new(), *out = NULL;
	struct sink sk = { .fd = k->to_fd };
	int chdired = 0;
	/* What lands on the host is written with the caller's rights. */
	int as_caller = k->tmp_fd >= 0 ? sbx_caller_enter() : 0;
	k->rc = -1;
	if (k->tmp_fd >= 0) {
		/* archive_write_disk works relative to the working directory:
		 * the fresh directory, whose only contents are what this stream
		 * makes.  The other thread uses no relative paths meanwhile. */
		if (fchdir(k->tmp_fd) < 0) {
			sbx_err_set(&k->err, SBX_EXIT_INTERNAL, errno, "cannot enter the temporary directory");
			goto out;
		}
		chdired = 1;
		out = disk_writer();
	} else {
		out = tar_writer(&sk);
	}
	if (!in || !out || archive_read_support_format_tar(in) != ARCHIVE_OK) {
		sbx_err_set(&k->err, SBX_EXIT_INTERNAL, ENOMEM, "cannot set up libarchive");
		goto out;
	}
	if (archive_read_open_fd(in, k->fd, 65536) != ARCHIVE_OK) {
		sbx_err_set(&k->err, SBX_EXIT_INVALID, 0, "malformed tar stream from the guest: %s",
			    archive_error_string(in));
		goto out;
	}
	if (sbx_tar_filter(k->c, in, out, &k->err) < 0)
		goto out;
	if (archive_write_close(out) != ARCHIVE_OK) {
		sbx_err_set(&k->err, SBX_EXIT_INTERNAL, archive_errno(out), "cannot finish writing: %s",
			    archive_error_string(out));
		goto out;
	}
	k->rc = 0;
out:
	if (k->rc < 0) {
		/* Stop the guest's tar (sbx_exec_run forwards SIGTERM), and no
		 * end-of-archive marker on a cut "-" stream. */
		k->aborted = 1;
		pthread_kill(k->main, SIGTERM);
		sk.cut = 1;
	}
	/* Still inside the temporary directory: the writer's deferred
	 * directory fix-ups (modes, times) land there, and only on
	 * directories this stream made; all of it is removed on refusal. */
	archive_write_free(out);
	archive_read_free(in);
	if (chdired && fchdir(k->cwd_fd) < 0 && k->rc == 0)
		k->rc = sbx_err_set(&k->err, SBX_EXIT_INTERNAL, errno, "cannot return to the working directory");
	sbx_caller_leave(as_caller);
	/* Drain what the guest still sends until it stops, so its writer
	 * never blocks on us. */
	char buf[65536];
	while (read(k->fd, buf, sizeof buf) > 0)
		;
	return NULL;
}

/* Where a download lands: into DEST when it is a directory, else as DEST
 * (its directory must exist), under hostpath.h's rules for writing (a
 * tenant's only beneath host_paths.write).  Opens that directory. */
static int host_target(const char *tenant, const char *dest, const char *name, char *final, size_t n,
		       struct sbx_err *err)
{
	static const char key[] = "sbx-cp destination";
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 }, in = { .dir_fd = -1 };
	if (sbx_hostpath_resolve(tenant, dest, SBX_HOSTPATH_WRITE | SBX_HOSTPATH_MAY_BE_MISSING | SBX_HOSTPATH_FOLLOW,
				 key, &hp, err) < 0)
		return -1;
	const struct sbx_hostpath *at = &hp;
	if (hp.exists && S_ISDIR(hp.st.st_mode)) {
		/* DEST/NAME, checked as itself: it is what is written.  Named
		 * as the caller named DEST, so it matches the same root. */
		_cleanup_free_ char *p = NULL;
		if (asprintf(&p, "%s/%s", dest, name) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot open %s", dest);
		if (sbx_hostpath_resolve(tenant, p, SBX_HOSTPATH_WRITE | SBX_HOSTPATH_MAY_BE_MISSING, key, &in, err) <
		    0)
			return -1;
		at = &in;
	} else {
		size_t l = strlen(dest);
		if (l && dest[l - 1] == '/')
			return sbx_err_set(err, SBX_EXIT_NOENT, ENOTDIR, "no such directory: %s", dest);
	}
	if (!strcmp(at->rel, ".") || !strcmp(at->rel, ".."))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "bad destination %s", dest);
	snprintf(final, n, "%s", at->rel);
	int fd = SBX_AS_CALLER(openat(at->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	if (fd < 0)
		return sbx_err_set(err, errno == EACCES ? SBX_EXIT_INVALID : SBX_EXIT_INTERNAL, errno,
				   "cannot open the directory of %s", dest);
	return fd;
}

static int make_tmpdir(int dirfd, char *name, size_t n, struct sbx_err *err)
{
	for (int tries = 0; tries < 100; tries++) {
		uint8_t rnd[6];
		if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
			break;
		snprintf(name, n, ".sbx-cp.%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
		if (SBX_AS_CALLER(mkdirat(dirfd, name, 0700)) == 0) {
			int fd = SBX_AS_CALLER(openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
			if (fd >= 0)
				return fd;
			break;
		}
		if (errno != EEXIST)
			break;
	}
	return sbx_err_set(err, errno == EACCES ? SBX_EXIT_INVALID : SBX_EXIT_INTERNAL, errno,
			   "cannot create a temporary directory beside the destination");
}

static int check_src(const struct sbx_session *s, const char *src, struct sbx_err *err)
{
	if (sbx_xfer_guest_path_check(src, "the source", err) < 0)
		return -1;
	if (!strcmp(src, "/"))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot copy / itself; name a directory below it");
	if (!sbx_xfer_path_under(src, &s->limits.exportable))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "the source %s is not under an exportable path of session %s (files.exportable)",
				   src, s->id);
	return 0;
}

static int download_status(const struct consumer *k, const struct sbx_exec_result *r, const char *src, const char *msg,
			   struct sbx_err *err)
{
	/* A refused stream first: the guest's tar was stopped because of it. */
	if (k->rc < 0 && k->err.code == SBX_EXIT_INVALID &&
	    !(r->exit.reason == SBX_R_EXITED && r->exit.status >= 100)) {
		*err = k->err;
		return -1;
	}
	if (r->exit.reason == SBX_R_EXITED && r->exit.status == 100)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such directory in the guest (or not accessible): %s",
				   src);
	if (r->exit.reason == SBX_R_EXITED && r->exit.status == 101)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such file in the guest: %s", src);
	if (guest_failed(r))
		return tar_failed(r, "tar", msg, err);
	if (k->rc < 0) {
		*err = k->err;
		return -1;
	}
	return 0;
}

int sbx_cp_download(struct sbx_state *st, const struct sbx_cp_opts *o, json_t **result, struct sbx_err *err)
{
	struct sbx_session s;
	char src[SBX_LIMIT_PATH_LEN + 1];
	strip_slash(o->guest_path, src, sizeof src);
	if (load_session(st, o->session, &s, err) < 0 || check_src(&s, src, err) < 0)
		return -1;
	char dir[SBX_LIMIT_PATH_LEN + 1], name[SBX_LIMIT_PATH_LEN + 1], final[PATH_MAX], tmpname[40] = "";
	snprintf(dir, sizeof dir, "%s", src);
	char *slash = strrchr(dir, '/');
	snprintf(name, sizeof name, "%s", slash + 1);
	slash[slash == dir ? 1 : 0] = 0;

	struct consumer k = { .fd = -1, .to_fd = o->to_fd, .tmp_fd = -1, .cwd_fd = -1, .main = pthread_self() };
	_cleanup_close_ int parent_fd = -1;
	int rc = -1, pp[2] = { -1, -1 }, consuming = 0;
	uint64_t granted = 0;
	struct sbx_tar_totals t = { 0 };
	if (o->host_dest) {
		if ((parent_fd = host_target(o->tenant, o->host_dest, name, final, sizeof final, err)) < 0)
			goto out;
		if ((k.cwd_fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the working directory");
			goto out;
		}
		if ((k.tmp_fd = make_tmpdir(parent_fd, tmpname, sizeof tmpname, err)) < 0)
			goto out;
	}
	if (sbx_xfer_reserve(st, &s, s.limits.max_transfer, 0, &granted, err) < 0)
		goto out;
	struct sbx_tar_rules rules = { .max_bytes = granted,
				       .top = name,
				       .host_modes = 1,
				       .cap_name = granted < s.limits.max_transfer ? "max_session_transfer"
										   : "max_transfer" };
	if (!(k.c = sbx_tar_check_new(&rules))) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot start the copy");
		goto out;
	}
	if (pipe2(pp, O_CLOEXEC) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "pipe");
		goto out;
	}
	/* TERM is how the checker stops the guest's tar; held (and so
	 * forwarded by sbx_exec_run, never fatal to us) until it is over. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	k.fd = pp[0];
	pthread_t ct;
	if (pthread_create(&ct, NULL, consume, &k) != 0) {
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		sbx_err_set(err, SBX_EXIT_INTERNAL, EAGAIN, "cannot start a thread");
		goto out;
	}
	consuming = 1;
	char *argv[] = { "/bin/sh", "-c", (char *)download_sh, "sbx-cp", dir, name, NULL };
	struct sbx_exec_result r;
	int ran = run_guest(st, o->session, argv, o->as_root, -1, pp[1], &r, o->guest_msg, err);
	close(pp[1]);
	pp[1] = -1;
	pthread_join(ct, NULL);
	consuming = 0;
	if (k.aborted) {
		/* our own TERM, if the exec ended before it was read */
		struct timespec zero = { 0 };
		sigset_t term;
		sigemptyset(&term);
		sigaddset(&term, SIGTERM);
		sigtimedwait(&term, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	sbx_tar_check_totals(k.c, &t);
	sbx_xfer_release(st, s.id, granted - (t.bytes < granted ? t.bytes : granted), NULL);
	if (ran < 0 || download_status(&k, &r, src, *o->guest_msg, err) < 0)
		goto out;
	if (o->host_dest) {
		if (SBX_AS_CALLER(renameat(k.tmp_fd, name, parent_fd, final)) < 0) {
			int e = errno;
			if (e == ENOENT)
				sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest sent nothing for %s", src);
			else
				sbx_err_set(err,
					    e == EEXIST || e == ENOTEMPTY || e == EISDIR || e == ENOTDIR
						    ? SBX_EXIT_INVALID
						    : SBX_EXIT_INTERNAL,
					    e, "cannot put %s in place (a directory cannot replace or be replaced)",
					    o->host_dest);
			goto out;
		}
	}
	json_t *srcs = json_array();
	json_array_append_new(srcs, json_string(src));
	*result = result_json("download", s.id, srcs, o->host_dest ? o->host_dest : "-", &t);
	rc = 0;
out:
	if (rc < 0)
		snprintf(err->session, sizeof err->session, "%s", o->session);
	if (consuming)
		pthread_join(ct, NULL);
	if (pp[0] >= 0)
		close(pp[0]);
	if (pp[1] >= 0)
		close(pp[1]);
	if (k.tmp_fd >= 0) {
		close(k.tmp_fd);
		SBX_AS_CALLER(sbx_rm_rf_at(parent_fd, tmpname));
	}
	if (k.cwd_fd >= 0)
		close(k.cwd_fd);
	sbx_tar_check_free(k.c);
	return rc;
}
