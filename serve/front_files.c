/* The front's side of envd's filesystem API and /files (files.h): what
 * the client sent becomes a call to the back; the bytes of a file pass
 * through as they come, never kept whole. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connect.h"
#include "files.h"
#include "front.h"
#include "serve.h"
#include "util.h"
#include "wire.h"

#define PART_TIMEOUT_MS (10 * 60 * 1000) /* a copy into a guest under TCG */
#define UPLOAD_FILES_MAX 64

/* ---- who, and where --------------------------------------------------- */

/* The user a call names: /files' ?username=, else HTTP Basic's user; ""
 * for the session's own.  0, or -1 when what was sent is no user name. */
static int call_user(struct MHD_Connection *c, char *user, size_t n)
{
	const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "username");
	user[0] = 0;
	if (q && *q) {
		size_t l = strlen(q);
		if (l >= n)
			return -1;
		for (size_t i = 0; i < l; i++)
			if (!((q[i] >= 'a' && q[i] <= 'z') || (q[i] >= 'A' && q[i] <= 'Z') ||
			      (q[i] >= '0' && q[i] <= '9') || q[i] == '_' || q[i] == '-' || q[i] == '.'))
				return -1;
		memcpy(user, q, l + 1);
		return 0;
	}
	serve_cx_user(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), user, n);
	return 0;
}

/* ?path= as sent: NULL when absent, "" (and *bad) when it holds a NUL. */
static const char *query_path(struct MHD_Connection *c, int *bad)
{
	const char *v = NULL;
	size_t l = 0;
	*bad = 0;
	if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "path", 4, &v, &l) != MHD_YES || !v)
		return NULL;
	if (strlen(v) != l) {
		*bad = 1;
		return "";
	}
	return v;
}

/* The call for the sandbox: op, user and args (consumed). */
static json_t *fs_request(struct MHD_Connection *c, const void *l, const char *op, const char *sandbox,
			  const char *user, json_t *args, int *peer)
{
	json_t *r = serve_front_request(c, l, op, peer);
	json_object_set_new(r, "id", json_string(sandbox));
	if (user[0])
		json_object_set_new(r, "user", json_string(user));
	json_object_set_new(r, "args", args);
	return r;
}

/* ---- errors ------------------------------------------------------------- */

/* The back's refusal as Connect's code and its HTTP status. */
static const char *cx_code(json_t *a, unsigned *status)
{
	int code = (int)json_integer_value(json_object_get(a, "code"));
	int e = (int)json_integer_value(json_object_get(a, "errno"));
	static const struct {
		int code, errnum; /* errnum -1: any */
		const char *name;
		unsigned status;
	} map[] = {
		{ SERVE_EXIT_NOPERM, -1, "unauthenticated", 401 },
		{ SBX_EXIT_NOENT, -1, "not_found", 404 },
		{ SBX_EXIT_CONFLICT, -1, "already_exists", 409 },
		{ SBX_EXIT_INVALID, EACCES, "permission_denied", 403 },
		{ SBX_EXIT_INVALID, -1, "invalid_argument", 400 },
		{ SBX_EXIT_USAGE, -1, "invalid_argument", 400 },
		{ SBX_EXIT_TEMPFAIL, -1, "resource_exhausted", 429 },
		{ SBX_EXIT_UNAVAIL, -1, "unavailable", 503 },
	};
	if (!a) {
		*status = 503;
		return "unavailable";
	}
	for (size_t i = 0; i < SBX_ARRAY_LEN(map); i++)
		if (map[i].code == code && (map[i].errnum < 0 || map[i].errnum == e)) {
			*status = map[i].status;
			return map[i].name;
		}
	*status = 500;
	return "internal";
}

static const char *msg_of(json_t *a)
{
	const char *m = json_string_value(json_object_get(a, "message"));
	return m ? m : a ? "failed" : "the service's back end is not answering";
}

static enum MHD_Result cx_error(struct MHD_Connection *c, json_t *a)
{
	unsigned st;
	const char *code = cx_code(a, &st);
	enum MHD_Result rc =
		serve_front_answer_json(c, st, json_pack("{s:s, s:s}", "code", code, "message", msg_of(a)));
	json_decref(a);
	return rc;
}

/* /files' errors: envd's {"code": HTTP status, "message"}. */
static unsigned files_status(json_t *a)
{
	int e = (int)json_integer_value(json_object_get(a, "errno"));
	unsigned st;
	cx_code(a, &st);
	return e == EFBIG ? 413 : e == ENOSPC ? 507 : st == 429 ? 413 : st == 409 ? 400 : st;
}

static enum MHD_Result files_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
	return serve_front_answer_json(c, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

/* ---- envd's filesystem calls ----------------------------------------------- */

/* What the client's message holds, as the back's args: the call and its
 * paths as they were sent (the back makes them absolute). */
static json_t *fs_args(const char *method, json_t *m)
{
	static const struct {
		const char *rpc, *call, *path_key;
	} calls[] = { { "Stat", "stat", "path" },
		      { "ListDir", "list", "path" },
		      { "MakeDir", "mkdir", "path" },
		      { "Move", "move", "source" },
		      { "Remove", "remove", "path" } };
	for (size_t i = 0; i < SBX_ARRAY_LEN(calls); i++) {
		if (strcmp(method, calls[i].rpc))
			continue;
		json_t *p = json_object_get(m, calls[i].path_key), *v;
		json_t *a = json_pack("{s:s}", "call", calls[i].call);
		json_object_set_new(a, "path", p ? json_incref(p) : json_string("")); /* proto3: absent is "" */
		if (!strcmp(calls[i].call, "move") && (v = json_object_get(m, "destination")))
			json_object_set(a, "dest", v);
		if ((v = json_object_get(m, "depth")))
			json_object_set(a, "depth", v);
		return a;
	}
	return NULL;
}

static enum MHD_Result fs_call(struct MHD_Connection *c, const void *l, const char *rpc, const char *body, size_t n,
			       const char *sandbox)
{
	json_error_t je;
	json_t *m = n ? json_loadb(body, n, JSON_REJECT_DUPLICATES, &je) : json_object();
	json_t *args = json_is_object(m) ? fs_args(rpc, m) : NULL;
	json_decref(m);
	if (!args)
		return serve_front_answer_json(c, 400,
					       json_pack("{s:s, s:s}", "code", "invalid_argument", "message",
							 "the body is not this call's JSON message"));
	char user[64];
	if (call_user(c, user, sizeof user) < 0) {
		json_decref(args);
		return serve_front_answer_json(
			c, 400, json_pack("{s:s, s:s}", "code", "invalid_argument", "message", "bad user"));
	}
	int peer;
	json_t *r = fs_request(c, l, "fs", sandbox, user, args, &peer); /* peer set before the call */
	json_t *a = serve_front_call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return cx_error(c, a);
	json_object_del(a, "ok");
	return serve_front_answer_json(c, 200, a);
}

/* ---- WatchDir and the watchers --------------------------------------------- */

#define WATCHERS_MAX 256
#define WATCHER_EVENTS_MAX 10000
#define WATCHER_IDLE_S 600 /* a watcher nobody asked for events this long goes */

/* The back's call that watches: {"path", "recursive"} of the client's
 * message; the call's socket, or -1 with *a the refusal. */
static int watch_call(struct MHD_Connection *c, const void *l, const char *sandbox, json_t *m, json_t **a)
{
	char user[64];
	json_t *p = json_object_get(m, "path"), *rec = json_object_get(m, "recursive");
	*a = NULL;
	if ((p && !json_is_string(p)) || (rec && !json_is_boolean(rec)) || call_user(c, user, sizeof user) < 0) {
		*a = json_pack("{s:b, s:i, s:s}", "ok", 0, "code", SBX_EXIT_INVALID, "message",
			       "expected {\"path\": string, \"recursive\": bool} and a user name");
		return -1;
	}
	json_t *args = json_pack("{s:s, s:b}", "path", p ? json_string_value(p) : "", "recursive", json_is_true(rec));
	int peer, fds[4], sock = -1;
	unsigned nfds = 0;
	json_t *r = fs_request(c, l, "watch", sandbox, user, args, &peer);
	/* The client's deadline is the watch's (E2B's SDK: a minute). */
	const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
	char *end;
	unsigned long ms = to ? strtoul(to, &end, 10) : 0;
	if (to && !*end && *to && ms > 0 && ms <= 86400000ul)
		json_object_set_new(r, "exec_timeout_ms", json_integer((json_int_t)ms));
	*a = serve_front_call(r, peer, fds, &nfds, &sock);
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	if (!json_is_true(json_object_get(*a, "ok"))) {
		if (sock >= 0)
			close(sock);
		return -1;
	}
	json_decref(*a);
	*a = NULL;
	return sock;
}

/* The back's next message on a watch's socket; NULL at its end. */
static json_t *watch_next(int sock)
{
	char msg[8 * SERVE_WATCH_REC_MAX]; /* a name of control bytes, each \\u00XX */
	int fds[1];
	unsigned nfds = 0;
	ssize_t n = serve_recv(sock, msg, sizeof msg, fds, &nfds, 1);
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	return n > 0 ? json_loads(msg, 0, NULL) : NULL;
}

struct watch_stream {
	int sock, conn; /* the back's call; the client's connection */
	int started, ended;
	unsigned keepalive_s;
	json_t *pending; /* an event that did not fit in the room MHD gave */
};

static void watch_stream_free(void *cls)
{
	struct watch_stream *s = cls;
	close(s->sock); /* the back stops the guest's watcher */
	json_decref(s->pending);
	free(s);
}

/* WatchDir's envelopes: start, then an event per message of the back's
 * and keepalives between, until the back ends it or the client goes. */
static ssize_t watch_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct watch_stream *s = cls;
	(void)pos;
	if (s->ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (!s->started) {
		s->started = 1;
		return serve_cx_envelope(buf, max, 0, json_pack("{s:{}}", "start"));
	}
	if (s->pending) { /* its turn again, with the room MHD has now */
		ssize_t rc = serve_cx_envelope(buf, max, 0, json_incref(s->pending));
		if (rc > 0) {
			json_decref(s->pending);
			s->pending = NULL;
		}
		return rc > 0 ? rc : 0;
	}
	for (;;) {
		/* POLLRDHUP: a client that closed its side (the SDK's stop())
		 * ends the watch now, not at the next keepalive's write. */
		struct pollfd p[2] = { { .fd = s->sock, .events = POLLIN }, { .fd = s->conn, .events = POLLRDHUP } };
		int k = poll(p, 2, (int)s->keepalive_s * 1000);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (k == 0)
			return serve_cx_envelope(buf, max, 0, json_pack("{s:{}}", "keepalive"));
		json_t *m = watch_next(s->sock);
		if (m && json_is_string(json_object_get(m, "name"))) {
			json_t *ev = json_pack("{s:{s:O, s:O}}", "filesystem", "name", json_object_get(m, "name"),
					       "type", json_object_get(m, "type"));
			json_decref(m);
			if (!ev)
				continue;
			ssize_t rc = serve_cx_envelope(buf, max, 0, json_incref(ev));
			if (rc < 0) /* every event fits a whole block (fuzz-serve checks) */
				s->pending = json_incref(ev);
			json_decref(ev);
			return rc > 0 ? rc : 0;
		}
		s->ended = 1;
		ssize_t rc;
		if (json_is_true(json_object_get(m, "ok"))) {
			rc = serve_cx_envelope(buf, max, 2, json_object());
		} else {
			unsigned st;
			const char *code = cx_code(m, &st);
			rc = serve_cx_end_error(buf, max, m ? code : "unavailable",
						m ? msg_of(m) : "the watch ended: the sandbox is gone");
		}
		json_decref(m);
		return rc;
	}
}

static enum MHD_Result stream_answer(struct MHD_Connection *c, const char *code, const char *msg)
{
	char buf[1024];
	ssize_t k = serve_cx_end_error(buf, sizeof buf, code, msg);
	struct MHD_Response *r = k > 0 ? MHD_create_response_from_buffer((size_t)k, buf, MHD_RESPMEM_MUST_COPY) : NULL;
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result watch_dir(struct MHD_Connection *c, const void *l, const char *body, size_t n,
				 const char *sandbox)
{
	json_t *m = serve_cx_unwrap(body, n), *a;
	if (!m)
		return stream_answer(c, "invalid_argument", "the body is not one WatchDirRequest envelope");
	int sock = watch_call(c, l, sandbox, m, &a);
	json_decref(m);
	if (sock < 0) {
		unsigned st;
		enum MHD_Result rc = stream_answer(c, cx_code(a, &st), msg_of(a));
		json_decref(a);
		return rc;
	}
	struct watch_stream *s = calloc(1, sizeof *s);
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!s || !ci) {
		free(s);
		close(sock);
		return MHD_NO;
	}
	*s = (struct watch_stream){ .sock = sock, .conn = ci->connect_fd };
	const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
	s->keepalive_s = ka && atoi(ka) > 0 && atoi(ka) < 3600 ? (unsigned)atoi(ka) : 50;
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32768, watch_read, s, watch_stream_free);
	if (!resp) {
		watch_stream_free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* CreateWatcher's watchers: the back's watch, read by a thread of its
 * own into a bounded list that GetWatcherEvents takes; by ID and
 * sandbox, so another's ID finds nothing. */
struct watcher {
	char id[24], sandbox[64];
	int sock;
	json_t *events;
	json_t *end;   /* the back's last message, or an error of ours; NULL: running */
	int removed;   /* unlinked: the thread frees it as it goes */
	int done;      /* the thread is gone: removal frees it */
	uint64_t seen; /* the last call for it, mono ns */
	struct watcher *next;
};

static pthread_mutex_t watchers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers;
static unsigned nwatchers;

static void watcher_free(struct watcher *w)
{
	close(w->sock);
	json_decref(w->events);
	json_decref(w->end);
	free(w);
}

static void *watcher_run(void *arg)
{
	struct watcher *w = arg;
	json_t *m;
	while ((m = watch_next(w->sock))) {
		int ev = json_is_string(json_object_get(m, "name"));
		pthread_mutex_lock(&watchers_mu);
		if (ev && json_array_size(w->events) < WATCHER_EVENTS_MAX) {
			json_array_append_new(w->events, json_pack("{s:O, s:O}", "name", json_object_get(m, "name"),
								   "type", json_object_get(m, "type")));
			json_decref(m);
			m = NULL;
		} else if (ev) { /* nobody takes them: the watch ends rather than grow */
			json_decref(m);
			m = json_pack("{s:b, s:i, s:s}", "ok", 0, "code", SBX_EXIT_TEMPFAIL, "message",
				      "more than 10000 events not taken: the watcher stopped");
		}
		if (m && !w->end)
			w->end = m;
		else
			json_decref(m);
		int stop = w->end != NULL;
		pthread_mutex_unlock(&watchers_mu);
		if (stop)
			break;
	}
	pthread_mutex_lock(&watchers_mu);
	if (!w->end)
		w->end = json_pack("{s:b, s:i, s:s}", "ok", 0, "code", SBX_EXIT_UNAVAIL, "message",
				   "the watch ended: the sandbox is gone");
	shutdown(w->sock, SHUT_RDWR); /* the back stops the guest's watcher */
	w->done = 1;
	int mine = w->removed;
	pthread_mutex_unlock(&watchers_mu);
	if (mine)
		watcher_free(w);
	return NULL;
}

/* Unlink w (watchers_mu held): freed now, or by its thread. */
static void watcher_drop(struct watcher **pp)
{
	struct watcher *w = *pp;
	*pp = w->next;
	nwatchers--;
	if (w->done) {
		watcher_free(w);
	} else {
		w->removed = 1;
		shutdown(w->sock, SHUT_RDWR);
	}
}

/* The watcher id names for sandbox (watchers_mu held), idle ones gone. */
static struct watcher **watcher_find(const char *id, const char *sandbox)
{
	uint64_t now = sbx_mono_ns();
	struct watcher **found = NULL;
	for (struct watcher **pp = &watchers; *pp;) {
		if (now - (*pp)->seen > (uint64_t)WATCHER_IDLE_S * 1000000000u) {
			watcher_drop(pp);
			continue;
		}
		if (id && !strcmp((*pp)->id, id) && !strcmp((*pp)->sandbox, sandbox))
			found = pp;
		pp = &(*pp)->next;
	}
	return found;
}

static enum MHD_Result cx_unary_error(struct MHD_Connection *c, unsigned status, const char *code, const char *msg)
{
	return serve_front_answer_json(c, status, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

static enum MHD_Result watcher_create(struct MHD_Connection *c, const void *l, json_t *m, const char *sandbox)
{
	unsigned char rnd[8];
	pthread_mutex_lock(&watchers_mu);
	watcher_find(NULL, sandbox);
	int full = nwatchers >= WATCHERS_MAX;
	pthread_mutex_unlock(&watchers_mu);
	if (full)
		return cx_unary_error(c, 429, "resource_exhausted", "too many watchers: remove some");
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return cx_unary_error(c, 500, "internal", "no randomness for a watcher ID");
	json_t *a;
	int sock = watch_call(c, l, sandbox, m, &a);
	if (sock < 0)
		return cx_error(c, a);
	struct watcher *w = calloc(1, sizeof *w);
	if (!w) {
		close(sock);
		return MHD_NO;
	}
	snprintf(w->id, sizeof w->id, "w");
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(w->id + 1 + 2 * i, 3, "%02x", rnd[i]);
	snprintf(w->sandbox, sizeof w->sandbox, "%s", sandbox);
	w->sock = sock;
	w->events = json_array();
	w->seen = sbx_mono_ns();
	pthread_t t;
	pthread_mutex_lock(&watchers_mu);
	if (pthread_create(&t, NULL, watcher_run, w) != 0) {
		pthread_mutex_unlock(&watchers_mu);
		watcher_free(w);
		return cx_unary_error(c, 503, "unavailable", "cannot start a thread");
	}
	pthread_detach(t);
	w->next = watchers;
	watchers = w;
	nwatchers++;
	pthread_mutex_unlock(&watchers_mu);
	return serve_front_answer_json(c, 200, json_pack("{s:s}", "watcherId", w->id));
}

/* GetWatcherEvents (take: the events so far) and RemoveWatcher. */
static enum MHD_Result watcher_call(struct MHD_Connection *c, const void *l, json_t *m, const char *sandbox, int take)
{
	const char *id = json_string_value(json_object_get(m, "watcherId"));
	if (!id)
		return cx_unary_error(c, 400, "invalid_argument", "watcherId: expected a string");
	/* The sandbox is still the caller's (its token checked again). */
	int peer;
	json_t *r = serve_front_request(c, l, "get", &peer);
	json_object_set_new(r, "id", json_string(sandbox));
	json_t *a = serve_front_call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return cx_error(c, a);
	json_decref(a);
	pthread_mutex_lock(&watchers_mu);
	struct watcher **pp = watcher_find(id, sandbox);
	json_t *out = NULL, *end = NULL;
	if (pp && take) {
		struct watcher *w = *pp;
		w->seen = sbx_mono_ns();
		if (json_array_size(w->events) || !w->end) {
			out = json_pack("{s:o}", "events", w->events);
			w->events = json_array();
		} else {
			end = json_incref(w->end);
		}
	} else if (pp) {
		watcher_drop(pp);
		out = json_object();
	}
	pthread_mutex_unlock(&watchers_mu);
	if (!pp)
		return cx_unary_error(c, 404, "not_found", "no watcher with that ID");
	if (end) {
		if (json_is_true(json_object_get(end, "ok"))) {
			json_decref(end);
			end = json_pack("{s:b, s:i, s:s}", "ok", 0, "code", SBX_EXIT_NOENT, "message",
					"the watch ended");
		}
		return cx_error(c, end);
	}
	return serve_front_answer_json(c, 200, out);
}

/* ---- /files GET -------------------------------------------------------------- */

struct download {
	int fd, sock;
	uint64_t size;
};

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct download *d = cls;
	for (;;) {
		ssize_t k = read(d->fd, buf, max);
		if (k > 0)
			return k;
		if (k < 0 && errno == EINTR)
			continue;
		/* short: the file changed, or the copy was refused midway */
		return pos == d->size ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

static void download_free(void *cls)
{
	struct download *d = cls;
	close(d->fd);
	if (d->sock >= 0)
		close(d->sock);
	free(d);
}

static enum MHD_Result files_get(struct MHD_Connection *c, const void *l, const char *sandbox)
{
	int bad;
	char user[64];
	const char *path = query_path(c, &bad);
	if (bad || call_user(c, user, sizeof user) < 0)
		return files_error(c, 400, "a path or user name that is not one");
	json_t *args = json_pack("{s:s}", "path", path ? path : "");
	if (!args)
		return files_error(c, 400, "a path that is not UTF-8");
	int peer, fds[4], sock = -1;
	unsigned nfds = 0;
	json_t *r = fs_request(c, l, "download", sandbox, user, args, &peer);
	json_t *a = serve_front_call(r, peer, fds, &nfds, &sock);
	if (!json_is_true(json_object_get(a, "ok")) || nfds != 1) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		if (sock >= 0)
			close(sock);
		enum MHD_Result rc = files_error(c, a ? files_status(a) : 503, msg_of(a));
		json_decref(a);
		return rc;
	}
	struct download *d = malloc(sizeof *d);
	json_int_t size = json_integer_value(json_object_get(a, "size"));
	json_decref(a);
	if (!d || size < 0) {
		free(d);
		close(fds[0]);
		close(sock);
		return MHD_NO;
	}
	*d = (struct download){ .fd = fds[0], .sock = sock, .size = (uint64_t)size };
	struct MHD_Response *resp =
		MHD_create_response_from_callback((uint64_t)size, 65536, download_read, d, download_free);
	if (!resp) {
		download_free(d);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
	enum MHD_Result rc = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

enum MHD_Result serve_files_envd(struct MHD_Connection *c, const void *l, const char *url, const char *method,
				 const char *body, size_t n, const char *sandbox)
{
	if (!strcmp(url, "/files"))
		return !strcmp(method, "GET") ? files_get(c, l, sandbox) : files_error(c, 405, "GET or POST");
	const char *rpc = url + strlen("/filesystem.Filesystem/");
	if (!strcmp(method, "POST") && !strcmp(rpc, "WatchDir"))
		return watch_dir(c, l, body, n, sandbox);
	if (strcmp(method, "POST"))
		return serve_front_answer_json(c, 405,
					       json_pack("{s:s, s:s}", "code", "unimplemented", "message", "POST"));
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!ct || strncmp(ct, "application/json", 16))
		return serve_front_answer_json(c, 415,
					       json_pack("{s:s, s:s}", "code", "unimplemented", "message",
							 "only Connect's JSON (application/json) is served"));
	if (!strcmp(rpc, "CreateWatcher") || !strcmp(rpc, "GetWatcherEvents") || !strcmp(rpc, "RemoveWatcher")) {
		json_t *m = n ? json_loadb(body, n, JSON_REJECT_DUPLICATES, NULL) : json_object();
		enum MHD_Result rc = !json_is_object(m) ? cx_unary_error(c, 400, "invalid_argument",
									 "the body is not this call's JSON message")
				     : rpc[0] == 'C'    ? watcher_create(c, l, m, sandbox)
							: watcher_call(c, l, m, sandbox, rpc[0] == 'G');
		json_decref(m);
		return rc;
	}
	return fs_call(c, l, rpc, body, n, sandbox);
}

/* ---- /files POST --------------------------------------------------------------- */

struct serve_upload {
	struct MHD_Connection *c;
	const void *l;
	char sandbox[64], user[64];
	char *path;                   /* ?path=, or NULL: each part's file name */
	struct MHD_PostProcessor *pp; /* multipart; NULL: the body is the file */
	int data, sock;               /* the open part's: its bytes, its call */
	char *name;                   /* its file name */
	uint64_t sent;                /* its bytes so far */
	unsigned parts;
	json_t *entries;
	unsigned status; /* 0, or the first refusal */
	char msg[512];
};

static void fail(struct serve_upload *u, unsigned status, const char *msg)
{
	if (!u->status) {
		u->status = status;
		snprintf(u->msg, sizeof u->msg, "%s", msg);
	}
}

/* The open part's bytes are all sent: what the back made of them. */
static void part_end(struct serve_upload *u)
{
	if (u->sock < 0)
		return;
	if (u->data >= 0)
		close(u->data);
	u->data = -1;
	struct pollfd p = { .fd = u->sock, .events = POLLIN };
	char buf[4096];
	int fds[4];
	unsigned nfds = 0;
	ssize_t k = poll(&p, 1, PART_TIMEOUT_MS) == 1 ? serve_recv(u->sock, buf, sizeof buf, fds, &nfds, 4) : -1;
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	close(u->sock);
	u->sock = -1;
	json_t *a = k > 0 ? json_loads(buf, 0, NULL) : NULL;
	if (json_is_true(json_object_get(a, "ok")))
		json_array_append(u->entries, json_object_get(a, "entry"));
	else
		fail(u, a ? files_status(a) : 503, msg_of(a));
	json_decref(a);
}

static void part_begin(struct serve_upload *u, const char *filename)
{
	part_end(u);
	const char *dest = u->path ? u->path : filename;
	if (u->status)
		return;
	if (!dest || !*dest)
		return fail(u, 400, "no path: neither ?path= nor the part's file name");
	if (++u->parts > UPLOAD_FILES_MAX)
		return fail(u, 400, "too many files in one upload");
	json_t *args = json_pack("{s:s}", "path", dest);
	if (!args)
		return fail(u, 400, "a path that is not UTF-8");
	int peer, fds[4], sock = -1;
	unsigned nfds = 0;
	json_t *r = fs_request(u->c, u->l, "upload", u->sandbox, u->user, args, &peer);
	json_t *a = serve_front_call(r, peer, fds, &nfds, &sock);
	if (!json_is_true(json_object_get(a, "ok")) || nfds != 1) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		if (sock >= 0)
			close(sock);
		fail(u, a ? files_status(a) : 503, msg_of(a));
		json_decref(a);
		return;
	}
	json_decref(a);
	u->data = fds[0];
	u->sock = sock;
}

/* Bytes of the open part; a back that stopped taking them (a cap) says
 * why when the part ends. */
static void part_data(struct serve_upload *u, const char *d, size_t n)
{
	while (u->data >= 0 && n) {
		ssize_t k = send(u->data, d, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			close(u->data);
			u->data = -1;
			break;
		}
		d += k;
		n -= (size_t)k;
	}
}

static enum MHD_Result part_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
				 const char *type, const char *enc, const char *data, uint64_t off, size_t size)
{
	struct serve_upload *u = cls;
	(void)kind;
	(void)type;
	(void)enc;
	if (!key || strcmp(key, "file")) /* envd takes only "file" parts */
		return MHD_YES;
	/* MHD may hand a part's start twice (empty, then its first bytes):
	 * a part is new at offset 0 unless nothing of the open one came yet
	 * under the same name. */
	if (off == 0 && (u->sock < 0 || u->sent || !u->name != !filename || (filename && strcmp(u->name, filename)))) {
		part_begin(u, filename);
		free(u->name);
		u->name = filename ? strdup(filename) : NULL;
		u->sent = 0;
	}
	u->sent += size;
	if (!u->status)
		part_data(u, data, size);
	return MHD_YES;
}

struct serve_upload *serve_files_upload_start(struct MHD_Connection *c, const void *l, const char *url,
					      const char *method)
{
	const char *sandbox = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	if (!sandbox || strcmp(url, "/files") || strcmp(method, "POST"))
		return NULL;
	struct serve_upload *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	*u = (struct serve_upload){ .c = c, .l = l, .data = -1, .sock = -1, .entries = json_array() };
	int bad;
	const char *p = query_path(c, &bad);
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (strlen(sandbox) >= sizeof u->sandbox || bad || call_user(c, u->user, sizeof u->user) < 0)
		fail(u, 400, "a sandbox, path or user name that is not one");
	snprintf(u->sandbox, sizeof u->sandbox, "%s", sandbox);
	if (p && !(u->path = strdup(p)))
		fail(u, 500, "out of memory");
	if (ct && !strncmp(ct, "multipart/form-data", 19)) {
		if (!(u->pp = MHD_create_post_processor(c, 65536, part_iter, u)))
			fail(u, 400, "a multipart body without its boundary");
	} else if (ct && !strncmp(ct, "application/octet-stream", 24)) {
		if (!u->path)
			fail(u, 400, "path query parameter is required for raw body upload");
	} else {
		fail(u, 400, "expected multipart/form-data or application/octet-stream");
	}
	return u;
}

enum MHD_Result serve_files_upload_step(struct MHD_Connection *c, struct serve_upload *u, const char *data, size_t *n)
{
	if (*n) {
		/* After a refusal the rest is read and dropped: the answer
		 * waits for the whole request. */
		if (!u->status) {
			if (u->pp) {
				if (MHD_post_process(u->pp, data, *n) != MHD_YES)
					fail(u, 400, "a malformed multipart body");
			} else {
				if (!u->parts)
					part_begin(u, NULL);
				part_data(u, data, *n);
			}
		}
		*n = 0;
		return MHD_YES;
	}
	if (u->pp) {
		MHD_destroy_post_processor(u->pp);
		u->pp = NULL;
	} else if (!u->parts && !u->status) {
		part_begin(u, NULL); /* an empty file */
	}
	part_end(u);
	if (!u->status && !json_array_size(u->entries))
		fail(u, 400, "no file in the upload");
	if (u->status)
		return files_error(c, u->status, u->msg);
	json_t *e = u->entries;
	u->entries = NULL;
	return serve_front_answer_json(c, 200, e);
}

void serve_files_upload_free(struct serve_upload *u)
{
	if (!u)
		return;
	if (u->pp)
		MHD_destroy_post_processor(u->pp);
	if (u->data >= 0)
		close(u->data);
	if (u->sock >= 0)
		close(u->sock);
	json_decref(u->entries);
	free(u->name);
	free(u->path);
	free(u);
}
