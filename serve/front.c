/* sbx-serve's front: HTTP (libmicrohttpd, a thread per connection), E2B's
 * control API and envd's Connect RPC, as an unprivileged uid in empty
 * namespaces.  Every action is a call to the back (wire.h). */
#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "connect.h"
#include "serve.h"
#include "util.h"
#include "wire.h"

#define CALL_TIMEOUT_MS (10 * 60 * 1000) /* a create under TCG, with a cold template */

static const struct serve_front_conf *conf;
static atomic_uint exec_seq;

struct conn {
	char *body;
	size_t n;
	int too_big;
};

struct listener {
	int is_unix;
};

/* ---- calls to the back ---------------------------------------------- */

/* Send req (consumed) with the client's connection when it came over the
 * unix socket; the answer's object (NULL: the back is gone) and, for an
 * exec, its fds.  *sock keeps the call's socket open when asked. */
static json_t *call(json_t *req, int peer, int *fds, unsigned *nfds, int *sock)
{
	char *t = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	int sv[2];
	if (!t || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		free(t);
		return NULL;
	}
	int pass[2] = { sv[1], peer };
	int rc = serve_send(conf->ctl, t, strlen(t), pass, peer >= 0 ? 2 : 1);
	free(t);
	close(sv[1]);
	if (rc < 0) {
		close(sv[0]);
		return NULL;
	}
	struct pollfd p = { .fd = sv[0], .events = POLLIN };
	static __thread char buf[64 << 10];
	int dummy[4];
	unsigned nd = 0;
	ssize_t n = poll(&p, 1, CALL_TIMEOUT_MS) == 1 ? serve_recv(sv[0], buf, sizeof buf, fds ? fds : dummy, fds ? nfds : &nd, 4) : -1;
	for (unsigned i = 0; !fds && i < nd; i++)
		close(dummy[i]);
	json_t *j = n > 0 ? json_loads(buf, 0, NULL) : NULL;
	if (sock && j)
		*sock = sv[0];
	else
		close(sv[0]);
	return j;
}

/* sbx's exit statuses as HTTP (sbx-serve(8), ERRORS). */
static unsigned http_of(int code)
{
	switch (code) {
	case SBX_EXIT_USAGE:
	case SBX_EXIT_INVALID: return MHD_HTTP_BAD_REQUEST;
	case SBX_EXIT_NOENT: return MHD_HTTP_NOT_FOUND;
	case SBX_EXIT_CONFLICT: return MHD_HTTP_CONFLICT;
	case SBX_EXIT_TEMPFAIL: return MHD_HTTP_TOO_MANY_REQUESTS;
	case SBX_EXIT_UNAVAIL: return MHD_HTTP_SERVICE_UNAVAILABLE;
	case SERVE_EXIT_NOPERM: return MHD_HTTP_UNAUTHORIZED;
	default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
	}
}

/* ---- answers -------------------------------------------------------- */

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type, const char *body)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(body ? strlen(body) : 0, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_TOO_MANY_REQUESTS)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "5");
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result answer_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	enum MHD_Result rc = t ? answer(c, status, "application/json", t) : answer(c, 500, NULL, NULL);
	free(t);
	return rc;
}

/* E2B's error body: {"code": HTTP status, "message": ...}. */
static enum MHD_Result api_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	return answer_json(c, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

static enum MHD_Result back_error(struct MHD_Connection *c, json_t *ans)
{
	if (!ans)
		return api_error(c, 503, "the service's back end is not answering");
	unsigned st = http_of((int)json_integer_value(json_object_get(ans, "code")));
	const char *m = json_string_value(json_object_get(ans, "message"));
	enum MHD_Result rc = api_error(c, st, m ? m : "failed");
	json_decref(ans);
	return rc;
}

/* ---- who asks ------------------------------------------------------- */

/* The request with what identifies its caller: the connection itself
 * over the unix socket (*peer), else the API key or the sandbox's token. */
static json_t *request(struct MHD_Connection *c, const struct listener *l, const char *op, int *peer)
{
	*peer = -1;
	json_t *r = json_pack("{s:s}", "op", op);
	if (l->is_unix) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		*peer = ci ? ci->connect_fd : -1;
		return r;
	}
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
	if (key && strlen(key) < 64)
		json_object_set_new(r, "key", json_string(key));
	if (tok && strlen(tok) < 64)
		json_object_set_new(r, "token", json_string(tok));
	return r;
}

/* ---- the control API (E2B's openapi.yml) ------------------------------ */

/* A sandbox ID from the path: what follows prefix up to '/' or the end. */
static int path_id(const char *url, const char *prefix, char *id, size_t n, const char **rest)
{
	size_t pl = strlen(prefix);
	if (strncmp(url, prefix, pl))
		return 0;
	const char *p = url + pl;
	size_t l = strcspn(p, "/");
	if (!l || l >= n)
		return 0;
	memcpy(id, p, l);
	id[l] = 0;
	*rest = p + l;
	return 1;
}

static enum MHD_Result api_create(struct MHD_Connection *c, const struct listener *l, struct conn *cn)
{
	json_error_t je;
	json_t *b = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, &je) : json_object();
	if (!json_is_object(b)) {
		json_decref(b);
		return api_error(c, 400, "the body is not a JSON object");
	}
	int peer;
	json_t *r = request(c, l, "create", &peer);
	json_t *v;
	if ((v = json_object_get(b, "templateID")))
		json_object_set(r, "template", v);
	if ((v = json_object_get(b, "timeout")))
		json_object_set(r, "timeout", v);
	if ((v = json_object_get(b, "metadata")))
		json_object_set(r, "metadata", v);
	if ((v = json_object_get(b, "envVars")) && !json_is_null(v))
		json_object_set(r, "env", v);
	json_decref(b);
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	json_object_del(a, "ok");
	return answer_json(c, MHD_HTTP_CREATED, a);
}

static enum MHD_Result api_sandbox(struct MHD_Connection *c, const struct listener *l, const char *method,
				   const char *id, const char *rest)
{
	int peer;
	const char *op = !strcmp(method, "DELETE") && !*rest                    ? "kill"
			 : !strcmp(method, "GET") && !*rest                     ? "get"
			 : !strcmp(method, "POST") && !strcmp(rest, "/connect") ? "connect"
										: NULL;
	if (!op)
		return api_error(c, 404, "no such route in this service");
	json_t *r = request(c, l, op, &peer);
	json_object_set_new(r, "id", json_string(id));
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	if (!strcmp(op, "kill")) {
		json_decref(a);
		return answer(c, MHD_HTTP_NO_CONTENT, NULL, NULL);
	}
	json_object_del(a, "ok");
	return answer_json(c, MHD_HTTP_OK, a);
}

static enum MHD_Result api_list(struct MHD_Connection *c, const struct listener *l)
{
	int peer;
	json_t *r = request(c, l, "list", &peer);
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	json_t *s = json_incref(json_object_get(a, "sandboxes"));
	json_decref(a);
	return answer_json(c, MHD_HTTP_OK, s);
}

/* ---- envd: Connect RPC ------------------------------------------------ */

/* A unary call's error: its HTTP status and {"code", "message"}. */
static enum MHD_Result unary_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg)
{
	return answer_json(c, status, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

/* A stream's error before any message: status 200 and the end of the
 * stream saying it (connect.h). */
static enum MHD_Result stream_error(struct MHD_Connection *c, const char *code, const char *msg)
{
	char buf[1024];
	ssize_t n = serve_cx_end_error(buf, sizeof buf, code, msg);
	if (n < 0)
		return MHD_NO;
	struct MHD_Response *r = MHD_create_response_from_buffer((size_t)n, buf, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

struct stream {
	int out, err, in, sock; /* the command's output, its stdin, the call */
	int started, out_eof, err_eof, ended;
	unsigned pid;
	json_t *end; /* how it ended, once the back says */
	unsigned keepalive_s;
};

static void stream_free(void *cls)
{
	struct stream *s = cls;
	int fds[] = { s->out, s->err, s->in, s->sock };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	json_decref(s->end);
	free(s);
}

/* The next envelopes of a Start stream: start, data, end, then the end of
 * the stream (connect.h). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *s = cls;
	(void)pos;
	if (s->ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (!s->started) {
		s->started = 1;
		return serve_cx_start_event(buf, max, s->pid);
	}
	while (!s->out_eof || !s->err_eof) {
		struct pollfd p[2] = { { .fd = s->out_eof ? -1 : s->out, .events = POLLIN },
				       { .fd = s->err_eof ? -1 : s->err, .events = POLLIN } };
		int k = poll(p, 2, (int)s->keepalive_s * 1000);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			return serve_cx_keepalive(buf, max);
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			size_t room = serve_cx_data_room(max);
			char raw[16384];
			ssize_t n = read(p[i].fd, raw, room < sizeof raw ? room : sizeof raw);
			if (n > 0)
				return serve_cx_data_event(buf, max, i == 0 ? "stdout" : "stderr", raw, (size_t)n);
			if (n == 0 || errno != EINTR)
				*(i == 0 ? &s->out_eof : &s->err_eof) = 1;
		}
	}
	/* Both closed: how it ended. */
	char msg[4096];
	int fds[1];
	unsigned nfds = 0;
	struct pollfd p = { .fd = s->sock, .events = POLLIN };
	ssize_t n = poll(&p, 1, 30000) == 1 ? serve_recv(s->sock, msg, sizeof msg, fds, &nfds, 1) : -1;
	json_t *e = n > 0 ? json_loads(msg, 0, NULL) : NULL;
	s->ended = 1;
	ssize_t rc = serve_cx_end(buf, max, e);
	json_decref(e);
	return rc;
}

static enum MHD_Result envd_start(struct MHD_Connection *c, const struct listener *l, struct conn *cn,
				  const char *sandbox)
{
	json_t *msg = serve_cx_unwrap(cn->body, cn->n);
	json_t *proc = json_object_get(msg, "process");
	json_t *cmd = json_object_get(proc, "cmd");
	if (!json_is_string(cmd)) {
		json_decref(msg);
		return stream_error(c, "invalid_argument", "process.cmd: expected a string");
	}
	int peer;
	json_t *r = request(c, l, "exec", &peer);
	json_t *argv = json_array();
	json_array_append(argv, cmd);
	json_t *args = json_object_get(proc, "args"), *v;
	size_t i;
	if (json_is_array(args))
		json_array_foreach(args, i, v) json_array_append(argv, v);
	json_object_set_new(r, "argv", argv);
	json_object_set_new(r, "id", json_string(sandbox));
	if ((v = json_object_get(proc, "envs")) && json_is_object(v))
		json_object_set(r, "env", v);
	if ((v = json_object_get(proc, "cwd")) && json_is_string(v))
		json_object_set(r, "cwd", v);
	if ((v = json_object_get(msg, "stdin")) && json_is_true(v))
		json_object_set_new(r, "stdin", json_true());
	char user[64];
	if (serve_cx_user(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), user, sizeof user))
		json_object_set_new(r, "user", json_string(user));
	json_decref(msg);
	int fds[4], sock = -1;
	unsigned nfds = 0;
	json_t *a = call(r, peer, fds, &nfds, &sock);
	if (!json_is_true(json_object_get(a, "ok")) || nfds < 2) {
		for (unsigned k = 0; k < nfds; k++)
			close(fds[k]);
		if (sock >= 0)
			close(sock);
		const char *m = json_string_value(json_object_get(a, "message"));
		int code = (int)json_integer_value(json_object_get(a, "code"));
		enum MHD_Result rc = stream_error(c, code == SBX_EXIT_NOENT ? "not_found" : code == SERVE_EXIT_NOPERM ? "unauthenticated" : code == SBX_EXIT_INVALID ? "invalid_argument" : "unavailable",
						    m ? m : "the service's back end is not answering");
		json_decref(a);
		return rc;
	}
	json_decref(a);
	struct stream *s = calloc(1, sizeof *s);
	if (!s) {
		for (unsigned k = 0; k < nfds; k++)
			close(fds[k]);
		close(sock);
		return MHD_NO;
	}
	s->out = fds[0];
	s->err = fds[1];
	s->in = nfds > 2 ? fds[2] : -1;
	s->sock = sock;
	s->pid = 1000 + atomic_fetch_add(&exec_seq, 1);
	const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
	s->keepalive_s = ka && atoi(ka) > 0 && atoi(ka) < 3600 ? (unsigned)atoi(ka) : 50;
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32768, stream_read, s, stream_free);
	if (!resp) {
		stream_free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result envd(struct MHD_Connection *c, const struct listener *l, const char *url,
			    const char *method, struct conn *cn, const char *sandbox)
{
	if (!strcmp(url, "/health")) { /* the sandbox is there, and the token its */
		int peer;
		json_t *r = request(c, l, "get", &peer);
		json_object_set_new(r, "id", json_string(sandbox));
		json_t *a = call(r, peer, NULL, NULL, NULL);
		int up = json_is_true(json_object_get(a, "ok"));
		json_decref(a);
		return up ? answer(c, MHD_HTTP_NO_CONTENT, NULL, NULL) : api_error(c, 502, "the sandbox is not running");
	}
	if (!strcmp(method, "POST") && !strcmp(url, "/process.Process/Start"))
		return envd_start(c, l, cn, sandbox);
	if (!strncmp(url, "/process.Process/", 17) || !strncmp(url, "/filesystem.Filesystem/", 23))
		return unary_error(c, MHD_HTTP_NOT_IMPLEMENTED, "unimplemented", "not served by this version of sbx-serve");
	return api_error(c, 404, "no such route in this service");
}

/* ---- the handler -------------------------------------------------------- */

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *upload, size_t *upload_n, void **ctx)
{
	const struct listener *l = cls;
	struct conn *cn = *ctx;
	(void)version;
	if (!cn) {
		if (!(cn = calloc(1, sizeof *cn)))
			return MHD_NO;
		*ctx = cn;
		return MHD_YES;
	}
	if (*upload_n) {
		if (cn->n + *upload_n > conf->body_max)
			cn->too_big = 1;
		else {
			char *nb = realloc(cn->body, cn->n + *upload_n + 1);
			if (!nb)
				return MHD_NO;
			cn->body = nb;
			memcpy(cn->body + cn->n, upload, *upload_n);
			cn->n += *upload_n;
		}
		*upload_n = 0;
		return MHD_YES;
	}
	if (cn->too_big)
		return api_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "the body is too large");
	const char *sandbox = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	if (sandbox)
		return envd(c, l, url, method, cn, sandbox);
	char id[SBX_ID_MAX + 1];
	const char *rest;
	if (!strcmp(url, "/sandboxes") || !strcmp(url, "/v2/sandboxes")) {
		if (!strcmp(method, "POST"))
			return api_create(c, l, cn);
		if (!strcmp(method, "GET"))
			return api_list(c, l);
	}
	if (path_id(url, "/sandboxes/", id, sizeof id, &rest) || path_id(url, "/v2/sandboxes/", id, sizeof id, &rest))
		return api_sandbox(c, l, method, id, rest);
	if (!strcmp(url, "/health"))
		return answer(c, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}");
	return api_error(c, 404, "no such route in this service");
}

static void completed(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_RequestTerminationCode t)
{
	struct conn *cn = *ctx;
	(void)cls;
	(void)c;
	(void)t;
	if (cn) {
		free(cn->body);
		free(cn);
	}
	*ctx = NULL;
}

static struct MHD_Daemon *start(int fd, struct listener *l)
{
	return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL, 0, NULL,
				NULL, handle, l, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
				(unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10), MHD_OPTION_NOTIFY_COMPLETED,
				completed, NULL, MHD_OPTION_END);
}

int serve_front_run(const struct serve_front_conf *c, struct sbx_err *err)
{
	static struct listener lu = { 1 }, lt = { 0 };
	conf = c;
	struct MHD_Daemon *du = c->unix_fd >= 0 ? start(c->unix_fd, &lu) : NULL;
	struct MHD_Daemon *dt = c->tcp_fd >= 0 ? start(c->tcp_fd, &lt) : NULL;
	if ((c->unix_fd >= 0 && !du) || (c->tcp_fd >= 0 && !dt))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start the HTTP server");
	/* Until the back goes: its end of ctl closing. */
	for (;;) {
		struct pollfd p = { .fd = c->ctl, .events = POLLHUP };
		if (poll(&p, 1, -1) > 0 && (p.revents & (POLLHUP | POLLERR)))
			break;
	}
	if (du)
		MHD_stop_daemon(du);
	if (dt)
		MHD_stop_daemon(dt);
	return 0;
}
