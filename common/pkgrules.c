/* A policy's packages.allow, deny, pins and lock compiled for a session
 * (pkgrules.h): lock files read as the caller (hostpath.h), parsed by an
 * unprivileged child, the result written beside the record. */
#include "pkgrules.h"
#include "hostpath.h"
#include "jail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sha2.h>

#define NOBODY 65534
#define REPLY_MAX (32u << 20) /* the child's answer: every entry as JSON */

int sbx_pkgrules_read_file(const char *tenant, const char *path, const char *key, size_t max, char **buf, size_t *n,
			   struct sbx_hostpath *hp, struct sbx_err *err)
{
	if (sbx_hostpath_resolve(tenant, path, SBX_HOSTPATH_READ | SBX_HOSTPATH_FOLLOW, key, hp, err) < 0) {
		if (err && err->code == SBX_EXIT_NOENT)
			err->code = SBX_EXIT_INVALID;
		return -1;
	}
	_cleanup_close_ int fd = sbx_hostpath_openat(hp, NULL, O_RDONLY | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "%s: cannot read %s", key, path);
	if (!S_ISREG(st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s is not a regular file", key, path);
	if ((uint64_t)st.st_size > max)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s is larger than %u MiB", key, path,
				   (unsigned)(max >> 20));
	_cleanup_free_ char *b = malloc(max + 1);
	if (!b)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "%s: cannot read %s", key, path);
	size_t got = 0;
	for (;;) {
		ssize_t r = read(fd, b + got, max + 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "%s: cannot read %s", key, path);
		if (r == 0)
			break;
		got += (size_t)r;
		if (got > max) /* it grew since the fstat */
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: %s is larger than %u MiB", key, path,
					   (unsigned)(max >> 20));
	}
	*buf = steal_pointer(&b);
	*n = got;
	return 0;
}

/* The child: nobody, no groups, no new privileges, bounded memory and
 * CPU, no fd but the answer's; parse and answer, as JSON: {"entries":
 * [[name, version, hash], ...]} or {"code": N, "error": "..."}. */
__attribute__((noreturn)) static void parse_child(int type, const char *name, const char *buf, size_t n, int wfd,
						  int san)
{
	/* 3: the answer; 4: a sanitized build's report file, opened by the
	 * parent (nobody could not open it). */
	if (dup2(wfd, 3) < 0 || (san >= 0 && dup2(san, 4) < 0))
		_exit(1);
	syscall(SYS_close_range, san >= 0 ? 5 : 4, ~0u, 0);
	if (san >= 0)
		sbx_jail_report_use(4);
	struct rlimit as = { 1ull << 30, 1ull << 30 }, cpu = { 20, 20 }, nofile = { 8, 8 };
	if ((!sbx_jail_sanitized() && setrlimit(RLIMIT_AS, &as) < 0) || setrlimit(RLIMIT_CPU, &cpu) < 0 ||
	    setrlimit(RLIMIT_NOFILE, &nofile) < 0)
		_exit(1);
	prctl(PR_SET_DUMPABLE, 0);
	if (geteuid() == 0 &&
	    (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0))
		_exit(1);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(1);
	struct sbx_pkgset set;
	struct sbx_err e = { 0 };
	int rc = type == 0 ? sbx_pkglock_parse_pip(name, buf, n, &set, &e)
			   : sbx_pkglock_parse_npm(name, buf, n, &set, &e);
	json_t *o;
	if (rc < 0) {
		o = json_pack("{s:i, s:s}", "code", e.code, "error", e.msg);
	} else {
		json_t *a = json_array();
		for (size_t i = 0; a && i < set.n; i++)
			json_array_append_new(a, json_pack("[s,s,s]", set.v[i].name, set.v[i].version, set.v[i].hash));
		o = json_pack("{s:o}", "entries", a);
	}
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	_exit(s && sbx_write_all(3, s, strlen(s)) == 0 ? 0 : 1);
}

/* What the child said, checked as strictly as any input: it parsed bytes
 * a tenant wrote, and may be theirs by now. */
static int child_answer(int type, const char *shown, const char *txt, size_t n, struct sbx_pkgset *set,
			struct sbx_err *err)
{
	json_t *o = json_loadb(txt, n, JSON_REJECT_DUPLICATES, NULL), *a = json_object_get(o, "entries"), *e;
	const char *msg = json_string_value(json_object_get(o, "error"));
	int rc = 0;
	size_t i;
	if (msg) {
		char m[512];
		snprintf(m, sizeof m, "%s", msg);
		sbx_text_clean(m);
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s", m);
	} else if (!json_is_array(a) || !json_array_size(a) || json_array_size(a) > SBX_PKGLOCK_ENTRIES_MAX) {
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the lock parser of %s gave no answer", shown);
	}
	json_array_foreach (rc == 0 ? a : NULL, i, e) {
		const char *nm = json_string_value(json_array_get(e, 0)), *v = json_string_value(json_array_get(e, 1)),
			   *h = json_string_value(json_array_get(e, 2));
		size_t hl = h ? strlen(h) : 0;
		char norm[SBX_PKG_NAME_LEN];
		if (!nm || !v || !h || hl != (type == 0 ? 64u : 128u) || strspn(h, "0123456789abcdef") != hl ||
		    !sbx_pkg_version_ok(v) ||
		    (type == 0 ? sbx_pkg_pypi_normalize(nm, norm, sizeof norm) < 0 || strcmp(norm, nm)
			       : !sbx_pkg_npm_name_ok(nm))) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the lock parser of %s gave a malformed entry",
					 shown);
			break;
		}
		if (sbx_pkgset_add(set, nm, v, h) < 0) {
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot keep the lock %s", shown);
			break;
		}
	}
	json_decref(o);
	return rc;
}

static int parse_unprivileged(int type, const char *shown, const char *buf, size_t n, struct sbx_pkgset *set,
			      struct sbx_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot parse %s", shown);
	int san = sbx_jail_report_spare(); /* -1 but in a sanitized build */
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		if (san >= 0)
			close(san);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot parse %s", shown);
	}
	if (pid == 0)
		parse_child(type, shown, buf, n, p[1], san);
	close(p[1]);
	if (san >= 0)
		close(san);
	_cleanup_free_ char *txt = malloc(REPLY_MAX);
	size_t got = 0;
	while (txt && got < REPLY_MAX) {
		ssize_t r = read(p[0], txt + got, REPLY_MAX - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(p[0]);
	if (got == REPLY_MAX)
		kill(pid, SIGKILL);
	int st = 0, w;
	while ((w = (int)waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	if (w < 0)
		st = 0; /* reaped elsewhere (SIGCHLD ignored): its answer, checked below, speaks */
	if (!txt || got == REPLY_MAX || !WIFEXITED(st) || WEXITSTATUS(st))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: the lock parser failed (%s)", shown,
				   !txt               ? "out of memory"
				   : got == REPLY_MAX ? "its answer is too large"
				   : WIFSIGNALED(st)  ? strsignal(WTERMSIG(st))
						      : "it exited with an error");
	return child_answer(type, shown, txt, got, set, err);
}

static void digest_hex(const void *p, size_t n, char out[65])
{
	SHA2_CTX c;
	SHA256Init(&c);
	SHA256Update(&c, p, n);
	SHA256End(&c, out);
}

static int load_lock(const struct sbx_policy *p, int t, const char *tenant, struct sbx_pkgrules_type *y,
		     struct sbx_err *err)
{
	static const char *const keys[] = { "packages.lock.pypi", "packages.lock.npm" };
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	_cleanup_free_ char *buf = NULL;
	size_t n = 0;
	if (sbx_pkgrules_read_file(tenant, p->packages.lock[t], keys[t], SBX_PKGLOCK_FILE_MAX, &buf, &n, &hp, err) < 0)
		return -1;
	snprintf(y->source, sizeof y->source, "%s", hp.real);
	digest_hex(buf, n, y->sha256);
	y->locked = 1;
	return parse_unprivileged(t, p->packages.lock[t], buf, n, &y->set, err);
}

static int copy_patterns(const struct sbx_policy_pkgnames *l, char ***v, size_t *n)
{
	*n = 0;
	*v = calloc(l->n + 1, sizeof **v);
	if (!*v)
		return -1;
	for (unsigned i = 0; i < l->n; i++)
		if (!((*v)[(*n)++] = strdup(l->v[i])))
			return -1;
	return 0;
}

static int compile_type(const struct sbx_policy *p, int t, const char *tenant, struct sbx_pkgrules_type *y,
			struct sbx_err *err)
{
	y->allow_set = p->packages.allow[t].set;
	if ((y->allow_set && copy_patterns(&p->packages.allow[t], &y->allow, &y->nallow) < 0) ||
	    copy_patterns(&p->packages.deny[t], &y->deny, &y->ndeny) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot compile the package rules");
	if (p->packages.lock[t][0])
		return load_lock(p, t, tenant, y, err);
	if (!p->packages.pins[t].set)
		return 0;
	y->locked = 2;
	snprintf(y->source, sizeof y->source, "packages.pins");
	for (unsigned i = 0; i < p->packages.pins[t].n; i++) {
		const char *pin = p->packages.pins[t].v[i], *eq = strstr(pin, "==");
		char name[SBX_PKG_NAME_LEN];
		snprintf(name, sizeof name, "%.*s", (int)(eq - pin), pin);
		if (sbx_pkgset_add(&y->set, name, eq + 2, "") < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot compile the package rules");
	}
	return 0;
}

int sbx_pkgrules_compile(const struct sbx_policy *p, const char *tenant, struct sbx_pkgrules *r,
			 struct sbx_limit_packages *k, char **txt, struct sbx_err *err)
{
	memset(r, 0, sizeof *r);
	*txt = NULL;
	for (int t = 0; t < SBX_PKG_TYPES; t++)
		if (compile_type(p, t, tenant, &r->t[t], err) < 0) {
			sbx_pkgrules_free(r);
			return -1;
		}
	if (!sbx_pkgrules_any(r))
		return 0;
	json_t *o = sbx_pkgrules_json(r);
	*txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!*txt) {
		sbx_pkgrules_free(r);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot compile the package rules");
	}
	digest_hex(*txt, strlen(*txt), k->rules);
	for (int t = 0; t < SBX_PKG_TYPES; t++) {
		memset(&k->lock[t], 0, sizeof k->lock[t]);
		if (r->t[t].locked != 1)
			continue;
		snprintf(k->lock[t].file, sizeof k->lock[t].file, "%s", r->t[t].source);
		snprintf(k->lock[t].sha256, sizeof k->lock[t].sha256, "%s", r->t[t].sha256);
		k->lock[t].entries = (unsigned)r->t[t].set.n;
	}
	return 0;
}

json_t *sbx_pkgrules_audit_json(const struct sbx_limit_packages *k)
{
	static const char *const types[] = { "pypi", "npm", "apt" };
	if (!k->rules[0])
		return NULL;
	json_t *locks = json_object();
	for (int t = 0; locks && t < SBX_PKG_TYPES; t++)
		if (k->lock[t].file[0])
			json_object_set_new(locks, types[t],
					    json_pack("{s:s, s:s, s:I}", "file", k->lock[t].file, "sha256",
						      k->lock[t].sha256, "entries", (json_int_t)k->lock[t].entries));
	return json_pack("{s:s, s:o}", "rules", k->rules, "locks", locks);
}

int sbx_pkgrules_save(int dfd, const char *txt, struct sbx_err *err)
{
	return sbx_atomic_write_at(dfd, SBX_PKGRULES_FILE, txt, strlen(txt), 0600, err);
}

int sbx_pkgrules_load(int dfd, const struct sbx_limit_packages *k, struct sbx_pkgrules *r, struct sbx_err *err)
{
	memset(r, 0, sizeof *r);
	if (!k->rules[0])
		return 0;
	size_t n = 0;
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, SBX_PKGRULES_FILE, REPLY_MAX, &n);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the session's %s", SBX_PKGRULES_FILE);
	char d[65];
	digest_hex(txt, n, d);
	if (strcmp(d, k->rules))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the session's %s is not the one its record names",
				   SBX_PKGRULES_FILE);
	json_t *o = json_loadb(txt, n, JSON_REJECT_DUPLICATES, NULL);
	int rc = o ? sbx_pkgrules_from_json(o, r, err)
		   : sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the session's %s is malformed", SBX_PKGRULES_FILE);
	json_decref(o);
	return rc;
}
