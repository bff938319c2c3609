/* sbx-serve's front: HTTP (libmicrohttpd, a thread per connection), E2B's
 * control API and envd's Connect RPC, as an unprivileged uid in empty
 * namespaces.  Every action is a call to the back (wire.h). */
#include <errno.h>
#include <netdb.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "connect.h"
#include "logs.h"
#include "query.h"
#include "front.h"
#include "serve.h"
#include "tls.h"
#include "util.h"
#include "wire.h"

#define CALL_TIMEOUT_MS (10 * 60 * 1000) /* a create under TCG, with a cold template */

static const struct serve_front_conf *conf;

struct conn {
	char *body;
	size_t n;
	int too_big, throttled;
	struct serve_upload *up; /* /files POST, taken as it arrives (front_files.c) */
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
	ssize_t n = poll(&p, 1, CALL_TIMEOUT_MS) == 1
			    ? serve_recv(sv[0], buf, sizeof buf, fds ? fds : dummy, fds ? nfds : &nd, 4)
			    : -1;
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
	struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, (void *)(body ? body : ""),
								 MHD_RESPMEM_MUST_COPY);
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

/* ---- rates ------------------------------------------------------------ */

/* Each caller (an API key, a sandbox's token, a uid on the unix socket,
 * else its address) draws on a bucket of conf->rate requests a second, up
 * to twice that at once; past it a request is answered 429 with
 * Retry-After.  Callers beyond the table's slots share the oldest's. */
#define RATE_SLOTS 1024
#define RATE_PROBES 8
static struct rate_slot {
	char who[80];
	double tokens;
	uint64_t at;
} rate_tab[RATE_SLOTS];
static pthread_mutex_t rate_mu = PTHREAD_MUTEX_INITIALIZER;

static void caller_of(struct MHD_Connection *c, const struct listener *l, char *who, size_t n)
{
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
	if (l->is_unix) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct ucred cr = { 0 };
		socklen_t cl = sizeof cr;
		if (ci && getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			snprintf(who, n, "uid:%u", (unsigned)cr.uid);
		else
			snprintf(who, n, "unix");
	} else if (key) {
		snprintf(who, n, "key:%.64s", key);
	} else if (tok) {
		snprintf(who, n, "token:%.64s", tok);
	} else {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		char host[64] = "?";
		if (ci && ci->client_addr)
			getnameinfo(ci->client_addr,
				    ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
									   : sizeof(struct sockaddr_in),
				    host, sizeof host, NULL, 0, NI_NUMERICHOST);
		snprintf(who, n, "addr:%s", host);
	}
}

static int rate_take(const char *who)
{
	uint64_t h = 1469598103934665603ull, now = sbx_mono_ns();
	for (const char *p = who; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	double rate = conf->rate, burst = 2.0 * conf->rate;
	pthread_mutex_lock(&rate_mu);
	struct rate_slot *s = NULL, *oldest = NULL;
	for (unsigned i = 0; i < RATE_PROBES && !s; i++) {
		struct rate_slot *t = &rate_tab[(h + i) % RATE_SLOTS];
		if (!strcmp(t->who, who))
			s = t;
		else if (!oldest || t->at < oldest->at)
			oldest = t;
	}
	if (!s) {
		s = oldest;
		snprintf(s->who, sizeof s->who, "%s", who);
		s->tokens = burst;
		s->at = now;
	}
	s->tokens += (double)(now - s->at) / 1e9 * rate;
	if (s->tokens > burst)
		s->tokens = burst;
	s->at = now;
	int ok = s->tokens >= 1.0;
	if (ok)
		s->tokens -= 1.0;
	pthread_mutex_unlock(&rate_mu);
	return ok;
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
	/* What sbx cannot do is refused, not dropped: a sandbox paused at
	 * its timeout (autoPause) keeps its memory and is resumed by a
	 * connect, not by traffic (autoResume), and its network is the
	 * operator's serve.policy, narrowed by allow_internet_access: false. */
	json_t *ap = json_object_get(b, "autoPause"), *apm = json_object_get(b, "autoPauseMemory"),
	       *ar = json_object_get(json_object_get(b, "autoResume"), "enabled"), *net = json_object_get(b, "network"),
	       *ia = json_object_get(b, "allow_internet_access");
	const char *no =
		ap && !json_is_null(ap) && !json_is_boolean(ap) ? "autoPause: expected true or false"
		: json_is_false(apm) ? "autoPauseMemory: false is not served: a paused sandbox keeps its memory"
		: json_is_true(ar)   ? "autoResume is not served: a connect resumes a paused sandbox"
		: net && !json_is_null(net) && json_object_size(net)
			? "network options are not served: the operator's serve.policy decides"
		: ia && !json_is_null(ia) && !json_is_boolean(ia) ? "allow_internet_access: expected true or false"
								  : NULL;
	if (no) {
		json_decref(b);
		return api_error(c, 400, no);
	}
	int peer;
	json_t *r = request(c, l, "create", &peer);
	json_t *v;
	if (json_is_boolean(ia))
		json_object_set(r, "internet", ia);
	if (json_is_true(ap))
		json_object_set_new(r, "auto_pause", json_true());
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
				   const char *id, const char *rest, struct conn *cn)
{
	int peer;
	const char *op = !strcmp(method, "DELETE") && !*rest                      ? "kill"
			 : !strcmp(method, "GET") && !*rest                       ? "get"
			 : !strcmp(method, "POST") && !strcmp(rest, "/connect")   ? "connect"
			 : !strcmp(method, "POST") && !strcmp(rest, "/pause")     ? "pause"
			 : !strcmp(method, "POST") && !strcmp(rest, "/resume")    ? "connect"
			 : !strcmp(method, "POST") && !strcmp(rest, "/timeout")   ? "timeout"
			 : !strcmp(method, "POST") && !strcmp(rest, "/refreshes") ? "refresh"
			 : !strcmp(method, "GET") && !strcmp(rest, "/metrics")    ? "metrics"
			 : !strcmp(method, "POST") && !strcmp(rest, "/fork")      ? "fork"
			 : !strcmp(method, "POST") && !strcmp(rest, "/snapshots") ? "snapshot"
										  : NULL;
	if (!op)
		return api_error(c, 404, "no such route in this service");
	json_t *secs = NULL, *count = NULL, *name = NULL;
	if (!strcmp(op, "snapshot")) { /* {"name": NAME}, optional */
		json_t *b = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, NULL) : json_object();
		json_t *v = json_object_get(b, "name");
		int ok = json_is_object(b) && (!v || json_is_string(v));
		if (ok && v)
			name = json_incref(v);
		json_decref(b);
		if (!ok)
			return api_error(c, 400, "expected {\"name\": NAME}");
	} else if (!strcmp(op, "fork")) { /* {"timeout": seconds, "count": N}, both optional */
		json_t *b = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, NULL) : json_object();
		json_t *t = json_object_get(b, "timeout"), *n = json_object_get(b, "count");
		int ok = json_is_object(b) && (!t || (json_is_integer(t) && json_integer_value(t) > 0)) &&
			 (!n || (json_is_integer(n) && json_integer_value(n) > 0));
		if (ok) {
			secs = t ? json_incref(t) : NULL;
			count = n ? json_incref(n) : NULL;
		}
		json_decref(b);
		if (!ok)
			return api_error(c, 400, "expected {\"timeout\": seconds, \"count\": N}");
	} else if (!strcmp(op, "connect")) {
		/* {"timeout": seconds, "memory": false (reboot)}, both optional */
		json_t *b = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, NULL) : json_object();
		json_t *t = json_object_get(b, "timeout"), *mem = json_object_get(b, "memory");
		int ok = json_is_object(b) &&
			 (!t || json_is_null(t) || (json_is_integer(t) && json_integer_value(t) >= 0));
		int reboot = ok && json_is_false(mem);
		if (ok && json_is_integer(t))
			secs = json_incref(t);
		json_decref(b);
		if (!ok)
			return api_error(c, 400, "expected {\"timeout\": seconds}");
		if (reboot) {
			json_decref(secs);
			return api_error(c, 400, "memory: false (a reboot) is not served: a sandbox resumes as it was");
		}
	} else if (!strcmp(op, "timeout") || !strcmp(op, "refresh")) {
		/* {"timeout": seconds} and {"duration": seconds} */
		json_t *b = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, NULL) : json_object();
		json_t *v = json_object_get(b, !strcmp(op, "timeout") ? "timeout" : "duration");
		int ok = json_is_object(b) &&
			 (v ? json_is_integer(v) && json_integer_value(v) >= 0 : !strcmp(op, "refresh"));
		if (ok && v)
			secs = json_incref(v);
		json_decref(b);
		if (!ok)
			return api_error(c, 400,
					 !strcmp(op, "timeout") ? "expected {\"timeout\": seconds}"
								: "expected {\"duration\": seconds}");
	}
	json_t *r = request(c, l, op, &peer);
	json_object_set_new(r, "id", json_string(id));
	if (secs)
		json_object_set_new(r, "timeout", secs);
	if (count)
		json_object_set_new(r, "count", count);
	if (name)
		json_object_set_new(r, "template", name);
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	if (!strcmp(op, "kill") || !strcmp(op, "pause") || !strcmp(op, "timeout") || !strcmp(op, "refresh")) {
		json_decref(a);
		return answer(c, MHD_HTTP_NO_CONTENT, NULL, NULL);
	}
	if (!strcmp(op, "metrics") || !strcmp(op, "fork")) {
		json_t *m = json_incref(json_object_get(a, !strcmp(op, "fork") ? "forks" : "metrics"));
		json_decref(a);
		return answer_json(c, !strcmp(op, "fork") ? MHD_HTTP_CREATED : MHD_HTTP_OK, m);
	}
	json_object_del(a, "ok");
	return answer_json(c, !strcmp(op, "snapshot") ? MHD_HTTP_CREATED : MHD_HTTP_OK, a);
}

/* GET /snapshots (sandboxID, name; limit and nextToken taken as "all
 * at once") and DELETE /templates/ID (a snapshot's). */
static enum MHD_Result api_snapshots(struct MHD_Connection *c, const struct listener *l, const char *rm_id)
{
	int peer;
	json_t *r = request(c, l, rm_id ? "snapshot_rm" : "snapshots", &peer);
	const char *sb = rm_id ? NULL : MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "sandboxID");
	const char *nm = rm_id ? rm_id : MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "name");
	if (sb)
		json_object_set_new(r, "id", json_string(sb));
	if (nm)
		json_object_set_new(r, "template", json_string(nm));
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	if (rm_id) {
		json_decref(a);
		return answer(c, MHD_HTTP_NO_CONTENT, NULL, NULL);
	}
	json_t *list = json_incref(json_object_get(a, "snapshots"));
	json_decref(a);
	return answer_json(c, MHD_HTTP_OK, list);
}

/* A query parameter that is a whole number (def when absent); -1: bad. */
static int query_u64(struct MHD_Connection *c, const char *k, uint64_t def, uint64_t max, uint64_t *out)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
	char *end;
	*out = def;
	if (!v)
		return 0;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (!*v || *end || errno || x > max || v[0] == '-')
		return -1;
	*out = x;
	return 0;
}

/* GET /sandboxes/ID/logs (start, limit) and /v2/... (cursor, limit,
 * direction): the sandbox's console, read here from the fd the back
 * opened (logs.h). */
static enum MHD_Result api_logs(struct MHD_Connection *c, const struct listener *l, const char *id, int v2)
{
	struct serve_logs_query q = { .v2 = v2 };
	uint64_t from, lim;
	const char *dir = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "direction");
	if (query_u64(c, v2 ? "cursor" : "start", 0, UINT64_MAX / 2, &from) < 0 ||
	    query_u64(c, "limit", SERVE_LOGS_LIMIT, SERVE_LOGS_LIMIT, &lim) < 0 ||
	    (dir && strcmp(dir, "forward") && strcmp(dir, "backward")))
		return api_error(c, 400,
				 v2 ? "expected cursor (ms), limit (1-1000), direction (forward, backward)"
				    : "expected start (ms) and limit (1-1000)");
	q.from_ms = from;
	q.limit = (unsigned)lim;
	q.backward = dir && !strcmp(dir, "backward");
	int peer, fds[4];
	unsigned nfds = 0;
	json_t *r = request(c, l, "logs", &peer);
	json_object_set_new(r, "id", json_string(id));
	json_t *a = call(r, peer, fds, &nfds, NULL);
	if (!json_is_true(json_object_get(a, "ok"))) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return back_error(c, a);
	}
	uint64_t base = (uint64_t)json_integer_value(json_object_get(a, "created_ms"));
	json_decref(a);
	char *buf = malloc(SERVE_LOGS_TAIL);
	size_t n = 0;
	int cut = 0;
	if (buf && nfds >= 1) {
		struct stat sb;
		off_t at = fstat(fds[0], &sb) == 0 && sb.st_size > (off_t)SERVE_LOGS_TAIL ? sb.st_size - SERVE_LOGS_TAIL
											  : 0;
		cut = at > 0;
		ssize_t k;
		while (n < SERVE_LOGS_TAIL && (k = pread(fds[0], buf + n, SERVE_LOGS_TAIL - n, at + (off_t)n)) > 0)
			n += (size_t)k;
	}
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	json_t *out = buf ? serve_logs(buf, n, cut, base, &q) : NULL;
	free(buf);
	return out ? answer_json(c, MHD_HTTP_OK, out) : api_error(c, 500, "out of memory");
}

static enum MHD_Result api_list(struct MHD_Connection *c, const struct listener *l)
{
	int peer;
	json_t *r = request(c, l, "list", &peer);
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return back_error(c, a);
	const char *why = NULL;
	json_t *s = serve_list_filter(json_object_get(a, "sandboxes"),
				      MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "metadata"),
				      MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state"), &why);
	json_decref(a);
	return s ? answer_json(c, MHD_HTTP_OK, s) : api_error(c, 400, why);
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

/* A stream's envelopes are made a block at a time: 128 KiB, ~96 KiB of
 * output each (base64), so a fast command's output costs few envelopes. */
#define STREAM_BLOCK (128u << 10)

struct stream {
	int out, err, in, sock; /* the command's output, its stdin, the call */
	int pty;                /* its terminal's master (Update resizes it); -1: none */
	int started, out_eof, err_eof, ended;
	int want_id; /* a Start: the exec ID (the pid) comes first */
	unsigned pid;
	char sandbox[SBX_ID_MAX + 1];
	unsigned keepalive_s;
	struct stream *next;            /* in running, while its stdin is open */
	char raw[STREAM_BLOCK / 4 * 3]; /* what one data envelope carries, at most */
};

/* The commands started here whose stdin is open, for SendInput and
 * CloseStdin (the other calls go to the back). */
static pthread_mutex_t running_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stream *running;

static void running_add(struct stream *s)
{
	pthread_mutex_lock(&running_mu);
	s->next = running;
	running = s;
	pthread_mutex_unlock(&running_mu);
}

static void running_del(struct stream *s)
{
	pthread_mutex_lock(&running_mu);
	for (struct stream **p = &running; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	pthread_mutex_unlock(&running_mu);
}

static void stream_free(void *cls)
{
	struct stream *s = cls;
	running_del(s);
	int fds[] = { s->out, s->err, s->in, s->sock, s->pty };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(s);
}

/* The back's next message on the call's socket (NULL: none in time). */
static json_t *call_next(int sock, int timeout_ms)
{
	char msg[4096];
	int fds[1];
	unsigned nfds = 0;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	ssize_t n = poll(&p, 1, timeout_ms) == 1 ? serve_recv(sock, msg, sizeof msg, fds, &nfds, 1) : -1;
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	return n > 0 ? json_loads(msg, 0, NULL) : NULL;
}

/* The next envelopes of a Start or Connect stream: start, data, end, then
 * the end of the stream (connect.h). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *s = cls;
	(void)pos;
	if (s->ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (!s->started) {
		s->started = 1;
		if (s->want_id) { /* the session started it, or says why not */
			json_t *a = call_next(s->sock, CALL_TIMEOUT_MS);
			const char *id = json_string_value(json_object_get(a, "exec_id"));
			if (!id || id[0] != 'e') {
				s->ended = 1;
				ssize_t rc = serve_cx_end(buf, max, a);
				json_decref(a);
				return rc;
			}
			s->pid = (unsigned)strtoul(id + 1, NULL, 10);
			json_decref(a);
			if (s->in >= 0)
				running_add(s);
		}
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
			char *raw = s->raw;
			ssize_t n = read(p[i].fd, raw, room < sizeof s->raw ? room : sizeof s->raw);
			if (n > 0)
				return serve_cx_data_event(buf, max,
							   i             ? "stderr"
							   : s->pty >= 0 ? "pty"
									 : "stdout",
							   raw, (size_t)n);
			if (n == 0 || errno != EINTR)
				*(i == 0 ? &s->out_eof : &s->err_eof) = 1;
		}
	}
	/* Both closed: how it ended. */
	running_del(s);
	json_t *e = call_next(s->sock, 30000);
	s->ended = 1;
	ssize_t rc = serve_cx_end(buf, max, e);
	json_decref(e);
	return rc;
}

/* A Connect error code for the back's answer that was not ok. */
static const char *cx_code(json_t *a)
{
	int code = (int)json_integer_value(json_object_get(a, "code"));
	return !a                                                   ? "unavailable"
	       : code == SBX_EXIT_NOENT                             ? "not_found"
	       : code == SERVE_EXIT_NOPERM                          ? "unauthenticated"
	       : code == SBX_EXIT_INVALID || code == SBX_EXIT_USAGE ? "invalid_argument"
	       : code == SBX_EXIT_TEMPFAIL                          ? "resource_exhausted"
	       : code == SBX_EXIT_CONFLICT                          ? "failed_precondition"
								    : "internal";
}

static unsigned cx_status(const char *code)
{
	return !strcmp(code, "not_found")             ? 404
	       : !strcmp(code, "unauthenticated")     ? 401
	       : !strcmp(code, "invalid_argument")    ? 400
	       : !strcmp(code, "resource_exhausted")  ? 429
	       : !strcmp(code, "failed_precondition") ? 412
	       : !strcmp(code, "unavailable")         ? 503
						      : 500;
}

/* A call to the back that opens a stream (exec, attach), streamed. */
static enum MHD_Result stream_call(struct MHD_Connection *c, json_t *r, int peer, const char *sandbox, unsigned pid)
{
	int fds[4], sock = -1;
	unsigned nfds = 0;
	json_t *a = call(r, peer, fds, &nfds, &sock);
	if (!json_is_true(json_object_get(a, "ok")) || nfds < 2) {
		for (unsigned k = 0; k < nfds; k++)
			close(fds[k]);
		if (sock >= 0)
			close(sock);
		const char *m = json_string_value(json_object_get(a, "message"));
		enum MHD_Result rc = stream_error(c, cx_code(a), m ? m : "the service's back end is not answering");
		json_decref(a);
		return rc;
	}
	/* the fds: output, errors, then stdin and the terminal as it says */
	int with_in = json_is_true(json_object_get(a, "stdin")), pty = json_is_true(json_object_get(a, "pty"));
	json_decref(a);
	struct stream *s = (unsigned)(2 + with_in + pty) == nfds ? calloc(1, sizeof *s) : NULL;
	if (!s) {
		for (unsigned k = 0; k < nfds; k++)
			close(fds[k]);
		close(sock);
		return MHD_NO;
	}
	s->out = fds[0];
	s->err = fds[1];
	s->in = with_in ? fds[2] : -1;
	s->pty = pty ? fds[2 + with_in] : -1;
	s->sock = sock;
	s->pid = pid;
	s->want_id = !pid;
	snprintf(s->sandbox, sizeof s->sandbox, "%s", sandbox);
	const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
	s->keepalive_s = ka && atoi(ka) > 0 && atoi(ka) < 3600 ? (unsigned)atoi(ka) : 50;
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, s, stream_free);
	if (!resp) {
		stream_free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
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
	/* pty: {"size": {"cols", "rows"}}: a terminal of that size */
	json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
	json_int_t cols = json_integer_value(json_object_get(size, "cols")),
		   rows = json_integer_value(json_object_get(size, "rows"));
	if (json_object_get(msg, "pty") && (cols < 1 || cols > 1000 || rows < 1 || rows > 1000)) {
		json_decref(msg);
		return stream_error(c, "invalid_argument", "pty.size: cols and rows of 1 to 1000");
	}
	int peer;
	json_t *r = request(c, l, "exec", &peer);
	if (json_object_get(msg, "pty")) {
		json_object_set_new(r, "pty_rows", json_integer(rows));
		json_object_set_new(r, "pty_cols", json_integer(cols));
	}
	json_t *argv = json_array();
	json_array_append(argv, cmd);
	json_t *args = json_object_get(proc, "args"), *v;
	size_t i;
	if (json_is_array(args))
		json_array_foreach (args, i, v)
			json_array_append(argv, v);
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
	/* The client's deadline for the call is the command's: sbx ends it
	 * then (reason timeout), rather than leaving it to run unwatched. */
	const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
	char *end;
	unsigned long ms = to ? strtoul(to, &end, 10) : 0;
	if (to && (*end || !*to || ms > 86400000ul)) {
		json_decref(r);
		json_decref(msg);
		return stream_error(c, "invalid_argument", "Connect-Timeout-Ms: expected milliseconds, at most a day");
	}
	if (ms)
		json_object_set_new(r, "exec_timeout_ms", json_integer((json_int_t)ms));
	json_decref(msg);
	return stream_call(c, r, peer, sandbox, 0);
}

/* The pid a call names: {"process": {"pid": N}} (E2B's selector); 0 for
 * none. */
static unsigned selected_pid(json_t *msg)
{
	json_t *p = json_object_get(json_object_get(msg, "process"), "pid");
	json_int_t v = json_is_integer(p) ? json_integer_value(p) : 0;
	return v > 0 && v < 1000000000 ? (unsigned)v : 0;
}

/* A unary call's body: plain JSON (application/json), else one envelope. */
static json_t *unary_body(struct conn *cn)
{
	json_t *j = cn->n ? json_loadb(cn->body, cn->n, JSON_REJECT_DUPLICATES, NULL) : json_object();
	if (!j)
		j = serve_cx_unwrap(cn->body, cn->n);
	if (j && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

/* Ask the back whether the caller may act on the sandbox at all. */
static int may(struct MHD_Connection *c, const struct listener *l, const char *sandbox, json_t **why)
{
	int peer;
	json_t *r = request(c, l, "get", &peer);
	json_object_set_new(r, "id", json_string(sandbox));
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (json_is_true(json_object_get(a, "ok"))) {
		json_decref(a);
		return 1;
	}
	*why = a;
	return 0;
}

static enum MHD_Result unary_back_error(struct MHD_Connection *c, json_t *a)
{
	const char *code = cx_code(a);
	const char *m = json_string_value(json_object_get(a, "message"));
	enum MHD_Result rc = unary_error(c, cx_status(code), code, m ? m : "the service's back end is not answering");
	json_decref(a);
	return rc;
}

/* SendInput and CloseStdin: the pipe to the command, held here. */
/* Update: a PTY command's terminal takes a new size; the back's exec
 * client gets SIGWINCH from the kernel and tells the guest. */
static enum MHD_Result envd_update(struct MHD_Connection *c, const struct listener *l, const char *sandbox, json_t *msg)
{
	unsigned pid = selected_pid(msg);
	json_t *size = json_object_get(json_object_get(msg, "pty"), "size"), *why = NULL;
	json_int_t cols = json_integer_value(json_object_get(size, "cols")),
		   rows = json_integer_value(json_object_get(size, "rows"));
	if (!pid || cols < 1 || cols > 1000 || rows < 1 || rows > 1000)
		return unary_error(c, 400, "invalid_argument",
				   "expected process.pid and pty.size's cols and rows, 1 to 1000");
	if (!may(c, l, sandbox, &why))
		return unary_back_error(c, why);
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	int found = 0, ok = 0;
	pthread_mutex_lock(&running_mu);
	for (struct stream *s = running; s && !found; s = s->next)
		if (s->pid == pid && !strcmp(s->sandbox, sandbox) && s->pty >= 0) {
			found = 1;
			ok = ioctl(s->pty, TIOCSWINSZ, &ws) == 0;
		}
	pthread_mutex_unlock(&running_mu);
	if (!found)
		return unary_error(c, 404, "not_found", "no running terminal with that pid here");
	return ok ? answer(c, MHD_HTTP_OK, "application/json", "{}")
		  : unary_error(c, 500, "internal", "cannot resize the terminal");
}

static enum MHD_Result envd_stdin(struct MHD_Connection *c, const struct listener *l, const char *sandbox, json_t *msg,
				  int close_it)
{
	unsigned pid = selected_pid(msg);
	json_t *why = NULL;
	if (!may(c, l, sandbox, &why))
		return unary_back_error(c, why);
	json_t *input = json_object_get(msg, "input");
	const char *b64 = json_string_value(json_object_get(input, "stdin"));
	if (!b64) /* a terminal's input is its stdin too */
		b64 = json_string_value(json_object_get(input, "pty"));
	unsigned char *raw = NULL;
	int n = 0;
	if (!close_it) {
		size_t bl = b64 ? strlen(b64) : 0;
		if (!b64 || bl > (4u << 20))
			return unary_error(c, 400, "invalid_argument", "input.stdin: expected base64 of at most 3 MiB");
		/* base64 as JSON carries it: padded; EVP wants whole quads */
		char *padded = malloc(bl + 4);
		raw = malloc(bl / 4 * 3 + 6);
		if (!padded || !raw) {
			free(padded);
			free(raw);
			return MHD_NO;
		}
		memcpy(padded, b64, bl);
		while (bl % 4)
			padded[bl++] = '=';
		n = bl ? EVP_DecodeBlock(raw, (unsigned char *)padded, (int)bl) : 0;
		while (n > 0 && bl > 0 && padded[bl - 1] == '=') {
			n--;
			bl--;
		}
		free(padded);
		if (n < 0) {
			free(raw);
			return unary_error(c, 400, "invalid_argument", "input.stdin: not base64");
		}
	}
	int found = 0, ok = 1;
	pthread_mutex_lock(&running_mu);
	for (struct stream *s = running; s; s = s->next) {
		if (s->pid != pid || strcmp(s->sandbox, sandbox) || s->in < 0)
			continue;
		found = 1;
		if (close_it) {
			close(s->in);
			s->in = -1;
		} else {
			/* A command that does not read blocks the writer: no
			 * waiting here, with the lock held. */
			int fl = fcntl(s->in, F_GETFL);
			fcntl(s->in, F_SETFL, fl | O_NONBLOCK);
			ok = n == 0 || write(s->in, raw, (size_t)n) == n;
		}
		break;
	}
	pthread_mutex_unlock(&running_mu);
	free(raw);
	if (!found)
		return unary_error(c, 404, "not_found", "no running process with that pid and its stdin open here");
	if (!ok)
		return unary_error(c, 429, "resource_exhausted", "the command is not reading its input");
	return answer(c, MHD_HTTP_OK, "application/json", "{}");
}

/* The calls to the back with a pid: SendSignal (pid -> exec eN), List. */
static enum MHD_Result envd_unary(struct MHD_Connection *c, const struct listener *l, const char *sandbox,
				  const char *op, json_t *msg)
{
	int peer;
	json_t *r = request(c, l, op, &peer);
	json_object_set_new(r, "id", json_string(sandbox));
	if (!strcmp(op, "signal")) {
		unsigned pid = selected_pid(msg);
		const char *sig = json_string_value(json_object_get(msg, "signal"));
		json_t *sn = json_object_get(msg, "signal");
		int signo = sig                   ? (!strcmp(sig, "SIGNAL_SIGKILL")   ? 9
						     : !strcmp(sig, "SIGNAL_SIGTERM") ? 15
										      : 0)
			    : json_is_integer(sn) ? (int)json_integer_value(sn)
						  : 0;
		if (!pid || (signo != 9 && signo != 15)) {
			json_decref(r);
			return unary_error(c, 400, "invalid_argument",
					   "expected process.pid and signal SIGKILL or SIGTERM");
		}
		char id[16];
		snprintf(id, sizeof id, "e%u", pid);
		json_object_set_new(r, "exec_id", json_string(id));
		json_object_set_new(r, "signal", json_integer(signo));
	}
	json_t *a = call(r, peer, NULL, NULL, NULL);
	if (!json_is_true(json_object_get(a, "ok")))
		return unary_back_error(c, a);
	json_object_del(a, "ok");
	return answer_json(c, MHD_HTTP_OK, !strcmp(op, "ps") ? a : (json_decref(a), json_object()));
}

static enum MHD_Result envd_connect(struct MHD_Connection *c, const struct listener *l, struct conn *cn,
				    const char *sandbox)
{
	json_t *msg = serve_cx_unwrap(cn->body, cn->n);
	unsigned pid = selected_pid(msg);
	json_decref(msg);
	if (!pid)
		return stream_error(c, "invalid_argument", "process.pid: expected a pid");
	int peer;
	json_t *r = request(c, l, "attach", &peer);
	char id[16];
	snprintf(id, sizeof id, "e%u", pid);
	json_object_set_new(r, "id", json_string(sandbox));
	json_object_set_new(r, "exec_id", json_string(id));
	return stream_call(c, r, peer, sandbox, pid);
}

static enum MHD_Result envd(struct MHD_Connection *c, const struct listener *l, const char *url, const char *method,
			    struct conn *cn, const char *sandbox)
{
	if (!strcmp(url, "/health")) { /* the sandbox is there, and the token its */
		json_t *why = NULL;
		if (may(c, l, sandbox, &why))
			return answer(c, MHD_HTTP_NO_CONTENT, NULL, NULL);
		json_decref(why);
		return api_error(c, 502, "the sandbox is not running");
	}
	if (!strcmp(url, "/files") || !strncmp(url, "/filesystem.Filesystem/", 23))
		return serve_files_envd(c, l, url, method, cn->body, cn->n, sandbox);
	if (strcmp(method, "POST"))
		return api_error(c, 404, "no such route in this service");
	if (!strcmp(url, "/process.Process/Start"))
		return envd_start(c, l, cn, sandbox);
	if (!strcmp(url, "/process.Process/Connect"))
		return envd_connect(c, l, cn, sandbox);
	static const struct {
		const char *path, *op;
	} unary[] = { { "/process.Process/List", "ps" },
		      { "/process.Process/SendSignal", "signal" },
		      { "/process.Process/SendInput", "stdin" },
		      { "/process.Process/CloseStdin", "close" },
		      { "/process.Process/Update", "update" } };
	for (size_t i = 0; i < SBX_ARRAY_LEN(unary); i++) {
		if (strcmp(url, unary[i].path))
			continue;
		json_t *msg = unary_body(cn);
		if (!msg)
			return unary_error(c, 400, "invalid_argument", "the body is not a JSON object");
		enum MHD_Result rc = !strcmp(unary[i].op, "update")  ? envd_update(c, l, sandbox, msg)
				     : !strcmp(unary[i].op, "stdin") ? envd_stdin(c, l, sandbox, msg, 0)
				     : !strcmp(unary[i].op, "close") ? envd_stdin(c, l, sandbox, msg, 1)
								     : envd_unary(c, l, sandbox, unary[i].op, msg);
		json_decref(msg);
		return rc;
	}
	if (!strncmp(url, "/process.Process/", 17))
		return unary_error(c, MHD_HTTP_NOT_IMPLEMENTED, "unimplemented",
				   "not served by this version of sbx-serve");
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
		char who[96];
		caller_of(c, l, who, sizeof who);
		if (!rate_take(who)) { /* its body, if any, is read and dropped */
			cn->throttled = 1;
			return MHD_YES;
		}
		cn->up = serve_files_upload_start(c, l, url, method);
		return MHD_YES;
	}
	if (cn->throttled) {
		if (*upload_n) {
			*upload_n = 0;
			return MHD_YES;
		}
		return api_error(c, MHD_HTTP_TOO_MANY_REQUESTS, "too many requests: slow down");
	}
	if (cn->up)
		return serve_files_upload_step(c, cn->up, upload, upload_n);
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
	if (path_id(url, "/sandboxes/", id, sizeof id, &rest) || path_id(url, "/v2/sandboxes/", id, sizeof id, &rest)) {
		if (!strcmp(method, "GET") && !strcmp(rest, "/logs"))
			return api_logs(c, l, id, !strncmp(url, "/v2/", 4));
		return api_sandbox(c, l, method, id, rest, cn);
	}
	if (!strcmp(url, "/snapshots") && !strcmp(method, "GET"))
		return api_snapshots(c, l, NULL);
	if (path_id(url, "/templates/", id, sizeof id, &rest) && !*rest && !strcmp(method, "DELETE"))
		return api_snapshots(c, l, id);
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
		serve_files_upload_free(cn->up);
		free(cn->body);
		free(cn);
	}
	*ctx = NULL;
}

static struct MHD_Daemon *start(int fd, struct listener *l)
{
	/* TLS is libmicrohttpd's (GnuTLS's), on the TCP listener only: the
	 * unix socket's callers are known by their uid, not by a network. */
	int tls = !l->is_unix && conf->tls_key;
	struct MHD_OptionItem tls_opts[] = { { MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)conf->tls_cert },
					     { MHD_OPTION_HTTPS_MEM_KEY, 0, conf->tls_key },
					     { MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)SERVE_TLS_PRIORITIES },
					     { MHD_OPTION_END, 0, NULL } },
			      none[] = { { MHD_OPTION_END, 0, NULL } };
	return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
					(tls ? MHD_USE_TLS : 0),
				0, NULL, NULL, handle, l, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
				(unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10), MHD_OPTION_NOTIFY_COMPLETED,
				completed, NULL, MHD_OPTION_ARRAY, tls ? tls_opts : none, MHD_OPTION_END);
}

int serve_front_run(const struct serve_front_conf *c, struct sbx_err *err)
{
	static struct listener lu = { 1 }, lt = { 0 };
	conf = c;
	struct MHD_Daemon *du = c->unix_fd >= 0 ? start(c->unix_fd, &lu) : NULL;
	struct MHD_Daemon *dt = c->tcp_fd >= 0 ? start(c->tcp_fd, &lt) : NULL;
	/* GnuTLS holds the key now, in its own memory; this copy goes. */
	if (c->tls_key)
		explicit_bzero(c->tls_key, strlen(c->tls_key));
	if ((c->unix_fd >= 0 && !du) || (c->tcp_fd >= 0 && !dt))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot start the HTTP%s server",
				   c->tcp_fd >= 0 && !dt && c->tls_key ? "S" : "");
	if (c->cli_fd >= 0 && serve_front_cli_start(c->cli_fd, c->ctl) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot serve the CLI socket");
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

/* ---- for the front's other files (front.h) ------------------------------ */

json_t *serve_front_call(json_t *req, int peer, int *fds, unsigned *nfds, int *sock)
{
	return call(req, peer, fds, nfds, sock);
}

json_t *serve_front_request(struct MHD_Connection *c, const void *l, const char *op, int *peer)
{
	return request(c, l, op, peer);
}

enum MHD_Result serve_front_answer_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	return answer_json(c, status, j);
}
