/* The package cache's apt route (pkgcache.h, sbx-policy(5)): a Debian
 * archive served through the cache, every file verified before the guest
 * sees it.
 *
 *   GET /apt/N/dists/SUITE/InRelease    verified with gpgv against the
 *                                       entry's keyring; its suite must be
 *                                       the entry's and it must not have
 *                                       expired (Valid-Until)
 *   GET /apt/N/dists/SUITE/PATH         an index the verified Release lists
 *                                       (by name or by-hash), checked
 *                                       against its SHA-256 there
 *   GET /apt/N/pool/...                 a .deb a verified Packages index of
 *                                       this session lists, checked against
 *                                       its SHA-256 there, its name against
 *                                       packages.allow/deny/pins.apt
 *
 * Release and Release.gpg are not served (apt takes InRelease first).
 * What the guest was last served of each entry (the Release, the .debs
 * its indexes list) is kept in memory for the life of this proxy: a
 * restarted proxy reloads the Release itself, and asks for apt-get update
 * before it serves a .deb. */
#include "aptidx.h"
#include "pkgc.h"
#include "policy.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GPGV "/usr/bin/gpgv"
#define GPGV_TIMEOUT_MS 30000
#define ROUTES 16
#define INDEXES_MAX 64 /* indexes read into one entry's map */

static struct route {
	pthread_mutex_t mu;
	int have; /* rel holds a verified Release */
	struct sbx_apt_release rel;
	struct sbx_apt_debmap *map;
	uint8_t read[INDEXES_MAX][32]; /* the indexes in map, by SHA-256 */
	unsigned nread;
} routes[ROUTES] = { [0 ... ROUTES - 1] = { .mu = PTHREAD_MUTEX_INITIALIZER } };

/* ---- gpgv ---- */

static int memfd_with(const char *name, const char *p, size_t n)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	size_t off = 0;
	while (fd >= 0 && off < n) {
		ssize_t w = write(fd, p + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	if (fd >= 0 && lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static char *memfd_read(int fd, size_t max, size_t *n)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size > max || lseek(fd, 0, SEEK_SET) < 0)
		return NULL;
	char *b = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (b && got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r <= 0) {
			free(b);
			return NULL;
		}
		got += (size_t)r;
	}
	if (b)
		b[got] = 0, *n = got;
	return b;
}

/* The signed text of an InRelease, verified by gpgv against the keyring
 * at the jail's path keyring: malloc'd, or NULL with gpgv's last words in
 * why.  gpgv reads the InRelease on its stdin and writes the signed text
 * on its stdout, memory files both: no path is written, and the one it
 * reads is the keyring, placed in the jail before the drop. */
static char *verify(const char *keyring, const char *data, size_t n, size_t *out_n, char *why, size_t wn)
{
	_cleanup_close_ int in = memfd_with("inrelease", data, n);
	_cleanup_close_ int out = memfd_create("signed", MFD_CLOEXEC), errf = memfd_create("gpgv", MFD_CLOEXEC);
	if (in < 0 || out < 0 || errf < 0)
		return snprintf(why, wn, "cannot run gpgv: %s", strerror(errno)), NULL;
	pid_t pid = fork();
	if (pid < 0)
		return snprintf(why, wn, "cannot run gpgv: %s", strerror(errno)), NULL;
	if (pid == 0) {
		char *const argv[] = { "gpgv", "--homedir", "/nonexistent", "--keyring", (char *)keyring, "--output",
				       "-",    NULL };
		static char *const envp[] = { "PATH=/usr/bin:/bin", "LC_ALL=C", NULL };
		if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(errf, 2) < 0)
			_exit(127);
		execve(GPGV, argv, envp);
		_exit(127);
	}
	int st = 0;
	uint64_t end = sbx_mono_ns() + (uint64_t)GPGV_TIMEOUT_MS * 1000000ull;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (sbx_mono_ns() >= end) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return snprintf(why, wn, "gpgv took longer than %d s", GPGV_TIMEOUT_MS / 1000), NULL;
		}
		poll(NULL, 0, 5);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		char *text = memfd_read(out, SBX_APT_RELEASE_MAX, out_n);
		if (!text)
			snprintf(why, wn, "gpgv's signed text cannot be read");
		return text;
	}
	size_t en = 0;
	_cleanup_free_ char *e = memfd_read(errf, 1u << 20, &en);
	while (e && en && strchr("\n ", e[en - 1]))
		e[--en] = 0;
	const char *last = e ? strrchr(e, '\n') : NULL;
	snprintf(why, wn, "%s",
		 WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "gpgv could not be run"
		 : e && en                               ? (last ? last + 1 : e)
							 : "gpgv failed");
	return NULL;
}

/* ---- the Release ---- */

static int release_fits(const struct sbx_limit_registry *r, const struct sbx_apt_release *rel, char *why, size_t wn)
{
	if (strcmp(rel->codename, r->suite) && strcmp(rel->suite, r->suite))
		return snprintf(why, wn, "it is the Release of %s, not of %s",
				rel->codename[0] ? rel->codename : rel->suite, r->suite),
		       -1;
	if (rel->valid_until && rel->valid_until < (int64_t)time(NULL))
		return snprintf(why, wn, "it expired (Valid-Until) and may be replayed"), -1;
	return 0;
}

/* Fetch, verify and parse the entry's InRelease into its route; the bytes
 * as fetched into *raw when raw is not NULL.  0, or -1 with the refusal
 * sent (-1 whenever it is not 0). */
static int release_load(struct conn *c, struct outcome *o, const struct sbx_limit_registry *r, unsigned idx, char **raw,
			size_t *raw_n)
{
	char msg[URL_MAX + 600], why[400], path[200];
	snprintf(path, sizeof path, "dists/%s/InRelease", r->suite);
	pc_join_url(c->upstream, sizeof c->upstream, r->url, path);
	if (idx >= ROUTES || !c->cfg->apt_keyring[idx]) {
		snprintf(msg, sizeof msg, "apt archive %s has no keyring in this session", c->registry);
		return pc_refuse(c, o, 500, msg, 1), -1;
	}
	uint64_t max;
	if (pc_upstream_begin(c, o, "the InRelease", &max) < 0)
		return -1;
	struct fetch f = {
		.url = c->upstream, .fd = -1, .max = max < SBX_APT_RELEASE_MAX ? max : SBX_APT_RELEASE_MAX, .budget = c
	};
	int frc = pc_fetch(&f);
	c->charged_up += f.bytes;
	if (frc < 0) {
		free(f.body.p);
		if (pc_refuse_page_budget(c, o, &f, "the InRelease") < 0)
			return -1;
		/* A redirect to a denied address leaves the redirect's status:
		 * the denial is the news. */
		int http = f.status && !f.denied[0];
		snprintf(msg, sizeof msg, "cannot fetch the InRelease of %s from apt archive %s: %s", r->suite,
			 c->registry, http ? "HTTP error" : f.error);
		if (http)
			snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " %ld", f.status);
		pc_diag(c, "%s (%s)", msg, c->upstream);
		return pc_refuse(c, o, 502, msg, 1), -1;
	}
	o->size = f.bytes;
	size_t tn = 0;
	_cleanup_free_ char *text =
		verify(c->cfg->apt_keyring[idx], f.body.p ? f.body.p : "", f.body.n, &tn, why, sizeof why);
	struct sbx_apt_release rel;
	if (!text) {
		free(f.body.p);
		o->verdict = "bad-signature";
		snprintf(msg, sizeof msg, "the InRelease of %s from apt archive %s does not verify with %s: %s",
			 r->suite, c->registry, r->keyring, why);
		return pc_refuse(c, o, 502, msg, 1), -1;
	}
	if (sbx_apt_release_parse(text, tn, &rel, why, sizeof why) < 0 || release_fits(r, &rel, why, sizeof why) < 0) {
		free(f.body.p);
		o->verdict = "refused";
		snprintf(msg, sizeof msg, "the InRelease of %s from apt archive %s is refused: %s", r->suite,
			 c->registry, why);
		return pc_refuse(c, o, 502, msg, 1), -1;
	}
	struct route *rt = &routes[idx];
	pthread_mutex_lock(&rt->mu);
	sbx_apt_release_free(&rt->rel);
	rt->rel = rel;
	rt->have = 1;
	pthread_mutex_unlock(&rt->mu);
	if (raw) {
		*raw = f.body.p;
		*raw_n = f.body.n;
	} else {
		free(f.body.p);
	}
	return 0;
}

static int serve_release(struct conn *c, const struct sbx_limit_registry *r, unsigned idx)
{
	struct outcome o = { 0 };
	snprintf(c->kind, sizeof c->kind, "release");
	snprintf(c->file, sizeof c->file, "dists/%s/InRelease", r->suite);
	if (c->head)
		return pc_refuse_head(c);
	char *raw = NULL;
	size_t n = 0;
	if (release_load(c, &o, r, idx, &raw, &n) < 0)
		return 0;
	o.verified = "signature";
	int rc = pc_serve_body(c, &o, "text/plain", raw, n);
	free(raw);
	return rc;
}

/* ---- indexes ---- */

/* The inspect hook of a Packages index: read into the route's map (once
 * per index content). */
static int read_index(struct conn *c, struct outcome *o, int fd)
{
	unsigned idx = (unsigned)c->apt_route;
	struct route *rt = &routes[idx];
	uint8_t h[32];
	for (int i = 0; i < 32; i++)
		sscanf(o->sha256 + 2 * i, "%2hhx", &h[i]);
	char why[300], msg[700];
	pthread_mutex_lock(&rt->mu);
	int known = 0;
	for (unsigned i = 0; i < rt->nread && !known; i++)
		known = !memcmp(rt->read[i], h, 32);
	int rc = 0;
	if (!known && rt->nread >= INDEXES_MAX) {
		/* An archive's Release may list any number of indexes, and
		 * each is read into this proxy's memory. */
		rc = -1;
		snprintf(why, sizeof why, "this session has read %d indexes of it already", INDEXES_MAX);
	} else if (!known) {
		if (lseek(fd, 0, SEEK_SET) < 0 || sbx_apt_debmap_add(&rt->map, fd, why, sizeof why) < 0)
			rc = -1;
		else
			memcpy(rt->read[rt->nread++], h, 32);
	}
	pthread_mutex_unlock(&rt->mu);
	if (lseek(fd, 0, SEEK_SET) < 0)
		rc = -1, snprintf(why, sizeof why, "%s", strerror(errno));
	if (rc == 0)
		return 0;
	snprintf(msg, sizeof msg, "index %s of apt archive %s cannot be read: %s", c->file, c->registry, why);
	return pc_refuse(c, o, 502, msg, 1), 1;
}

static int serve_index(struct conn *c, const struct sbx_limit_registry *r, unsigned idx, const char *path)
{
	struct outcome o = { 0 };
	char msg[URL_MAX + 400], rest[URL_MAX];
	snprintf(c->kind, sizeof c->kind, "index");
	snprintf(c->file, sizeof c->file, "%s", path);
	if (!strcmp(path, "Release") || !strcmp(path, "Release.gpg")) {
		snprintf(msg, sizeof msg, "the cache serves InRelease, not %s", path);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	if (c->head)
		return pc_refuse_head(c);
	struct route *rt = &routes[idx];
	pthread_mutex_lock(&rt->mu);
	int have = rt->have;
	pthread_mutex_unlock(&rt->mu);
	if (!have && release_load(c, &o, r, idx, NULL, NULL) < 0)
		return 0;
	struct want w = { 0 };
	pthread_mutex_lock(&rt->mu);
	const struct sbx_apt_relfile *e = sbx_apt_release_find(&rt->rel, path);
	if (!e)
		e = sbx_apt_release_by_hash(&rt->rel, path);
	if (e) {
		pc_to_hex(e->sha256, 32, w.sha256);
		const char *base = strrchr(e->path, '/');
		base = base ? base + 1 : e->path;
		if (!strncmp(base, "Packages", 8))
			w.inspect = read_index;
	}
	pthread_mutex_unlock(&rt->mu);
	if (!e) {
		snprintf(msg, sizeof msg, "%s is not listed in the verified Release of %s (apt archive %s)", path,
			 r->suite, c->registry);
		return pc_refuse(c, &o, 404, msg, 0);
	}
	snprintf(w.key, sizeof w.key, "sha256-%s", w.sha256);
	snprintf(rest, sizeof rest, "dists/%s/%s", r->suite, path);
	char url[URL_MAX];
	pc_join_url(url, sizeof url, r->url, rest);
	c->apt_route = (int)idx;
	return pc_serve_file(c, &o, url, &w);
}

/* ---- packages ---- */

static int serve_deb(struct conn *c, const struct sbx_limit_registry *r, unsigned idx, const char *filename)
{
	struct outcome o = { 0 };
	char msg[URL_MAX + 400];
	snprintf(c->kind, sizeof c->kind, "deb");
	const char *base = strrchr(filename, '/');
	snprintf(c->file, sizeof c->file, "%s", base ? base + 1 : filename);
	struct route *rt = &routes[idx];
	struct want w = { 0 };
	pthread_mutex_lock(&rt->mu);
	const struct sbx_apt_deb *d = rt->map ? sbx_apt_debmap_find(rt->map, filename) : NULL;
	int none = !rt->map;
	if (d) {
		snprintf(c->package, sizeof c->package, "%s", d->package);
		snprintf(c->version, sizeof c->version, "%s", d->version);
		snprintf(c->arch, sizeof c->arch, "%s", d->arch);
		pc_to_hex(d->sha256, 32, w.sha256);
	}
	pthread_mutex_unlock(&rt->mu);
	if (!d) {
		snprintf(msg, sizeof msg,
			 none ? "%s: this session's cache has read no index of apt archive %s yet (run apt-get update)"
			      : "%s is not in the indexes of apt archive %s this session read (run apt-get update)",
			 filename, c->registry);
		return pc_refuse(c, &o, 404, msg, 1);
	}
	if (pc_rules_check(c, SBX_REG_APT, 1))
		return 0;
	if (c->head)
		return pc_head_file(c);
	snprintf(w.key, sizeof w.key, "sha256-%s", w.sha256);
	char url[URL_MAX];
	pc_join_url(url, sizeof url, r->url, filename);
	return pc_serve_file(c, &o, url, &w);
}

/* ---- the route ---- */

int pc_route_apt(struct conn *c, const struct sbx_limit_registry *r, unsigned idx, segment *seg, unsigned ns)
{
	struct outcome o = { 0 };
	char path[URL_MAX] = "";
	size_t off = 0;
	/* seg[0] "apt", seg[1] N; the rest is the archive's path.  A
	 * segment with '/' inside (an encoded one) is no archive path. */
	for (unsigned i = 2; i < ns; i++) {
		if (strchr(seg[i], '/') || off + strlen(seg[i]) + 2 >= sizeof path)
			return pc_refuse(c, &o, 404, "not an apt archive path", 0);
		off += (size_t)snprintf(path + off, sizeof path - off, "%s%s", i > 2 ? "/" : "", seg[i]);
	}
	if (idx >= ROUTES)
		return pc_refuse(c, &o, 404, "not an apt archive path", 0);
	if (ns >= 5 && !strcmp(seg[2], "dists")) {
		if (strcmp(seg[3], r->suite)) {
			char msg[300];
			snprintf(msg, sizeof msg, "apt archive %s serves suite %s only", c->registry, r->suite);
			return pc_refuse(c, &o, 404, msg, 0);
		}
		const char *rest = path + strlen("dists/") + strlen(r->suite) + 1;
		if (!strcmp(rest, "InRelease"))
			return serve_release(c, r, idx);
		return serve_index(c, r, idx, rest);
	}
	if (ns >= 4 && !strcmp(seg[2], "pool"))
		return serve_deb(c, r, idx, path);
	return pc_refuse(c, &o, 404, "not an apt archive path (dists/SUITE/... or pool/...)", 0);
}
