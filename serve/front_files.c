/* The front's side of envd's filesystem API and /files (files.h): what
 * the client sent becomes a call to the back; the bytes of a file pass
 * through as they come, never kept whole. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connect.h"
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

/* WatchDir and the watchers: not served (sbx-serve(8) CAVEATS).  A
 * stream's refusal is its end message; a unary call's its status. */
static enum MHD_Result unimplemented(struct MHD_Connection *c, int stream)
{
	const char *m = "watching directories is not served by sbx-serve";
	if (!stream)
		return serve_front_answer_json(c, 501, json_pack("{s:s, s:s}", "code", "unimplemented", "message", m));
	char buf[512];
	ssize_t k = serve_cx_end_error(buf, sizeof buf, "unimplemented", m);
	struct MHD_Response *r = k > 0 ? MHD_create_response_from_buffer((size_t)k, buf, MHD_RESPMEM_MUST_COPY) : NULL;
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return rc;
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
	if (!strcmp(rpc, "WatchDir"))
		return unimplemented(c, 1);
	if (!strcmp(rpc, "CreateWatcher") || !strcmp(rpc, "GetWatcherEvents") || !strcmp(rpc, "RemoveWatcher"))
		return unimplemented(c, 0);
	if (strcmp(method, "POST"))
		return serve_front_answer_json(c, 405,
					       json_pack("{s:s, s:s}", "code", "unimplemented", "message", "POST"));
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!ct || strncmp(ct, "application/json", 16))
		return serve_front_answer_json(c, 415,
					       json_pack("{s:s, s:s}", "code", "unimplemented", "message",
							 "only Connect's JSON (application/json) is served"));
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
