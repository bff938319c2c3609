/* Reading a session's connection log (LIB/sessions/ID/net.log, written by
 * its proxy, proxy/) for sbx-ps --net: the client layer's reader of the
 * proxy's one output format. */
#include "netlog.h"
#include "execrec.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* LIB/sessions/ID/NAME, a log the proxy writes, for reading: NULL with
 * *err clear when the session has none, NULL with err set (4: no such
 * session) when the session is not there. */
static FILE *log_open(struct sbx_state *st, const char *id, const char *name, struct sbx_err *err)
{
	if (sbx_session_visible(st, id, err) < 0)
		return NULL;
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0) {
		if (errno == ENOENT)
			sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id);
		else
			sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open session %s", id);
		return NULL;
	}
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
	if (fd >= 0 && !f)
		close(fd);
	return f;
}

int sbx_netlog_read(struct sbx_state *st, const char *id, json_t **out, struct sbx_err *err)
{
	*out = NULL;
	err->code = 0;
	_cleanup_fclose_ FILE *f = log_open(st, id, "net.log", err);
	if (err->code)
		return -1;
	json_t *arr = json_array();
	if (!arr)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	char *line = NULL;
	size_t cap = 0;
	/* A line torn by a crash, or one that is not ours, is skipped. */
	while (f && getline(&line, &cap, f) > 0) {
		json_t *o = json_loads(line, 0, NULL);
		if (json_is_object(o))
			json_array_append_new(arr, o);
		else
			json_decref(o);
	}
	free(line);
	*out = arr;
	return 0;
}

/* The execs running at time t (sbx_fmt_time's form, which sorts as text):
 * started <= t and ended >= t, or not ended. */
static json_t *execs_at(json_t *execs, const char *t)
{
	json_t *ids = json_array(), *x;
	size_t i;
	json_array_foreach (execs, i, x) {
		const char *s = json_string_value(json_object_get(x, "started"));
		const char *e = json_string_value(json_object_get(x, "ended"));
		const char *id = json_string_value(json_object_get(x, "exec"));
		if (id && s && strcmp(s, t) <= 0 && (!e || strcmp(t, e) <= 0))
			json_array_append_new(ids, json_string(id));
	}
	return ids;
}

/* The egress proxy's connections (net.log) as rows of the install record:
 * a git clone, a curl, a package manager pointed elsewhere.  TLS passes
 * through, so the host knows the name, the port and the bytes, not the
 * path: url is SCHEME://NAME:PORT/ (https for TLS, http for plain HTTP,
 * tcp when the proxy did not look).
 * Allowed connections and refused ones alike; net.log's per-second
 * summaries of refusals are left to sbx-ps --net. */
static void egress_rows(FILE *f, json_t *execs, json_t *arr)
{
	char *line = NULL;
	size_t cap = 0;
	while (f && getline(&line, &cap, f) > 0) {
		json_t *o = json_loads(line, 0, NULL);
		const char *proto = json_string_value(json_object_get(o, "proto")),
			   *verdict = json_string_value(json_object_get(o, "verdict")),
			   *t = json_string_value(json_object_get(o, "time")),
			   *dom = json_string_value(json_object_get(o, "domain")),
			   *addr = json_string_value(json_object_get(o, "address")),
			   *sniff = json_string_value(json_object_get(o, "sniff")),
			   *why = json_string_value(json_object_get(o, "reason"));
		json_int_t port = json_integer_value(json_object_get(o, "port"));
		if (!proto || strcmp(proto, "tcp") || !verdict || !t || !(dom || addr) || json_object_get(o, "count")) {
			json_decref(o);
			continue;
		}
		const char *host = dom ? dom : addr;
		char url[400];
		/* What the proxy saw of its first bytes; with a cidr rule it
		 * did not look. */
		const char *scheme = !sniff                   ? "tcp"
				     : !strcmp(sniff, "http") ? "http"
				     : !strcmp(sniff, "tls")  ? "https"
							      : "tcp";
		snprintf(url, sizeof url, "%s://%s%s%s:%lld/", scheme, !dom && strchr(host, ':') ? "[" : "", host,
			 !dom && strchr(host, ':') ? "]" : "", (long long)port);
		int ok = !strcmp(verdict, "allow");
		json_t *r =
			json_pack("{s:s, s:O, s:s, s:s, s:s, s:s, s:i, s:s, s:I, s:O, s:o}", "time", t, "session",
				  json_object_get(o, "session"), "kind", "fetch", "registry", "egress", "package", host,
				  "verdict",
				  ok                         ? "ok"
				  : !strcmp(verdict, "deny") ? "refused"
							     : "error",
				  "status", 0, "url", url, "size", json_integer_value(json_object_get(o, "bytes_in")),
				  "bytes_out", json_object_get(o, "bytes_out"), "execs", execs_at(execs, t));
		if (r && why)
			json_object_set_new(r, "reason", json_string(why));
		if (r)
			json_array_append_new(arr, r);
		json_decref(o);
	}
	free(line);
}

struct row {
	json_t *o;
	size_t at; /* its place before the sort: ties keep it */
};

static int by_time(const void *a, const void *b)
{
	const struct row *p = a, *q = b;
	const char *x = json_string_value(json_object_get(p->o, "time"));
	const char *y = json_string_value(json_object_get(q->o, "time"));
	int c = !x ? (y ? 1 : 0) : !y ? -1 : strcmp(x, y);
	return c ? c : p->at < q->at ? -1 : p->at > q->at;
}

int sbx_pkglog_read(struct sbx_state *st, const char *id, json_t **out, struct sbx_err *err)
{
	*out = NULL;
	err->code = 0;
	_cleanup_fclose_ FILE *f = log_open(st, id, "packages.log", err);
	if (err->code)
		return -1;
	json_t *execs = NULL;
	struct sbx_err xe = { 0 };
	if (sbx_exec_list(st, id, &execs, &xe) < 0)
		execs = NULL; /* no execs yet: no directory */
	json_t *arr = json_array();
	if (!arr) {
		json_decref(execs);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	char *line = NULL;
	size_t cap = 0;
	/* The writer caps the log at 4 MiB; a torn line is skipped. */
	while (f && getline(&line, &cap, f) > 0) {
		json_t *o = json_loads(line, 0, NULL);
		const char *kind = json_string_value(json_object_get(o, "kind"));
		const char *verdict = json_string_value(json_object_get(o, "verdict"));
		const char *t = json_string_value(json_object_get(o, "time"));
		int file = kind && (!strcmp(kind, "tarball") || !strcmp(kind, "file") || !strcmp(kind, "deb"));
		if (json_is_true(json_object_get(o, "truncated"))) {
			json_array_append_new(arr, o); /* the writer's last line: its cap */
			continue;
		}
		if (!json_is_object(o) || !verdict || !t || json_object_get(o, "method") ||
		    (!file && !strcmp(verdict, "ok"))) {
			json_decref(o);
			continue;
		}
		json_object_set_new(o, "execs", execs_at(execs, t));
		json_array_append_new(arr, o);
	}
	free(line);
	struct sbx_err ne = { 0 };
	_cleanup_fclose_ FILE *nf = log_open(st, id, "net.log", &ne);
	egress_rows(nf, execs, arr);
	json_decref(execs);
	/* Oldest first, the two logs together (rows of one millisecond in
	 * the logs' order); a log's cap line (no time) last. */
	size_t n = json_array_size(arr);
	struct row *v = n ? calloc(n, sizeof *v) : NULL;
	if (n && !v) {
		json_decref(arr);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++)
		v[i] = (struct row){ json_incref(json_array_get(arr, i)), i };
	qsort(v, n, sizeof *v, by_time);
	json_array_clear(arr);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, v[i].o);
	free(v);
	*out = arr;
	return 0;
}

/* Count one refusal into o ({count-key: N, "first": [...]}), remembering
 * the first few distinct destinations. */
static void tally(json_t *o, const char *key, const char *what, json_int_t n)
{
	json_object_set_new(o, key, json_integer(json_integer_value(json_object_get(o, key)) + n));
	json_t *first = json_object_get(o, "first");
	if (!what || json_array_size(first) >= SBX_VIOLATIONS_FIRST)
		return;
	size_t i;
	json_t *v;
	json_array_foreach (first, i, v)
		if (!strcmp(json_string_value(v), what))
			return;
	json_array_append_new(first, json_string(what));
}

/* The lines of name from off on, each a JSON object, to fn. */
static void scan_log(int dfd, const char *name, uint64_t off, json_t *acc, void (*fn)(json_t *acc, json_t *line))
{
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	/* Both logs are capped at 4 MiB by their writers: never more. */
	uint64_t left = 4u << 20;
	_cleanup_fclose_ FILE *f = lseek(fd, (off_t)off, SEEK_SET) == (off_t)off ? fdopen(fd, "re") : NULL;
	if (!f) {
		close(fd);
		return;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t r;
	while (left && (r = getline(&line, &cap, f)) > 0) {
		left = (uint64_t)r > left ? 0 : left - (uint64_t)r;
		json_t *o = json_loads(line, 0, NULL);
		if (json_is_object(o))
			fn(acc, o);
		json_decref(o);
	}
	free(line);
}

static void net_line(json_t *acc, json_t *o)
{
	const char *verdict = json_string_value(json_object_get(o, "verdict"));
	const char *proto = json_string_value(json_object_get(o, "proto"));
	if (!verdict || !proto || !strcmp(verdict, "allow"))
		return;
	/* A summary line stands for count attempts. */
	json_int_t n = json_integer_value(json_object_get(o, "count"));
	const char *dst = json_string_value(json_object_get(o, "domain"));
	if (!dst)
		dst = json_string_value(json_object_get(o, "address"));
	tally(json_object_get(acc, strcmp(proto, "dns") ? "egress" : "dns"), "denied", dst, n > 0 ? n : 1);
}

static void pkg_line(json_t *acc, json_t *o)
{
	const char *verdict = json_string_value(json_object_get(o, "verdict"));
	if (!verdict || !strcmp(verdict, "ok"))
		return;
	const char *what = json_string_value(json_object_get(o, "package"));
	tally(json_object_get(acc, "packages"), "refused", what, 1);
}

json_t *sbx_netlog_violations(int dfd, uint64_t net_off, uint64_t pkg_off)
{
	json_t *acc = json_pack("{s:{s:i, s:[]}, s:{s:i, s:[]}, s:{s:i, s:[]}}", "egress", "denied", 0, "first", "dns",
				"denied", 0, "first", "packages", "refused", 0, "first");
	if (!acc || dfd < 0)
		return acc;
	scan_log(dfd, "net.log", net_off, acc, net_line);
	scan_log(dfd, "packages.log", pkg_off, acc, pkg_line);
	return acc;
}
