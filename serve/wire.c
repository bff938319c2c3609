/* Between sbx-serve's halves (wire.h). */
#include "wire.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

static const char *const op_names[] = { [SERVE_OP_CREATE] = "create",
					[SERVE_OP_GET] = "get",
					[SERVE_OP_LIST] = "list",
					[SERVE_OP_KILL] = "kill",
					[SERVE_OP_EXEC] = "exec",
					[SERVE_OP_SIGNAL] = "signal",
					[SERVE_OP_TEMPLATES] = "templates",
					[SERVE_OP_WHOAMI] = "whoami",
					[SERVE_OP_CONNECT] = "connect",
					[SERVE_OP_PS] = "ps",
					[SERVE_OP_ATTACH] = "attach",
					[SERVE_OP_PAUSE] = "pause",
					[SERVE_OP_RESUME] = "resume",
					[SERVE_OP_TIMEOUT] = "timeout",
					[SERVE_OP_REFRESH] = "refresh",
					[SERVE_OP_METRICS] = "metrics",
					[SERVE_OP_FORK] = "fork",
					[SERVE_OP_FS] = "fs",
					[SERVE_OP_DOWNLOAD] = "download",
					[SERVE_OP_UPLOAD] = "upload",
					[SERVE_OP_CLI] = "cli",
					[SERVE_OP_LOGS] = "logs",
					[SERVE_OP_SNAPSHOT] = "snapshot",
					[SERVE_OP_SNAPSHOTS] = "snapshots",
					[SERVE_OP_SNAPSHOT_RM] = "snapshot_rm",
					[SERVE_OP_WATCH] = "watch" };

int serve_cli_env_ok(const char *name, size_t len)
{
	static const char *const keep[] = { "TERM", "COLUMNS", "LINES", "NO_COLOR", "SBX_NO_PROGRESS" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(keep); i++)
		if (strlen(keep[i]) == len && !memcmp(name, keep[i], len))
			return 1;
	return 0;
}

int serve_cli_prog_ok(const char *prog)
{
	static const char *const progs[] = { "sbx-create", "sbx-exec",     "sbx-cp",   "sbx-ps",
					     "sbx-kill",   "sbx-snapshot", "sbx-port", "sbx-audit" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(progs); i++)
		if (!strcmp(prog, progs[i]))
			return 1;
	return 0;
}

const char *serve_op_name(enum serve_op op)
{
	return op > 0 && op < SBX_ARRAY_LEN(op_names) && op_names[op] ? op_names[op] : "?";
}

json_t *serve_cli_request(const char *buf, size_t n, struct sbx_err *err)
{
	if (n > SERVE_CLI_MSG_MAX) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "a command of more than %u bytes", SERVE_CLI_MSG_MAX);
		return NULL;
	}
	json_t *o = json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL), *a = json_object_get(o, "argv"),
	       *e = json_object_get(o, "env"), *v;
	json_t *argv = json_array(), *env = json_object();
	const char *k;
	size_t i;
	int ok = json_is_object(o) && json_is_array(a) && json_array_size(a) >= 1 &&
		 json_array_size(a) <= SERVE_ARGV_MAX && (!e || json_is_object(e)) && argv && env;
	json_array_foreach (ok ? a : NULL, i, v) {
		ok = json_is_string(v) && json_string_length(v) <= SERVE_STR_MAX &&
		     strlen(json_string_value(v)) == json_string_length(v);
		if (!ok)
			break;
		json_array_append(argv, v);
	}
	if (ok && !serve_cli_prog_ok(json_string_value(json_array_get(a, 0)))) {
		sbx_err_set(err, SBX_EXIT_INVALID, 0, "%.40s is not a command served to users",
			    json_string_value(json_array_get(a, 0)));
		ok = -1;
	}
	json_object_foreach (ok > 0 ? e : NULL, k, v) {
		const char *s = json_string_value(v);
		if (!s || json_string_length(v) > 256 || strlen(s) != json_string_length(v))
			continue;
		int printable = 1;
		for (const char *c = s; *c && printable; c++)
			printable = (unsigned char)*c >= 0x20 && *c != 0x7f;
		if (printable && serve_cli_env_ok(k, strlen(k)))
			json_object_set(env, k, v);
	}
	json_decref(o);
	if (ok <= 0) {
		if (!ok)
			sbx_err_set(err, SBX_EXIT_INVALID, 0,
				    "a command is {\"argv\": [PROGRAM, ARG...]} of at most %d strings", SERVE_ARGV_MAX);
		json_decref(argv);
		json_decref(env);
		return NULL;
	}
	return json_pack("{s:s, s:o, s:o}", "op", "cli", "argv", argv, "env", env);
}

int serve_cli_signal(const char *buf, size_t n)
{
	json_t *o = n <= 256 ? json_loadb(buf, n, 0, NULL) : NULL;
	json_int_t s = json_integer_value(json_object_get(o, "signal"));
	json_decref(o);
	static const int ok[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
	for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++)
		if (s == ok[i])
			return ok[i];
	return 0;
}

/* A string field, at most cap - 1 bytes, no NUL; absent is "". */
static int str_field(json_t *o, const char *k, char *out, size_t cap, struct sbx_err *err)
{
	json_t *v = json_object_get(o, k);
	out[0] = 0;
	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: expected a string of at most %zu bytes", k, cap - 1);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

static int strv_push(char ***v, size_t *n, const char *s, size_t len)
{
	char **nv = realloc(*v, (*n + 2) * sizeof **v);
	if (!nv)
		return -1;
	*v = nv;
	if (!(nv[*n] = strndup(s, len)))
		return -1;
	nv[++*n] = NULL;
	return 0;
}

static int argv_field(json_t *o, struct serve_req *r, struct sbx_err *err)
{
	json_t *a = json_object_get(o, "argv"), *v;
	size_t i;
	if (!json_is_array(a) || !json_array_size(a) || json_array_size(a) > SERVE_ARGV_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "argv: expected 1 to %d strings", SERVE_ARGV_MAX);
	json_array_foreach (a, i, v) {
		if (!json_is_string(v) || json_string_length(v) > SERVE_MSG_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "argv[%zu]: expected a string without NUL", i);
		if (strv_push(&r->argv, &r->argc, json_string_value(v), json_string_length(v)) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	return 0;
}

/* env: an object of NAME to VALUE; names as a shell's, values without NUL. */
static int env_field(json_t *o, struct serve_req *r, struct sbx_err *err)
{
	json_t *e = json_object_get(o, "env"), *v;
	const char *k;
	if (!e)
		return 0;
	if (!json_is_object(e) || json_object_size(e) > SERVE_ENV_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "env: expected an object of at most %d variables",
				   SERVE_ENV_MAX);
	json_object_foreach (e, k, v) {
		size_t kl = strlen(k);
		int ok = kl > 0 && kl <= 128 && !(k[0] >= '0' && k[0] <= '9');
		for (size_t i = 0; ok && i < kl; i++)
			ok = k[i] == '_' || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z') ||
			     (k[i] >= '0' && k[i] <= '9');
		if (!ok || !json_is_string(v) || json_string_length(v) > SERVE_STR_MAX ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "env: '%.40s' is not NAME: \"VALUE\"", k);
		char *kv;
		if (asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
		int rc = strv_push(&r->env, &r->nenv, kv, strlen(kv));
		free(kv);
		if (rc < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	return 0;
}

static int meta_field(json_t *o, struct serve_req *r, struct sbx_err *err)
{
	json_t *m = json_object_get(o, "metadata"), *v;
	const char *k;
	if (!m || json_is_null(m))
		return 0;
	if (!json_is_object(m) || json_object_size(m) > SERVE_META_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "metadata: expected an object of at most %d strings",
				   SERVE_META_MAX);
	json_object_foreach (m, k, v)
		if (strlen(k) > 256 || !json_is_string(v) || json_string_length(v) > 1024)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "metadata: '%.40s' is not a string of at most 1024 bytes", k);
	r->metadata = json_incref(m);
	return 0;
}

static int uint_field(json_t *o, const char *k, unsigned max, unsigned *out, struct sbx_err *err)
{
	json_t *v = json_object_get(o, k);
	*out = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: expected an integer from 0 to %u", k, max);
	*out = (unsigned)json_integer_value(v);
	return 0;
}

static int decode(json_t *o, struct serve_req *r, struct sbx_err *err)
{
	char op[16];
	if (!json_is_object(o))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a request is a JSON object");
	if (str_field(o, "op", op, sizeof op, err) < 0)
		return -1;
	r->op = 0;
	for (size_t i = 1; i < SBX_ARRAY_LEN(op_names); i++)
		if (op_names[i] && !strcmp(op, op_names[i]))
			r->op = (enum serve_op)i;
	if (!r->op)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "unknown op '%.16s'", op);
	unsigned sig = 0;
	if (str_field(o, "key", r->key, sizeof r->key, err) < 0 ||
	    str_field(o, "token", r->token, sizeof r->token, err) < 0 ||
	    str_field(o, "id", r->id, sizeof r->id, err) < 0 ||
	    str_field(o, "template", r->tmpl, sizeof r->tmpl, err) < 0 ||
	    str_field(o, "cwd", r->cwd, sizeof r->cwd, err) < 0 ||
	    str_field(o, "user", r->user, sizeof r->user, err) < 0 ||
	    str_field(o, "exec_id", r->exec_id, sizeof r->exec_id, err) < 0 ||
	    uint_field(o, "timeout", 86400 * 30, &r->timeout_s, err) < 0 ||
	    uint_field(o, "signal", 64, &sig, err) < 0 ||
	    uint_field(o, "exec_timeout_ms", 86400000, &r->exec_timeout_ms, err) < 0 ||
	    uint_field(o, "count", 1000, &r->count, err) < 0 ||
	    uint_field(o, "pty_rows", 1000, &r->pty_rows, err) < 0 ||
	    uint_field(o, "pty_cols", 1000, &r->pty_cols, err) < 0 || env_field(o, r, err) < 0 ||
	    meta_field(o, r, err) < 0)
		return -1;
	r->signo = (int)sig;
	json_t *si = json_object_get(o, "stdin");
	if (si && !json_is_boolean(si))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "stdin: expected true or false");
	r->stdin_open = json_is_true(si);
	json_t *ia = json_object_get(o, "internet");
	if (ia && !json_is_boolean(ia))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "internet: expected true or false");
	r->internet = ia ? json_is_true(ia) : -1;
	json_t *ap = json_object_get(o, "auto_pause");
	if (ap && !json_is_boolean(ap))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "auto_pause: expected true or false");
	r->auto_pause = json_is_true(ap);
	if ((r->op == SERVE_OP_EXEC || r->op == SERVE_OP_CLI) && argv_field(o, r, err) < 0)
		return -1;
	if (r->op == SERVE_OP_CLI && !serve_cli_prog_ok(r->argv[0]))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "cli: %.40s is not a command served to users", r->argv[0]);
	if ((r->op == SERVE_OP_FS || r->op == SERVE_OP_DOWNLOAD || r->op == SERVE_OP_UPLOAD ||
	     r->op == SERVE_OP_WATCH) &&
	    !json_is_object(r->args = json_incref(json_object_get(o, "args"))))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: no args", op);
	int need_id = r->op != SERVE_OP_CREATE && r->op != SERVE_OP_LIST && r->op != SERVE_OP_TEMPLATES &&
		      r->op != SERVE_OP_WHOAMI && r->op != SERVE_OP_CLI && r->op != SERVE_OP_SNAPSHOTS &&
		      r->op != SERVE_OP_SNAPSHOT_RM;
	if (need_id && !r->id[0])
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "%s: no sandbox ID", op);
	if (r->op == SERVE_OP_SIGNAL && (!r->exec_id[0] || !r->signo))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "signal: an exec ID and a signal are needed");
	if (!r->pty_rows != !r->pty_cols)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a terminal needs both rows and columns");
	if (r->op == SERVE_OP_ATTACH && !r->exec_id[0])
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "attach: an exec ID is needed");
	return 0;
}

int serve_req_decode(const char *buf, size_t n, struct serve_req *r, struct sbx_err *err)
{
	memset(r, 0, sizeof *r);
	if (n > SERVE_MSG_MAX)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a request of %zu bytes (at most %u)", n, SERVE_MSG_MAX);
	json_error_t je;
	json_t *o = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "a request that is not JSON: %.80s", je.text);
	int rc = decode(o, r, err);
	json_decref(o);
	if (rc < 0)
		serve_req_free(r);
	return rc;
}

void serve_req_free(struct serve_req *r)
{
	json_decref(r->metadata);
	json_decref(r->args);
	r->metadata = r->args = NULL;
	for (size_t i = 0; r->env && i < r->nenv; i++)
		free(r->env[i]);
	for (size_t i = 0; r->argv && i < r->argc; i++)
		free(r->argv[i]);
	free(r->env);
	free(r->argv);
	r->env = r->argv = NULL;
	r->nenv = r->argc = 0;
}

int serve_send(int sock, const void *buf, size_t n, const int *fds, unsigned nfds)
{
	ssize_t k;
	while ((k = sbx_sendmsg_fds(sock, buf, n, fds, (int)nfds, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return k == (ssize_t)n ? 0 : -1;
}

ssize_t serve_recv(int sock, char *buf, size_t cap, int *fds, unsigned *nfds, unsigned max_fds)
{
	int n = 0;
	ssize_t k = sbx_recvmsg_fds(sock, buf, cap - 1, fds, &n, (int)max_fds);
	*nfds = (unsigned)n;
	if (k >= 0)
		buf[k] = 0;
	return k;
}
