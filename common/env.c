#include "env.h"
#include "hostpath.h"
#include "proto.h"
#include "secrets.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

int sbx_env_name_ok(const char *s, size_t n)
{
	if (n == 0 || n > SBX_ENV_KEY_MAX ||
	    !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_'))
			return 0;
	return 1;
}

/* Printable text and tabs (UTF-8 passes): nothing a terminal, a log line
 * or a shell's view of the environment could be fooled by. */
static int text_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return 0;
	}
	return 1;
}

const char *sbx_env_entry(const struct sbx_env *e, unsigned i, size_t *namelen, const char **value)
{
	const char *p = e->buf;
	for (unsigned k = 0; k < i; k++)
		p += strlen(p) + 1;
	*namelen = strcspn(p, "=");
	*value = p + *namelen + 1;
	return p;
}

static void env_remove(struct sbx_env *e, unsigned i)
{
	size_t nl;
	const char *v;
	char *p = (char *)sbx_env_entry(e, i, &nl, &v);
	size_t l = strlen(p) + 1;
	memmove(p, p + l, e->len - (size_t)(p - e->buf) - l);
	e->len -= l;
	uint64_t low = i ? e->secret & ((1ull << i) - 1) : 0;
	e->secret = low | ((e->secret >> 1) & ~((1ull << i) - 1));
	e->n--;
}

int sbx_env_set(struct sbx_env *e, const char *kv, int secret, const char *key, struct sbx_err *err)
{
	const char *eq = strchr(kv, '=');
	size_t nl = eq ? (size_t)(eq - kv) : strlen(kv);
	if (!eq)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: '%.*s' is not NAME=VALUE", key, 64, kv);
	if (!sbx_env_name_ok(kv, nl))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "%s: '%.*s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)", key,
				   (int)(nl > 64 ? 64 : nl), kv, SBX_ENV_KEY_MAX);
	size_t vl = strlen(eq + 1);
	if (vl > SBX_ENV_VALUE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: the value of %.*s is over %d bytes", key, (int)nl, kv,
				   SBX_ENV_VALUE_MAX);
	if (!text_ok(eq + 1, vl))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: the value of %.*s holds a control character", key,
				   (int)nl, kv);
	json_t *utf8 = json_stringn(eq + 1, vl); /* the record and sbx-ps --json are JSON */
	if (!utf8)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: the value of %.*s is not UTF-8", key, (int)nl, kv);
	json_decref(utf8);
	for (unsigned i = 0; i < e->n; i++) {
		size_t l;
		const char *v;
		const char *p = sbx_env_entry(e, i, &l, &v);
		if (l == nl && !memcmp(p, kv, nl)) {
			env_remove(e, i); /* the later one wins, as in a shell */
			break;
		}
	}
	if (e->n >= SBX_ENV_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: at most %d variables", key, SBX_ENV_MAX);
	if (e->len + nl + vl + 2 > sizeof e->buf)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: the environment is over %d bytes", key,
				   SBX_ENV_BYTES_MAX);
	memcpy(e->buf + e->len, kv, nl + vl + 1);
	e->buf[e->len + nl + vl + 1] = 0;
	e->len += nl + vl + 2;
	if (secret)
		e->secret |= 1ull << e->n;
	e->n++;
	return 0;
}

int sbx_workdir_check(const char *dir, const char *key, struct sbx_err *err)
{
	size_t n = strlen(dir);
	if (dir[0] != '/' || n >= SBX_WORKDIR_MAX || !text_ok(dir, n))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "%s: the working directory must be an absolute path in the guest, under %d bytes",
				   key, SBX_WORKDIR_MAX);
	return 0;
}

int sbx_user_parse(const char *u, uint32_t *uid)
{
	if (!strcmp(u, "root"))
		*uid = 0;
	else if (!strcmp(u, "user"))
		*uid = 1000;
	else {
		char *end;
		if (!u[0] || strspn(u, "0123456789") != strlen(u) || strlen(u) > 5)
			return -1;
		unsigned long v = strtoul(u, &end, 10);
		if (v > 65534)
			return -1;
		*uid = (uint32_t)v;
	}
	return 0;
}

int sbx_env_file_load(struct sbx_env *e, const char *path, const char *tenant, struct sbx_err *err)
{
	_cleanup_hostpath_ struct sbx_hostpath hp = { .dir_fd = -1 };
	if (sbx_hostpath_resolve(tenant, path, SBX_HOSTPATH_READ | SBX_HOSTPATH_FOLLOW, "--env-file", &hp, err) < 0) {
		if (err && err->code == SBX_EXIT_NOENT)
			err->code = SBX_EXIT_INVALID;
		return -1;
	}
	if (!S_ISREG(hp.st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--env-file: %s is not a regular file", path);
	_cleanup_close_ int fd = sbx_hostpath_openat(&hp, NULL, O_RDONLY | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "--env-file: cannot read %s", path);
	if ((uint64_t)st.st_size > SBX_ENV_FILE_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--env-file: %s is over %u bytes", path, SBX_ENV_FILE_MAX);
	_cleanup_free_ char *txt = malloc(SBX_ENV_FILE_MAX + 1);
	size_t n = 0;
	ssize_t r = 0;
	while (txt && n <= SBX_ENV_FILE_MAX && (r = read(fd, txt + n, SBX_ENV_FILE_MAX + 1 - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "--env-file: cannot read %s", path);
		n += (size_t)r;
		if (n > SBX_ENV_FILE_MAX) /* it grew since the fstat */
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--env-file: %s is over %u bytes", path,
					   SBX_ENV_FILE_MAX);
	}
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "--env-file: out of memory");
	txt[n] = 0;
	if (memchr(txt, 0, n))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "--env-file: %s holds a NUL byte", path);
	unsigned line = 0;
	for (char *p = txt, *nl; p < txt + n; p = nl + 1) {
		line++;
		nl = strchr(p, '\n');
		if (!nl)
			nl = txt + n;
		*nl = 0;
		if (!p[0] || p[0] == '#')
			continue;
		char key[PATH_MAX + 32];
		snprintf(key, sizeof key, "%s:%u", path, line);
		if (sbx_env_set(e, p, 0, key, err) < 0)
			return -1;
	}
	return 0;
}

/* Where the value v[0..vl) meets a secret: 1 it is one (*which set), 2 it
 * holds one, 0 neither.  A value compares as the scrubber does: less one
 * trailing newline. */
static int meets_secret(const struct sbx_secrets *sec, const char *v, size_t vl, unsigned *which)
{
	for (unsigned i = 0; i < sec->n; i++) {
		const uint8_t *s = sec->s[i].value;
		size_t sl = sec->pat[i];
		if (!sl)
			continue;
		if ((vl == sl && !memcmp(v, s, sl)) || (vl == sec->s[i].len && !memcmp(v, s, vl))) {
			*which = i;
			return 1;
		}
		if (vl > sl && memmem(v, vl, s, sl)) {
			*which = i;
			return 2;
		}
	}
	return 0;
}

int sbx_env_bind_secrets(struct sbx_env *e, const struct sbx_secrets *sec, struct sbx_err *err)
{
	struct sbx_env out = { 0 };
	for (unsigned i = 0; i < e->n; i++) {
		size_t nl;
		const char *v;
		const char *p = sbx_env_entry(e, i, &nl, &v);
		unsigned w = 0;
		int m = e->secret & (1ull << i) ? 0 : meets_secret(sec, v, strlen(v), &w);
		if (m == 2)
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"-e %.*s: its value holds the value of secret %s; a secret's value is never kept "
				"(set %.*s to the secret's whole value, or read /run/secrets/%s in the guest)",
				(int)nl, p, sec->s[w].name, (int)nl, p, sec->s[w].name);
		char kv[SBX_ENV_KEY_MAX + SBX_SECRET_NAME_MAX + 2];
		if (m == 1)
			snprintf(kv, sizeof kv, "%.*s=%s", (int)nl, p, sec->s[w].name);
		if (sbx_env_set(&out, m == 1 ? kv : p, m == 1 || (e->secret & (1ull << i)), "-e", err) < 0)
			return -1;
	}
	*e = out;
	return 0;
}

void sbx_env_to_json(const struct sbx_env *e, json_t *record)
{
	if (!e->n)
		return;
	json_t *env = json_object(), *sec = json_object();
	for (unsigned i = 0; i < e->n; i++) {
		size_t nl;
		const char *v;
		const char *p = sbx_env_entry(e, i, &nl, &v);
		char name[SBX_ENV_KEY_MAX + 1];
		snprintf(name, sizeof name, "%.*s", (int)nl, p);
		json_object_set_new(e->secret & (1ull << i) ? sec : env, name, json_string(v));
	}
	json_object_set_new(record, "env", env);
	if (json_object_size(sec))
		json_object_set_new(record, "env_secrets", sec);
	else
		json_decref(sec);
}

static int from_obj(struct sbx_env *e, json_t *o, int secret)
{
	const char *k;
	json_t *v;
	if (!o)
		return 0;
	if (!json_is_object(o))
		return -1;
	json_object_foreach (o, k, v) {
		char kv[SBX_ENV_KEY_MAX + SBX_ENV_VALUE_MAX + 2];
		if (!json_is_string(v) || strlen(k) > SBX_ENV_KEY_MAX || json_string_length(v) > SBX_ENV_VALUE_MAX)
			return -1;
		if (secret && !sbx_secret_name_ok(json_string_value(v), json_string_length(v)))
			return -1;
		snprintf(kv, sizeof kv, "%s=%s", k, json_string_value(v));
		if (strchr(k, '=') || sbx_env_set(e, kv, secret, "record", NULL) < 0)
			return -1;
	}
	return 0;
}

int sbx_env_from_json(struct sbx_env *e, json_t *record)
{
	memset(e, 0, sizeof *e);
	if (from_obj(e, json_object_get(record, "env"), 0) < 0 ||
	    from_obj(e, json_object_get(record, "env_secrets"), 1) < 0) {
		memset(e, 0, sizeof *e);
		return -1;
	}
	return 0;
}

json_t *sbx_env_show(const struct sbx_env *e)
{
	json_t *o = json_object();
	for (unsigned i = 0; i < e->n && o; i++) {
		size_t nl;
		const char *v;
		const char *p = sbx_env_entry(e, i, &nl, &v);
		char name[SBX_ENV_KEY_MAX + 1], shown[SBX_SECRET_NAME_MAX + 10];
		snprintf(name, sizeof name, "%.*s", (int)nl, p);
		if (e->secret & (1ull << i))
			snprintf(shown, sizeof shown, "[secret:%s]", v);
		json_object_set_new(o, name, json_string(e->secret & (1ull << i) ? shown : v));
	}
	return o;
}
