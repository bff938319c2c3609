#include "state.h"
#include "hostconf.h"
#include "util.h"
#include "units.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

static int mkdir_open(int at, const char *path, struct sbx_err *err)
{
	if (mkdirat(at, path, 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create state directory %s", path);
	int fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open state directory %s", path);
	return fd;
}

/* mkdir -p for an absolute path, mode 0755 for parents we create. */
static int mkdir_p(const char *path, struct sbx_err *err)
{
	char tmp[600];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", tmp);
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", tmp);
	return 0;
}

/* st reset, and its LIB and RUN paths under $SBX_ROOT (if set). */
static int state_paths(struct sbx_state *st, struct sbx_err *err)
{
	memset(st, 0, sizeof *st);
	st->lib_fd = st->run_fd = st->sessions_fd = st->rsessions_fd = -1;
	const char *root = getenv("SBX_ROOT");
	if (root && *root) {
		if (root[0] != '/' || strlen(root) > 400)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "SBX_ROOT must be an absolute path of at most 400 bytes");
		snprintf(st->root, sizeof st->root, "%s", root);
	}
	snprintf(st->lib, sizeof st->lib, "%s/var/lib/sbx", st->root);
	snprintf(st->run, sizeof st->run, "%s/run/sbx", st->root);
	return 0;
}

int sbx_state_open(struct sbx_state *st, struct sbx_err *err)
{
	if (sbx_state_peek(st, err) < 0)
		return -1;
	/* Every command starts here: the directories are there but on a
	 * host's first use, and creating them each time cost seven system
	 * calls (one mkdir per path component). */
	if (st->sessions_fd >= 0 && st->rsessions_fd >= 0)
		return 0;
	sbx_state_close(st);
	if (mkdir_p(st->lib, err) < 0 || mkdir_p(st->run, err) < 0)
		return -1;
	st->lib_fd = open(st->lib, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	st->run_fd = open(st->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->lib_fd < 0 || st->run_fd < 0) {
		int e = errno;
		sbx_state_close(st);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot open state directory");
	}
	if ((st->sessions_fd = mkdir_open(st->lib_fd, "sessions", err)) < 0 ||
	    (st->rsessions_fd = mkdir_open(st->run_fd, "sessions", err)) < 0) {
		sbx_state_close(st);
		return -1;
	}
	return 0;
}

int sbx_state_peek(struct sbx_state *st, struct sbx_err *err)
{
	/* Every command (and the monitor, and the proxy) comes through here
	 * first: an sbx.yaml that does not parse stops each of them the same
	 * way, with the same message, before anything is made or changed,
	 * rather than only the few steps that read one of its settings. */
	if (state_paths(st, err) < 0 || sbx_hostconf_check(err) < 0)
		return -1;
	st->lib_fd = open(st->lib, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	st->run_fd = open(st->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (st->lib_fd >= 0)
		st->sessions_fd = openat(st->lib_fd, "sessions", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (st->run_fd >= 0)
		st->rsessions_fd = openat(st->run_fd, "sessions", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return 0;
}

void sbx_state_close(struct sbx_state *st)
{
	int *fds[] = { &st->lib_fd, &st->run_fd, &st->sessions_fd, &st->rsessions_fd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

int sbx_state_room(struct sbx_state *st, uint64_t need, struct sbx_err *err)
{
	static struct sbx_hostconf hc; /* large */
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	struct statvfs v;
	if (fstatvfs(st->lib_fd, &v) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the free space of %s", st->lib);
	uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
	uint64_t reserve = sbx_hostconf_reserve(&hc.audit, (uint64_t)v.f_blocks * v.f_frsize);
	if (avail >= reserve && avail - reserve >= need)
		return 0;
	if (need)
		sbx_err_set(
			err, SBX_EXIT_TEMPFAIL, ENOSPC,
			"host disk full: %llu MiB free on %s, not enough for %llu MiB beside the reserve of %llu "
			"MiB kept for the audit trail (sbx.yaml audit.reserve); free space there, or try another host",
			(unsigned long long)(avail >> 20), st->lib, (unsigned long long)((need + MIB - 1) >> 20),
			(unsigned long long)(reserve >> 20));
	else
		sbx_err_set(
			err, SBX_EXIT_TEMPFAIL, ENOSPC,
			"host disk full: %llu MiB free on %s, under the reserve of %llu MiB kept for the audit trail "
			"(sbx.yaml audit.reserve); free space there, or try another host",
			(unsigned long long)(avail >> 20), st->lib, (unsigned long long)(reserve >> 20));
	err->retry_after_ms = 60000;
	return -1;
}

int sbx_id_check(const char *id, const char *what, struct sbx_err *err)
{
	size_t n = strlen(id);
	if (n == 0 || n > SBX_ID_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid %s ID '%.80s': must be 1 to %d characters", what,
				   id, SBX_ID_MAX);
	if (id[0] == '.' || id[0] == '-')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid %s ID '%s': must not start with '.' or '-'", what,
				   id);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '-' || c == '.'))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid %s ID '%s': only letters, digits, '_', '-' and '.' are allowed",
					   what, id);
	}
	return 0;
}

int sbx_state_ended(const char *state)
{
	return !strcmp(state, "crashed") || !strcmp(state, "stopped") || !strcmp(state, "expired");
}

int sbx_state_up(const char *live)
{
	return !strcmp(live, "running") || !strcmp(live, "paused");
}

int sbx_state_live(const char *live)
{
	return sbx_state_up(live) || !strcmp(live, "suspended");
}

int sbx_tenant_check(const char *tenant, struct sbx_err *err)
{
	if (!tenant || !*tenant)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid tenant ID '': a tenant must be named");
	if (sbx_id_check(tenant, "tenant", err) < 0)
		return -1;
	static const char *const reserved[] = { "_", "@", "operator" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(reserved); i++)
		if (!strcasecmp(tenant, reserved[i]))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid tenant ID '%s': the name is reserved",
					   tenant);
	return 0;
}

int sbx_tenant_pin(const char **tenant, struct sbx_err *err)
{
	if (!getenv("SBX_CALLER"))
		return 0;
	const char *pin = getenv("SBX_TENANT");
	if (!pin || !*pin)
		return sbx_err_set(err, 77, 0, "acting for a user with no tenant");
	if (*tenant && strcmp(*tenant, pin))
		return sbx_err_set(err, 77, 0, "you act as tenant %s here, not as %.64s", pin, *tenant);
	*tenant = pin;
	return 0;
}

int sbx_state_scope(struct sbx_state *st, const char *tenant, struct sbx_err *err)
{
	if (sbx_tenant_pin(&tenant, err) < 0)
		return -1;
	if (!tenant)
		tenant = getenv("SBX_TENANT");
	st->tenant[0] = 0;
	if (!tenant)
		return 0;
	if (sbx_tenant_check(tenant, err) < 0)
		return -1;
	snprintf(st->tenant, sizeof st->tenant, "%s", tenant);
	return 0;
}

/* s- and 12 hex digits; sbx_pool_id_new makes members' IDs as long (a
 * claim's hostname then overwrites /etc/hosts in place; t1100 checks). */
void sbx_id_new(char *buf, size_t n)
{
	unsigned char r[6];
	arc4random_buf(r, sizeof r);
	snprintf(buf, n, "s-%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5]);
}

int sbx_lock_global(struct sbx_state *st, struct sbx_err *err)
{
	int fd = openat(st->run_fd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the global lock");
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot take the global lock");
		}
	}
	return fd;
}

int sbx_lock_session(struct sbx_state *st, const char *id, int nonblock, int create, struct sbx_err *err)
{
	for (int tries = 0; tries < 100; tries++) {
		_cleanup_close_ int dfd = openat(st->rsessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (dfd < 0 && errno == ENOENT && create) {
			if (mkdirat(st->rsessions_fd, id, 0700) < 0 && errno != EEXIST)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno,
						   "cannot create runtime directory for %s", id);
			continue;
		}
		if (dfd < 0) {
			if (errno == ENOENT)
				return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open runtime directory of %s", id);
		}
		_cleanup_close_ int fd =
			openat(dfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
		if (fd < 0) {
			if (errno == ENOENT)
				return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the lock of %s", id);
		}
		if (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EWOULDBLOCK)
				return -2;
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock session %s", id);
		}
		/* Cleanup unlinks the lock file while holding it: a lock taken on
		 * a file that is no longer the one at the path protects nothing. */
		struct stat a, b;
		if (fstat(fd, &a) == 0 && fstatat(dfd, "lock", &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev)
			return sbx_steal_fd(&fd);
		if (!create)
			return sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
	}
	return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s: lock keeps changing", id);
}

int sbx_session_locked(struct sbx_state *st, const char *id)
{
	_cleanup_close_ int dfd = openat(st->rsessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return 0;
	_cleanup_close_ int fd = openat(dfd, "lock", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0)
		return errno == EWOULDBLOCK;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int sbx_dir_ids(DIR *d, int dirs_only, char ***ids, size_t *n)
{
	size_t cap = 0;
	*ids = NULL;
	*n = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (sbx_id_check(de->d_name, "ID", NULL) < 0 || (dirs_only && de->d_type != DT_DIR))
			continue;
		char *name = strdup(de->d_name);
		if (name && *n == cap) {
			cap = cap ? cap * 2 : 16;
			char **nv = realloc(*ids, cap * sizeof **ids);
			if (!nv) {
				free(name);
				name = NULL;
			} else {
				*ids = nv;
			}
		}
		if (!name) {
			while (*n)
				free((*ids)[--*n]);
			free(*ids);
			*ids = NULL;
			closedir(d);
			errno = ENOMEM;
			return -1;
		}
		(*ids)[(*n)++] = name;
	}
	closedir(d);
	if (*n)
		qsort(*ids, *n, sizeof **ids, cmp_name);
	return 0;
}

static int write_replace(int dirfd, const char *name, const void *data, size_t n, int mode, int sync,
			 struct sbx_err *err)
{
	char tmp[300];
	snprintf(tmp, sizeof tmp, ".%s.tmp.%d", name, (int)getpid());
	_cleanup_close_ int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot write %s", name);
	if (sbx_write_all(fd, data, n) < 0 || (sync && fsync(fd) < 0)) {
		int e = errno;
		unlinkat(dirfd, tmp, 0);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot write %s", name);
	}
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		int e = errno;
		unlinkat(dirfd, tmp, 0);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot rename %s into place", name);
	}
	if (sync)
		fsync(dirfd);
	return 0;
}

int sbx_atomic_write_at(int dirfd, const char *name, const void *data, size_t n, int mode, struct sbx_err *err)
{
	return write_replace(dirfd, name, data, n, mode, 1, err);
}

int sbx_replace_at(int dirfd, const char *name, const void *data, size_t n, int mode, struct sbx_err *err)
{
	return write_replace(dirfd, name, data, n, mode, 0, err);
}

int sbx_rm_rf_at(int at, const char *name)
{
	if (unlinkat(at, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (sbx_rm_rf_at(dirfd(d), de->d_name) < 0)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(at, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = -1;
	return rc;
}

uint64_t sbx_proc_start_time(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* comm may hold spaces and parens: fields restart after the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	unsigned long long v = 0;
	/* after ")": state(3) ... starttime is field 22, i.e. the 20th after state */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &v) != 1)
		return 0;
	return v;
}

int sbx_boot_id(char *buf, size_t n)
{
	_cleanup_close_ int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, n - 1);
	if (r <= 0)
		return -1;
	buf[r] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}
