#include "workspace.h"
#include "disk.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#define RECORD "workspace.json"
#define DISK "disk.img"
#define DISK_TMP ".disk.img.tmp"
#define LOCK "lock"
/* A workspace whose record is lost is kept this long after its files last
 * changed: the policy's default retention (sbx-policy(5)). */
#define RETENTION_FALLBACK_MS (7ull * 24 * 3600 * 1000)

static const char *tenant_dir(const char *tenant)
{
	return tenant && *tenant ? tenant : "@";
}

static int check_names(const char *tenant, const char *name, struct sbx_err *err)
{
	if (sbx_workspace_check(name, err) < 0)
		return -1;
	if (tenant && *tenant && sbx_id_check(tenant, "tenant", err) < 0)
		return -1;
	return 0;
}

int sbx_workspace_check(const char *name, struct sbx_err *err)
{
	return sbx_id_check(name, "workspace", err);
}

/* OFD locks: held per open file description (released when the monitor's
 * fd closes, whatever killed it), and testable without taking them. */
static int ofd_take(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	return fcntl(fd, F_OFD_SETLK, &fl);
}

static int ofd_held(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0)
		return 0;
	return fl.l_type != F_UNLCK;
}

static int opendir_at(int at, const char *name, int create, struct sbx_err *err)
{
	if (create && mkdirat(at, name, 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the workspace directory %s", name);
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && (errno != ENOENT || create))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the workspace directory %s", name);
	return fd;
}

/* LIB/workspaces/TENANT/NAME as a directory fd; -1 with errno ENOENT (and
 * err untouched) when it does not exist and create is off.  *tdir gets
 * the tenant directory when asked for. */
static int open_ws(struct sbx_state *st, const char *tenant, const char *name, int create, int *tdir,
		   struct sbx_err *err)
{
	_cleanup_close_ int root = opendir_at(st->lib_fd, "workspaces", create, err);
	if (root < 0)
		return -1;
	_cleanup_close_ int t = opendir_at(root, tenant_dir(tenant), create, err);
	if (t < 0)
		return -1;
	int fd = opendir_at(t, name, create, err);
	if (fd >= 0 && tdir)
		*tdir = sbx_steal_fd(&t);
	return fd;
}

/* The record; on failure w->unreadable is set and the rest left alone. */
static int read_record(int dfd, struct sbx_workspace_info *w)
{
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, RECORD, 64 << 10, NULL);
	json_t *o = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
	if (!o || json_integer_value(json_object_get(o, "schema")) != 1) {
		json_decref(o);
		w->unreadable = 1;
		return -1;
	}
	w->retention_ms = sbx_json_u64(o, "retention_ms");
	w->created_ns = sbx_json_u64(o, "created_ns");
	w->last_used_ns = sbx_json_u64(o, "last_used_ns");
	sbx_json_str(o, "session", w->session, sizeof w->session);
	if (!w->session[0])
		sbx_json_str(o, "last_session", w->session, sizeof w->session);
	if (sbx_id_check(w->session, "session", NULL) < 0)
		w->session[0] = 0;
	json_decref(o);
	return 0;
}

static int write_record(int dfd, const struct sbx_workspace_info *w, int attached, struct sbx_err *err)
{
	char created[40], used[40];
	sbx_fmt_time(w->created_ns, created, sizeof created);
	sbx_fmt_time(w->last_used_ns, used, sizeof used);
	json_t *o = json_pack("{s:i, s:s, s:s?, s:I, s:I, s:s, s:I, s:s, s:I, s:s?, s:s?}", "schema", 1, "name",
			      w->name, "tenant", w->tenant[0] ? w->tenant : NULL, "size", (json_int_t)w->size,
			      "retention_ms", (json_int_t)w->retention_ms, "created", created, "created_ns",
			      (json_int_t)w->created_ns, "last_used", used, "last_used_ns", (json_int_t)w->last_used_ns,
			      "session", attached && w->session[0] ? w->session : NULL, "last_session",
			      w->session[0] ? w->session : NULL);
	char *txt = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	json_decref(o);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot encode the workspace record");
	int rc = sbx_atomic_write_at(dfd, RECORD, txt, strlen(txt), 0600, err);
	free(txt);
	return rc;
}

static void fill_disk(int dfd, struct sbx_workspace_info *w)
{
	struct stat sb;
	if (fstatat(dfd, DISK, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)) {
		w->size = (uint64_t)sb.st_size;
		w->used = (uint64_t)sb.st_blocks * 512;
	}
}

/* Who holds it, for the conflict message. */
static int busy(int dfd, const char *name, struct sbx_err *err)
{
	struct sbx_workspace_info w = { 0 };
	read_record(dfd, &w);
	if (w.session[0])
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "workspace %s is in use by session %s (one running session at a time)", name,
				   w.session);
	return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "workspace %s is in use by another session", name);
}

int sbx_workspace_probe(struct sbx_state *st, const char *tenant, const char *name, struct sbx_err *err)
{
	if (check_names(tenant, name, err) < 0)
		return -1;
	_cleanup_close_ int dfd = open_ws(st, tenant, name, 0, NULL, err);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1;
	_cleanup_close_ int lfd = openat(dfd, LOCK, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (lfd >= 0 && ofd_held(lfd))
		return busy(dfd, name, err);
	return 0;
}

/* Remove NAME under tdir, and the tenant directory once empty.  The
 * caller holds the global lock. */
static int remove_ws(struct sbx_state *st, int tdir, const char *tenant, const char *name)
{
	int rc = sbx_rm_rf_at(tdir, name);
	_cleanup_close_ int root = openat(st->lib_fd, "workspaces", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (root >= 0)
		unlinkat(root, tenant_dir(tenant), AT_REMOVEDIR); /* ENOTEMPTY: others remain */
	return rc;
}

/* The image on first use; built under a temporary name, so a monitor
 * killed during mkfs leaves no half-made disk.img behind. */
static int make_disk(int dfd, struct sbx_workspace *w, uint64_t size, struct sbx_err *err)
{
	char tmp[1200];
	snprintf(tmp, sizeof tmp, "%.*s" DISK_TMP, (int)(strlen(w->disk) - strlen(DISK)), w->disk);
	unlinkat(dfd, DISK_TMP, 0);
	if (sbx_disk_workspace(tmp, size, SBX_WORKSPACE_UID, SBX_WORKSPACE_GID, err) < 0)
		return -1;
	if (renameat(dfd, DISK_TMP, dfd, DISK) < 0) {
		int e = errno;
		unlinkat(dfd, DISK_TMP, 0);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot rename the workspace disk into place");
	}
	fsync(dfd);
	return 0;
}

/* Under the workspace's lock: make or grow the image, write the record. */
static int prepare(int dfd, struct sbx_workspace *w, uint64_t size, uint64_t retention_ms, const char *session,
		   struct sbx_err *err)
{
	struct sbx_workspace_info *i = &w->info;
	uint64_t now = sbx_now_ns();
	struct stat sb;
	int have = fstatat(dfd, DISK, &sb, AT_SYMLINK_NOFOLLOW) == 0;
	if (have && !S_ISREG(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "workspace %s: %s is not a regular file", i->name, DISK);
	if (read_record(dfd, i) < 0 && have) {
		/* Quarantine, never lose the data: the image is still good. */
		char q[64];
		snprintf(q, sizeof q, RECORD ".corrupt-%llu", (unsigned long long)(now / 1000000u));
		renameat(dfd, RECORD, dfd, q);
	}
	/* The retention of the policy it is used under now. */
	i->retention_ms = retention_ms;
	snprintf(i->session, sizeof i->session, "%s", session);
	if (!i->created_ns || !have)
		i->created_ns = now;
	i->last_used_ns = now;
	if (!have) {
		/* Intent first: a create killed here leaves a record that
		 * sbx-gc reclaims after the retention, and the next attach
		 * makes the disk. */
		w->created = 1;
		i->size = size;
		if (write_record(dfd, i, 1, err) < 0 || make_disk(dfd, w, size, err) < 0)
			return -1;
	} else if ((uint64_t)sb.st_size < size) {
		/* A policy that grants more grows the workspace (offline: no VM
		 * has it); one that grants less leaves it as it was made. */
		w->grown_from = (uint64_t)sb.st_size;
		if (sbx_disk_grow(w->disk, size, err) < 0)
			return -1;
	}
	fill_disk(dfd, i);
	return write_record(dfd, i, 1, err);
}

int sbx_workspace_attach(struct sbx_state *st, const char *tenant, const char *name, uint64_t size,
			 uint64_t retention_ms, const char *session, struct sbx_workspace *w, struct sbx_err *err)
{
	memset(w, 0, sizeof *w);
	w->lock_fd = w->dir_fd = -1;
	if (check_names(tenant, name, err) < 0)
		return -1;
	struct sbx_workspace_info *i = &w->info;
	snprintf(i->name, sizeof i->name, "%s", name);
	snprintf(i->tenant, sizeof i->tenant, "%s", tenant ? tenant : "");
	snprintf(w->disk, sizeof w->disk, "%s/workspaces/%s/%s/" DISK, st->lib, tenant_dir(tenant), name);
	/* Taken under the global lock, never waited for: sbx-gc removes
	 * workspaces under it, so the lock file we lock is the one that
	 * stays. */
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	_cleanup_close_ int tdir = -1;
	int fresh = 0;
	{
		_cleanup_close_ int root = opendir_at(st->lib_fd, "workspaces", 1, err);
		if (root < 0 || (tdir = opendir_at(root, tenant_dir(tenant), 1, err)) < 0)
			return -1;
		fresh = mkdirat(tdir, name, 0700) == 0;
	}
	_cleanup_close_ int dfd = opendir_at(tdir, name, 1, err);
	if (dfd < 0)
		return -1;
	_cleanup_close_ int lfd = openat(dfd, LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the lock of workspace %s", name);
	if (ofd_take(lfd) < 0) {
		if (errno == EAGAIN || errno == EACCES)
			return busy(dfd, name, err);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot lock workspace %s", name);
	}
	close(g);
	g = -1;
	if (prepare(dfd, w, size, retention_ms, session, err) < 0) {
		if (fresh) {
			/* Nothing of a workspace that never worked stays. */
			g = sbx_lock_global(st, NULL);
			remove_ws(st, tdir, tenant, name);
		}
		return -1;
	}
	i->in_use = 1;
	w->lock_fd = sbx_steal_fd(&lfd);
	w->dir_fd = sbx_steal_fd(&dfd);
	return 0;
}

void sbx_workspace_release(struct sbx_state *st, struct sbx_workspace *w, int discard)
{
	if (w->lock_fd < 0)
		return;
	struct sbx_workspace_info *i = &w->info;
	if (discard && w->created) {
		int g = sbx_lock_global(st, NULL);
		_cleanup_close_ int tdir = -1;
		_cleanup_close_ int dfd = open_ws(st, i->tenant, i->name, 0, &tdir, NULL);
		if (dfd >= 0)
			remove_ws(st, tdir, i->tenant, i->name);
		if (g >= 0)
			close(g);
	} else {
		/* The jail handed the image to the VMM's uid; the next session's
		 * jail hands it to its own, and meanwhile it is root's. */
		fchownat(w->dir_fd, DISK, 0, 0, AT_SYMLINK_NOFOLLOW);
		i->last_used_ns = sbx_now_ns();
		fill_disk(w->dir_fd, i);
		write_record(w->dir_fd, i, 0, NULL);
	}
	i->in_use = 0;
	close(w->lock_fd);
	close(w->dir_fd);
	w->lock_fd = w->dir_fd = -1;
}

/* What a listing or sbx-gc knows of one workspace; dfd is its directory. */
static void describe(int dfd, const char *tenant, const char *name, struct sbx_workspace_info *w)
{
	memset(w, 0, sizeof *w);
	snprintf(w->name, sizeof w->name, "%s", name);
	snprintf(w->tenant, sizeof w->tenant, "%s", tenant ? tenant : "");
	if (read_record(dfd, w) < 0) {
		/* No record: judge by the newest change to its files. */
		struct stat sb;
		const char *files[] = { ".", DISK, LOCK };
		for (size_t k = 0; k < SBX_ARRAY_LEN(files); k++)
			if (fstatat(dfd, files[k], &sb, AT_SYMLINK_NOFOLLOW) == 0) {
				uint64_t t = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
				if (t > w->last_used_ns)
					w->last_used_ns = t;
			}
		w->retention_ms = RETENTION_FALLBACK_MS;
	}
	fill_disk(dfd, w);
	_cleanup_close_ int lfd = openat(dfd, LOCK, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	w->in_use = lfd >= 0 && ofd_held(lfd);
}

int sbx_workspace_reap(struct sbx_state *st, const char *tenant, const char *name, uint64_t now, int dry_run,
		       struct sbx_workspace_info *info)
{
	memset(info, 0, sizeof *info);
	if (check_names(tenant, name, NULL) < 0)
		return 0;
	_cleanup_close_ int g = sbx_lock_global(st, NULL);
	if (g < 0)
		return 0;
	_cleanup_close_ int tdir = -1;
	_cleanup_close_ int dfd = open_ws(st, tenant, name, 0, &tdir, NULL);
	if (dfd < 0)
		return 0;
	describe(dfd, tenant, name, info);
	/* Taken, not just tested: while we hold it (and the global lock) no
	 * monitor can attach it. */
	_cleanup_close_ int lfd = openat(dfd, LOCK, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (info->in_use || (lfd >= 0 && ofd_take(lfd) < 0)) {
		info->in_use = 1;
		return 0;
	}
	if (info->last_used_ns + info->retention_ms * 1000000u > now)
		return 0;
	if (!dry_run)
		remove_ws(st, tdir, tenant, name);
	return 1;
}

static int cmp_info(const void *a, const void *b)
{
	const struct sbx_workspace_info *x = a, *y = b;
	int c = strcmp(x->tenant, y->tenant);
	return c ? c : strcmp(x->name, y->name);
}

/* The workspaces under one tenant directory, appended to *out. */
static int list_tenant(int root, const char *tenant, struct sbx_workspace_info **out, size_t *n, size_t *cap)
{
	_cleanup_close_ int tdir = openat(root, tenant_dir(tenant), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (tdir < 0)
		return errno == ENOENT ? 0 : -1;
	DIR *d = fdopendir(dup(tdir));
	if (!d)
		return -1;
	rewinddir(d);
	char **names;
	size_t nn;
	if (sbx_dir_ids(d, 1, &names, &nn) < 0)
		return -1;
	int rc = 0;
	for (size_t k = 0; k < nn; k++) {
		_cleanup_close_ int dfd = openat(tdir, names[k], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (dfd >= 0 && rc == 0) {
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 16;
				struct sbx_workspace_info *nv = realloc(*out, nc * sizeof **out);
				if (!nv)
					rc = -1;
				else
					*out = nv, *cap = nc;
			}
			if (rc == 0)
				describe(dfd, tenant, names[k], &(*out)[(*n)++]);
		}
		free(names[k]);
	}
	free(names);
	return rc;
}

int sbx_workspace_list(struct sbx_state *st, const char *tenant, struct sbx_workspace_info **out, size_t *n,
		       struct sbx_err *err)
{
	*out = NULL;
	*n = 0;
	size_t cap = 0;
	if (tenant && *tenant && sbx_id_check(tenant, "tenant", err) < 0)
		return -1;
	_cleanup_close_ int root = openat(st->lib_fd, "workspaces", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (root < 0)
		return errno == ENOENT ? 0 : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list workspaces");
	/* "@" (no tenant) first, then every tenant directory. */
	int rc = list_tenant(root, tenant ? tenant : "", out, n, &cap);
	if (rc == 0 && !tenant) {
		char **tenants;
		size_t nt;
		DIR *d = fdopendir(dup(root));
		if (d)
			rewinddir(d);
		if (!d || sbx_dir_ids(d, 1, &tenants, &nt) < 0) {
			rc = -1;
		} else {
			for (size_t k = 0; k < nt; k++) {
				if (rc == 0)
					rc = list_tenant(root, tenants[k], out, n, &cap);
				free(tenants[k]);
			}
			free(tenants);
		}
	}
	if (rc < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list workspaces");
	}
	if (*n)
		qsort(*out, *n, sizeof **out, cmp_info);
	return 0;
}
