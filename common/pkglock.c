/* Lock files and package rules (pkglock.h).  Both lock formats are read
 * from bytes a tenant supplies: every loop is bounded by the input, every
 * kept string by its field, and the JSON's nesting is measured before
 * jansson (which recurses) sees it. */
#include "pkglock.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_PIP 65536 /* a logical line, continuations joined */
#define HASHES_MAX 256     /* --hash options of one requirement */

/* ---- names and versions ---- */

int sbx_pkg_pypi_normalize(const char *s, char *out, size_t n)
{
	size_t len = strlen(s), o = 0;
	if (!len || len >= n || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[len - 1]))
		return -1;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '-' || ch == '_' || ch == '.') {
			if (out[o - 1] != '-')
				out[o++] = '-';
		} else if (isalnum(ch) && ch < 0x80) {
			out[o++] = (char)tolower(ch);
		} else {
			return -1;
		}
	}
	out[o] = 0;
	return 0;
}

static bool npm_part_ok(const char *s, size_t len)
{
	if (!len || s[0] == '.' || s[0] == '_')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) || (unsigned char)s[i] >= 0x80)
			if (!strchr("-._~", s[i]))
				return false;
	return true;
}

bool sbx_pkg_npm_name_ok(const char *s)
{
	size_t len = strlen(s);
	if (!len || len > 214)
		return false;
	if (s[0] != '@')
		return npm_part_ok(s, len);
	const char *sl = strchr(s, '/');
	return sl && npm_part_ok(s + 1, (size_t)(sl - s - 1)) && npm_part_ok(sl + 1, strlen(sl + 1));
}

bool sbx_pkg_version_ok(const char *s)
{
	size_t len = strlen(s);
	if (!len || len >= SBX_PKG_VERSION_LEN)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(isalnum((unsigned char)s[i]) && (unsigned char)s[i] < 0x80) && !strchr(".+!_-", s[i]))
			return false;
	return true;
}

/* Debian Policy 5.6.1 and 5.6.12: names [a-z0-9][a-z0-9+.-]+, versions
 * [EPOCH:]UPSTREAM[-REVISION] of [A-Za-z0-9.+~-] (and the one ':'). */
bool sbx_pkg_deb_name_ok(const char *s)
{
	size_t len = strlen(s);
	if (len < 2 || len >= SBX_PKG_NAME_LEN || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || strchr("+.-", s[i])))
			return false;
	return true;
}

bool sbx_pkg_deb_version_ok(const char *s)
{
	size_t len = strlen(s), colons = 0;
	if (!len || len >= SBX_PKG_VERSION_LEN || !isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == ':' && ++colons == 1 && strspn(s, "0123456789") == i)
			continue;
		if (!(isalnum((unsigned char)s[i]) && (unsigned char)s[i] < 0x80) && !strchr(".+~-", s[i]))
			return false;
	}
	return s[len - 1] != ':';
}

/* ---- the set ---- */

void sbx_pkgset_free(struct sbx_pkgset *s)
{
	free(s->v);
	memset(s, 0, sizeof *s);
}

static struct sbx_pkgpin *set_find(const struct sbx_pkgset *s, const char *name, const char *version)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name) && (!version || !strcmp(s->v[i].version, version)))
			return &s->v[i];
	return NULL;
}

int sbx_pkgset_add(struct sbx_pkgset *s, const char *name, const char *version, const char *hash)
{
	if (s->n >= SBX_PKGLOCK_ENTRIES_MAX) {
		errno = E2BIG;
		return -1;
	}
	if (s->n == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 32;
		struct sbx_pkgpin *v = realloc(s->v, nc * sizeof *v);
		if (!v)
			return -1;
		s->v = v;
		s->cap = nc;
	}
	struct sbx_pkgpin *p = &s->v[s->n++];
	snprintf(p->name, sizeof p->name, "%s", name);
	snprintf(p->version, sizeof p->version, "%s", version);
	snprintf(p->hash, sizeof p->hash, "%s", hash ? hash : "");
	return 0;
}

static int too_many(struct sbx_err *err, const char *shown)
{
	if (errno == E2BIG)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "%s: more than %u locked files (a lock names what one session installs)", shown,
				   SBX_PKGLOCK_ENTRIES_MAX);
	return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read %s", shown);
}

/* ---- pip requirements ---- */

/* Printable ASCII only: a name, a version or a hash has no use for
 * anything else, and a control character in a message would reach a
 * terminal. */
static int text_ok(const char *buf, size_t n, size_t *bad_line)
{
	size_t line = 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)buf[i];
		if (ch == '\n')
			line++;
		else if ((ch < 0x20 && ch != '\t' && ch != '\r') || ch >= 0x7f) {
			*bad_line = line;
			return -1;
		}
	}
	return 0;
}

struct pip_line {
	const char *file;
	size_t line; /* where the logical line starts */
	struct sbx_pkgset *out;
	struct sbx_err *err;
};

static int pip_fail(const struct pip_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pip_fail(const struct pip_line *l, const char *fmt, ...)
{
	char m[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	return sbx_err_set(l->err, SBX_EXIT_INVALID, 0, "%s:%zu: %s", l->file, l->line, m);
}

/* "NAME[EXTRAS]==VERSION", spaces already gone; name normalized. */
static int pip_spec(const struct pip_line *l, char *spec, char *name, char *version)
{
	char *eq = strstr(spec, "==");
	if (!eq)
		return pip_fail(l, "'%.80s' is not pinned: a lock names each package as NAME==VERSION", spec);
	*eq = 0;
	char *ver = eq + 2;
	if (*ver == '=')
		ver++; /* "===": arbitrary equality, still one version */
	char *br = strchr(spec, '[');
	if (br) {
		char *close = strchr(br, ']');
		if (!close || close[1])
			return pip_fail(l, "'%.80s': extras are [NAME,...] after the name", spec);
		*br = 0;
	}
	if (sbx_pkg_pypi_normalize(spec, name, SBX_PKG_NAME_LEN) < 0)
		return pip_fail(l, "'%.80s' is not a project name", spec);
	if (!sbx_pkg_version_ok(ver))
		return pip_fail(l, "%s: '%.80s' is not one exact version", name, ver);
	snprintf(version, SBX_PKG_VERSION_LEN, "%s", ver);
	return 0;
}

/* One logical line (comment stripped): a requirement and its hashes. */
static int pip_requirement(const struct pip_line *l, char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	if (!*s)
		return 0;
	if (*s == '-') {
		char opt[40];
		snprintf(opt, sizeof opt, "%.*s", (int)strcspn(s, " \t="), s);
		return pip_fail(l, "option %s is not allowed in a lock: only pinned requirements with --hash", opt);
	}
	/* The requirement ends where its first option starts. */
	char *opts = strstr(s, " --");
	char *tab = strstr(s, "\t--");
	if (!opts || (tab && tab < opts))
		opts = tab;
	if (opts)
		*opts++ = 0;
	char *semi = strchr(s, ';');
	if (semi)
		*semi = 0; /* an environment marker: the pin stands either way */
	if (strchr(s, '@') || strstr(s, "://"))
		return pip_fail(l, "'%.80s': a direct URL is not a registry package", s);
	char spec[512];
	size_t k = 0;
	for (char *p = s; *p && k + 1 < sizeof spec; p++)
		if (*p != ' ' && *p != '\t')
			spec[k++] = *p;
	spec[k] = 0;
	char name[SBX_PKG_NAME_LEN], version[SBX_PKG_VERSION_LEN];
	if (pip_spec(l, spec, name, version) < 0)
		return -1;
	if (set_find(l->out, name, NULL))
		return pip_fail(l, "%s is listed twice", name);
	unsigned nh = 0;
	char *save = NULL;
	for (char *t = opts ? strtok_r(opts, " \t", &save) : NULL; t; t = strtok_r(NULL, " \t", &save)) {
		const char *h = NULL;
		if (!strncmp(t, "--hash=", 7))
			h = t + 7;
		else if (!strcmp(t, "--hash"))
			h = strtok_r(NULL, " \t", &save);
		else
			return pip_fail(l, "%s: option %.40s is not allowed in a lock (only --hash)", name, t);
		if (!h || strncmp(h, "sha256:", 7) || strlen(h + 7) != 64 || strspn(h + 7, "0123456789abcdef") != 64)
			return pip_fail(l, "%s: '%.90s' is not --hash=sha256:HEX (64 lower-case hex digits)", name,
					h ? h : "");
		if (++nh > HASHES_MAX)
			return pip_fail(l, "%s: more than 256 hashes", name);
		if (sbx_pkgset_add(l->out, name, version, h + 7) < 0)
			return too_many(l->err, l->file);
	}
	if (!nh)
		return pip_fail(l, "%s==%s has no --hash=sha256: (a lock names the hash of each file it allows)", name,
				version);
	return 0;
}

/* What both parsers do first: the name as messages show it, an empty
 * set, the size bound. */
static int parse_begin(const char *name, size_t n, char shown[256], struct sbx_pkgset *out, struct sbx_err *err)
{
	snprintf(shown, 256, "%.200s", name);
	memset(out, 0, sizeof *out);
	if (n > SBX_PKGLOCK_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: larger than %u MiB", shown,
				   SBX_PKGLOCK_FILE_MAX >> 20);
	return 0;
}

int sbx_pkglock_parse_pip(const char *name, const char *buf, size_t n, struct sbx_pkgset *out, struct sbx_err *err)
{
	char shown[256];
	if (parse_begin(name, n, shown, out, err) < 0)
		return -1;
	size_t bad;
	if (text_ok(buf, n, &bad) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s:%zu: a control character or non-ASCII byte", shown,
				   bad);
	_cleanup_free_ char *line = malloc(LINE_MAX_PIP);
	if (!line)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read %s", shown);
	struct pip_line l = { .file = shown, .line = 1, .out = out, .err = err };
	size_t ln = 1, k = 0, i = 0;
	int rc = 0;
	while (i <= n && rc == 0) {
		size_t e = i;
		while (e < n && buf[e] != '\n')
			e++;
		size_t len = e - i;
		if (len && buf[i + len - 1] == '\r')
			len--;
		int cont = len && buf[i + len - 1] == '\\';
		if (cont)
			len--;
		/* A comment: "#" at the start or after white space. */
		for (size_t j = 0; j < len; j++)
			if (buf[i + j] == '#' && (j == 0 || buf[i + j - 1] == ' ' || buf[i + j - 1] == '\t')) {
				len = j;
				cont = 0;
				break;
			}
		if (k + len + 2 > LINE_MAX_PIP) {
			rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s:%zu: a line longer than %u bytes", shown, l.line,
					 LINE_MAX_PIP);
			break;
		}
		if (len)
			memcpy(line + k, buf + i, len);
		k += len;
		line[k++] = ' ';
		line[k] = 0;
		if (!cont || e >= n) {
			rc = pip_requirement(&l, line);
			k = 0;
			l.line = ln + 1;
		}
		ln++;
		i = e + 1;
	}
	if (rc == 0 && !out->n)
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0,
				 "%s: no requirement in it (an empty lock would allow nothing)", shown);
	if (rc < 0)
		sbx_pkgset_free(out);
	return rc;
}

/* ---- npm package-lock.json ---- */

/* The deepest nesting of buf's arrays and objects, outside strings: > max
 * is refused before jansson, whose parser recurses, sees it. */
static bool depth_ok(const char *buf, size_t n, unsigned max)
{
	unsigned d = 0;
	int str = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = buf[i];
		if (str) {
			if (ch == '\\')
				i++;
			else if (ch == '"')
				str = 0;
		} else if (ch == '"') {
			str = 1;
		} else if (ch == '[' || ch == '{') {
			if (++d > max)
				return false;
		} else if ((ch == ']' || ch == '}') && d) {
			d--;
		}
	}
	return true;
}

static int b64_val(int ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* "sha512-BASE64" among integrity's space-separated entries, as hex. */
static int integrity_sha512(const char *integ, char hex[SBX_PKG_HASH_LEN])
{
	for (const char *t = integ; t && *t;) {
		t += strspn(t, " \t");
		size_t len = strcspn(t, " \t?");
		if (len == 7 + 88 && !strncmp(t, "sha512-", 7) && t[7 + 86] == '=' && t[7 + 87] == '=') {
			uint8_t d[66];
			unsigned acc = 0, bits = 0, o = 0;
			int ok = 1;
			for (size_t i = 7; i < 7 + 86 && ok; i++) {
				int v = b64_val((unsigned char)t[i]);
				if (v < 0) {
					ok = 0;
					break;
				}
				acc = (acc << 6) | (unsigned)v;
				bits += 6;
				if (bits >= 8) {
					bits -= 8;
					d[o++] = (uint8_t)(acc >> bits);
				}
			}
			if (ok && o == 64) {
				for (int i = 0; i < 64; i++)
					snprintf(hex + 2 * i, 3, "%02x", d[i]);
				return 0;
			}
		}
		t += strcspn(t, " \t");
	}
	return -1;
}

struct npm_ctx {
	const char *file;
	struct sbx_pkgset *out;
	struct sbx_err *err;
};

static int npm_fail(const struct npm_ctx *x, const char *key, const char *what)
{
	char k[120];
	snprintf(k, sizeof k, "%s", key);
	sbx_text_clean(k);
	return sbx_err_set(x->err, SBX_EXIT_INVALID, 0, "%s: packages.\"%s\": %s", x->file, k, what);
}

/* One entry of "packages": kept, skipped (0) or refused. */
static int npm_entry(const struct npm_ctx *x, const char *key, json_t *e)
{
	if (!json_is_object(e))
		return npm_fail(x, key, "not an object");
	const char *nm = strstr(key, "node_modules/");
	if (!nm)
		return 0; /* the project itself or a workspace folder: nothing fetched */
	for (const char *p; (p = strstr(nm + 13, "node_modules/"));)
		nm = p;
	if (json_is_true(json_object_get(e, "link")) || json_is_true(json_object_get(e, "inBundle")) ||
	    json_is_true(json_object_get(e, "bundled")))
		return 0; /* a link to a folder, or inside another package's tarball */
	json_t *jn = json_object_get(e, "name"), *jv = json_object_get(e, "version");
	json_t *ji = json_object_get(e, "integrity"), *jr = json_object_get(e, "resolved");
	if ((jn && !json_is_string(jn)) || !json_is_string(jv) || (ji && !json_is_string(ji)) ||
	    (jr && !json_is_string(jr)))
		return npm_fail(x, key, "name, version, resolved and integrity must be strings (version is required)");
	const char *name = jn ? json_string_value(jn) : nm + 13;
	if (!sbx_pkg_npm_name_ok(name))
		return npm_fail(x, key, "not an npm package name");
	const char *ver = json_string_value(jv);
	if (!sbx_pkg_version_ok(ver))
		return npm_fail(x, key, "version is not one exact version");
	const char *res = jr ? json_string_value(jr) : "";
	if (jr && strncmp(res, "https://", 8) && strncmp(res, "http://", 7))
		return npm_fail(x, key,
				"resolved is not a registry tarball (git, file: and other sources are not "
				"served by the package cache)");
	char hex[SBX_PKG_HASH_LEN];
	if (!ji || integrity_sha512(json_string_value(ji), hex) < 0)
		return npm_fail(x, key, "integrity has no sha512-BASE64 (a lock names the hash of each tarball)");
	const struct sbx_pkgpin *old = set_find(x->out, name, ver);
	if (old)
		return strcmp(old->hash, hex) ? npm_fail(x, key, "the same name and version with another integrity")
					      : 0; /* the same tarball at two places in the tree */
	if (sbx_pkgset_add(x->out, name, ver, hex) < 0)
		return too_many(x->err, x->file);
	return 0;
}

int sbx_pkglock_parse_npm(const char *name, const char *buf, size_t n, struct sbx_pkgset *out, struct sbx_err *err)
{
	char shown[256];
	if (parse_begin(name, n, shown, out, err) < 0)
		return -1;
	if (!depth_ok(buf, n, SBX_PKGLOCK_DEPTH_MAX))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: nested deeper than %u", shown, SBX_PKGLOCK_DEPTH_MAX);
	json_error_t je;
	json_t *doc = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
	if (!doc) {
		sbx_text_clean(je.text);
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s:%d: %s", shown, je.line, je.text);
	}
	int rc = 0;
	json_t *lv = json_object_get(doc, "lockfileVersion"), *pk = json_object_get(doc, "packages");
	if (!json_is_object(doc))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: not a package-lock.json (an object)", shown);
	else if (!json_is_integer(lv) || (json_integer_value(lv) != 2 && json_integer_value(lv) != 3))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0,
				 "%s: lockfileVersion is not 2 or 3 (npm 7 and later write them: npm install "
				 "--lockfile-version 3)",
				 shown);
	else if (!json_is_object(pk))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: packages is not an object", shown);
	struct npm_ctx x = { shown, out, err };
	const char *key;
	json_t *v;
	if (rc == 0)
		json_object_foreach (pk, key, v)
			if ((rc = npm_entry(&x, key, v)) < 0)
				break;
	json_decref(doc);
	if (rc == 0 && !out->n)
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: no package in it (an empty lock would allow nothing)",
				 shown);
	if (rc < 0)
		sbx_pkgset_free(out);
	return rc;
}

/* ---- the compiled rules ---- */

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void sbx_pkgrules_free(struct sbx_pkgrules *r)
{
	for (int t = 0; t < SBX_PKG_TYPES; t++) {
		strv_free(r->t[t].allow, r->t[t].nallow);
		strv_free(r->t[t].deny, r->t[t].ndeny);
		sbx_pkgset_free(&r->t[t].set);
	}
	memset(r, 0, sizeof *r);
}

bool sbx_pkgrules_any(const struct sbx_pkgrules *r)
{
	for (int t = 0; t < SBX_PKG_TYPES; t++)
		if (r->t[t].allow_set || r->t[t].ndeny || r->t[t].locked)
			return true;
	return false;
}

static const char *const type_names[] = { "pypi", "npm", "apt" };

static json_t *strv_json(char **v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

json_t *sbx_pkgrules_json(const struct sbx_pkgrules *r)
{
	json_t *o = json_pack("{s:i}", "schema", 1);
	for (int t = 0; o && t < SBX_PKG_TYPES; t++) {
		const struct sbx_pkgrules_type *y = &r->t[t];
		if (t == SBX_PKG_APT && !y->allow_set && !y->ndeny && !y->locked)
			continue; /* as before apt was a type */
		json_t *e = json_array();
		for (size_t i = 0; e && i < y->set.n; i++)
			json_array_append_new(
				e, json_pack("[s,s,s]", y->set.v[i].name, y->set.v[i].version, y->set.v[i].hash));
		json_t *ty = json_pack("{s:o?, s:o, s:s, s:s, s:s, s:o}", "allow",
				       y->allow_set ? strv_json(y->allow, y->nallow) : NULL, "deny",
				       strv_json(y->deny, y->ndeny), "locked",
				       y->locked == 1   ? "lock"
				       : y->locked == 2 ? "pins"
							: "none",
				       "source", y->source, "sha256", y->sha256, "entries", e);
		if (!ty || json_object_set_new(o, type_names[t], ty) < 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

static int strv_from(json_t *a, char ***v, size_t *n)
{
	size_t i;
	json_t *s;
	*n = 0;
	*v = calloc(json_array_size(a) + 1, sizeof **v);
	if (!*v)
		return -1;
	json_array_foreach (a, i, s) {
		if (!json_is_string(s) || json_string_length(s) >= SBX_PKG_PATTERN_LEN)
			return -1;
		if (!((*v)[(*n)++] = strdup(json_string_value(s))))
			return -1;
	}
	return 0;
}

static int type_from(json_t *ty, struct sbx_pkgrules_type *y)
{
	json_t *al = json_object_get(ty, "allow"), *de = json_object_get(ty, "deny"),
	       *en = json_object_get(ty, "entries");
	const char *lk = json_string_value(json_object_get(ty, "locked"));
	if (json_is_null(al))
		al = NULL; /* every name */
	if (!json_is_object(ty) || (al && !json_is_array(al)) || !json_is_array(de) || !json_is_array(en) || !lk)
		return -1;
	y->allow_set = al != NULL;
	if ((al && strv_from(al, &y->allow, &y->nallow) < 0) || strv_from(de, &y->deny, &y->ndeny) < 0)
		return -1;
	y->locked = !strcmp(lk, "lock") ? 1 : !strcmp(lk, "pins") ? 2 : !strcmp(lk, "none") ? 0 : -1;
	if (y->locked < 0)
		return -1;
	sbx_json_str(ty, "source", y->source, sizeof y->source);
	sbx_json_str(ty, "sha256", y->sha256, sizeof y->sha256);
	size_t i;
	json_t *e;
	json_array_foreach (en, i, e) {
		const char *a = json_string_value(json_array_get(e, 0)), *b = json_string_value(json_array_get(e, 1)),
			   *c = json_string_value(json_array_get(e, 2));
		if (!a || !b || !c || strlen(a) >= SBX_PKG_NAME_LEN || strlen(b) >= SBX_PKG_VERSION_LEN ||
		    strlen(c) >= SBX_PKG_HASH_LEN || sbx_pkgset_add(&y->set, a, b, c) < 0)
			return -1;
	}
	return 0;
}

int sbx_pkgrules_from_json(json_t *o, struct sbx_pkgrules *r, struct sbx_err *err)
{
	memset(r, 0, sizeof *r);
	for (int t = 0; t < SBX_PKG_TYPES; t++)
		if (t == SBX_PKG_APT && !json_object_get(o, type_names[t]))
			continue; /* written before apt: no rules of it */
		else if (type_from(json_object_get(o, type_names[t]), &r->t[t]) < 0) {
			sbx_pkgrules_free(r);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the session's pkgrules.json is malformed (%s)",
					   type_names[t]);
		}
	return 0;
}

bool sbx_pkg_pattern_match(int type, const char *pattern, const char *name)
{
	return fnmatch(pattern, name, type == 1 ? FNM_PATHNAME : 0) == 0;
}

const char *sbx_pkgrules_name(const struct sbx_pkgrules *r, int type, const char *name, char *why, size_t n)
{
	if (!r || type < 0 || type >= SBX_PKG_TYPES)
		return NULL;
	const struct sbx_pkgrules_type *y = &r->t[type];
	for (size_t i = 0; i < y->ndeny; i++)
		if (sbx_pkg_pattern_match(type, y->deny[i], name)) {
			snprintf(why, n, "%s matches packages.deny.%s '%s'", name, type_names[type], y->deny[i]);
			return why;
		}
	bool ok = !y->allow_set;
	for (size_t i = 0; !ok && i < y->nallow; i++)
		ok = sbx_pkg_pattern_match(type, y->allow[i], name);
	if (!ok) {
		snprintf(why, n, "%s matches no pattern of packages.allow.%s", name, type_names[type]);
		return why;
	}
	if (y->locked && !set_find(&y->set, name, NULL)) {
		if (y->locked == 1)
			snprintf(why, n, "%s is not in the lock %s (packages.lock.%s)", name, y->source,
				 type_names[type]);
		else
			snprintf(why, n, "%s is not in packages.pins.%s", name, type_names[type]);
		return why;
	}
	return NULL;
}

bool sbx_pkgrules_version(const struct sbx_pkgrules *r, int type, const char *name, const char *version)
{
	if (!r || type < 0 || type >= SBX_PKG_TYPES || !r->t[type].locked)
		return true;
	return set_find(&r->t[type].set, name, version) != NULL;
}

const struct sbx_pkgpin *sbx_pkgrules_find(const struct sbx_pkgrules *r, int type, const char *name,
					   const char *version)
{
	if (!r || type < 0 || type >= SBX_PKG_TYPES)
		return NULL;
	return set_find(&r->t[type].set, name, version);
}

bool sbx_pkgrules_file(const struct sbx_pkgrules *r, int type, const char *name, const char *version, const char *hash)
{
	if (!r || type < 0 || type >= SBX_PKG_TYPES || r->t[type].locked != 1)
		return true;
	const struct sbx_pkgset *s = &r->t[type].set;
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name) && !strcmp(s->v[i].version, version) && !strcmp(s->v[i].hash, hash))
			return true;
	return false;
}
