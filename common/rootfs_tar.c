/* One tar stream unpacked under a root's directory fd (rootfs_tar.h):
 * every entry is created here, one component at a time with O_NOFOLLOW,
 * so no name, symlink or hardlink in the archive can reach outside the
 * root. */
#include "rootfs_tar.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/xattr.h>

#include <archive_entry.h>

#include "util.h"

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static bool set_has(const struct pathset *p, const char *s)
{
	if (!p->cap)
		return false;
	for (size_t i = fnv(s) & (p->cap - 1);; i = (i + 1) & (p->cap - 1)) {
		if (!p->slot[i])
			return false;
		if (!strcmp(p->slot[i], s))
			return true;
	}
}

static int set_add(struct pathset *p, const char *s)
{
	if (set_has(p, s))
		return 0;
	if ((p->n + 1) * 2 > p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 1024;
		char **v = calloc(cap, sizeof *v);
		if (!v)
			return -1;
		for (size_t i = 0; i < p->cap; i++) {
			if (!p->slot[i])
				continue;
			size_t j = fnv(p->slot[i]) & (cap - 1);
			while (v[j])
				j = (j + 1) & (cap - 1);
			v[j] = p->slot[i];
		}
		free(p->slot);
		p->slot = v;
		p->cap = cap;
	}
	char *d = strdup(s);
	if (!d)
		return -1;
	size_t i = fnv(s) & (p->cap - 1);
	while (p->slot[i])
		i = (i + 1) & (p->cap - 1);
	p->slot[i] = d;
	p->n++;
	p->bytes += strlen(s) + 1;
	return 0;
}

static void set_clear(struct pathset *p)
{
	for (size_t i = 0; i < p->cap; i++)
		free(p->slot[i]);
	free(p->slot);
	memset(p, 0, sizeof *p);
}

/* An entry's name shown in a message: cleaned of control bytes, cut. */
static void shown(const char *raw, char *out, size_t n)
{
	snprintf(out, n, "%s", raw ? raw : "(none)");
	if (strlen(raw ? raw : "") >= n && n > 4)
		memcpy(out + n - 4, "...", 4);
	sbx_text_clean(out);
}

/* Normalize an archive name into out: "./" and "//" dropped, "" for the
 * root itself.  Absolute names and ".." are refused (3), not stripped,
 * so the operator learns the archive is not what it claims. */
int sbx_rootfs_norm(const char *raw, char *out, const char **why)
{
	if (!raw || !*raw)
		return *why = "empty name", -1;
	if (raw[0] == '/')
		return *why = "absolute name (refused, not stripped)", -1;
	size_t o = 0, depth = 0;
	for (const char *p = raw; *p;) {
		const char *e = strchrnul(p, '/');
		size_t l = (size_t)(e - p);
		if (l == 2 && p[0] == '.' && p[1] == '.')
			return *why = "a \"..\" component (refused, not stripped)", -1;
		if (l && !(l == 1 && p[0] == '.')) {
			if (l > NAME_MAX)
				return *why = "a component longer than 255 bytes", -1;
			if (++depth > DEPTH_MAX || o + l + 1 > NAME_MAX_LEN)
				return *why = "name too long or too deep", -1;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, l);
			o += l;
		}
		p = *e ? e + 1 : e;
	}
	out[o] = 0;
	return 0;
}

struct ctx {
	struct unpack *u;
	const char *raw; /* the entry's name as the archive has it */
	struct sbx_err *err;
};

static int bad(const struct ctx *c, int code, int errnum, const char *why)
{
	char s[200];
	shown(c->raw, s, sizeof s);
	return sbx_err_set(c->err, code, errnum, "%sentry \"%s\": %s", c->u->what, s, why);
}

/* The parent directory of path (normalized, not "") opened O_RDONLY
 * under the root, one component at a time with O_NOFOLLOW: a symlink on
 * the way is ELOOP, a file ENOTDIR, and both refuse the entry.  Missing
 * parents are made (0755, owned by whoever runs the import) when create.
 * *base points at the last component.  Returns the fd, -1 with err, or
 * -2 when !create and a component is missing. */
static int parent_open(const struct ctx *c, char *path, const char **base, bool create)
{
	struct unpack *u = c->u;
	char *slash = strrchr(path, '/');
	_cleanup_close_ int fd = openat(u->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot open the root");
	*base = slash ? slash + 1 : path;
	if (!slash)
		return sbx_steal_fd(&fd);
	*slash = 0;
	int ret = -1;
	for (char *p = path;;) {
		char *e = strchrnul(p, '/');
		char sv = *e;
		*e = 0;
		int n = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (n < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
				bad(c, SBX_EXIT_INTERNAL, errno, "cannot make a parent directory");
				*e = sv;
				break;
			}
			/* Made by this layer (path ends at e): an opaque
			 * marker must not hide it. */
			if (set_add(&u->made, path) < 0) {
				sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
				*e = sv;
				break;
			}
			n = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		*e = sv;
		if (n < 0) {
			int en = errno;
			struct stat st;
			/* O_DIRECTORY wins over O_NOFOLLOW: a symlink is ENOTDIR. */
			*e = 0;
			if (en == ENOTDIR && fstatat(fd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				en = ELOOP;
			*e = sv;
			if (en == ENOENT && !create)
				ret = -2;
			else if (en == ELOOP)
				bad(c, SBX_EXIT_INVALID, 0,
				    "a parent directory is a symlink (entries through symlinks are refused)");
			else if (en == ENOTDIR)
				bad(c, SBX_EXIT_INVALID, 0, "a parent is not a directory");
			else
				bad(c, SBX_EXIT_INTERNAL, en, "cannot open a parent directory");
			break;
		}
		close(fd);
		fd = n;
		if (!sv) {
			ret = sbx_steal_fd(&fd);
			break;
		}
		p = e + 1;
	}
	*slash = '/';
	return ret;
}

/* Remove name under dfd and, if a directory, everything in it; never
 * follows a symlink (unlinkat removes the link, subdirectories are opened
 * O_NOFOLLOW).  depth bounds the recursion. */
static int remove_tree(int dfd, const char *name, unsigned depth)
{
	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	if (depth > DEPTH_MAX + 8)
		return errno = ELOOP, -1;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (remove_tree(dirfd(d), de->d_name, depth + 1) < 0)
			return -1;
	}
	return unlinkat(dfd, name, AT_REMOVEDIR);
}

/* Make room for a new entry called base: whatever is there goes (a later
 * entry or layer replaces an earlier one, as tar and overlayfs do). */
static int clear_dest(const struct ctx *c, int pfd, const char *base)
{
	if (remove_tree(pfd, base, 0) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot replace what an earlier entry made");
	return 0;
}

static int own(const struct ctx *c, int pfd, const char *base, struct archive_entry *e)
{
	int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
	if (uid < 0 || gid < 0 || uid >= UINT32_MAX || gid >= UINT32_MAX)
		return bad(c, SBX_EXIT_INVALID, 0, "uid or gid out of range");
	if (fchownat(pfd, base, (uid_t)uid, (gid_t)gid, AT_SYMLINK_NOFOLLOW) < 0 &&
	    !(errno == EPERM && !c->u->root_user)) {
		/* Unpacked confined (confine.h), in a user namespace of 65536
		 * ids: an owner outside them is not one a template can hold. */
		if (errno == EINVAL)
			return bad(c, SBX_EXIT_INVALID, 0, "its owner is outside the ids 0-65535 a template may hold");
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot set the owner");
	}
	return 0;
}

static struct timespec mtime_of(struct archive_entry *e)
{
	if (!archive_entry_mtime_is_set(e))
		return (struct timespec){ .tv_nsec = UTIME_OMIT };
	return (struct timespec){ .tv_sec = archive_entry_mtime(e), .tv_nsec = archive_entry_mtime_nsec(e) };
}

/* setuid/setgid grant privilege only on files that run; a setgid
 * directory (Debian's /var/mail, /var/local) just passes its group on. */
static mode_t perm_of(struct unpack *u, struct archive_entry *e)
{
	mode_t m = archive_entry_perm(e) & 07777;
	if ((m & 06000) && !u->lim->allow_setuid && archive_entry_filetype(e) != AE_IFDIR) {
		m &= ~(mode_t)06000;
		u->stripped++;
	}
	return m;
}

static int make_dir(const struct ctx *c, int pfd, const char *base, const char *path, struct archive_entry *e)
{
	struct unpack *u = c->u;
	struct stat st;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) && clear_dest(c, pfd, base) < 0)
		return -1;
	if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot make the directory");
	if (own(c, pfd, base, e) < 0)
		return -1;
	if (u->nfix == u->capfix) {
		size_t cap = u->capfix ? u->capfix * 2 : 256;
		struct dirfix *f = realloc(u->fix, cap * sizeof *f);
		if (!f)
			return sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		u->fix = f;
		u->capfix = cap;
	}
	char *p = strdup(path);
	if (!p)
		return sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	u->fix[u->nfix++] = (struct dirfix){ .path = p, .mode = perm_of(u, e), .mtime = mtime_of(e) };
	return 0;
}

/* Of the extended attributes only file capabilities (ping's cap_net_raw)
 * survive, and only where setuid bits would: they are privilege in the
 * same way (a file counts once among the stripped).  Everything else (ACLs, SELinux labels, user.*) is the
 * guest's business, not the archive's. */
static int file_caps(const struct ctx *c, int fd, struct archive_entry *e)
{
	const char *name;
	const void *v;
	size_t n;
	archive_entry_xattr_reset(e);
	while (archive_entry_xattr_next(e, &name, &v, &n) == ARCHIVE_OK) {
		if (strcmp(name, "security.capability"))
			continue;
		if (!c->u->lim->allow_setuid) {
			c->u->stripped++; /* once per file, however often it is named */
			return 0;
		}
		if (fsetxattr(fd, name, v, n, 0) < 0)
			return bad(c, errno == EINVAL || errno == ERANGE ? SBX_EXIT_INVALID : SBX_EXIT_INTERNAL, errno,
				   "cannot set its file capabilities");
	}
	return 0;
}

static int make_file(const struct ctx *c, struct archive *a, int pfd, const char *base, struct archive_entry *e)
{
	struct unpack *u = c->u;
	if (archive_entry_size_is_set(e) && archive_entry_size(e) > 0 &&
	    (uint64_t)archive_entry_size(e) > u->lim->max_bytes - u->bytes) {
		char m[160];
		snprintf(m, sizeof m,
			 "its %lld bytes would pass the cap of %llu bytes (max_bytes): refused before any is written",
			 (long long)archive_entry_size(e), (unsigned long long)u->lim->max_bytes);
		return bad(c, SBX_EXIT_CONFLICT, 0, m);
	}
	if (clear_dest(c, pfd, base) < 0)
		return -1;
	_cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot create the file");
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (!buf)
		return sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, CHUNK);
		if (n == 0)
			break;
		if (n < 0)
			return bad(c, SBX_EXIT_INVALID, 0,
				   archive_error_string(a) ? archive_error_string(a) : "bad data");
		/* Counted before it is written: a bomb stops at the cap. */
		if ((uint64_t)n > u->lim->max_bytes - u->bytes)
			return bad(c, SBX_EXIT_CONFLICT, 0, "the archive's data passes the size cap (max_bytes) here");
		u->bytes += (uint64_t)n;
		if (sbx_write_all(fd, buf, (size_t)n) < 0)
			return bad(c, SBX_EXIT_INTERNAL, errno, "cannot write the file");
	}
	if (own(c, pfd, base, e) < 0)
		return -1;
	/* After chown, which clears setuid bits and capabilities itself. */
	if (fchmod(fd, perm_of(u, e)) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot set the mode");
	if (file_caps(c, fd, e) < 0)
		return -1;
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, mtime_of(e) };
	if (futimens(fd, ts) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot set the mtime");
	return 0;
}

static int make_symlink(const struct ctx *c, int pfd, const char *base, struct archive_entry *e)
{
	/* The target is only stored, never followed here; absolute targets
	 * are normal in a rootfs and resolve inside the guest. */
	const char *t = archive_entry_symlink(e);
	if (!t || !*t || strlen(t) > NAME_MAX_LEN)
		return bad(c, SBX_EXIT_INVALID, 0, "symlink with an empty or too long target");
	if (clear_dest(c, pfd, base) < 0)
		return -1;
	if (symlinkat(t, pfd, base) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot make the symlink");
	if (own(c, pfd, base, e) < 0)
		return -1;
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, mtime_of(e) };
	if (utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot set the mtime");
	return 0;
}

static int make_hardlink(const struct ctx *c, int pfd, const char *base, const char *path, const char *rawt)
{
	char t[NAME_MAX_LEN + 1];
	const char *why = "the root";
	if (sbx_rootfs_norm(rawt, t, &why) < 0 || !*t) {
		char m[300], s[160];
		shown(rawt, s, sizeof s);
		snprintf(m, sizeof m, "hardlink to \"%s\": %s", s, why);
		return bad(c, SBX_EXIT_INVALID, 0, m);
	}
	if (!set_has(&c->u->made, t))
		return bad(c, SBX_EXIT_INVALID, 0, "hardlink to something this archive has not extracted (yet)");
	if (!strcmp(t, path))
		return 0;
	const char *tbase;
	_cleanup_close_ int tfd = parent_open(c, t, &tbase, false);
	if (tfd == -2)
		return bad(c, SBX_EXIT_INVALID, 0, "hardlink to something no longer there");
	if (tfd < 0)
		return -1;
	struct stat st;
	if (fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
		return bad(c, SBX_EXIT_INVALID, 0, "hardlink to a directory or to nothing");
	if (clear_dest(c, pfd, base) < 0)
		return -1;
	/* flags 0: a symlink target is linked itself, never followed. */
	if (linkat(tfd, tbase, pfd, base, 0) < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot make the hardlink");
	return 0;
}

/* .wh.NAME and .wh..wh..opq in an image layer: hide what lower layers
 * have, never what this layer made. */
static int whiteout(const struct ctx *c, char *path, const char *base)
{
	struct unpack *u = c->u;
	bool opaque = !strcmp(base, ".wh..wh..opq");
	if (!opaque && !strncmp(base, ".wh..wh.", 8))
		return 0; /* aufs bookkeeping (.wh..wh.plnk and the like) */
	const char *name = base + 4;
	if (!opaque && (!*name || !strcmp(name, ".") || !strcmp(name, "..")))
		return bad(c, SBX_EXIT_INVALID, 0, "whiteout without a name");
	const char *b;
	_cleanup_close_ int pfd = parent_open(c, path, &b, false);
	if (pfd == -2)
		return 0; /* nothing below to hide */
	if (pfd < 0)
		return -1;
	size_t pl = (size_t)(b - path);
	char full[NAME_MAX_LEN + 1 + NAME_MAX + 1];
	if (!opaque) {
		snprintf(full, sizeof full, "%.*s%s", (int)pl, path, name);
		return set_has(&u->made, full) ? 0 : clear_dest(c, pfd, name);
	}
	int dfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot open the opaque directory");
	_cleanup_closedir_ DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return bad(c, SBX_EXIT_INTERNAL, errno, "cannot open the opaque directory");
	}
	for (struct dirent *de; (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(full, sizeof full, "%.*s%s", (int)pl, path, de->d_name);
		if (!set_has(&u->made, full) && clear_dest(c, dirfd(d), de->d_name) < 0)
			return -1;
	}
	return 0;
}

static int entry(struct unpack *u, struct archive *a, struct archive_entry *e, struct sbx_err *err)
{
	struct ctx c = { .u = u, .raw = archive_entry_pathname(e), .err = err };
	char path[NAME_MAX_LEN + 1];
	const char *why, *base;
	if (sbx_rootfs_norm(c.raw, path, &why) < 0)
		return bad(&c, SBX_EXIT_INVALID, 0, why);
	if (!*path)
		return 0; /* "./": the root is the caller's */
	const char *hl = archive_entry_hardlink(e);
	unsigned ft = archive_entry_filetype(e);
	if (!hl && (ft == AE_IFCHR || ft == AE_IFBLK || ft == AE_IFIFO || ft == AE_IFSOCK)) {
		u->dropped++;
		return 0;
	}
	if (!hl && ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK)
		return bad(&c, SBX_EXIT_INVALID, 0, "unknown entry type");
	const char *slash = strrchr(path, '/');
	if (u->layer && !strncmp(slash ? slash + 1 : path, ".wh.", 4))
		return whiteout(&c, path, slash ? slash + 1 : path);
	_cleanup_close_ int pfd = parent_open(&c, path, &base, true);
	if (pfd < 0)
		return -1;
	int r = hl               ? make_hardlink(&c, pfd, base, path, hl)
		: ft == AE_IFDIR ? make_dir(&c, pfd, base, path, e)
		: ft == AE_IFLNK ? make_symlink(&c, pfd, base, e)
				 : make_file(&c, a, pfd, base, e);
	if (r < 0)
		return -1;
	if (u->made.bytes > NAMES_MAX)
		return bad(&c, SBX_EXIT_CONFLICT, 0, "the names of one layer exceed 256 MiB");
	if (set_add(&u->made, path) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	return 0;
}

static int fix_dirs(struct unpack *u, struct sbx_err *err)
{
	for (size_t i = 0; i < u->nfix; i++) {
		struct dirfix *f = &u->fix[i];
		struct ctx c = { .u = u, .raw = f->path, .err = err };
		const char *base;
		int pfd = parent_open(&c, f->path, &base, false);
		if (pfd == -2 || (pfd < 0 && err->code == SBX_EXIT_INVALID))
			continue; /* removed or replaced by a later entry */
		if (pfd < 0)
			return -1;
		int fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(pfd);
		if (fd < 0)
			continue;
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, f->mtime };
		int r = fchmod(fd, f->mode) < 0 || futimens(fd, ts) < 0 ? -1 : 0;
		int en = errno;
		close(fd);
		if (r < 0)
			return bad(&c, SBX_EXIT_INTERNAL, en, "cannot set the directory's mode or mtime");
	}
	return 0;
}

void sbx_rootfs_reset(struct unpack *u)
{
	set_clear(&u->made);
	for (size_t i = 0; i < u->nfix; i++)
		free(u->fix[i].path);
	free(u->fix);
	u->fix = NULL;
	u->nfix = u->capfix = 0;
}

/* A reader for the tar streams we accept: tar (ustar, pax, GNU) only,
 * plain or gzip/zstd/xz.  Only built-in filters: support_filter_all
 * would run external programs on hostile input. */
struct archive *sbx_rootfs_reader(bool filters)
{
	struct archive *a = archive_read_new();
	if (!a)
		return NULL;
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    (filters &&
	     (archive_read_support_filter_gzip(a) != ARCHIVE_OK || archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	      archive_read_support_filter_xz(a) != ARCHIVE_OK))) {
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* Apply every entry of an open archive, then the directories' modes. */
int sbx_rootfs_apply(struct unpack *u, struct archive *a, struct sbx_err *err)
{
	int r = 0;
	for (;;) {
		struct archive_entry *e;
		int h = archive_read_next_header(a, &e);
		if (h == ARCHIVE_EOF)
			break;
		if (h != ARCHIVE_OK) {
			/* Warnings too: a header libarchive had to guess at is
			 * not one to build a root from. */
			const char *s = archive_error_string(a);
			r = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%smalformed archive after %llu entries: %s", u->what,
					(unsigned long long)u->entries, s ? s : "unreadable header");
			break;
		}
		if (++u->entries > u->lim->max_entries) {
			r = sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "%smore than %llu entries (max_entries)", u->what,
					(unsigned long long)u->lim->max_entries);
			break;
		}
		if ((r = entry(u, a, e, err)) < 0)
			break;
	}
	if (r == 0)
		r = fix_dirs(u, err);
	sbx_rootfs_reset(u);
	return r;
}
