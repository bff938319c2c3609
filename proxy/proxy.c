/* The session's proxy process (egress.h): listeners made in the session's
 * namespace by the monitor (netns.h), connections out from the host's.
 * One thread per connection, at most max_connections + CONN_SLACK of
 * them: past that a connection is refused where it is accepted, without
 * a thread.  The main thread accepts, and once a second writes what the
 * second brought to the audit trail: the DNS queries answered
 * (dns.query), and every refusal counted by destination and reason
 * (net.refused), so a guest that floods refusals costs the host one
 * audit record a second, never one each.  net.log is capped too. */
#include "px.h"
#include "audit.h"
#include "budget.h"
#include "cgroup.h"
#include "hostconf.h"
#include "jail.h"
#include "netns.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <sha2.h>

#include "pkgcache.h"
#include "wmsg.h"

#define CONN_SLACK 8                                     /* TCP connections being decided past max_connections */
#define DNS_TCP_MAX 8                                    /* DNS over TCP connections at once */
#define PKG_CONN_MAX 56                                  /* package cache connections at once */
#define REFUSED_OTHER "(other destinations and reasons)" /* the rest's key, per protocol */
#define REFUSED_LINES 20                                 /* refusals a second written to net.log one by one */
#define NETLOG_MAX (4u << 20)                            /* net.log's cap; $SBX_NETLOG_MAX overrides */
#define AUDIT_MSG_MAX WMSG_MAX                           /* a message from an unprivileged half */
#define AUDIT_PER_SEC                                                                                                  \
	512 /* records a second each half may send: a compromised                                                      \
	     * one cannot hog the shared audit lock */
#define BUDGET_PER_SEC                                                                                                 \
	2048                                 /* package budget operations a second (one per MiB                        \
					      * fetched, and a few per request) */
#define AUDIT_BUDGET_FILE "proxy-audit.json" /* the budget's count, across proxies */
#define AUDIT_ENVELOPE                                                                                                 \
	160 /* a record's own fields (seq, time, type, prev), counted                                                  \
	     * with its fields against the budget */
/* The network half's uid: SBX_JAIL_UID_BASE + 2^22 + its pid.  pid_max is
 * at most 2^22, so no VMM's jail uid (the base + its pid), live or left
 * on a crashed session's files, is ever one. */
#define PROXY_UID_BASE (SBX_JAIL_UID_BASE + (1u << 22))

/* ---- records ---- */

json_t *px_rec_new(struct sbx_proxy *px, const char *proto)
{
	char t[40];
	sbx_fmt_time(sbx_now_ns(), t, sizeof t);
	return json_pack("{s:s, s:s, s:s}", "time", t, "session", px->s.id, "proto", proto);
}

/* One line of net.log, under px->mu.  Past the cap, one line saying so,
 * and from then on only a count. */
static void log_locked(struct sbx_proxy *px, json_t *rec)
{
	if (px->log_full) {
		px->log_dropped++;
		return;
	}
	char *line = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
	if (!line)
		return;
	size_t n = strlen(line);
	line[n] = '\n';                                 /* one write per record: lines never interleave (O_APPEND) */
	if (px->log_size + n + 1 + 512 > px->log_max) { /* room for the last line */
		free(line);
		char t[40];
		sbx_fmt_time(sbx_now_ns(), t, sizeof t);
		json_t *tr = json_pack("{s:s, s:s, s:s, s:b, s:I}", "time", t, "session", px->s.id, "proto", "log",
				       "truncated", 1, "max_bytes", (json_int_t)px->log_max);
		line = tr ? json_dumps(tr, JSON_COMPACT) : NULL;
		json_decref(tr);
		px->log_full = 1;
		px->log_dropped++;
		if (!line)
			return;
		n = strlen(line);
		line[n] = '\n';
	}
	if (sbx_write_all(px->log_fd, line, n + 1) == 0)
		px->log_size += n + 1;
	free(line);
}

void sbx_proxy_log(struct sbx_proxy *px, json_t *rec)
{
	pthread_mutex_lock(&px->mu);
	log_locked(px, rec);
	pthread_mutex_unlock(&px->mu);
}

/* ---- the budget of the session's records (N5) ----
 *
 * Every second can bring a net.refused and a dns.query record, and each
 * admitted connection a net.connect/net.close pair: bounded a second, not
 * in total.  So the half that writes them counts their bytes, and past
 * audit.session_max writes one net.suppressed record and from then on
 * only counts, by type; when it ends, a net.totals record says how many
 * were left out.  A record left out counts as taken: a connection past
 * the budget is admitted without its own record (its count is in
 * net.totals), not refused.  The count is kept in the session's
 * directory, so a proxy started again (a resume) goes on from it. */

/* The network half's record types (wmsg.h's first four), all of them
 * budgeted. */
#define budget_types wmsg_types
#define BUDGET_TYPES 4

static void budget_save(struct sbx_proxy *px)
{
	if (px->budget.dfd < 0 || (px->budget.saved == px->budget.used && px->budget.saved_over == px->budget.over))
		return;
	char buf[128];
	int n = snprintf(buf, sizeof buf, "{\"schema\":1,\"bytes\":%llu,\"suppressed\":%s}\n",
			 (unsigned long long)px->budget.used, px->budget.over ? "true" : "false");
	if (sbx_atomic_write_at(px->budget.dfd, AUDIT_BUDGET_FILE, buf, (size_t)n, 0600, NULL) == 0) {
		px->budget.saved = px->budget.used;
		px->budget.saved_over = px->budget.over;
	}
}

/* What an earlier proxy of the session took, and the budget, before the
 * writer serves any record. */
static void budget_load(struct sbx_proxy *px)
{
	_cleanup_free_ char *txt =
		px->budget.dfd >= 0 ? sbx_read_small_at(px->budget.dfd, AUDIT_BUDGET_FILE, 4096, NULL) : NULL;
	json_t *o = txt ? json_loads(txt, 0, NULL) : NULL;
	json_int_t b = json_integer_value(json_object_get(o, "bytes"));
	px->budget.used = px->budget.saved = b > 0 ? (uint64_t)b : 0;
	px->budget.over = px->budget.saved_over = json_is_true(json_object_get(o, "suppressed"));
	json_decref(o);
}

/* Append one record of the proxy's, within the budget; audit_mu held. */
static int budget_append(struct sbx_proxy *px, const char *type, json_t *f, struct sbx_err *err)
{
	int k = -1;
	for (size_t i = 0; i < BUDGET_TYPES; i++)
		if (!strcmp(type, budget_types[i]))
			k = (int)i;
	if (k < 0 || !px->budget.max)
		return sbx_audit_append(&px->st, type, f, err);
	char *body = json_dumps(f, JSON_COMPACT);
	uint64_t size = (body ? strlen(body) : 0) + strlen(type) + AUDIT_ENVELOPE;
	free(body);
	if (!px->budget.over && px->budget.used + size <= px->budget.max) {
		if (sbx_audit_append(&px->st, type, f, err) < 0)
			return -1;
		px->budget.used += size;
		return 0;
	}
	px->budget.left_out[k]++;
	px->budget.left_bytes += size;
	if (px->budget.over)
		return 0;
	json_t *s = json_pack("{s:s, s:s, s:I, s:I}", "session", px->s.id, "type_first", type, "budget_bytes",
			      (json_int_t)px->budget.max, "used_bytes", (json_int_t)px->budget.used);
	if (s && px->s.tenant[0])
		json_object_set_new(s, "tenant", json_string(px->s.tenant));
	int rc = s ? sbx_audit_append(&px->st, "net.suppressed", s, err)
		   : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	json_decref(s);
	if (rc < 0) { /* not said: this record is not taken either */
		px->budget.left_out[k]--;
		px->budget.left_bytes -= size;
		return -1;
	}
	px->budget.over = 1;
	budget_save(px);
	return 0;
}

/* The proxy ends: what it left out, if anything, in one record. */
static void budget_totals(struct sbx_proxy *px)
{
	pthread_mutex_lock(&px->audit_mu);
	uint64_t n = 0;
	json_t *by = json_object();
	for (size_t i = 0; by && i < BUDGET_TYPES; i++)
		if (px->budget.left_out[i]) {
			n += px->budget.left_out[i];
			json_object_set_new(by, budget_types[i], json_integer((json_int_t)px->budget.left_out[i]));
		}
	uint64_t bad = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(px->refused); i++)
		bad += px->refused[i];
	if (n || bad) {
		json_t *f = json_pack("{s:s, s:I, s:I, s:I, s:I, s:O}", "session", px->s.id, "budget_bytes",
				      (json_int_t)px->budget.max, "used_bytes", (json_int_t)px->budget.used,
				      "suppressed_records", (json_int_t)n, "suppressed_bytes",
				      (json_int_t)px->budget.left_bytes, "suppressed", by);
		/* What the writer refused of its halves' messages (wmsg.h),
		 * by why: a compromised half shows here. */
		if (f && bad)
			json_object_set_new(f, "refused_messages",
					    json_pack("{s:I, s:I, s:I, s:I}", "malformed", (json_int_t)px->refused[0],
						      "not_allowed", (json_int_t)px->refused[1], "too_large",
						      (json_int_t)px->refused[2], "over_rate",
						      (json_int_t)px->refused[3]));
		if (f && px->s.tenant[0])
			json_object_set_new(f, "tenant", json_string(px->s.tenant));
		if (f)
			sbx_audit_append(&px->st, "net.totals", f, NULL);
		json_decref(f);
	}
	json_decref(by);
	budget_save(px);
	pthread_mutex_unlock(&px->audit_mu);
}

/* The audit trail, with the session's tenant; -1 (err) when the record
 * could not be written. */
int px_audit(struct sbx_proxy *px, const char *type, json_t *f, struct sbx_err *err)
{
	if (!f)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	if (px->audit_fd < 0) {
		if (px->s.tenant[0])
			json_object_set_new(f, "tenant", json_string(px->s.tenant));
		pthread_mutex_lock(&px->audit_mu);
		int rc = budget_append(px, type, f, err);
		pthread_mutex_unlock(&px->audit_mu);
		return rc;
	}
	/* Through the writer, one record at a time; its answer says
	 * whether the record is in the trail. */
	char *body = json_dumps(f, JSON_COMPACT);
	size_t tl = strlen(type), bl = body ? strlen(body) : 0;
	char *msg = body ? malloc(tl + 1 + bl) : NULL;
	if (!msg) {
		free(body);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	}
	memcpy(msg, type, tl + 1);
	memcpy(msg + tl + 1, body, bl);
	free(body);
	uint8_t ans = 1;
	pthread_mutex_lock(&px->audit_mu);
	ssize_t k = tl + 1 + bl <= AUDIT_MSG_MAX ? send(px->audit_fd, msg, tl + 1 + bl, MSG_NOSIGNAL) : -1;
	while (k >= 0 && (k = recv(px->audit_fd, &ans, 1, 0)) < 0 && errno == EINTR)
		;
	pthread_mutex_unlock(&px->audit_mu);
	free(msg);
	if (k != 1 || ans)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, k == 1 ? 0 : errno,
				   "the audit trail did not take the record");
	return 0;
}

/* The session's packages.max_download counter, through the writer (the
 * package cache's budget callback, pkgcache.h): 0 granted, 1 refused, -1
 * not accounted. */
static int px_budget(void *ctx, uint64_t take, uint64_t give, uint64_t *used)
{
	struct sbx_proxy *px = ctx;
	uint8_t q[17], a[9];
	size_t ql = wmsg_budget_encode(q, take, give);
	pthread_mutex_lock(&px->audit_mu);
	ssize_t k = send(px->audit_fd, q, ql, MSG_NOSIGNAL);
	while (k >= 0 && (k = recv(px->audit_fd, a, sizeof a, 0)) < 0 && errno == EINTR)
		;
	pthread_mutex_unlock(&px->audit_mu);
	if (k != (ssize_t)sizeof a || a[0] > 1)
		return -1;
	uint64_t u = 0;
	for (int i = 8; i >= 1; i--)
		u = (u << 8) | a[i];
	*used = u;
	return a[0];
}

static int px_audit_cb(void *ctx, const char *type, json_t *f, struct sbx_err *err)
{
	return px_audit(ctx, type, f, err);
}

/* Count a refusal.  1 when it is to be written to net.log on its own
 * (the first REFUSED_LINES of a second), 0 when the second's summary
 * line counts it. */
int px_refusal(struct sbx_proxy *px, const char *proto, const char *verdict, const char *domain, const char *address,
	       unsigned port, const char *reason)
{
	domain = domain ? domain : "";
	address = address ? address : "";
	reason = reason ? reason : "";
	pthread_mutex_lock(&px->mu);
	struct refusal *r = NULL;
	for (int pass = 0; pass < 2 && !r; pass++) {
		for (unsigned i = 0; i < px->nref && !r; i++) {
			struct refusal *k = &px->ref[i];
			if (k->port == port && !strcmp(k->proto, proto) && !strcmp(k->verdict, verdict) &&
			    !strcmp(k->domain, domain) && !strcmp(k->address, address) &&
			    !strncmp(k->reason, reason, sizeof k->reason - 1))
				r = k;
		}
		if (r || px->nref < REFUSED_KEYS - 2)
			break;
		/* Full: the rest of this protocol's count under one key. */
		verdict = "deny", domain = "", address = "", port = 0, reason = REFUSED_OTHER;
	}
	if (!r) {
		r = &px->ref[px->nref++];
		memset(r, 0, sizeof *r);
		snprintf(r->proto, sizeof r->proto, "%s", proto);
		snprintf(r->verdict, sizeof r->verdict, "%s", verdict);
		snprintf(r->domain, sizeof r->domain, "%s", domain);
		snprintf(r->address, sizeof r->address, "%s", address);
		snprintf(r->reason, sizeof r->reason, "%s", reason);
		r->port = port;
	}
	r->count++;
	int one = px->ref_lines < REFUSED_LINES;
	if (one) {
		px->ref_lines++;
		r->logged++;
	}
	pthread_mutex_unlock(&px->mu);
	return one;
}

static json_t *str_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

/* The second just ended: answered queries as one dns.query event, and
 * refusals as one net.refused event (and, for those not written one by
 * one, a summary line each in net.log).  Taken out under px->mu and
 * appended outside it.  An audit record that cannot be written here is
 * lost with the second; what it counts was refused anyway. */
static void second_flush(struct sbx_proxy *px)
{
	static struct refusal ref[REFUSED_KEYS]; /* the main thread's alone */
	pthread_mutex_lock(&px->mu);
	json_t *batch = json_array_size(px->dns_batch) ? px->dns_batch : NULL;
	uint64_t dns_more = px->dns_more;
	if (batch)
		px->dns_batch = json_array();
	unsigned nref = px->nref;
	memcpy(ref, px->ref, nref * sizeof ref[0]);
	px->nref = 0;
	px->dns_more = 0;
	px->ref_lines = 0;
	char t[40];
	sbx_fmt_time(sbx_now_ns(), t, sizeof t);
	for (unsigned i = 0; i < nref; i++) {
		if (ref[i].count <= ref[i].logged)
			continue;
		json_t *l = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:I}", "time", t, "session", px->s.id, "proto",
				      ref[i].proto, "domain", str_or_null(ref[i].domain), "verdict", ref[i].verdict,
				      "reason", ref[i].reason, "count", (json_int_t)(ref[i].count - ref[i].logged));
		if (l && ref[i].address[0])
			json_object_set_new(l, "address", json_string(ref[i].address));
		if (l && ref[i].port)
			json_object_set_new(l, "port", json_integer(ref[i].port));
		log_locked(px, l);
		json_decref(l);
	}
	pthread_mutex_unlock(&px->mu);
	if (batch) {
		json_t *f = json_pack("{s:s, s:o}", "session", px->s.id, "queries", batch);
		if (f && dns_more)
			json_object_set_new(f, "more", json_integer((json_int_t)dns_more));
		px_audit(px, "dns.query", f, NULL);
		json_decref(f);
	}
	if (!nref)
		return;
	json_t *list = json_array();
	for (unsigned i = 0; list && i < nref; i++) {
		json_t *e = json_pack("{s:s, s:s, s:o, s:s, s:I}", "proto", ref[i].proto, "verdict", ref[i].verdict,
				      "domain", str_or_null(ref[i].domain), "reason", ref[i].reason, "count",
				      (json_int_t)ref[i].count);
		if (e && ref[i].address[0])
			json_object_set_new(e, "address", json_string(ref[i].address));
		if (e && ref[i].port)
			json_object_set_new(e, "port", json_integer(ref[i].port));
		json_array_append_new(list, e);
	}
	json_t *f = list ? json_pack("{s:s, s:o}", "session", px->s.id, "refusals", list) : NULL;
	px_audit(px, "net.refused", f, NULL);
	json_decref(f);
}

void px_addr_str(const struct sockaddr *sa, char *out, size_t n)
{
	const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
						  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
	if (!inet_ntop(sa->sa_family, a, out, (socklen_t)n))
		snprintf(out, n, "?");
}

/* ---- connections ---- */

static void *pkg_thread(void *arg)
{
	struct conn c = *(struct conn *)arg;
	free(arg);
	struct sbx_pkgcache_cfg cfg = { .cache_fd = c.px->cache_fd,
					.pkglog_fd = c.px->pkglog_fd,
					.audit = px_audit_cb,
					.budget = px_budget,
					.ctx = c.px,
					.session = c.px->s.id,
					.tenant = c.px->s.tenant,
					.pkg = &c.px->s.limits.packages,
					.rules = sbx_pkgrules_any(&c.px->rules) ? &c.px->rules : NULL,
					.log_fd = 2 };
	char paths[16][64];
	for (int i = 0; i < 16 && c.px->apt_key[i]; i++) {
		snprintf(paths[i], sizeof paths[i], "/" SBX_PKGCACHE_APT_KEYS "/apt-%d.gpg", i);
		cfg.apt_keyring[i] = paths[i];
	}
	sbx_pkgcache_serve(&cfg, c.fd);
	close(c.fd);
	px_side_done(c.px, &c.px->pkg);
	return NULL;
}

/* This half's connections, to the monitor when they go from none to
 * some or back (proxy.h); px->mu held.  A full pipe (a monitor not
 * reading) leaves busy_sent as it was, and busy_tick tries again. */
static void busy_report(struct sbx_proxy *px)
{
	int busy = px->threads + px->dns_tcp + px->pkg > 0;
	if (px->busy_fd < 0 || busy == px->busy_sent)
		return;
	char b = busy ? px->busy_on : px->busy_off;
	if (write(px->busy_fd, &b, 1) == 1)
		px->busy_sent = busy;
}

static void busy_tick(struct sbx_proxy *px)
{
	pthread_mutex_lock(&px->mu);
	busy_report(px);
	pthread_mutex_unlock(&px->mu);
}

void px_side_done(struct sbx_proxy *px, unsigned *count)
{
	pthread_mutex_lock(&px->mu);
	(*count)--;
	busy_report(px);
	pthread_mutex_unlock(&px->mu);
}

static int spawn(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 << 10);
	int rc = pthread_create(&t, &at, fn, arg);
	pthread_attr_destroy(&at);
	return rc;
}

static void accept_one(struct sbx_proxy *px, int lfd, int kind)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	unsigned *count = kind == 0 ? &px->threads : kind == 1 ? &px->dns_tcp : &px->pkg;
	unsigned cap = kind == 0   ? px->pol.network.max_connections + CONN_SLACK
		       : kind == 1 ? DNS_TCP_MAX
				   : PKG_CONN_MAX;
	pthread_mutex_lock(&px->mu);
	int ok = *count < cap;
	if (ok) {
		(*count)++;
		busy_report(px);
	}
	pthread_mutex_unlock(&px->mu);
	if (!ok) {
		px_refuse_now(
			px, fd, kind,
			kind == 0   ? "too many connections at once (network.max_connections, and a few being decided)"
			: kind == 1 ? "too many DNS connections at once"
				    : "too many package cache connections at once");
		return;
	}
	struct conn *c = malloc(sizeof *c);
	void *(*fn)(void *) = kind == 0 ? px_tcp_thread : kind == 1 ? px_dns_tcp_thread : NULL;
	if (kind == 2)
		fn = pkg_thread;
	if (c) {
		*c = (struct conn){ px, fd };
		if (fn && spawn(fn, c) == 0)
			return;
	}
	px_side_done(px, count);
	close(fd);
	free(c);
}

/* ---- the process ---- */

/* While it still may: into the session's host cgroup (its pids, memory
 * and CPU caps count the proxy's threads and buffers too: a flood costs
 * the session, not the host); a mount namespace of its own whose root is
 * built from the host's system files alone, read-only, nosuid and nodev
 * (jail.h: the state directories stay reachable, and writable, only
 * through the fds opened before; no other mount of the host is copied,
 * so none is kept alive or shown); no core dumps, and not dumpable, so
 * that another session's proxy (the same uid, no capabilities) cannot
 * ptrace it or read its memory through /proc.  The package cache reads
 * sbx.yaml first, by path, while the host's tree is still there. */
static int confine(struct sbx_proxy *px, const struct sbx_proxy_args *a, struct sbx_err *err)
{
	if (sbx_cgroup_enter(sbx_session_cgroup(&px->s), err) < 0)
		return -1;
	if (a->pkg_fd >= 0 && sbx_pkgcache_init(err) < 0)
		return -1;
	if (sbx_jail_system_root(err) < 0)
		return -1;
	/* apt's keyrings, where the cache's gpgv can name them. */
	const char *names[16];
	char nbuf[16][32];
	unsigned nk = 0;
	for (; nk < 16 && px->apt_key[nk]; nk++) {
		snprintf(nbuf[nk], sizeof nbuf[nk], "apt-%u.gpg", nk);
		names[nk] = nbuf[nk];
	}
	if (nk && sbx_jail_system_files(SBX_PKGCACHE_APT_KEYS, names, (const char *const *)px->apt_key, px->apt_key_len,
					nk, err) < 0)
		return -1;
	struct rlimit none = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &none) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot turn off core dumps");
	return 0;
}

/* Nothing the proxy does needs a capability once its files are open: no
 * privilege for a process that parses the guest's bytes all day.  The
 * bounding set goes first (shrinking it takes CAP_SETPCAP); uid, when
 * not 0, is taken before the rest (that takes CAP_SETUID). */
static int drop_caps(uid_t uid)
{
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	if (uid && (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
		return -1;
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };
	if (syscall(SYS_capset, &h, d) < 0)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return -1;
	if (uid) { /* no way back */
		uid_t r, e, s;
		if (getresuid(&r, &e, &s) < 0 || r != uid || e != uid || s != uid || setresuid(0, 0, 0) == 0)
			return errno = EPERM, -1;
	}
	return 0;
}

/* Dropping capabilities and changing uid clear PR_SET_PDEATHSIG: arm it
 * again, and check that the parent is still there to have armed it for. */
static int unprivileged(uid_t uid, pid_t parent, struct sbx_err *err)
{
	if (drop_caps(uid) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot drop privileges");
	if (getppid() != parent)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the parent is gone");
	return sbx_jail_filter(err);
}

/* ---- readiness (netns.h: the monitor waits for it) ---- */

static int ready_fd = -1; /* until this process is ready or has said why not */

static void ready_done(void)
{
	if (ready_fd >= 0)
		close(ready_fd);
	ready_fd = -1;
}

static void ready_say(const struct sbx_err *err)
{
	char m[sizeof err->msg + 16];
	int n = err ? snprintf(m, sizeof m, "E%d %s\n", err->code ? err->code : SBX_EXIT_INTERNAL, err->msg)
		    : snprintf(m, sizeof m, "R");
	if (ready_fd >= 0 && n > 0) /* one write, under PIPE_BUF: never torn by the other half's */
		(void)!write(ready_fd, m, (size_t)n < sizeof m ? (size_t)n : sizeof m - 1);
	ready_done();
}

/* ---- the writer (root, the audit trail and the session's counters) ---- */

/* The network half's word, before its first record: it runs; and the
 * writer's to the cache half, once the network half said it. */
#define NET_READY "ready"

/* Messages a second on one channel (rate limits, wmsg.h). */
struct wrate {
	uint64_t sec;
	unsigned records, budget;
};

/* One message from an unprivileged half (wmsg.h), which may send what
 * allow says: a record appended (its session and tenant forced to this
 * session's, within the budget), or a package budget operation on the
 * session's counter with this session's max_download.  Anything else is
 * refused and counted (px->refused), and answered: the half waits.  0
 * when the channel is closed. */
static int writer_serve(struct sbx_proxy *px, int fd, unsigned allow, struct wrate *r)
{
	static uint8_t buf[AUDIT_MSG_MAX + 1];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return 0;
	if (n < 0)
		return 1;
	uint64_t now = sbx_mono_ns() / 1000000000ull;
	if (now != r->sec)
		r->sec = now, r->records = r->budget = 0;
	struct wmsg m;
	int rc = wmsg_decode(buf, (size_t)n > AUDIT_MSG_MAX ? AUDIT_MSG_MAX + 1 : (size_t)n, allow, &m);
	if (rc < 0) {
		px->refused[rc == WMSG_NOT_ALLOWED ? 1 : rc == WMSG_TOO_LARGE ? 2 : 0]++;
		uint8_t no = 1;
		send(fd, &no, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		return 1;
	}
	if (m.kind == WMSG_BUDGET) {
		uint8_t a[9] = { 2 };
		uint64_t used = 0;
		if (r->budget++ >= BUDGET_PER_SEC) {
			px->refused[3]++;
		} else if (px->budget.dfd >= 0) {
			int b = sbx_counter_take(px->budget.dfd, "pkgbudget.json", "pkgbudget.lock",
						 px->s.limits.packages.max_download, m.give, m.take, 0, NULL, &used,
						 NULL);
			a[0] = b < 0 ? 2 : (uint8_t)b;
		}
		for (int i = 0; i < 8; i++)
			a[1 + i] = (uint8_t)(used >> (8 * i));
		send(fd, a, sizeof a, MSG_NOSIGNAL | MSG_DONTWAIT);
		return 1;
	}
	uint8_t ans = 1;
	if (r->records++ >= AUDIT_PER_SEC) {
		px->refused[3]++;
	} else {
		json_t *f = json_loadb(m.json, m.json_len, JSON_REJECT_DUPLICATES, NULL);
		if (json_is_object(f)) {
			json_object_set_new(f, "session", json_string(px->s.id));
			json_object_del(f, "tenant");
			if (px->s.tenant[0])
				json_object_set_new(f, "tenant", json_string(px->s.tenant));
			pthread_mutex_lock(&px->audit_mu);
			ans = budget_append(px, wmsg_types[m.type], f, NULL) == 0 ? 0 : 1;
			pthread_mutex_unlock(&px->audit_mu);
		} else {
			px->refused[0]++;
		}
		json_decref(f);
	}
	send(fd, &ans, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	return 1;
}

/* The network half says NET_READY once it has dropped its privileges and
 * serves its listeners; nothing else comes first.  Its channel's end
 * (EOF) is its death. */
static int wait_net_ready(int afd, struct sbx_err *err)
{
	char b[sizeof NET_READY];
	struct pollfd pf = { .fd = afd, .events = POLLIN };
	int r;
	while ((r = poll(&pf, 1, SBX_PROXY_START_TIMEOUT_S * 1000)) < 0 && errno == EINTR)
		;
	ssize_t n = r > 0 && (pf.revents & POLLIN) ? recv(afd, b, sizeof b, MSG_DONTWAIT) : -1;
	if (n != (ssize_t)strlen(NET_READY) || memcmp(b, NET_READY, (size_t)n))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the network half did not start");
	return 0;
}

/* The writer: root without capabilities, the one process of the proxy
 * that holds LIB (the audit trail lives in LIB itself) and the session's
 * directory (the counters), and parses nothing but its two channels'
 * messages (wmsg.h).  No listener, no upstream, no cache.  It ends when
 * both halves have closed their channels, with the session's totals. */
static int run_writer(struct sbx_proxy *px, int nfd, int cfd, struct sbx_err *err)
{
	if (wait_net_ready(nfd, err) < 0)
		return -1;
	ready_done(); /* the cache half says it for all three */
	budget_load(px);
	if (send(cfd, NET_READY, strlen(NET_READY), MSG_NOSIGNAL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot reach the cache half");
	struct pollfd pf[2] = { { .fd = nfd, .events = POLLIN }, { .fd = cfd, .events = POLLIN } };
	static const unsigned allow[2] = { WMSG_ALLOW_NET, WMSG_ALLOW_PKG };
	struct wrate rate[2] = { { 0 } };
	uint64_t next = sbx_mono_ns() + 1000000000ull;
	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		if (sbx_mono_ns() >= next) {
			pthread_mutex_lock(&px->audit_mu);
			budget_save(px);
			pthread_mutex_unlock(&px->audit_mu);
			next = sbx_mono_ns() + 1000000000ull;
		}
		int r = poll(pf, 2, 1000);
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; r > 0 && i < 2; i++)
			if (pf[i].revents && !writer_serve(px, pf[i].fd, allow[i], &rate[i]))
				pf[i].fd = -1;
	}
	budget_totals(px);
	return 0;
}

/* ---- the cache half (the recorded pid) ---- */

/* The cache half: SBX_PKGCACHE_UID without capabilities, serving the
 * package cache (the guest's HTTP, the registries' replies) with its
 * scope's directory, packages.log and its channel to the writer.  It
 * ends the network half on SIGTERM (by closing its stop pipe), giving it
 * a moment to send its last counts, then closes its channel so the
 * writer ends with the totals; it ends (non-zero) when either dies. */
static int run_cache(struct sbx_proxy *px, const struct sbx_proxy_args *a, pid_t net, pid_t writer, int sfd,
		     int stop_fd, struct sbx_err *err)
{
	int npfd = (int)syscall(SYS_pidfd_open, net, 0), wpfd = (int)syscall(SYS_pidfd_open, writer, 0);
	if (npfd < 0 || wpfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot watch the other halves");
	if (wait_net_ready(px->audit_fd, err) < 0) /* the writer's word: both run */
		return -1;
	ready_say(NULL); /* all three run: the session may be reported ready */
	struct pollfd pf[4] = { { .fd = sfd, .events = POLLIN },
				{ .fd = npfd, .events = POLLIN },
				{ .fd = wpfd, .events = POLLIN },
				{ .fd = a->pkg_fd, .events = POLLIN } };
	uint64_t deadline = 0, next = sbx_mono_ns() + 1000000000ull;
	int stopping = 0, lost = 0;
	for (;;) {
		/* Its own refusals (package cache connections past the cap). */
		if (sbx_mono_ns() >= next) {
			second_flush(px);
			busy_tick(px);
			next = sbx_mono_ns() + 1000000000ull;
		}
		int r = poll(pf, 4, stopping ? 50 : 1000);
		if (r < 0 && errno != EINTR)
			break;
		if (stopping && sbx_mono_ns() >= deadline)
			break; /* it dies with us (its death signal) */
		if (r <= 0)
			continue;
		if (pf[0].revents && !stopping) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) < 0)
				continue;
			/* Not kill(): this uid may not signal the network
			 * half's.  Closing its stop pipe tells it. */
			close(stop_fd);
			stop_fd = -1;
			stopping = 1;
			deadline = sbx_mono_ns() + 800000000ull; /* the monitor waits 1 s */
			pf[0].fd = -1;
		}
		if (pf[3].revents & POLLIN)
			accept_one(px, pf[3].fd, 2);
		if (pf[2].revents) { /* the writer: nothing can be recorded any more */
			lost = 2;
			break;
		}
		if (pf[1].revents) { /* its last records are with the writer */
			lost = !stopping;
			break;
		}
	}
	if (lost != 2) {
		/* Our last counts, then our channel's end: the writer
		 * writes the totals and ends. */
		second_flush(px);
		pthread_mutex_lock(&px->audit_mu);
		shutdown(px->audit_fd, SHUT_RDWR);
		pthread_mutex_unlock(&px->audit_mu);
		struct pollfd w = { .fd = wpfd, .events = POLLIN };
		uint64_t now = sbx_mono_ns(), until = now + 150000000ull;
		if (!stopping || deadline > until)
			until = deadline > now ? deadline : now + 150000000ull;
		while (poll(&w, 1, (int)((until - sbx_mono_ns()) / 1000000u) + 1) < 0 && errno == EINTR)
			;
	}
	if (stop_fd >= 0)
		close(stop_fd);
	int st = 0;
	waitpid(net, &st, WNOHANG);
	waitpid(writer, NULL, WNOHANG);
	if (lost == 2)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the proxy's audit writer ended");
	if (lost)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the network half ended (status %d)", st);
	return 0;
}

/* The network half, as its own uid (PROXY_UID_BASE + its pid): the
 * transparent proxy and the resolver, the parsers of the
 * guest's bytes.  It holds its listeners, net.log and a socket to the
 * writer, and nothing else: no state directory, no trail, no cache. */
static int run_net(struct sbx_proxy *px, const struct sbx_proxy_args *a, int afd, pid_t priv, int sfd, int stop_fd,
		   struct sbx_err *err)
{
	px->audit_fd = afd;
	if (unprivileged(PROXY_UID_BASE + (uid_t)getpid(), priv, err) < 0)
		return -1;
	static void *udp_arg[2];
	udp_arg[0] = px;
	udp_arg[1] = (void *)(intptr_t)a->dns_udp_fd;
	if (a->dns_udp_fd >= 0 && spawn(px_dns_udp_thread, udp_arg) != 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start the resolver");
	if (send(afd, NET_READY, strlen(NET_READY), MSG_NOSIGNAL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot reach the writer");
	ready_done(); /* the cache half says it for all three */
	struct pollfd pf[4] = { { .fd = sfd, .events = POLLIN },
				{ .fd = a->tcp_fd, .events = POLLIN },
				{ .fd = a->dns_tcp_fd, .events = POLLIN },
				{ .fd = stop_fd, .events = POLLIN } };
	/* The second's records are written on time however busy the
	 * listeners are. */
	uint64_t next = sbx_mono_ns() + 1000000000ull;
	for (;;) {
		uint64_t now = sbx_mono_ns();
		if (now >= next) {
			second_flush(px);
			busy_tick(px);
			next = now + 1000000000ull;
		}
		int r = poll(pf, 4, (int)((next - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		if (pf[0].revents || pf[3].revents) /* a signal, or the cache half says stop */
			break;
		for (int k = 1; k < 3; k++)
			if (pf[k].revents & POLLIN)
				accept_one(px, pf[k].fd, k - 1);
	}
	second_flush(px);
	return 0;
}

static int load(struct sbx_proxy *px, const char *id, struct sbx_err *err)
{
	if (sbx_state_open(&px->st, err) < 0 || sbx_record_load(&px->st, id, &px->s, err) < 0)
		return -1;
	_cleanup_close_ int dfd = openat(px->st.sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the session directory");
	_cleanup_free_ char *txt = sbx_read_small_at(dfd, "policy.json", 1 << 20, NULL);
	json_t *o = txt ? json_loads(txt, JSON_REJECT_DUPLICATES, NULL) : NULL;
	sbx_policy_defaults(&px->pol);
	int rc = o ? sbx_policy_network_from_json(o, &px->pol, err)
		   : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the session's policy.json");
	json_decref(o);
	/* The package rules, as the record names them: a file that is not
	 * that one stops the proxy rather than serve without them. */
	if (rc < 0 || sbx_pkgrules_load(dfd, &px->s.limits.packages, &px->rules, err) < 0)
		return -1;
	px->log_fd = openat(dfd, "net.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat sb;
	if (px->log_fd < 0 || fstat(px->log_fd, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open net.log");
	px->log_size = (uint64_t)sb.st_size; /* a restarted proxy goes on counting */
	static struct sbx_hostconf hc;       /* large */
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	px->budget.max = hc.audit.session_max ? hc.audit.session_max : SBX_AUDIT_SESSION_MAX_DEFAULT;
	if ((px->budget.dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 0)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the session directory");
	const char *hf = getenv("SBX_HOSTS_FILE");
	if (hf && *hf && (px->hosts_fd = open(hf, O_RDONLY | O_CLOEXEC)) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot open SBX_HOSTS_FILE %s", hf);
	px->log_max = NETLOG_MAX;
	const char *e = getenv("SBX_NETLOG_MAX");
	if (e && *e) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);
		if (*end || v < 4096)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "SBX_NETLOG_MAX is not a number of bytes >= 4096");
		px->log_max = v;
	}
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* apt's keyrings, written beside the record at create (aptsrc.h), each
 * read whole and checked against the record's SHA-256 of it: a keyring
 * that is not the one the session was created with stops the proxy
 * rather than verify an archive with other keys. */
static int apt_keys_open(struct sbx_proxy *px, struct sbx_err *err)
{
	const struct sbx_limit_packages *k = &px->s.limits.packages;
	unsigned n = 0;
	for (unsigned i = 0; i < k->nreg && n < 16; i++) {
		if (k->reg[i].type != SBX_REG_APT)
			continue;
		char name[32], got[65];
		size_t len = 0;
		snprintf(name, sizeof name, "apt-%u.gpg", n);
		char *buf = sbx_read_small_at(px->budget.dfd, name, 1u << 20, &len);
		if (buf) {
			SHA2_CTX h;
			SHA256Init(&h);
			SHA256Update(&h, (const uint8_t *)buf, len);
			SHA256End(&h, got);
		}
		if (!buf || strcmp(got, k->reg[i].keyring_sha256)) {
			free(buf);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno,
					   "the session's %s is missing or not the keyring it was created with", name);
		}
		px->apt_key[n] = buf;
		px->apt_key_len[n++] = len;
	}
	return 0;
}

/* What the package cache holds, opened as root before anyone drops: its
 * scope's directory (handed to SBX_PKGCACHE_UID; an older sbx's, root's,
 * handed over here once) and the session's packages.log. */
static int cache_open(struct sbx_proxy *px, const struct sbx_proxy_args *a, struct sbx_err *err)
{
	if (a->pkg_fd < 0)
		return 0;
	px->cache_fd = sbx_pkgcache_scope_open(px->st.lib_fd, px->s.tenant, SBX_PKGCACHE_UID, err);
	if (px->cache_fd < 0)
		return -1;
	px->pkglog_fd =
		openat(px->budget.dfd, "packages.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (px->pkglog_fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open packages.log");
	return apt_keys_open(px, err);
}

static int run(const struct sbx_proxy_args *a, struct sbx_err *err)
{
	static struct sbx_proxy px; /* large (the policy); threads share it */
	pthread_mutex_init(&px.mu, NULL);
	pthread_mutex_init(&px.audit_mu, NULL);
	px.log_fd = -1;
	px.audit_fd = -1;
	px.hosts_fd = -1;
	px.budget.dfd = -1;
	px.cache_fd = px.pkglog_fd = -1;
	px.busy_fd = a->busy_fd;
	px.dns_batch = json_array();
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL); /* before any thread: all inherit it */
	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0 || !px.dns_batch)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set up");
	if (load(&px, a->id, err) < 0 || cache_open(&px, a, err) < 0)
		return -1;
	/* Three processes (as OpenSSH's privilege separation, one step
	 * further): the network half parses the guest's bytes as a uid of
	 * its own; the cache half (this one, the pid the record names)
	 * serves the package cache as SBX_PKGCACHE_UID; the writer, root
	 * without capabilities, holds LIB for the audit trail and the
	 * session's counters and parses only what the two send it. */
	pid_t monitor = getppid();
	int san_net = sbx_jail_report_spare(), san_w = sbx_jail_report_spare(); /* sanitized builds' report files */
	if (confine(&px, a, err) < 0)
		return -1;
	int nch[2], cch[2], stop[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, nch) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, cch) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the audit sockets");
	if (pipe2(stop, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the stop pipe");
	int listeners[] = { a->tcp_fd, a->dns_udp_fd, a->dns_tcp_fd, a->pkg_fd };
	pid_t top = getpid(), writer = fork();
	if (writer < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the audit writer");
	if (writer == 0) {
		/* LIB and the session's directory, its two channels: nothing
		 * of the network, the guest or the cache. */
		sbx_jail_report_use(san_w);
		close_fd(&san_net);
		int *drop[] = { &nch[1],
				&cch[0],
				&stop[0],
				&stop[1],
				&px.busy_fd,
				&px.log_fd,
				&px.hosts_fd,
				&px.cache_fd,
				&px.pkglog_fd,
				&px.st.run_fd,
				&px.st.rsessions_fd,
				&px.st.sessions_fd };
		for (size_t i = 0; i < SBX_ARRAY_LEN(drop); i++)
			close_fd(drop[i]);
		for (size_t i = 0; i < SBX_ARRAY_LEN(listeners); i++)
			close_fd(&listeners[i]);
		if (unprivileged(0, top, err) < 0)
			return -1;
		return run_writer(&px, nch[0], cch[1], err);
	}
	pid_t net = fork();
	if (net < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the network half");
	if (net == 0) {
		px.busy_on = SBX_PROXY_BUSY_NET;
		px.busy_off = SBX_PROXY_IDLE_NET;
		sbx_jail_report_use(san_net);
		close_fd(&san_w);
		int *drop[] = { &nch[0], &cch[0], &cch[1], &stop[1], &px.budget.dfd, &px.cache_fd, &px.pkglog_fd };
		for (size_t i = 0; i < SBX_ARRAY_LEN(drop); i++)
			close_fd(drop[i]);
		close_fd(&listeners[3]);
		sbx_state_close(&px.st);
		return run_net(&px, a, nch[1], top, sfd, stop[0], err);
	}
	px.busy_on = SBX_PROXY_BUSY_PKG;
	px.busy_off = SBX_PROXY_IDLE_PKG;
	/* Of LIB, only the cache scope and packages.log stay: not LIB, not
	 * the session's directory, not RUN (every session's sockets). */
	int *drop[] = { &san_net, &san_w, &nch[0], &nch[1], &cch[1], &stop[0], &px.budget.dfd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(drop); i++)
		close_fd(drop[i]);
	for (size_t i = 0; i < 3; i++)
		close_fd(&listeners[i]);
	sbx_state_close(&px.st);
	px.audit_fd = cch[0];
	if (unprivileged(SBX_PKGCACHE_UID, monitor, err) < 0)
		return -1;
	return run_cache(&px, a, net, writer, sfd, stop[1], err);
}

int sbx_proxy_run(const struct sbx_proxy_args *a, struct sbx_err *err)
{
	ready_fd = a->ready_fd;
	if (run(a, err) == 0)
		return 0;
	ready_say(err); /* either half, whichever failed: its own message */
	return -1;
}
