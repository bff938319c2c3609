/* The package cache's store (pkgcache.h): content-addressed entries under
 * LIB/pkgcache/SCOPE, their verification records, the LRU order and the
 * scope's quota, the names HEAD is answered from, and serving a file from
 * there or from upstream into it. */
#include "pkgc.h"
#include "state.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#define META "meta"        /* per entry: its hashes as last verified, and when last used */
#define NAMES "names"      /* what each (registry, package, file) was stored as, for HEAD */
#define CACHE_LOCK ".lock" /* eviction, per cache scope */

/* ---- files -------------------------------------------------------------------- */

/* The cache directory this session may share, its tenant's or the one for
 * sessions without a tenant: a copy of the fd opened before the drop. */
int pc_cache_dir(const struct conn *c)
{
	return fcntl(c->cfg->cache_fd, F_DUPFD_CLOEXEC, 0);
}

/* ---- the scope's owner (as root, before the drop) ---------------------------- */

/* Hand dir's entries to uid, depth levels down: directories and regular
 * files with one link only (a hard link to a file elsewhere keeps its
 * owner); a symlink is never followed, nor handed over. */
static int hand_over(int dir, uid_t uid, int depth)
{
	int dd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = dd < 0 ? NULL : fdopendir(dd);
	if (!d) {
		if (dd >= 0)
			close(dd);
		return -1;
	}
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth > 0) {
			_cleanup_close_ int sub =
				openat(dir, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (sub < 0 || hand_over(sub, uid, depth - 1) < 0 || fchown(sub, uid, uid) < 0)
				return -1;
		} else if (S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid != uid) {
			_cleanup_close_ int f = openat(dir, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
			struct stat fs;
			if (f >= 0 && fstat(f, &fs) == 0 && fs.st_ino == st.st_ino && S_ISREG(fs.st_mode) &&
			    fs.st_nlink == 1 && fchown(f, uid, uid) < 0)
				return -1;
		}
	}
	return 0;
}

int sbx_pkgcache_scope_open(int lib_fd, const char *tenant, uid_t uid, struct sbx_err *err)
{
	char p[128];
	if (tenant && *tenant && sbx_id_check(tenant, "tenant", err) < 0)
		return -1;
	if (mkdirat(lib_fd, "pkgcache", 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the package cache directory");
	_cleanup_close_ int base = openat(lib_fd, "pkgcache", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	/* Root's and 0700: no scope reaches another through "..". */
	if (base < 0 || fstat(base, &st) < 0 || ((st.st_uid || st.st_gid) && fchown(base, 0, 0) < 0) ||
	    ((st.st_mode & 07777) != 0700 && fchmod(base, 0700) < 0))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the package cache directory");
	if (tenant && *tenant)
		snprintf(p, sizeof p, "tenant-%s", tenant);
	else
		snprintf(p, sizeof p, "shared");
	if (mkdirat(base, p, 0700) == 0 && fchownat(base, p, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand package cache %s over", p);
	_cleanup_close_ int fd = openat(base, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open package cache %s", p);
	if (st.st_uid != uid || st.st_gid != uid) { /* an older sbx's, root's: once */
		if (hand_over(fd, uid, 2) < 0 || fchown(fd, uid, uid) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand package cache %s over", p);
	}
	if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make package cache %s private", p);
	return sbx_steal_fd(&fd);
}

static void hash_fd_done(struct fetch *f, char s256[65], char s512[129], char s1[41])
{
	uint8_t d[64];
	SHA256Final(d, &f->s256);
	pc_to_hex(d, 32, s256);
	SHA512Final(d, &f->s512);
	pc_to_hex(d, 64, s512);
	SHA1Final(d, &f->s1);
	pc_to_hex(d, 20, s1);
}

/* Hash an open file from the start. */
static int hash_file(int fd, struct fetch *f)
{
	SHA256Init(&f->s256);
	SHA512Init(&f->s512);
	SHA1Init(&f->s1);
	char buf[65536];
	off_t off = 0;
	for (;;) {
		ssize_t r = pread(fd, buf, sizeof buf, off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (!r)
			return 0;
		SHA256Update(&f->s256, (uint8_t *)buf, (size_t)r);
		SHA512Update(&f->s512, (uint8_t *)buf, (size_t)r);
		SHA1Update(&f->s1, (uint8_t *)buf, (size_t)r);
		off += r;
	}
}

/* Which of the registry's hashes the content fails; NULL when none. */
static const char *mismatch(const struct want *w, const char *s256, const char *s512, const char *s1)
{
	if (w->sha256[0] && strcmp(w->sha256, s256))
		return "sha256";
	if (w->sha512[0] && strcmp(w->sha512, s512))
		return "sha512";
	if (w->sha1[0] && strcmp(w->sha1, s1))
		return "sha1";
	return NULL;
}

static int refuse_budget(struct conn *c, struct outcome *o, uint64_t need, int more, uint64_t used)
{
	char msg[600];
	uint64_t max = c->cfg->pkg->max_download, left = used < max ? max - used : 0;
	o->verdict = "refused";
	if (more)
		snprintf(msg, sizeof msg,
			 "packages.max_download of policy %s exceeded: %s is larger than the %llu bytes left of %llu",
			 pc_policy_name(c), c->file, (unsigned long long)left, (unsigned long long)max);
	else
		snprintf(msg, sizeof msg,
			 "packages.max_download of policy %s exceeded: %s (%llu bytes) does not fit in the %llu bytes "
			 "left of %llu",
			 pc_policy_name(c), c->file, (unsigned long long)need, (unsigned long long)left,
			 (unsigned long long)max);
	return pc_refuse(c, o, 403, msg, 1);
}

/* A download's file until it is verified: PART_DIR/.part-RANDOM, made
 * O_EXCL|O_NOFOLLOW (nothing planted there is opened or followed) and
 * renamed into place, or removed, before the request ends.  One left by a
 * proxy that died mid-download is swept by the next eviction scan
 * (part_sweep) once it is PART_STALE_S old. */
#define PART_DIR "tmp"
#define PART_NAME_MAX 32
#define PART_STALE_S (2 * 3600)

static int part_create(int tmp, char name[PART_NAME_MAX])
{
	for (int i = 0; i < 16; i++) {
		uint8_t r[8];
		arc4random_buf(r, sizeof r);
		memcpy(name, ".part-", 6);
		pc_to_hex(r, sizeof r, name + 6);
		int fd = openat(tmp, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return -1;
}

struct part_name {
	int dir; /* -1: nothing to remove */
	const char *name;
};

static void part_drop(struct part_name *p)
{
	if (p->dir >= 0)
		unlinkat(p->dir, p->name, 0);
}

/* Downloads that never finished (their proxy was killed): regular files
 * named .part-* older than PART_STALE_S. */
static void part_sweep(int dir)
{
	int dd = openat(dir, PART_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_closedir_ DIR *d = dd < 0 ? NULL : fdopendir(dd);
	if (!d) {
		if (dd >= 0)
			close(dd);
		return;
	}
	time_t now = time(NULL);
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st;
		if (!strncmp(e->d_name, ".part-", 6) && fstatat(dd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && st.st_mtime + PART_STALE_S < now)
			unlinkat(dd, e->d_name, 0);
	}
}

/* ---- cache entries: verification records, LRU, quota, names ---------------- */

int pc_subdir(int dir, const char *name)
{
	mkdirat(dir, name, 0700);
	return openat(dir, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* META/KEY holds the hashes of the entry's inode as it was when last
 * hashed: "1 INO SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS SHA256 SHA512
 * SHA1".  They stand for the content while the inode, size, mtime and
 * ctime are all unchanged (any write or rename of the entry changes its
 * ctime, which no one can set back).  The record's own mtime is when the
 * entry was last used: the eviction order. */
static int meta_read(int dir, const char *key, const struct stat *st, char s256[65], char s512[129], char s1[41])
{
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (md < 0)
		return -1;
	_cleanup_free_ char *t = sbx_read_small_at(md, key, 512, NULL);
	if (!t)
		return -1;
	unsigned v;
	unsigned long long ino, size, ms, mn, cs, cn;
	char h256[65], h512[129], h1[41];
	if (sscanf(t, "%u %llu %llu %llu %llu %llu %llu %64s %128s %40s", &v, &ino, &size, &ms, &mn, &cs, &cn, h256,
		   h512, h1) != 10 ||
	    v != 1 || !pc_hex_ok(h256, 64) || !pc_hex_ok(h512, 128) || !pc_hex_ok(h1, 40))
		return -1;
	if (ino != (unsigned long long)st->st_ino || size != (unsigned long long)st->st_size ||
	    ms != (unsigned long long)st->st_mtim.tv_sec || mn != (unsigned long long)st->st_mtim.tv_nsec ||
	    cs != (unsigned long long)st->st_ctim.tv_sec || cn != (unsigned long long)st->st_ctim.tv_nsec)
		return -1;
	memcpy(s256, h256, 65);
	memcpy(s512, h512, 129);
	memcpy(s1, h1, 41);
	return 0;
}

/* Mark key used now (nanoseconds, not the file system's coarse clock). */
static void lru_touch(int dir, const char *key)
{
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct timespec ts[2];
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[1] = ts[0];
	if (md >= 0)
		utimensat(md, key, ts, AT_SYMLINK_NOFOLLOW);
}

/* Record the hashes of fd (named key) as they are now: st is fd's stat
 * from before it was hashed, and nothing is recorded if it changed since. */
static void meta_write(const struct conn *c, int dir, const char *key, int fd, const struct stat *st, const char *s256,
		       const char *s512, const char *s1)
{
	struct stat now;
	if (fstat(fd, &now) < 0 || now.st_ino != st->st_ino || now.st_size != st->st_size ||
	    now.st_mtim.tv_sec != st->st_mtim.tv_sec || now.st_mtim.tv_nsec != st->st_mtim.tv_nsec ||
	    now.st_ctim.tv_sec != st->st_ctim.tv_sec || now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)
		return;
	_cleanup_close_ int md = pc_subdir(dir, META);
	char t[512];
	int w = snprintf(t, sizeof t, "1 %llu %llu %llu %llu %llu %llu %s %s %s\n", (unsigned long long)st->st_ino,
			 (unsigned long long)st->st_size, (unsigned long long)st->st_mtim.tv_sec,
			 (unsigned long long)st->st_mtim.tv_nsec, (unsigned long long)st->st_ctim.tv_sec,
			 (unsigned long long)st->st_ctim.tv_nsec, s256, s512, s1);
	struct sbx_err e = { 0 };
	if (md < 0 || w <= 0 || (size_t)w >= sizeof t || sbx_atomic_write_at(md, key, t, (size_t)w, 0600, &e) < 0) {
		pc_diag(c, "cannot record the hashes of cache entry %s: %s", key, md < 0 ? strerror(errno) : e.msg);
		return;
	}
	lru_touch(dir, key);
}

static int entry_name_ok(const char *k)
{
	return (!strncmp(k, "sha256-", 7) && pc_hex_ok(k + 7, 64)) ||
	       (!strncmp(k, "sha512-", 7) && pc_hex_ok(k + 7, 128));
}

static void drop_entry(int dir, const char *key)
{
	unlinkat(dir, key, 0);
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (md >= 0)
		unlinkat(md, key, 0);
}

struct lru {
	char key[140];
	uint64_t size;
	uint64_t used; /* ns */
};

static int lru_cmp(const void *a, const void *b)
{
	const struct lru *x = a, *y = b;
	return x->used < y->used ? -1 : x->used > y->used;
}

/* Keep the scope within its quota (scope_quota): remove the
 * least recently used entries, never keep, until the rest fits.  Under
 * the scope's lock, so sessions of a tenant evict one at a time. */
static void evict(const struct conn *c, int dir, const char *keep)
{
	_cleanup_close_ int lk = openat(dir, CACHE_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0)
		return;
	int dd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = dd < 0 ? NULL : fdopendir(dd);
	if (!d) {
		if (dd >= 0)
			close(dd);
		return;
	}
	_cleanup_close_ int md = openat(dir, META, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ struct lru *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st, ms;
		if (!entry_name_ok(e->d_name) || fstatat(dir, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct lru *nv = realloc(v, nc * sizeof *nv);
			if (!nv)
				return;
			v = nv;
			cap = nc;
		}
		snprintf(v[n].key, sizeof v[n].key, "%s", e->d_name);
		v[n].size = (uint64_t)st.st_size;
		v[n].used = md >= 0 && fstatat(md, e->d_name, &ms, AT_SYMLINK_NOFOLLOW) == 0
				    ? (uint64_t)ms.st_mtim.tv_sec * 1000000000ull + (uint64_t)ms.st_mtim.tv_nsec
				    : 0; /* never recorded: oldest */
		total += v[n].size;
		n++;
	}
	part_sweep(dir);
	uint64_t quota = pc_scope_quota(c);
	if (total <= quota)
		return;
	qsort(v, n, sizeof *v, lru_cmp);
	for (size_t i = 0; i < n && total > quota; i++) {
		if (keep && !strcmp(v[i].key, keep))
			continue;
		drop_entry(dir, v[i].key);
		total -= v[i].size;
		pc_diag(c, "cache quota %llu bytes: evicted %s (%llu bytes, least recently used)",
			(unsigned long long)quota, v[i].key, (unsigned long long)v[i].size);
	}
}

/* NAMES/n-HEX: the entry a (registry, kind, package, file or version) was
 * last served from, so that HEAD can be answered from the cache without
 * asking the registry which hash the name stands for. */
static void name_of(const struct conn *c, char out[70])
{
	SHA2_CTX h;
	uint8_t d[32];
	const char *parts[] = { c->reg_url ? c->reg_url : "", c->kind, c->package,
				!strcmp(c->kind, "tarball") ? c->version : c->file };
	SHA256Init(&h);
	for (size_t i = 0; i < SBX_ARRAY_LEN(parts); i++)
		SHA256Update(&h, (const uint8_t *)parts[i], strlen(parts[i]) + 1);
	SHA256Final(d, &h);
	memcpy(out, "n-", 2);
	pc_to_hex(d, 32, out + 2);
}

static int name_read(const struct conn *c, int dir, char key[140])
{
	char nm[70];
	name_of(c, nm);
	_cleanup_close_ int nd = openat(dir, NAMES, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ char *t = nd < 0 ? NULL : sbx_read_small_at(nd, nm, 256, NULL);
	if (!t)
		return -1;
	t[strcspn(t, "\n")] = 0;
	if (!entry_name_ok(t))
		return -1;
	snprintf(key, 140, "%s", t);
	return 0;
}

static void name_write(const struct conn *c, int dir, const char *key)
{
	char nm[70], old[140], t[160];
	if (name_read(c, dir, old) == 0 && !strcmp(old, key))
		return;
	name_of(c, nm);
	_cleanup_close_ int nd = pc_subdir(dir, NAMES);
	int w = snprintf(t, sizeof t, "%s\n", key);
	if (nd < 0 || sbx_atomic_write_at(nd, nm, t, (size_t)w, 0600, NULL) < 0)
		pc_diag(c, "cannot record the name of cache entry %s", key);
}

/* The last step of every file served: count it (unless it was counted as
 * it was downloaded), record it (fail closed), send it. */
static int deliver(struct conn *c, struct outcome *o, int fd)
{
	uint64_t used = 0;
	int b = o->prepaid ? 0 : pc_budget_take(c, o->size, &used);
	if (b < 0)
		return pc_refuse(c, o, 500, "cannot account the download against packages.max_download", 1);
	if (b > 0)
		return refuse_budget(c, o, o->size, 0, used);
	o->status = 200;
	o->verdict = "ok";
	if (pc_record(c, o, 1) < 0)
		return pc_refuse(c, o, 500, "cannot record the download in the audit trail", 0);
	return pc_send_file(c, fd, o->size);
}

/* The cache entry for w: an fd when it verifies (o filled), else -1 (an
 * entry that does not verify is removed).  It is hashed only when its
 * verification record does not match its inode as it is now. */
static int cached(struct conn *c, struct outcome *o, int dir, const struct want *w)
{
	if (!w->key[0])
		return -1;
	_cleanup_close_ int fd = openat(dir, w->key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	char s256[65], s512[129], s1[41];
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	if (meta_read(dir, w->key, &st, s256, s512, s1) == 0) {
		o->verified = "cached";
	} else {
		struct fetch f = { 0 };
		if (hash_file(fd, &f) < 0)
			return -1;
		hash_fd_done(&f, s256, s512, s1);
		o->verified = "rehashed";
		if (!mismatch(w, s256, s512, s1))
			meta_write(c, dir, w->key, fd, &st, s256, s512, s1);
	}
	if (mismatch(w, s256, s512, s1)) {
		pc_diag(c, "cache entry %s does not verify: removed", w->key);
		drop_entry(dir, w->key);
		o->verified = NULL;
		return -1;
	}
	o->size = (uint64_t)st.st_size;
	snprintf(o->sha256, sizeof o->sha256, "%s", s256);
	return sbx_steal_fd(&fd);
}

/* Download url into a new file of the cache directory.  Every byte is
 * reserved against what is left of the budget before it is taken (the
 * whole Content-Length at once when upstream gives one, so a larger file
 * is refused before its body is fetched), and what arrived stays charged.
 * Every hash the registry published is checked; a verified file with a
 * strong hash is then named in the cache, within the quota.  The fd, or
 * -1 with the refusal already sent (*sent). */
static int download(struct conn *c, struct outcome *o, int dir, const char *url, const struct want *w, int *sent)
{
	char msg[URL_MAX + 512];
	*sent = 1;
	char part[PART_NAME_MAX];
	_cleanup_close_ int tmp = pc_subdir(dir, PART_DIR);
	_cleanup_close_ int tfd = tmp < 0 ? -1 : part_create(tmp, part);
	__attribute__((cleanup(part_drop))) struct part_name pn = { tfd < 0 ? -1 : tmp, part };
	if (tfd < 0) {
		pc_diag(c, "cannot create a file in the cache: %s", strerror(errno));
		return pc_refuse(c, o, 500, "cannot write to the package cache", 1), -1;
	}
	uint64_t used = 0;
	if (pc_budget_take(c, 0, &used) < 0)
		return pc_refuse(c, o, 500, "cannot account the download against packages.max_download", 1), -1;
	uint64_t left = pc_budget_left(c, used);
	if (!left)
		return refuse_budget(c, o, 0, 1, used), -1;
	if (pc_slot_take(c) < 0) {
		snprintf(msg, sizeof msg, "%u upstream fetches of this session are in flight; try again",
			 SBX_PKGCACHE_FETCHES_MAX);
		return pc_refuse(c, o, 503, msg, 1), -1;
	}
	struct fetch f = { .url = url, .fd = tfd, .max = left, .budget = c };
	if (pc_fetch(&f) < 0) {
		o->size = f.bytes;
		if (f.broke < 0)
			return pc_refuse(c, o, 500, "cannot account the download against packages.max_download", 1), -1;
		if (f.over || f.broke > 0) {
			pc_budget_take(c, 0, &used);
			return refuse_budget(c, o, left, 1, used), -1;
		}
		if (f.status == 404 || f.status == 410)
			snprintf(msg, sizeof msg, "%s: registry %s lists it but it is not there (HTTP %ld)", c->file,
				 c->registry, f.status);
		else
			snprintf(msg, sizeof msg, "cannot fetch %s from registry %s: %s", c->file, c->registry,
				 f.error);
		pc_diag(c, "%s (%s)", msg, url);
		return pc_refuse(c, o, 502, msg, 1), -1;
	}
	pc_slot_give(c);
	o->prepaid = 1;
	char s256[65], s512[129], s1[41];
	hash_fd_done(&f, s256, s512, s1);
	o->size = f.bytes;
	o->verified = "hashed";
	snprintf(o->sha256, sizeof o->sha256, "%s", s256);
	const char *bad = mismatch(w, s256, s512, s1);
	if (bad) {
		int k = !strcmp(bad, "sha256") ? 0 : !strcmp(bad, "sha512") ? 1 : 2;
		const char *want[] = { w->sha256, w->sha512, w->sha1 }, *got[] = { s256, s512, s1 };
		o->verdict = "hash-mismatch";
		snprintf(msg, sizeof msg,
			 "%s mismatch: %s from registry %s is not the file its index names (%s %s, got %s)", bad,
			 c->file, c->registry, bad, want[k], got[k]);
		return pc_refuse(c, o, 502, msg, 1), -1;
	}
	if (w->key[0] && f.bytes > pc_scope_quota(c)) {
		pc_diag(c, "%s (%llu bytes) is larger than the cache quota of %llu bytes: served, not kept", w->key,
			(unsigned long long)f.bytes, (unsigned long long)pc_scope_quota(c));
	} else if (w->key[0]) {
		/* Named by rename, not by linking the fd through /proc (which
		 * the proxy does not mount).  An entry already there has the
		 * same content (same hash): it stays, this name goes. */
		if (fsync(tfd) < 0 || renameat2(tmp, part, dir, w->key, RENAME_NOREPLACE) < 0) {
			if (errno != EEXIST)
				pc_diag(c, "cannot keep %s in the cache: %s", w->key, strerror(errno));
		} else {
			pn.dir = -1; /* renamed: nothing left to remove */
			/* Renaming changed the inode's ctime: record it as it is now. */
			struct stat st;
			if (fstat(tfd, &st) == 0)
				meta_write(c, dir, w->key, tfd, &st, s256, s512, s1);
			evict(c, dir, w->key);
		}
	}
	*sent = 0;
	return sbx_steal_fd(&tfd);
}

/* Serve one package file: from the cache when an entry under the
 * registry's hash exists and still verifies, else from upstream into the
 * cache.  Every path ends in exactly one response and one record. */
int pc_serve_file(struct conn *c, struct outcome *o, const char *url, const struct want *w)
{
	snprintf(c->upstream, sizeof c->upstream, "%s", url);
	if (w->sha256[0])
		snprintf(o->expected, sizeof o->expected, "sha256:%s", w->sha256);
	else if (w->sha512[0])
		snprintf(o->expected, sizeof o->expected, "sha512:%s", w->sha512);
	else if (w->sha1[0])
		snprintf(o->expected, sizeof o->expected, "sha1:%s", w->sha1);
	if (!w->sha256[0] && !w->sha512[0] && c->cfg->pkg->require_hashes) {
		char msg[600];
		snprintf(msg, sizeof msg,
			 "%s: registry %s names no sha256 or sha512 for it and packages.require_hashes is set in "
			 "policy %s",
			 c->file, c->registry, pc_policy_name(c));
		return pc_refuse(c, o, 403, msg, 1);
	}
	_cleanup_close_ int dir = pc_cache_dir(c);
	if (dir < 0) {
		pc_diag(c, "cannot open the cache directory: %s", strerror(errno));
		return pc_refuse(c, o, 500, "cannot open the package cache", 1);
	}
	_cleanup_close_ int fd = cached(c, o, dir, w);
	if (fd >= 0) {
		o->cache = "hit";
		lru_touch(dir, w->key);
	} else {
		o->cache = "miss";
		int sent;
		fd = download(c, o, dir, url, w, &sent);
		if (fd < 0)
			return sent ? 0 : -1;
	}
	if (w->inspect && w->inspect(c, o, fd))
		return 0;
	if (w->key[0])
		name_write(c, dir, w->key);
	return deliver(c, o, fd);
}

/* HEAD of a file or tarball: from the cache only.  The entry this name was
 * last served from, verified like a hit, answers with its length; anything
 * else is 404, and nothing is fetched, hashed anew for an unchanged entry,
 * or charged. */
int pc_head_file(struct conn *c)
{
	struct outcome o = { 0 };
	char key[140], msg[600];
	_cleanup_close_ int dir = pc_cache_dir(c);
	if (dir < 0) {
		pc_diag(c, "cannot open the cache directory: %s", strerror(errno));
		return pc_refuse(c, &o, 500, "cannot open the package cache", 0);
	}
	struct want w = { 0 };
	_cleanup_close_ int fd = -1;
	if (name_read(c, dir, key) == 0) {
		snprintf(w.key, sizeof w.key, "%s", key);
		snprintf(key[5] == '6' ? w.sha256 : w.sha512, key[5] == '6' ? sizeof w.sha256 : sizeof w.sha512, "%s",
			 key + 7);
		fd = cached(c, &o, dir, &w);
	}
	if (fd < 0) {
		o.cache = "miss";
		snprintf(msg, sizeof msg, "%s is not in the package cache (HEAD is answered from the cache only)",
			 c->file[0] ? c->file : c->package);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	o.cache = "hit";
	o.status = 200;
	o.verdict = "ok";
	pc_record(c, &o, 0);
	return pc_send_head(c, 200, "OK", "application/octet-stream", o.size);
}
