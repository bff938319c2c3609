/* config.json of an OCI bundle: bounded, strict on types (oci_spec.h). */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>

#include "oci_spec.h"
#include "util.h"

/* A string of at most max bytes with no NUL in it (jansson allows \u0000),
 * and no control bytes when ctl is 0. */
static int str_ok(json_t *v, size_t max, int ctl)
{
	if (!json_is_string(v))
		return 0;
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n > max || strlen(s) != n)
		return 0;
	for (size_t i = 0; !ctl && i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

static int strv(json_t *a, const char *what, size_t max, int need_eq, char ***out, size_t *outc, size_t *bytes,
		struct sbx_err *err)
{
	if (!json_is_array(a))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: %s must be an array of strings",
				   what);
	size_t n = json_array_size(a);
	if (n > max)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: %s has %zu entries, at most %zu",
				   what, n, max);
	char **v = calloc(n + 1, sizeof *v);
	if (!v)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read config.json");
	*out = v;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(a, i);
		if (!str_ok(e, SBX_OCI_STR_MAX, 1))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"invalid config.json: %s[%zu] must be a string of at most %u bytes without NUL", what,
				i, SBX_OCI_STR_MAX);
		const char *s = json_string_value(e);
		if (need_eq && (!strchr(s, '=') || s[0] == '='))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: %s[%zu] is not NAME=VALUE",
					   what, i);
		*bytes += json_string_length(e) + 1;
		if (*bytes > SBX_OCI_ARGV_BYTES)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid config.json: process.args and process.env over %u bytes",
					   SBX_OCI_ARGV_BYTES);
		if (!(v[i] = strdup(s)))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read config.json");
		*outc = i + 1;
	}
	return 0;
}

static int uid_field(json_t *o, const char *k, uint32_t *out, struct sbx_err *err)
{
	json_t *v = json_object_get(o, k);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SBX_OCI_UID_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: process.user.%s must be 0..%u", k,
				   SBX_OCI_UID_MAX);
	*out = (uint32_t)json_integer_value(v);
	return 0;
}

/* process.rlimits: what the guest sets for the process (the host's
 * limits are not the container's: its process is not a host process). */
static int rlimits(json_t *a, struct sbx_oci_spec *s, struct sbx_err *err)
{
	static const struct {
		const char *name;
		int res;
	} names[] = {
		{ "RLIMIT_CPU", RLIMIT_CPU },           { "RLIMIT_FSIZE", RLIMIT_FSIZE },
		{ "RLIMIT_DATA", RLIMIT_DATA },         { "RLIMIT_STACK", RLIMIT_STACK },
		{ "RLIMIT_CORE", RLIMIT_CORE },         { "RLIMIT_RSS", RLIMIT_RSS },
		{ "RLIMIT_NPROC", RLIMIT_NPROC },       { "RLIMIT_NOFILE", RLIMIT_NOFILE },
		{ "RLIMIT_MEMLOCK", RLIMIT_MEMLOCK },   { "RLIMIT_AS", RLIMIT_AS },
		{ "RLIMIT_LOCKS", RLIMIT_LOCKS },       { "RLIMIT_SIGPENDING", RLIMIT_SIGPENDING },
		{ "RLIMIT_MSGQUEUE", RLIMIT_MSGQUEUE }, { "RLIMIT_NICE", RLIMIT_NICE },
		{ "RLIMIT_RTPRIO", RLIMIT_RTPRIO },     { "RLIMIT_RTTIME", RLIMIT_RTTIME },
	};
	if (!json_is_array(a) || json_array_size(a) > SBX_OCI_RLIMITS_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid config.json: process.rlimits must be an array of at most %u",
				   SBX_OCI_RLIMITS_MAX);
	json_t *e;
	size_t i;
	json_array_foreach (a, i, e) {
		json_t *t = json_object_get(e, "type"), *so = json_object_get(e, "soft"),
		       *h = json_object_get(e, "hard");
		int res = -1;
		for (size_t k = 0; json_is_string(t) && k < sizeof names / sizeof names[0]; k++)
			if (!strcmp(json_string_value(t), names[k].name))
				res = names[k].res;
		if (res < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid config.json: process.rlimits[%zu].type is not a Linux RLIMIT_ name",
					   i);
		if (!json_is_integer(so) || !json_is_integer(h) || json_integer_value(so) < 0 ||
		    json_integer_value(h) < json_integer_value(so))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"invalid config.json: process.rlimits[%zu]: soft and hard must be integers, 0 <= "
				"soft <= hard",
				i);
		for (unsigned k = 0; k < s->nrlimits; k++)
			if (s->rlimits[k].resource == (uint32_t)res)
				return sbx_err_set(err, SBX_EXIT_INVALID, 0,
						   "invalid config.json: process.rlimits has %s twice",
						   json_string_value(t));
		s->rlimits[s->nrlimits++] = (struct sbx_oci_rlimit){ (uint32_t)res, (uint64_t)json_integer_value(so),
								     (uint64_t)json_integer_value(h) };
	}
	return 0;
}

static int process(json_t *p, struct sbx_oci_spec *s, struct sbx_err *err)
{
	if (!json_is_object(p))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: process must be an object");
	size_t bytes = 0;
	json_t *args = json_object_get(p, "args");
	if (json_is_array(args) && !json_array_size(args))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: process.args is empty");
	if (!args)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: no process.args");
	if (strv(args, "process.args", SBX_OCI_ARGS_MAX, 0, &s->args, &s->argc, &bytes, err) < 0)
		return -1;
	json_t *env = json_object_get(p, "env");
	if (env && strv(env, "process.env", SBX_OCI_ENV_MAX, 1, &s->env, &s->envc, &bytes, err) < 0)
		return -1;
	json_t *cwd = json_object_get(p, "cwd");
	if (cwd) {
		if (!str_ok(cwd, SBX_OCI_PATH_MAX, 0) || json_string_value(cwd)[0] != '/')
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid config.json: process.cwd must be an absolute path of at most %u "
					   "bytes",
					   SBX_OCI_PATH_MAX);
		snprintf(s->cwd, sizeof s->cwd, "%s", json_string_value(cwd));
	}
	json_t *t = json_object_get(p, "terminal");
	if (t && !json_is_boolean(t))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: process.terminal must be a boolean");
	s->terminal = json_is_true(t);
	json_t *cs = json_object_get(p, "consoleSize");
	if (cs) {
		json_t *h = json_object_get(cs, "height"), *w = json_object_get(cs, "width");
		if (!json_is_object(cs) || !json_is_integer(h) || !json_is_integer(w) || json_integer_value(h) < 0 ||
		    json_integer_value(h) > 65535 || json_integer_value(w) < 0 || json_integer_value(w) > 65535)
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"invalid config.json: process.consoleSize must be {height, width} of 0..65535");
		s->rows = (unsigned)json_integer_value(h);
		s->cols = (unsigned)json_integer_value(w);
	}
	json_t *rl = json_object_get(p, "rlimits");
	if (rl && rlimits(rl, s, err) < 0)
		return -1;
	json_t *u = json_object_get(p, "user");
	if (u) {
		if (!json_is_object(u))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid config.json: process.user must be an object");
		if (json_object_get(u, "username"))
			return sbx_err_set(
				err, SBX_EXIT_INVALID, 0,
				"invalid config.json: process.user.username is for Windows; give uid and gid");
		if (uid_field(u, "uid", &s->uid, err) < 0 || uid_field(u, "gid", &s->gid, err) < 0)
			return -1;
	}
	return 0;
}

static int root(json_t *r, struct sbx_oci_spec *s, struct sbx_err *err)
{
	json_t *p = json_is_object(r) ? json_object_get(r, "path") : NULL;
	if (!p || !str_ok(p, SBX_OCI_PATH_MAX, 0) || !json_string_length(p))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid config.json: root.path must be a path of at most %u bytes",
				   SBX_OCI_PATH_MAX);
	snprintf(s->root, sizeof s->root, "%s", json_string_value(p));
	json_t *ro = json_object_get(r, "readonly");
	if (ro && !json_is_boolean(ro))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: root.readonly must be a boolean");
	s->root_readonly = json_is_true(ro);
	return 0;
}

static int annotations(json_t *a, struct sbx_oci_spec *s, struct sbx_err *err)
{
	if (!(s->annotations = json_object()))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot read config.json");
	if (!a)
		return 0;
	if (!json_is_object(a) || json_object_size(a) > SBX_OCI_ANNOTATIONS_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "invalid config.json: annotations must be an object of at most %u strings",
				   SBX_OCI_ANNOTATIONS_MAX);
	const char *k;
	json_t *v;
	json_object_foreach (a, k, v) {
		if (!str_ok(v, SBX_OCI_STR_MAX, 1) || strlen(k) > 1024)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "invalid config.json: annotation values must be strings of at most %u bytes",
					   SBX_OCI_STR_MAX);
		json_object_set(s->annotations, k, v);
	}
	return 0;
}

int sbx_oci_spec_parse(const char *buf, size_t len, struct sbx_oci_spec *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	if (len > SBX_OCI_CONFIG_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: over %u bytes", SBX_OCI_CONFIG_MAX);
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: line %d: %.200s", je.line, je.text);
	int rc = 0;
	json_t *v = json_object_get(j, "ociVersion");
	if (!json_is_object(j))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: not an object");
	else if (!v || !str_ok(v, 64, 0) || strncmp(json_string_value(v), "1.", 2))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: ociVersion must be a 1.x version");
	if (rc == 0)
		rc = process(json_object_get(j, "process"), s, err);
	if (rc == 0)
		rc = root(json_object_get(j, "root"), s, err);
	if (rc == 0)
		rc = annotations(json_object_get(j, "annotations"), s, err);
	json_t *lx = json_object_get(j, "linux");
	if (rc == 0 && lx && !json_is_object(lx))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: linux must be an object");
	if (rc == 0)
		rc = sbx_oci_resources_parse(json_object_get(lx, "resources"), &s->res, err);
	if (rc == 0)
		rc = sbx_oci_mounts_check(json_object_get(j, "mounts"), err);
	json_decref(j);
	if (rc < 0)
		sbx_oci_spec_free(s);
	return rc;
}

int sbx_oci_process_parse(const char *buf, size_t len, struct sbx_oci_spec *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	if (len > SBX_OCI_CONFIG_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid process.json: over %u bytes", SBX_OCI_CONFIG_MAX);
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid process.json: line %d: %.200s", je.line, je.text);
	int rc = process(j, s, err);
	json_decref(j);
	if (rc < 0)
		sbx_oci_spec_free(s);
	return rc;
}

int sbx_oci_spec_load(int bundle_dfd, struct sbx_oci_spec *s, struct sbx_err *err)
{
	memset(s, 0, sizeof *s);
	size_t len;
	_cleanup_free_ char *buf = sbx_read_small_at(bundle_dfd, "config.json", SBX_OCI_CONFIG_MAX, &len);
	if (!buf)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot read the bundle's config.json");
	return sbx_oci_spec_parse(buf, len, s, err);
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void sbx_oci_spec_free(struct sbx_oci_spec *s)
{
	strv_free(s->args, s->argc);
	strv_free(s->env, s->envc);
	json_decref(s->annotations);
	s->args = s->env = NULL;
	s->argc = s->envc = 0;
	s->annotations = NULL;
}
