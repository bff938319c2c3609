/* The session's proxy process (egress.h): listeners made in the session's
 * namespace by the monitor (netns.h), connections out from the host's.
 * One thread per connection, at most max_connections + CONN_SLACK of
 * them: past that a connection is refused where it is accepted, without
 * a thread.  The main thread accepts, and once a second writes what the
 * second brought to the audit trail: the DNS queries answered
 * (dns.query), and every refusal counted by destination and reason
 * (net.refused), so a guest that floods refusals costs the host one
 * audit record a second, never one each.  net.log is capped too. */
#include "egress.h"
#include "audit.h"
#include "cgroup.h"
#include "jail.h"
#include "session.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "pkgcache.h"
#include "proxy.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif

#define SNIFF_TIMEOUT_MS 5000   /* for the guest's first bytes */
#define CONNECT_TIMEOUT_MS 10000
#define DNS_TCP_IDLE_MS 10000
#define CONN_SLACK 8            /* TCP connections being decided past max_connections */
#define DNS_TCP_MAX 8           /* DNS over TCP connections at once */
#define PKG_CONN_MAX 56         /* package cache connections at once */
#define DNS_BATCH_MAX 64        /* queries listed in a second's dns.query event */
#define REFUSED_KEYS 64         /* (destination, reason) counted apart in a second */
#define REFUSED_OTHER "(other destinations and reasons)" /* the rest's key, per protocol */
#define REFUSED_LINES 20        /* refusals a second written to net.log one by one */
#define NETLOG_MAX (4u << 20)   /* net.log's cap; $SBX_NETLOG_MAX overrides */
#define AUDIT_MSG_MAX 65536     /* a record from the network half */
#define AUDIT_PER_SEC 512       /* records a second it may send: a compromised one
				 * cannot hog the shared audit lock */
#define HOSTS_MAX (1u << 20)
/* The network half's uid: SBX_JAIL_UID_BASE + 2^22 + its pid.  pid_max is
 * at most 2^22, so no VMM's jail uid (the base + its pid), live or left
 * on a crashed session's files, is ever one. */
#define PROXY_UID_BASE (SBX_JAIL_UID_BASE + (1u << 22))
#define RESOLVE_MAX 16
#define COPY_BUF 65536
#define HALF_CLOSED_IDLE_MS 30000

struct sbx_proxy {
	struct sbx_state st;
	struct sbx_session s;
	struct sbx_policy pol;
	int log_fd;
	pthread_mutex_t mu; /* everything below, and net.log */
	pthread_mutex_t audit_mu; /* the audit trail: an append fsyncs, which may be slow,
				   * and must hold up neither answers nor the log */
	int audit_fd;       /* the network half's way to it (run_net); -1: its own */
	int hosts_fd;       /* $SBX_HOSTS_FILE, opened while it could be */
	unsigned threads;   /* TCP connections accepted and not yet closed */
	unsigned active;    /* of them, admitted (connected out) */
	unsigned dns_tcp, pkg; /* DNS/TCP and package cache connections open */
	uint64_t bytes;     /* moved so far, both ways */
	json_t *dns_batch;  /* queries answered, not yet in the audit trail */
	uint64_t dns_more;  /* answered past DNS_BATCH_MAX this second */
	struct refusal {
		char proto[4], verdict[8];
		char domain[SBX_HOST_LEN], address[INET6_ADDRSTRLEN];
		unsigned port;
		char reason[160];
		uint64_t count, logged; /* this second; of them, in net.log one by one */
	} ref[REFUSED_KEYS];
	unsigned nref;      /* the last two slots: REFUSED_OTHER for tcp and dns */
	unsigned ref_lines; /* written one by one this second */
	uint64_t log_size, log_max, log_dropped;
	int log_full;       /* the truncation line is written: count only */
};

/* ---- records ---- */

static json_t *rec_new(struct sbx_proxy *px, const char *proto)
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
	line[n] = '\n'; /* one write per record: lines never interleave (O_APPEND) */
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

/* The audit trail, with the session's tenant; -1 (err) when the record
 * could not be written. */
static int audit(struct sbx_proxy *px, const char *type, json_t *f, struct sbx_err *err)
{
	if (!f)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	if (px->audit_fd < 0) {
		if (px->s.tenant[0])
			json_object_set_new(f, "tenant", json_string(px->s.tenant));
		pthread_mutex_lock(&px->audit_mu);
		int rc = sbx_audit_append(&px->st, type, f, err);
		pthread_mutex_unlock(&px->audit_mu);
		return rc;
	}
	/* Through the privileged half, one record at a time; its answer says
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
		return sbx_err_set(err, SBX_EXIT_INTERNAL, k == 1 ? 0 : errno, "the audit trail did not take the record");
	return 0;
}

/* Count a refusal.  1 when it is to be written to net.log on its own
 * (the first REFUSED_LINES of a second), 0 when the second's summary
 * line counts it. */
static int refusal(struct sbx_proxy *px, const char *proto, const char *verdict, const char *domain,
		   const char *address, unsigned port, const char *reason)
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
		audit(px, "dns.query", f, NULL);
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
	audit(px, "net.refused", f, NULL);
	json_decref(f);
}

static void addr_str(const struct sockaddr *sa, char *out, size_t n)
{
	const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
						  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
	if (!inet_ntop(sa->sa_family, a, out, (socklen_t)n))
		snprintf(out, n, "?");
}

static void set_port(struct sockaddr_storage *ss, unsigned port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

/* ---- resolving ---- */

/* A hosts(5) file: every address listed for name.  Read whole each time
 * (it may change), through an fd opened at start: the network half may
 * not open it by name. */
static unsigned hosts_lookup(int fd, const char *name, struct sockaddr_storage *out, unsigned max)
{
	char *buf = malloc(HOSTS_MAX + 1);
	size_t len = 0;
	ssize_t k;
	while (buf && len < HOSTS_MAX && (k = pread(fd, buf + len, HOSTS_MAX - len, (off_t)len)) > 0)
		len += (size_t)k;
	_cleanup_fclose_ FILE *f = buf ? fmemopen(buf, len ? len : 1, "r") : NULL;
	if (buf && !len)
		buf[0] = 0;
	char line[1024];
	unsigned n = 0;
	while (f && n < max && fgets(line, sizeof line, f)) {
		line[strcspn(line, "#\n")] = 0;
		char *save = NULL, *addr = strtok_r(line, " \t", &save), *h;
		if (!addr)
			continue;
		struct sockaddr_storage ss = { 0 };
		struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
		if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1)
			ss.ss_family = AF_INET;
		else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1)
			ss.ss_family = AF_INET6;
		else
			continue;
		while ((h = strtok_r(NULL, " \t", &save)))
			if (!strcasecmp(h, name)) {
				out[n++] = ss;
				break;
			}
	}
	if (f)
		fclose(f), f = NULL;
	free(buf);
	return n;
}

unsigned sbx_proxy_resolve(struct sbx_proxy *px, const char *name, unsigned port, struct sockaddr_storage *out,
			   unsigned max, const char **why)
{
	struct sockaddr_storage all[RESOLVE_MAX];
	unsigned n = 0, kept = 0;
	if (px->hosts_fd >= 0)
		n = hosts_lookup(px->hosts_fd, name, all, RESOLVE_MAX);
	if (!n) {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL, *r;
		if (getaddrinfo(name, NULL, &hints, &res) == 0)
			for (r = res; r && n < RESOLVE_MAX; r = r->ai_next)
				if (r->ai_addrlen <= sizeof all[0]) {
					memset(&all[n], 0, sizeof all[n]);
					memcpy(&all[n++], r->ai_addr, r->ai_addrlen);
				}
		if (res)
			freeaddrinfo(res);
	}
	*why = n ? NULL : "the name does not resolve";
	for (unsigned i = 0; i < n && kept < max; i++) {
		const char *d = sbx_egress_denied_here((struct sockaddr *)&all[i]);
		if (d) {
			*why = d; /* the last reason, if none is left */
			continue;
		}
		out[kept] = all[i];
		set_port(&out[kept++], port);
	}
	if (kept)
		*why = NULL;
	return kept;
}

/* ---- DNS ---- */

static const char *qtype_name(unsigned t, char *buf, size_t n)
{
	switch (t) {
	case SBX_DNS_A: return "A";
	case SBX_DNS_AAAA: return "AAAA";
	default: snprintf(buf, n, "TYPE%u", t); return buf;
	}
}

static const char *rcode_name(int rc)
{
	static const char *const names[] = { "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED" };
	return rc >= 0 && rc < 6 ? names[rc] : "?";
}

/* Answer one query; returns the answer's length (0: none) and in *rec
 * what to log once it is sent (dns_record). */
static size_t dns_handle(struct sbx_proxy *px, const uint8_t *req, size_t n, uint8_t *out, size_t cap, json_t **rec)
{
	*rec = NULL;
	struct sbx_dns_query q;
	int rc = sbx_dns_parse(req, n, &q);
	if (rc < 0)
		return 0;
	const char *why = NULL;
	uint8_t addrs[RESOLVE_MAX * 4];
	unsigned na = 0;
	json_t *answers = json_array();
	if (rc > 0)
		why = rc == SBX_DNS_NOTIMP ? "not a standard query" : "malformed query";
	else if (!px->pol.network.dns)
		rc = SBX_DNS_REFUSED, why = "network.dns is false";
	else if (q.qclass != 1)
		rc = SBX_DNS_REFUSED, why = "not class IN";
	else if (sbx_egress_match_name(&px->pol, q.name, 0) < 0)
		rc = SBX_DNS_REFUSED, why = "not in the allowlist";
	else {
		struct sockaddr_storage ss[RESOLVE_MAX];
		const char *w = NULL;
		unsigned k = sbx_proxy_resolve(px, q.name, 0, ss, RESOLVE_MAX, &w);
		if (!k) {
			rc = w && !strcmp(w, "the name does not resolve") ? SBX_DNS_NXDOMAIN : SBX_DNS_REFUSED;
			why = w;
		}
		/* The guest has IPv4 only: AAAA gets an empty answer, so clients
		 * move on to A at once. */
		for (unsigned i = 0; i < k && q.qtype == SBX_DNS_A; i++)
			if (ss[i].ss_family == AF_INET) {
				char a[INET6_ADDRSTRLEN];
				memcpy(addrs + 4 * na++, &((struct sockaddr_in *)&ss[i])->sin_addr, 4);
				addr_str((struct sockaddr *)&ss[i], a, sizeof a);
				json_array_append_new(answers, json_string(a));
			}
	}
	size_t len = sbx_dns_answer(req, &q, rc, addrs, na, out, cap);
	char tb[16];
	const char *verdict = rc == SBX_DNS_NOERROR ? "allow" : "deny";
	json_t *r = rec_new(px, "dns");
	json_object_set_new(r, "domain", q.name[0] || !rc ? json_string(q.name) : json_null());
	json_object_set_new(r, "qtype", json_string(qtype_name(q.qtype, tb, sizeof tb)));
	json_object_set_new(r, "id", json_integer(q.id)); /* the query's, to match retransmissions */
	json_object_set_new(r, "verdict", json_string(verdict));
	json_object_set_new(r, "rcode", json_string(rcode_name(rc)));
	json_object_set_new(r, "reason", why ? json_string(why) : json_null());
	json_object_set_new(r, "answers", answers);
	*rec = r;
	return len;
}

/* An answered query: net.log, and the second's dns.query batch.  A
 * refused one: counted (refusal). */
static void dns_record(struct sbx_proxy *px, json_t *r)
{
	if (!r)
		return;
	const char *verdict = json_string_value(json_object_get(r, "verdict"));
	if (verdict && strcmp(verdict, "allow")) {
		if (refusal(px, "dns", verdict, json_string_value(json_object_get(r, "domain")), NULL, 53,
			    json_string_value(json_object_get(r, "reason"))))
			sbx_proxy_log(px, r);
		json_decref(r);
		return;
	}
	sbx_proxy_log(px, r);
	json_t *e = json_pack("{s:O, s:O, s:O, s:O}", "domain", json_object_get(r, "domain"), "qtype",
			      json_object_get(r, "qtype"), "verdict", json_object_get(r, "verdict"), "rcode",
			      json_object_get(r, "rcode"));
	json_decref(r);
	pthread_mutex_lock(&px->mu);
	if (json_array_size(px->dns_batch) < DNS_BATCH_MAX)
		json_array_append_new(px->dns_batch, e);
	else
		px->dns_more++, json_decref(e);
	pthread_mutex_unlock(&px->mu);
}

static void *dns_udp_thread(void *arg)
{
	struct sbx_proxy *px = ((void **)arg)[0];
	int fd = (int)(intptr_t)((void **)arg)[1];
	uint8_t req[1500], out[SBX_DNS_MAX];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		ssize_t r = recvfrom(fd, req, sizeof req, 0, (struct sockaddr *)&from, &fl);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		json_t *rec;
		size_t n = dns_handle(px, req, (size_t)r, out, sizeof out, &rec);
		if (n)
			sendto(fd, out, n, MSG_NOSIGNAL, (struct sockaddr *)&from, fl);
		dns_record(px, rec);
	}
}

/* Read exactly n bytes within ms; 0 or -1. */
static int read_full(int fd, uint8_t *p, size_t n, int ms)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t k = read(fd, p + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

struct conn {
	struct sbx_proxy *px;
	int fd;
};

static void side_done(struct sbx_proxy *px, unsigned *count)
{
	pthread_mutex_lock(&px->mu);
	(*count)--;
	pthread_mutex_unlock(&px->mu);
}

static void *dns_tcp_thread(void *arg)
{
	struct conn c = *(struct conn *)arg;
	free(arg);
	uint8_t len[2], req[65535], out[2 + 4096];
	while (read_full(c.fd, len, 2, DNS_TCP_IDLE_MS) == 0) {
		size_t n = (size_t)len[0] << 8 | len[1];
		if (!n || read_full(c.fd, req, n, DNS_TCP_IDLE_MS) < 0)
			break;
		json_t *rec;
		size_t k = dns_handle(c.px, req, n, out + 2, sizeof out - 2, &rec);
		out[0] = (uint8_t)(k >> 8);
		out[1] = (uint8_t)k;
		int sent = k && sbx_write_all(c.fd, out, k + 2) == 0;
		dns_record(c.px, rec);
		if (!sent)
			break;
	}
	close(c.fd);
	side_done(c.px, &c.px->dns_tcp);
	return NULL;
}

static void *pkg_thread(void *arg)
{
	struct conn c = *(struct conn *)arg;
	free(arg);
	struct sbx_pkgcache_cfg cfg = { .st = &c.px->st, .session = c.px->s.id, .tenant = c.px->s.tenant,
					.pkg = &c.px->s.limits.packages, .log_fd = 2 };
	sbx_pkgcache_serve(&cfg, c.fd);
	close(c.fd);
	side_done(c.px, &c.px->pkg);
	return NULL;
}

/* ---- TCP ---- */

/* Connect to the first address that answers within the timeout. */
static int connect_out(struct sockaddr_storage *to, unsigned n, unsigned *used, char *why, size_t wn)
{
	snprintf(why, wn, "no address");
	for (unsigned i = 0; i < n; i++) {
		int fd = socket(to[i].ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			snprintf(why, wn, "socket: %s", strerror(errno));
			continue;
		}
		socklen_t sl = to[i].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
		int r = connect(fd, (struct sockaddr *)&to[i], sl);
		if (r < 0 && errno == EINPROGRESS) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };
			int e = 0;
			socklen_t el = sizeof e;
			r = poll(&pf, 1, CONNECT_TIMEOUT_MS);
			if (r == 0)
				errno = ETIMEDOUT, r = -1;
			else if (r > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e)
				errno = e, r = -1;
			else if (r > 0)
				r = 0;
		}
		if (r == 0) {
			*used = i;
			int fl = fcntl(fd, F_GETFL);
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
			return fd;
		}
		snprintf(why, wn, "connect: %s", strerror(errno));
		close(fd);
	}
	return -1;
}

/* Count n bytes against the session's cap; 0 when over it. */
static int charge(struct sbx_proxy *px, size_t n)
{
	pthread_mutex_lock(&px->mu);
	px->bytes += n;
	int ok = px->bytes <= px->pol.network.max_bytes;
	pthread_mutex_unlock(&px->mu);
	return ok;
}

/* Forward what the flow lets through of the n bytes pending from the
 * guest, keeping the rest.  0, or -1 to stop (*why: the reason, or NULL
 * when the server is gone). */
static int flow_push(struct sbx_proxy *px, struct sbx_http_flow *f, int u, uint8_t *b, size_t *n, int *wait,
		     uint64_t *out, const char **why)
{
	int v = SBX_FLOW_OK;
	size_t k = f ? sbx_http_flow_scan(f, b, *n, &v) : *n;
	*why = NULL;
	if (k) {
		if (!charge(px, k))
			return *why = "network.max_bytes reached", -1;
		if (sbx_write_all(u, b, k) < 0)
			return -1;
		*out += k;
		memmove(b, b + k, *n - k);
		*n -= k;
	}
	*wait = v == SBX_FLOW_WAIT;
	if (v == SBX_FLOW_DENY)
		return *why = f->why, -1;
	return 0;
}

/* Copy both ways until both are done, the guest's bytes through the flow
 * (an HTTP connection's; NULL: opaque), starting with the plen bytes
 * already read into pend (COPY_BUF long).  A request the flow refuses
 * ends the guest's direction there (the server sees the end of the
 * stream), and the answers to the requests before it are still relayed.
 * Returns the reason it stopped early, or NULL. */
static const char *splice_both(struct sbx_proxy *px, int g, int u, struct sbx_http_flow *flow, uint8_t *pend,
			       size_t plen, uint64_t *in, uint64_t *out)
{
	static __thread uint8_t buf[COPY_BUF];
	int gopen = 1, uopen = 1; /* guest -> upstream, upstream -> guest */
	int wait = 0;             /* for the server's answer to an Upgrade */
	const char *why, *refused = NULL;
#define GUEST_BYTES()                                                              \
	do {                                                                       \
		if (flow_push(px, flow, u, pend, &plen, &wait, out, &why) < 0) {  \
			if (!flow || flow->state != SBX_HTTP_DENIED)               \
				return why;                                        \
			refused = why;                                             \
			gopen = 0;                                                 \
			shutdown(u, SHUT_WR);                                      \
		}                                                                  \
	} while (0)
	GUEST_BYTES();
	while (gopen || uopen) {
		int gread = gopen && !wait;
		struct pollfd pf[2] = { { .fd = gread ? g : -1, .events = POLLIN },
					{ .fd = uopen ? u : -1, .events = POLLIN } };
		/* Half-closed, a connection may idle only so long: a peer that
		 * never closes must not hold a connection slot for ever. */
		int r0 = poll(pf, 2, gopen && uopen ? -1 : refused ? SNIFF_TIMEOUT_MS : HALF_CLOSED_IDLE_MS);
		if (r0 < 0) {
			if (errno == EINTR)
				continue;
			return "poll failed";
		}
		if (r0 == 0)
			return refused ? refused : "idle after one side closed";
		for (int k = 0; k < 2; k++) {
			if (!pf[k].revents)
				continue;
			int from = k ? u : g, to = k ? g : u;
			uint8_t *into = k ? buf : pend + plen;
			size_t room = k ? sizeof buf : COPY_BUF - plen;
			ssize_t r = room ? read(from, into, room) : 0;
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				shutdown(to, SHUT_WR);
				if (k)
					uopen = 0;
				else
					gopen = 0;
				if (r < 0)
					return NULL; /* a reset: the end either way */
				continue;
			}
			if (!k) {
				plen += (size_t)r;
				GUEST_BYTES();
				continue;
			}
			*in += (uint64_t)r;
			if (!charge(px, (size_t)r))
				return "network.max_bytes reached";
			if (sbx_write_all(to, buf, (size_t)r) < 0)
				return NULL;
			if (wait && gopen) { /* the answer to an Upgrade: go on, parsing or not */
				sbx_http_flow_response(flow, buf, (size_t)r);
				GUEST_BYTES();
			}
		}
	}
#undef GUEST_BYTES
	return refused;
}

struct attempt {
	char domain[SBX_HOST_LEN];
	char address[INET6_ADDRSTRLEN];
	unsigned port;
	int rule;
	int slot; /* holds one of max_connections */
	int refused; /* admitted, and a later request refused */
	enum sbx_sniff sniff;
	const char *verdict, *reason;
	char why[400];
};

static json_t *attempt_rec(struct sbx_proxy *px, const struct attempt *a, uint64_t in, uint64_t out, uint64_t t0)
{
	json_t *r = rec_new(px, "tcp");
	json_object_set_new(r, "domain", a->domain[0] ? json_string(a->domain) : json_null());
	json_object_set_new(r, "address", json_string(a->address));
	json_object_set_new(r, "port", json_integer(a->port));
	json_object_set_new(r, "verdict", json_string(a->verdict));
	json_object_set_new(r, "reason", a->reason ? json_string(a->reason) : json_null());
	json_object_set_new(r, "sniff", json_string(sbx_sniff_name(a->sniff)));
	if (a->rule >= 0)
		json_object_set_new(r, "rule", json_integer(a->rule));
	json_object_set_new(r, "bytes_in", json_integer((json_int_t)in));
	json_object_set_new(r, "bytes_out", json_integer((json_int_t)out));
	json_object_set_new(r, "duration_ms", json_integer((json_int_t)((sbx_mono_ns() - t0) / 1000000u)));
	return r;
}

/* The verdict of an admitted connection is in the trail before a byte
 * moves; -1 when it cannot be written (the connection is then refused). */
static int connect_audit(struct sbx_proxy *px, const struct attempt *a, uint64_t t0, struct sbx_err *err)
{
	json_t *r = attempt_rec(px, a, 0, 0, t0);
	static const char *const drop[] = { "time", "proto", "bytes_in", "bytes_out", "duration_ms" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(drop); i++)
		json_object_del(r, drop[i]);
	int rc = audit(px, "net.connect", r, err);
	json_decref(r);
	return rc;
}

/* A connection's line in net.log; an admitted one's bytes in the trail
 * (net.close).  A refusal is counted instead (refusal), and written here
 * only when it is among the second's first. */
static void close_log(struct sbx_proxy *px, const struct attempt *a, uint64_t in, uint64_t out, uint64_t t0)
{
	int allowed = !strcmp(a->verdict, "allow");
	if (!allowed && !refusal(px, "tcp", a->verdict, a->domain, a->address, a->port, a->reason))
		return;
	if (allowed && a->refused) /* a later request: the connection was cut there */
		refusal(px, "tcp", "deny", a->domain, a->address, a->port, a->reason);
	json_t *r = attempt_rec(px, a, in, out, t0);
	sbx_proxy_log(px, r);
	if (allowed) {
		json_object_del(r, "time");
		json_object_del(r, "proto");
		audit(px, "net.close", r, NULL);
	}
	json_decref(r);
}

/* Read what the guest sends first, until it names a host (or cannot). */
static enum sbx_sniff sniff(int fd, uint8_t *buf, size_t *n, char *host)
{
	uint64_t deadline = sbx_mono_ns() + SNIFF_TIMEOUT_MS * 1000000ull;
	enum sbx_sniff k = SBX_SNIFF_MORE;
	*n = 0;
	while (k == SBX_SNIFF_MORE && *n < SBX_SNIFF_MAX) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			break;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		ssize_t got = read(fd, buf + *n, SBX_SNIFF_MAX - *n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		*n += (size_t)got;
		k = sbx_sniff_host(buf, *n, host, SBX_HOST_LEN);
	}
	return k == SBX_SNIFF_MORE ? SBX_SNIFF_OTHER : k;
}

/* Decide; on allow, *ufd is the connection out. */
static void decide(struct sbx_proxy *px, int g, const struct sockaddr_in *dst, struct attempt *a, uint8_t *buf,
		   size_t *n, int *ufd)
{
	unsigned port = ntohs(dst->sin_port);
	a->port = port;
	a->rule = -1;
	a->verdict = "deny";
	addr_str((const struct sockaddr *)dst, a->address, sizeof a->address);
	*n = 0;
	*ufd = -1;
	pthread_mutex_lock(&px->mu);
	int over_conn = px->active >= px->pol.network.max_connections;
	int over_bytes = px->bytes >= px->pol.network.max_bytes;
	if (!over_conn && !over_bytes)
		px->active++, a->slot = 1; /* given back unless admitted */
	pthread_mutex_unlock(&px->mu);
	if (over_conn) {
		a->reason = "network.max_connections reached";
		return;
	}
	if (over_bytes) {
		a->reason = "network.max_bytes reached";
		return;
	}
	struct sockaddr_storage to[RESOLVE_MAX];
	unsigned nto = 0;
	/* A raw address: only a cidr rule admits it, and then without a look
	 * at what the guest sends (the server may speak first). */
	int rule = sbx_egress_match_addr(&px->pol, (const struct sockaddr *)dst, port);
	if (rule >= 0) {
		a->rule = rule;
		if ((a->reason = sbx_egress_denied_here((const struct sockaddr *)dst)))
			return;
		memcpy(&to[0], dst, sizeof *dst);
		nto = 1;
	} else {
		a->sniff = sniff(g, buf, n, a->domain);
		if (a->sniff == SBX_SNIFF_BAD) {
			a->domain[0] = 0;
			a->reason = "malformed TLS or HTTP";
			return;
		}
		if (a->sniff == SBX_SNIFF_CONFLICT) {
			a->reason = "the request's target names another host than its Host";
			return;
		}
		struct in6_addr lit;
		if (!a->domain[0] || inet_pton(AF_INET, a->domain, &lit) == 1 || inet_pton(AF_INET6, a->domain, &lit) == 1) {
			a->domain[0] = 0; /* an address is not a name */
			const char *d = sbx_egress_denied((const struct sockaddr *)dst);
			snprintf(a->why, sizeof a->why, "%s%s%s", "raw address not in any cidr rule",
				 d ? "; and denied: " : "", d ? d : "");
			a->reason = a->why;
			return;
		}
		if ((a->rule = sbx_egress_match_name(&px->pol, a->domain, port)) < 0) {
			a->reason = "not in the allowlist";
			return;
		}
		const char *why = NULL;
		nto = sbx_proxy_resolve(px, a->domain, port, to, RESOLVE_MAX, &why);
		if (!nto) {
			snprintf(a->why, sizeof a->why, "%s", why ? why : "no address");
			a->reason = a->why;
			return;
		}
	}
	unsigned used = 0;
	*ufd = connect_out(to, nto, &used, a->why, sizeof a->why);
	addr_str((struct sockaddr *)&to[*ufd >= 0 ? used : 0], a->address, sizeof a->address);
	if (*ufd < 0) {
		a->verdict = "error";
		a->reason = a->why;
		return;
	}
	a->verdict = "allow";
	a->reason = NULL;
}

static void *tcp_thread(void *arg)
{
	struct conn c = *(struct conn *)arg;
	free(arg);
	struct sbx_proxy *px = c.px;
	uint64_t t0 = sbx_mono_ns(), in = 0, out = 0;
	struct attempt a = { 0 };
	struct sockaddr_in dst = { 0 };
	socklen_t dl = sizeof dst;
	uint8_t *buf = malloc(COPY_BUF); /* the sniffed bytes, then the guest's pending ones */
	struct sbx_http_flow *flow = NULL;
	size_t n = 0;
	int u = -1;
	if (!buf || getsockopt(c.fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) < 0) {
		a.verdict = "error";
		a.reason = "no original destination";
		snprintf(a.address, sizeof a.address, "?");
	} else {
		decide(px, c.fd, &dst, &a, buf, &n, &u);
	}
	struct sbx_err err = { 0 };
	if (u >= 0 && connect_audit(px, &a, t0, &err) < 0) {
		/* Fail closed, as the rest of sbx: no record, no connection. */
		close(u);
		u = -1;
		a.verdict = "error";
		snprintf(a.why, sizeof a.why, "cannot write the audit trail: %s", err.msg);
		a.reason = a.why;
	}
	/* An HTTP connection admitted by its name has every later request
	 * checked for the same name; TLS and cidr-admitted ones are opaque. */
	if (u >= 0 && a.sniff == SBX_SNIFF_HTTP && a.domain[0] && (flow = malloc(sizeof *flow)))
		sbx_http_flow_init(flow, a.domain);
	if (u >= 0 && (a.sniff != SBX_SNIFF_HTTP || flow)) {
		const char *stop = splice_both(px, c.fd, u, flow, buf, n, &in, &out);
		a.refused = flow && flow->state == SBX_HTTP_DENIED;
		if (stop) {
			snprintf(a.why, sizeof a.why, "%s", stop);
			a.reason = a.why;
		}
	}
	if (u >= 0)
		close(u);
	free(flow);
	free(buf);
	close(c.fd);
	close_log(px, &a, in, out, t0);
	pthread_mutex_lock(&px->mu);
	px->threads--;
	if (a.slot)
		px->active--;
	pthread_mutex_unlock(&px->mu);
	return NULL;
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

/* A connection over a cap: reset at once, no thread, counted. */
static void refuse_now(struct sbx_proxy *px, int fd, int kind, const char *reason)
{
	char addr[INET6_ADDRSTRLEN] = "10.0.2.2";
	unsigned port = kind == 1 ? 53 : 3141;
	if (kind == 0) {
		struct sockaddr_in dst = { 0 };
		socklen_t dl = sizeof dst;
		if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) == 0) {
			addr_str((struct sockaddr *)&dst, addr, sizeof addr);
			port = ntohs(dst.sin_port);
		} else {
			snprintf(addr, sizeof addr, "?");
			port = 0;
		}
	}
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(fd);
	if (!refusal(px, "tcp", "deny", NULL, addr, port, reason))
		return;
	struct attempt a = { .port = port, .rule = -1, .verdict = "deny", .reason = reason };
	snprintf(a.address, sizeof a.address, "%s", addr);
	json_t *r = attempt_rec(px, &a, 0, 0, sbx_mono_ns());
	sbx_proxy_log(px, r);
	json_decref(r);
}

static void accept_one(struct sbx_proxy *px, int lfd, int kind)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	unsigned *count = kind == 0 ? &px->threads : kind == 1 ? &px->dns_tcp : &px->pkg;
	unsigned cap = kind == 0 ? px->pol.network.max_connections + CONN_SLACK : kind == 1 ? DNS_TCP_MAX : PKG_CONN_MAX;
	pthread_mutex_lock(&px->mu);
	int ok = *count < cap;
	if (ok)
		(*count)++;
	pthread_mutex_unlock(&px->mu);
	if (!ok) {
		refuse_now(px, fd, kind,
			   kind == 0   ? "too many connections at once (network.max_connections, and a few being decided)"
			   : kind == 1 ? "too many DNS connections at once"
				       : "too many package cache connections at once");
		return;
	}
	struct conn *c = malloc(sizeof *c);
	void *(*fn)(void *) = kind == 0 ? tcp_thread : kind == 1 ? dns_tcp_thread : NULL;
	if (kind == 2)
		fn = pkg_thread;
	if (c) {
		*c = (struct conn){ px, fd };
		if (fn && spawn(fn, c) == 0)
			return;
	}
	pthread_mutex_lock(&px->mu);
	(*count)--;
	pthread_mutex_unlock(&px->mu);
	close(fd);
	free(c);
}

/* ---- the process ---- */

/* While it still may: into the session's host cgroup (its pids, memory
 * and CPU caps count the proxy's threads and buffers too: a flood costs
 * the session, not the host); a mount namespace of its own whose whole
 * tree is read-only and nosuid (the state directories stay reachable,
 * and writable, only through the fds opened before, which keep the
 * mounts they were opened on); no core dumps, and not dumpable, so that
 * another session's proxy (the same uid, no capabilities) cannot ptrace
 * it or read its memory through /proc. */
static int confine(struct sbx_proxy *px, struct sbx_err *err)
{
	if (sbx_cgroup_enter(sbx_session_cgroup(&px->s), err) < 0)
		return -1;
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a mount namespace");
	struct mount_attr ma = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID };
	if (syscall(SYS_mount_setattr, -1, "/", AT_RECURSIVE, &ma, sizeof ma) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the root read-only");
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

/* ---- the audit writer ---- */


/* One record from the network half: "TYPE\0{fields}".  Only the proxy's
 * own types, always for this session; a one-byte answer, 0 when it is in
 * the trail. */
static int audit_serve(struct sbx_proxy *px, int fd, uint64_t *sec, unsigned *count)
{
	static char buf[AUDIT_MSG_MAX + 1];
	static const char *const types[] = { "net.connect", "net.close", "dns.query", "net.refused" };
	ssize_t n = recv(fd, buf, AUDIT_MSG_MAX, MSG_DONTWAIT);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	uint8_t rc = 1;
	size_t tl = strnlen(buf, (size_t)n);
	int known = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(types) && tl < (size_t)n; i++)
		known |= !strcmp(buf, types[i]);
	uint64_t now = sbx_mono_ns() / 1000000000ull;
	if (now != *sec)
		*sec = now, *count = 0;
	if (known && (*count)++ < AUDIT_PER_SEC) {
		json_t *f = json_loadb(buf + tl + 1, (size_t)n - tl - 1, JSON_REJECT_DUPLICATES, NULL);
		if (json_is_object(f)) {
			json_object_set_new(f, "session", json_string(px->s.id));
			json_object_del(f, "tenant");
			if (px->s.tenant[0])
				json_object_set_new(f, "tenant", json_string(px->s.tenant));
			rc = sbx_audit_append(&px->st, buf, f, NULL) == 0 ? 0 : 1;
		}
		json_decref(f);
	}
	send(fd, &rc, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	return 1;
}

/* The privileged half: uid 0 without capabilities (it owns the trail),
 * writing the audit records the network half sends, and serving the
 * package cache (which writes the shared cache and the session's files).
 * It ends the network half on SIGTERM, giving it a moment to send its
 * last counts, and ends (non-zero) when it dies. */
static int run_priv(struct sbx_proxy *px, const struct sbx_proxy_args *a, int afd, pid_t child, int sfd,
		    struct sbx_err *err)
{
	int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	if (pidfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot watch the network half");
	if (a->pkg_fd >= 0 && sbx_pkgcache_init(err) < 0)
		return -1;
	struct pollfd pf[4] = { { .fd = sfd, .events = POLLIN },
				{ .fd = afd, .events = POLLIN },
				{ .fd = pidfd, .events = POLLIN },
				{ .fd = a->pkg_fd, .events = POLLIN } };
	uint64_t sec = 0, deadline = 0, next = sbx_mono_ns() + 1000000000ull;
	unsigned count = 0;
	int stopping = 0;
	for (;;) {
		/* Its own refusals (package cache connections past the cap). */
		if (sbx_mono_ns() >= next) {
			second_flush(px);
			next = sbx_mono_ns() + 1000000000ull;
		}
		int r = poll(pf, 4, stopping ? 50 : 1000);
		if (r < 0 && errno != EINTR)
			break;
		if (stopping && sbx_mono_ns() >= deadline) {
			kill(child, SIGKILL);
			break;
		}
		if (r <= 0)
			continue;
		if (pf[0].revents && !stopping) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) < 0)
				continue;
			kill(child, SIGTERM);
			stopping = 1;
			deadline = sbx_mono_ns() + 800000000ull; /* the monitor waits 1 s */
			pf[0].fd = -1;
		}
		if ((pf[1].revents & POLLIN) && !audit_serve(px, afd, &sec, &count))
			pf[1].fd = -1; /* closed: its end is near */
		if (pf[3].revents & POLLIN)
			accept_one(px, pf[3].fd, 2);
		if (pf[2].revents) { /* gone: what it sent last still goes in */
			struct pollfd q = { .fd = afd, .events = POLLIN };
			while (poll(&q, 1, 0) > 0 && (q.revents & POLLIN) && audit_serve(px, afd, &sec, &count))
				;
			break;
		}
	}
	second_flush(px);
	int st = 0;
	while (waitpid(child, &st, 0) < 0 && errno == EINTR)
		;
	if (!stopping)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the network half ended (status %d)", st);
	return 0;
}

/* The network half, as its own uid (PROXY_UID_BASE + its pid): the
 * transparent proxy and the resolver, the parsers of the
 * guest's bytes.  It holds its listeners, net.log and a socket to the
 * privileged half, and nothing else: no state directory, no trail. */
static int run_net(struct sbx_proxy *px, const struct sbx_proxy_args *a, int afd, pid_t priv, int sfd,
		   struct sbx_err *err)
{
	px->audit_fd = afd;
	sbx_state_close(&px->st);
	if (unprivileged(PROXY_UID_BASE + (uid_t)getpid(), priv, err) < 0)
		return -1;
	static void *udp_arg[2];
	udp_arg[0] = px;
	udp_arg[1] = (void *)(intptr_t)a->dns_udp_fd;
	if (a->dns_udp_fd >= 0 && spawn(dns_udp_thread, udp_arg) != 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start the resolver");
	struct pollfd pf[3] = { { .fd = sfd, .events = POLLIN },
				{ .fd = a->tcp_fd, .events = POLLIN },
				{ .fd = a->dns_tcp_fd, .events = POLLIN } };
	/* The second's records are written on time however busy the
	 * listeners are. */
	uint64_t next = sbx_mono_ns() + 1000000000ull;
	for (;;) {
		uint64_t now = sbx_mono_ns();
		if (now >= next) {
			second_flush(px);
			next = now + 1000000000ull;
		}
		int r = poll(pf, 3, (int)((next - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		if (pf[0].revents)
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
	if (rc < 0)
		return -1;
	px->log_fd = openat(dfd, "net.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat sb;
	if (px->log_fd < 0 || fstat(px->log_fd, &sb) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open net.log");
	px->log_size = (uint64_t)sb.st_size; /* a restarted proxy goes on counting */
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

int sbx_proxy_run(const struct sbx_proxy_args *a, struct sbx_err *err)
{
	static struct sbx_proxy px; /* large (the policy); threads share it */
	pthread_mutex_init(&px.mu, NULL);
	pthread_mutex_init(&px.audit_mu, NULL);
	px.log_fd = -1;
	px.audit_fd = -1;
	px.hosts_fd = -1;
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
	if (load(&px, a->id, err) < 0)
		return -1;
	/* Two halves (as OpenSSH's privilege separation): the network half
	 * parses the guest's bytes as an unprivileged uid of its own; this
	 * one, uid 0 without capabilities, writes the audit trail for it and
	 * serves the package cache. */
	pid_t monitor = getppid();
	if (confine(&px, err) < 0)
		return -1;
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the audit socket");
	pid_t priv = getpid(), child = fork();
	if (child < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the network half");
	if (child == 0) {
		close(sp[0]);
		if (a->pkg_fd >= 0)
			close(a->pkg_fd);
		return run_net(&px, a, sp[1], priv, sfd, err);
	}
	close(sp[1]);
	close(a->tcp_fd);
	if (a->dns_tcp_fd >= 0)
		close(a->dns_tcp_fd);
	if (a->dns_udp_fd >= 0)
		close(a->dns_udp_fd);
	if (unprivileged(0, monitor, err) < 0)
		return -1;
	return run_priv(&px, a, sp[0], child, sfd, err);
}
