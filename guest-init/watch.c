/* guest-init --watch: a directory's changes, as inotify tells them, for
 * sbx-serve's WatchDir (serve/files.h).  Run as an exec of the call's user
 * from SBX_GUEST_WATCH_PATH (guest-init itself, bound there at boot), so
 * what the user may not read is not watched.
 *
 * Output, on stdout, NUL-terminated records (a name may hold any byte but
 * NUL and '/' components, newlines included):
 *   "S"         the watches are set: events from here on are reported;
 *   "T" NAME    an event, T one of C (created or moved in), W (written),
 *               R (removed), N (renamed or moved away), M (attributes),
 *               NAME relative to the watched directory ("." for itself).
 * It ends at EOF on stdin (its caller went away), when the directory
 * itself is removed, or on an error, with the statuses fs_sh's calls use
 * (serve/files.c): 101 no such path, 102 not a directory, 107 permission
 * denied; 108 more directories than WATCH_DIRS_MAX or the kernel's limits
 * allow (inotify's watches, or instances: watchers at once), 109 events were lost
 * (the kernel's queue overflowed). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "init.h"

#define WATCH_DIRS_MAX 8192
#define ST_NOENT 101
#define ST_NOTDIR 102
#define ST_DENIED 107
#define ST_TOO_MANY 108
#define ST_OVERFLOW 109

#define MASK                                                                                                           \
	(IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | \
	 IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct dir {
	int wd;
	char *rel; /* "" for the root, else "a/b" */
};

static struct watch {
	int fd;
	int recursive;
	char root[PATH_MAX];
	struct dir *dirs;
	size_t n;
	char out[65536];
	size_t outn;
} w;

static void flush_out(void)
{
	size_t off = 0;
	while (off < w.outn) {
		ssize_t k = write(STDOUT_FILENO, w.out + off, w.outn - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			_exit(0); /* the reader is gone: nobody to tell */
		off += (size_t)k;
	}
	w.outn = 0;
}

static void emit(char type, const char *rel, const char *name)
{
	size_t rl = strlen(rel), nl = name ? strlen(name) : 0;
	size_t need = 1 + rl + (rl && nl ? 1 : 0) + nl + (!rl && !nl ? 1 : 0) + 1;
	if (need > sizeof w.out)
		return; /* no path is that long */
	if (w.outn + need > sizeof w.out)
		flush_out();
	char *p = w.out + w.outn;
	*p++ = type;
	if (!rl && !nl)
		*p++ = '.';
	memcpy(p, rel, rl);
	p += rl;
	if (rl && nl)
		*p++ = '/';
	memcpy(p, name, nl);
	p += nl;
	*p++ = 0;
	w.outn = (size_t)(p - w.out);
}

static struct dir *find_wd(int wd)
{
	for (size_t i = 0; i < w.n; i++)
		if (w.dirs[i].wd == wd)
			return &w.dirs[i];
	return NULL;
}

static void drop(size_t i)
{
	free(w.dirs[i].rel);
	w.dirs[i] = w.dirs[--w.n];
}

/* A watch on root/rel; its wd again when the directory has one already
 * (inotify gives an inode one wd): its name is then updated. */
static int add_dir(const char *rel, int *status)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s%s%s", w.root, *rel && strcmp(w.root, "/") ? "/" : "", rel) >=
	    (int)sizeof path)
		return -1; /* deeper than a path can name: not watched */
	int wd = inotify_add_watch(w.fd, path, MASK);
	if (wd < 0) {
		if (errno == ENOSPC && status)
			*status = ST_TOO_MANY;
		return -1;
	}
	struct dir *d = find_wd(wd);
	char *r = strdup(rel);
	if (!r)
		return -1;
	if (d) {
		free(d->rel);
		d->rel = r;
		return 0;
	}
	if (w.n >= WATCH_DIRS_MAX) {
		free(r);
		inotify_rm_watch(w.fd, wd);
		if (status)
			*status = ST_TOO_MANY;
		return -1;
	}
	if (!(w.n & 63)) {
		struct dir *nd = realloc(w.dirs, (w.n + 64) * sizeof *nd);
		if (!nd) {
			free(r);
			inotify_rm_watch(w.fd, wd);
			return -1;
		}
		w.dirs = nd;
	}
	w.dirs[w.n++] = (struct dir){ .wd = wd, .rel = r };
	return 0;
}

/* rel and every directory below it watched (symlinks not followed); with
 * created, what is found inside is reported as created: it came after
 * the directory, before its watch.  0, or -1 with *status set when the
 * watches ran out. */
static int add_tree(const char *rel, int created, int *status)
{
	if (add_dir(rel, status) < 0)
		return *status ? -1 : 0;
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s%s%s", w.root, *rel && strcmp(w.root, "/") ? "/" : "", rel) >=
	    (int)sizeof path)
		return 0;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dp) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(dp))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (created)
			emit('C', rel, e->d_name);
		int isdir = e->d_type == DT_DIR;
		struct stat sb;
		if (e->d_type == DT_UNKNOWN)
			isdir = fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode);
		if (!isdir)
			continue;
		char sub[PATH_MAX];
		if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof sub)
			continue;
		rc = add_tree(sub, created, status);
	}
	closedir(dp);
	return rc;
}

/* The watches of rel and below it go: it was moved away (a move within
 * the tree adds them again under the new name). */
static void drop_tree(const char *rel)
{
	size_t l = strlen(rel);
	for (size_t i = 0; i < w.n;) {
		const char *r = w.dirs[i].rel;
		if (*r && !strncmp(r, rel, l) && (r[l] == 0 || r[l] == '/')) {
			inotify_rm_watch(w.fd, w.dirs[i].wd);
			drop(i);
		} else {
			i++;
		}
	}
}

/* One event; 1 when the watch is over (the directory is gone). */
static int handle(const struct inotify_event *ev, int *status)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		*status = ST_OVERFLOW;
		return 1;
	}
	struct dir *d = find_wd(ev->wd);
	if (!d)
		return 0;
	int is_root = !*d->rel;
	if (ev->mask & IN_IGNORED) {
		if (is_root)
			return 1;
		drop((size_t)(d - w.dirs));
		return 0;
	}
	if (!ev->len) { /* the directory itself: below the root, its parent tells */
		if (is_root && (ev->mask & IN_DELETE_SELF))
			emit('R', "", NULL);
		else if (is_root && (ev->mask & IN_MOVE_SELF))
			emit('N', "", NULL);
		else if (is_root && (ev->mask & IN_ATTRIB))
			emit('M', "", NULL);
		return 0;
	}
	/* the event's name, copied: add_tree may move d */
	char rel[PATH_MAX];
	if (snprintf(rel, sizeof rel, "%s", d->rel) >= (int)sizeof rel)
		return 0;
	if (ev->mask & (IN_CREATE | IN_MOVED_TO))
		emit('C', rel, ev->name);
	if (ev->mask & IN_MOVED_FROM)
		emit('N', rel, ev->name);
	if (ev->mask & IN_ATTRIB)
		emit('M', rel, ev->name);
	if (ev->mask & IN_MODIFY)
		emit('W', rel, ev->name);
	if (ev->mask & IN_DELETE)
		emit('R', rel, ev->name);
	if (!w.recursive || !(ev->mask & IN_ISDIR))
		return 0;
	char sub[PATH_MAX];
	if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", ev->name) >= (int)sizeof sub)
		return 0;
	if (ev->mask & IN_MOVED_FROM)
		drop_tree(sub);
	if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && add_tree(sub, !!(ev->mask & IN_CREATE), status) < 0)
		return 1;
	return 0;
}

static int start(const char *path, int *status)
{
	struct stat sb;
	if (stat(path, &sb) < 0)
		return *status = errno == ENOENT || errno == ENOTDIR ? ST_NOENT : errno == EACCES ? ST_DENIED : 1;
	if (!S_ISDIR(sb.st_mode))
		return *status = ST_NOTDIR;
	if (access(path, R_OK | X_OK) < 0)
		return *status = ST_DENIED;
	/* The watches are on what the path resolves to (symlinks in it
	 * followed, as envd does); below it none is. */
	if (!realpath(path, w.root))
		return *status = ST_NOENT;
	if ((w.fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) < 0) {
		fprintf(stderr, "guest-init: inotify: %s\n", strerror(errno));
		/* EMFILE: the user's inotify instances (128 by default) */
		return *status = errno == EMFILE ? ST_TOO_MANY : 1;
	}
	*status = 0;
	if (w.recursive ? add_tree("", 0, status) < 0 : add_dir("", status) < 0) {
		if (!*status) {
			fprintf(stderr, "guest-init: cannot watch %s: %s\n", path, strerror(errno));
			*status = 1;
		}
		return *status;
	}
	if (!w.n)
		return *status = ST_DENIED;
	return 0;
}

int sbx_guest_watch(const char *path, int recursive)
{
	int status = 0;
	signal(SIGPIPE, SIG_IGN);
	w.recursive = recursive;
	if (start(path, &status))
		return status;
	w.out[w.outn++] = 'S';
	w.out[w.outn++] = 0;
	flush_out();
	static char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (;;) {
		struct pollfd p[2] = { { .fd = STDIN_FILENO, .events = POLLIN }, { .fd = w.fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (p[0].revents) {
			char junk[512];
			ssize_t k = read(STDIN_FILENO, junk, sizeof junk);
			if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
				return 0;
		}
		if (!p[1].revents)
			continue;
		ssize_t n = read(w.fd, buf, sizeof buf);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return 1;
		int over = 0;
		for (char *q = buf; q < buf + n && !over;) {
			const struct inotify_event *ev = (const struct inotify_event *)q;
			over = handle(ev, &status);
			q += sizeof *ev + ev->len;
		}
		flush_out();
		if (over)
			return status;
	}
}
