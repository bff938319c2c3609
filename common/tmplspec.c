/* Template specs: see tmplspec.h.  Read through the strict YAML reader
 * policies and sbx.yaml use (yamlstrict.h: no anchors, aliases, tags,
 * directives, deep nesting or control characters; null is never an empty
 * collection), with duplicate and unknown keys refused here, so a spec
 * fails closed exactly as a policy does. */
#include "tmplspec.h"
#include "yamlstrict.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#define DEPTH_MAX 8
#define SCALAR_MAX SBX_TMPLSPEC_CMD_MAX

/* ---- checks ---- */

int sbx_tmplspec_check_relpath(const char *s, char *why, size_t n)
{
	size_t len = strlen(s);
	if (!len || len >= SBX_TMPLSPEC_PATH_LEN)
		return snprintf(why, n, "must be 1 to %d bytes", SBX_TMPLSPEC_PATH_LEN - 1), -1;
	if (s[0] == '/')
		return snprintf(why, n, "must be relative to the spec's directory"), -1;
	for (const char *p = s; *p;) {
		size_t l = strcspn(p, "/");
		if (l == 2 && !strncmp(p, "..", 2))
			return snprintf(why, n, "must not leave the spec's directory ('..')"), -1;
		p += l;
		while (*p == '/')
			p++;
	}
	return 0;
}

/* Absolute, no '.' or '..' components, normalised ("//" and a trailing '/'
 * dropped) into out. */
int sbx_tmplspec_check_guestpath(const char *s, char *out, size_t outn, char *why, size_t n)
{
	if (s[0] != '/')
		return snprintf(why, n, "must be an absolute path"), -1;
	size_t o = 0;
	for (const char *p = s; *p;) {
		while (*p == '/')
			p++;
		size_t l = strcspn(p, "/");
		if (!l)
			break;
		if ((l == 1 && p[0] == '.') || (l == 2 && !strncmp(p, "..", 2)))
			return snprintf(why, n, "must not have '.' or '..' components"), -1;
		if (o + 1 + l + 1 > outn || o + 1 + l + 1 > SBX_TMPLSPEC_PATH_LEN)
			return snprintf(why, n, "longer than %d bytes", SBX_TMPLSPEC_PATH_LEN - 1), -1;
		out[o++] = '/';
		memcpy(out + o, p, l);
		o += l;
		p += l;
	}
	if (!o)
		out[o++] = '/';
	out[o] = 0;
	return 0;
}

/* A POSIX-portable user name, as Debian's adduser takes by default. */
int sbx_tmplspec_check_user(const char *s)
{
	size_t n = strlen(s);
	if (!n || n >= SBX_TMPLSPEC_USER_LEN || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return -1;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return -1;
	return 0;
}

/* Debian policy 5.6.1: lower case, digits, + - . ; two or more; starting
 * alphanumeric (so never an option to apt). */
int sbx_tmplspec_check_package(const char *s)
{
	size_t n = strlen(s);
	if (n < 2 || n >= SBX_TMPLSPEC_PKG_LEN || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return -1;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '-' ||
		      s[i] == '.'))
			return -1;
	return 0;
}

static int check_env_name(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > 128 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return -1;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_'))
			return -1;
	return 0;
}

/* NAME[@VERSION], each an ID (state.c's allowlist); no owner. */
static int check_ref(const char *s, char *why, size_t n)
{
	char buf[128];
	if (strlen(s) >= sizeof buf)
		return snprintf(why, n, "longer than %zu bytes", sizeof buf - 1), -1;
	snprintf(buf, sizeof buf, "%s", s);
	char *at = strchr(buf, '@');
	if (at)
		*at++ = 0;
	if (sbx_id_check(buf, "template", NULL) < 0 || strlen(buf) >= 64 ||
	    (at && (sbx_id_check(at, "template version", NULL) < 0 || strchr(at, '@'))))
		return snprintf(why, n,
				"must be debian:SUITE, busybox or TEMPLATE[@VERSION] (letters, digits, '_', '-', '.')"),
		       -1;
	return 0;
}

/* ---- the schema ---- */

/* Walk a mapping: for each key call fn with the value's event current;
 * seen[] catches duplicates (keys is the list of allowed names). */
typedef int (*key_fn)(struct sbx_yaml *c, struct sbx_tmplspec *s, void *item, unsigned k, const char *path);

struct walk {
	struct sbx_tmplspec *s;
	void *item;
	key_fn fn;
};

static int walk_value(struct sbx_yaml *c, int k, const char *key, yaml_mark_t km, const char *path, void *arg)
{
	const struct walk *w = arg;
	(void)key;
	(void)km;
	return w->fn(c, w->s, w->item, (unsigned)k, path);
}

static int parse_map(struct sbx_yaml *c, const char *path, const char *const *keys, size_t nkeys,
		     struct sbx_tmplspec *s, void *item, key_fn fn, unsigned *seen_mask)
{
	struct walk w = { s, item, fn };
	uint64_t seen;
	if (sbx_yaml_map(c, path, keys, nkeys, walk_value, &w, &seen) < 0)
		return -1;
	if (seen_mask)
		*seen_mask = (unsigned)seen;
	return 0;
}

/* A list of scalars, each handed to fn (which adds it to s). */
typedef int (*item_fn)(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path, const char *v);

static int each_scalar(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path, item_fn fn)
{
	if (sbx_yaml_expect(c, YAML_SEQUENCE_START_EVENT, path) < 0)
		return -1;
	for (;;) {
		if (sbx_yaml_next(c) < 0)
			return -1;
		if (c->ev.type == YAML_SEQUENCE_END_EVENT)
			return 0;
		const char *v = sbx_yaml_scalar(c, path);
		if (!v || fn(c, s, path, v) < 0)
			return -1;
	}
}

static int package_item(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path, const char *v)
{
	if (sbx_tmplspec_check_package(v) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark,
				      "%s: '%.60s' is not a Debian package name (lower case, digits, '+', '-', '.')",
				      path, v);
	for (unsigned i = 0; i < s->npackages; i++)
		if (!strcmp(s->packages[i], v))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%s' is listed twice", path, v);
	if (s->npackages == SBX_TMPLSPEC_PACKAGES_MAX)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: more than %d packages", path,
				      SBX_TMPLSPEC_PACKAGES_MAX);
	snprintf(s->packages[s->npackages++], SBX_TMPLSPEC_PKG_LEN, "%s", v);
	return 0;
}

static const char *const file_keys[] = { "src", "dst", "mode" };

static int file_key(struct sbx_yaml *c, struct sbx_tmplspec *s, void *item, unsigned k, const char *path)
{
	struct sbx_tmplspec_file *f = item;
	const char *v = sbx_yaml_scalar(c, path);
	char why[120];
	if (!v)
		return -1;
	if (k == 0) {
		if (sbx_tmplspec_check_relpath(v, why, sizeof why) < 0)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%.60s' %s", path, v, why);
		snprintf(f->src, sizeof f->src, "%s", v);
	} else if (k == 1) {
		if (sbx_tmplspec_check_guestpath(v, f->dst, sizeof f->dst, why, sizeof why) < 0)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%.60s' %s", path, v, why);
		if (!strcmp(f->dst, "/"))
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: must name a path below /", path);
	} else {
		/* An octal string ("0755"); setuid and setgid bits are the
		 * operator's to give, not a spec's. */
		char *end;
		errno = 0;
		long m = strtol(v, &end, 8);
		if (errno || *end || end == v || strlen(v) > 5 || m < 0 || m > 07777)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%.20s' is not an octal mode (\"0644\")", path,
					      v);
		if (m & 06000)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: setuid and setgid bits are not allowed (%04lo)",
					      path, m);
		f->mode = (int)m;
	}
	(void)s;
	return 0;
}

static int file_item(struct sbx_yaml *c, void *obj, unsigned i, const char *sub)
{
	struct sbx_tmplspec *s = obj;
	yaml_mark_t m = c->ev.start_mark;
	struct sbx_tmplspec_file *f = &s->files[s->nfiles];
	memset(f, 0, sizeof *f);
	f->mode = -1;
	unsigned seen = 0;
	if (parse_map(c, sub, file_keys, SBX_ARRAY_LEN(file_keys), s, f, file_key, &seen) < 0)
		return -1;
	if ((seen & 3u) != 3u)
		return sbx_yaml_failm(c, m, "%s: needs both src and dst", sub);
	s->nfiles++;
	return 0;
}

static int v_files(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path)
{
	return sbx_yaml_seq(c, path, SBX_TMPLSPEC_FILES_MAX, "entries", file_item, s, NULL);
}

static const char *const run_keys[] = { "cmd", "user" };

static int run_key(struct sbx_yaml *c, struct sbx_tmplspec *s, void *item, unsigned k, const char *path)
{
	struct sbx_tmplspec_run *r = item;
	const char *v = sbx_yaml_scalar(c, path);
	if (!v)
		return -1;
	if (k == 0) {
		if (!*v)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: empty command", path);
		free(r->cmd);
		if (!(r->cmd = strdup(v)))
			return sbx_err_set(c->err, SBX_EXIT_INTERNAL, ENOMEM, "cannot parse %s", c->name);
	} else {
		if (sbx_tmplspec_check_user(v) < 0)
			return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%.40s' is not a user name", path, v);
		snprintf(r->user, sizeof r->user, "%s", v);
	}
	(void)s;
	return 0;
}

static int run_item(struct sbx_yaml *c, void *obj, unsigned i, const char *sub)
{
	struct sbx_tmplspec *s = obj;
	struct sbx_tmplspec_run *r = &s->run[s->nrun];
	memset(r, 0, sizeof *r);
	s->nrun++; /* owned from here, so an error frees it */
	if (c->ev.type == YAML_SCALAR_EVENT && !sbx_yaml_is_null(&c->ev))
		return run_key(c, s, r, 0, sub);
	yaml_mark_t m = c->ev.start_mark;
	if (c->ev.type != YAML_MAPPING_START_EVENT)
		return sbx_yaml_failm(c, m, "%s: expected a command line or {cmd, user}, got %s", sub,
				      sbx_yaml_kind(&c->ev));
	if (parse_map(c, sub, run_keys, SBX_ARRAY_LEN(run_keys), s, r, run_key, NULL) < 0)
		return -1;
	if (!r->cmd)
		return sbx_yaml_failm(c, m, "%s: needs cmd", sub);
	return 0;
}

static int v_run(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path)
{
	return sbx_yaml_seq(c, path, SBX_TMPLSPEC_RUN_MAX, "steps", run_item, s, NULL);
}

static int env_value(struct sbx_yaml *c, int k, const char *name, yaml_mark_t km, const char *path, void *arg)
{
	struct sbx_tmplspec *s = arg;
	(void)k;
	char where[80];
	snprintf(where, sizeof where, "%.*s", (int)(strlen(path) - strlen(name) - 1), path);
	if (check_env_name(name) < 0)
		return sbx_yaml_failm(c, km, "%s: '%.60s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)",
				      where, name);
	if (json_object_size(s->env) == SBX_TMPLSPEC_ENV_MAX)
		return sbx_yaml_failm(c, km, "%s: more than %d variables", where, SBX_TMPLSPEC_ENV_MAX);
	/* A plain null is a mistake, not an empty value: write "". */
	const char *v = sbx_yaml_scalar(c, path);
	if (!v)
		return -1;
	if (strlen(v) > SBX_TMPLSPEC_ENV_VAL_MAX)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: longer than %d bytes", path, SBX_TMPLSPEC_ENV_VAL_MAX);
	json_object_set_new(s->env, name, json_string(v));
	return 0;
}

/* Names the walker takes as any (its duplicates refused there). */
static int v_env(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path)
{
	return sbx_yaml_map(c, path, NULL, 0, env_value, s, NULL);
}

static int remove_item(struct sbx_yaml *c, struct sbx_tmplspec *s, const char *path, const char *v)
{
	char why[120], norm[SBX_TMPLSPEC_PATH_LEN];
	if (sbx_tmplspec_check_guestpath(v, norm, sizeof norm, why, sizeof why) < 0)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: '%.60s' %s", path, v, why);
	if (!strcmp(norm, "/"))
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: must name a path below /", path);
	if (s->nremove == SBX_TMPLSPEC_REMOVE_MAX)
		return sbx_yaml_failm(c, c->ev.start_mark, "%s: more than %d paths", path, SBX_TMPLSPEC_REMOVE_MAX);
	snprintf(s->remove[s->nremove++], SBX_TMPLSPEC_PATH_LEN, "%s", norm);
	return 0;
}

int sbx_tmplspec_check_spec_user(const char *v)
{
	size_t n = strlen(v);
	if (n && n <= 5 && strspn(v, "0123456789") == n)
		return strtoul(v, NULL, 10) <= 65534 ? 0 : -1;
	return sbx_tmplspec_check_user(v);
}

static const char *const root_keys[] = { "from", "packages", "files",  "run",   "env",
					 "user", "workdir",  "kernel", "remove" };

static int root_key(struct sbx_yaml *c, struct sbx_tmplspec *s, void *item, unsigned k, const char *path)
{
	char why[160];
	const char *v;
	(void)item;
	switch (k) {
	case 0:
		if (!(v = sbx_yaml_scalar(c, path)))
			return -1;
		if (!strcmp(v, "busybox")) {
			s->from = SBX_FROM_BUSYBOX;
			snprintf(s->from_ref, sizeof s->from_ref, "busybox");
		} else if (!strncmp(v, "debian:", 7)) {
			const char *suite = v + 7;
			size_t n = strlen(suite);
			bool ok = n >= 2 && n <= 32;
			for (size_t i = 0; ok && i < n; i++)
				ok = suite[i] >= 'a' && suite[i] <= 'z';
			if (!ok)
				return sbx_yaml_failm(c, c->ev.start_mark,
						      "from: '%.40s' is not a Debian suite (debian:bookworm)", v);
			s->from = SBX_FROM_DEBIAN;
			snprintf(s->from_ref, sizeof s->from_ref, "%s", suite);
		} else {
			if (check_ref(v, why, sizeof why) < 0)
				return sbx_yaml_failm(c, c->ev.start_mark, "from: '%.60s' %s", v, why);
			s->from = SBX_FROM_TEMPLATE;
			snprintf(s->from_ref, sizeof s->from_ref, "%s", v);
		}
		return 0;
	case 1: return each_scalar(c, s, path, package_item);
	case 2: return v_files(c, s, path);
	case 3: return v_run(c, s, path);
	case 4: return v_env(c, s, path);
	case 5:
		if (!(v = sbx_yaml_scalar(c, path)))
			return -1;
		if (sbx_tmplspec_check_spec_user(v) < 0)
			return sbx_yaml_failm(c, c->ev.start_mark,
					      "user: '%.40s' is not a user name ([a-z_][a-z0-9_-]*, at most 32) or a "
					      "uid (0 to 65534)",
					      v);
		snprintf(s->user, sizeof s->user, "%s", v);
		return 0;
	case 7:
		if (!(v = sbx_yaml_scalar(c, path)))
			return -1;
		if (strcmp(v, SBX_TMPLSPEC_KERNEL))
			return sbx_yaml_failm(
				c, c->ev.start_mark,
				"kernel: '%.60s' is not a kernel sbx boots (the one is " SBX_TMPLSPEC_KERNEL ")", v);
		snprintf(s->kernel, sizeof s->kernel, "%s", v);
		return 0;
	case 8: return each_scalar(c, s, path, remove_item);
	default:
		if (!(v = sbx_yaml_scalar(c, path)))
			return -1;
		if (sbx_tmplspec_check_guestpath(v, s->workdir, sizeof s->workdir, why, sizeof why) < 0)
			return sbx_yaml_failm(c, c->ev.start_mark, "workdir: '%.60s' %s", v, why);
		return 0;
	}
}

static int parse_stream(struct sbx_yaml *c, struct sbx_tmplspec *s)
{
	yaml_mark_t top = { 0 };
	if (sbx_yaml_next(c) < 0 || sbx_yaml_next(c) < 0)
		return -1;
	if (c->ev.type == YAML_STREAM_END_EVENT)
		return sbx_yaml_failm(c, top, "empty spec: it needs at least from:");
	if (sbx_yaml_next(c) < 0)
		return -1;
	if (c->ev.type != YAML_MAPPING_START_EVENT || sbx_yaml_is_null(&c->ev))
		return sbx_yaml_failm(c, c->ev.start_mark, "a template spec is a mapping (from, packages, ...), not %s",
				      sbx_yaml_kind(&c->ev));
	unsigned seen = 0;
	if (parse_map(c, "", root_keys, SBX_ARRAY_LEN(root_keys), s, NULL, root_key, &seen) < 0)
		return -1;
	if (!(seen & 1u))
		return sbx_yaml_failm(c, top, "from: is required (debian:bookworm, busybox or TEMPLATE[@VERSION])");
	if (sbx_yaml_next(c) < 0 || sbx_yaml_next(c) < 0)
		return -1;
	if (c->ev.type != YAML_STREAM_END_EVENT)
		return sbx_yaml_failm(c, c->ev.start_mark, "only one YAML document is allowed");
	return 0;
}

void sbx_tmplspec_free(struct sbx_tmplspec *s)
{
	if (!s)
		return;
	for (unsigned i = 0; s->run && i < s->nrun; i++)
		free(s->run[i].cmd);
	free(s->packages);
	free(s->files);
	free(s->run);
	free(s->remove);
	json_decref(s->env);
	memset(s, 0, sizeof *s);
}

static int parse(const char *name, const uint8_t *buf, size_t n, bool redact, struct sbx_tmplspec *s,
		 struct sbx_err *err)
{
	struct sbx_yaml c;
	char shown[200];
	memset(s, 0, sizeof *s);
	snprintf(shown, sizeof shown, "%s", name);
	sbx_text_clean(shown);
	if (n > SBX_TMPLSPEC_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load template spec %s: larger than %u KiB", shown,
				   SBX_TMPLSPEC_FILE_MAX >> 10);
	s->packages = calloc(SBX_TMPLSPEC_PACKAGES_MAX, sizeof *s->packages);
	s->files = calloc(SBX_TMPLSPEC_FILES_MAX, sizeof *s->files);
	s->run = calloc(SBX_TMPLSPEC_RUN_MAX, sizeof *s->run);
	s->remove = calloc(SBX_TMPLSPEC_REMOVE_MAX, sizeof *s->remove);
	s->env = json_object();
	if (!s->packages || !s->files || !s->run || !s->remove || !s->env) {
		sbx_tmplspec_free(s);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot parse template spec %s", shown);
	}
	if (sbx_yaml_open(&c, shown, buf, n, DEPTH_MAX, SCALAR_MAX, err) < 0) {
		sbx_yaml_close(&c);
		sbx_tmplspec_free(s);
		return -1;
	}
	c.value_tabs = true; /* a run: line may be indented */
	c.redact = redact;
	int r = parse_stream(&c, s);
	sbx_yaml_close(&c);
	if (r < 0) {
		sbx_tmplspec_free(s);
		return -1;
	}
	snprintf(s->source, sizeof s->source, "%s", shown);
	return 0;
}

int sbx_tmplspec_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_tmplspec *s, struct sbx_err *err)
{
	return parse(name, buf, n, false, s, err);
}

int sbx_tmplspec_load_fd(int fd, const char *path, bool redact, struct sbx_tmplspec *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read template spec %.200s", path);
	if (!S_ISREG(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load template spec %.200s: not a regular file",
				   path);
	if (sb.st_size > (off_t)SBX_TMPLSPEC_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cannot load template spec %.200s: larger than %u KiB",
				   path, SBX_TMPLSPEC_FILE_MAX >> 10);
	_cleanup_free_ char *txt = malloc((size_t)sb.st_size + 1);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read template spec %.200s", path);
	ssize_t got = pread(fd, txt, (size_t)sb.st_size, 0);
	if (got < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read template spec %.200s", path);
	return parse(path, (const uint8_t *)txt, (size_t)got, redact, s, err);
}

int sbx_tmplspec_load(const char *path, struct sbx_tmplspec *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read template spec %.200s", path);
	return sbx_tmplspec_load_fd(fd, path, false, s, err);
}

json_t *sbx_tmplspec_json(const struct sbx_tmplspec *s)
{
	json_t *pk = json_array(), *fl = json_array(), *rn = json_array();
	for (unsigned i = 0; i < s->npackages; i++)
		json_array_append_new(pk, json_string(s->packages[i]));
	for (unsigned i = 0; i < s->nfiles; i++) {
		json_t *f = json_pack("{s:s, s:s}", "src", s->files[i].src, "dst", s->files[i].dst);
		if (s->files[i].mode >= 0)
			json_object_set_new(f, "mode", json_sprintf("%04o", (unsigned)s->files[i].mode));
		json_array_append_new(fl, f);
	}
	for (unsigned i = 0; i < s->nrun; i++)
		json_array_append_new(rn, json_pack("{s:s, s:s}", "cmd", s->run[i].cmd, "user",
						    s->run[i].user[0] ? s->run[i].user : "root"));
	char from[160];
	snprintf(from, sizeof from, "%s%s", s->from == SBX_FROM_DEBIAN ? "debian:" : "", s->from_ref);
	json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:O, s:s, s:s}", "from", from, "packages", pk, "files", fl, "run",
			      rn, "env", s->env, "user", s->user, "workdir", s->workdir);
	/* Only when given, so a spec without them hashes as it always has. */
	if (j && s->kernel[0])
		json_object_set_new(j, "kernel", json_string(s->kernel));
	if (j && s->nremove) {
		json_t *rm = json_array();
		for (unsigned i = 0; i < s->nremove; i++)
			json_array_append_new(rm, json_string(s->remove[i]));
		json_object_set_new(j, "remove", rm);
	}
	return j;
}
