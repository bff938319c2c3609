/* The session's resolver (egress.h): names resolved through the hosts file
 * and the system, filtered by the deny list, and the guest's DNS queries
 * over UDP and TCP answered for the names its policy allows. */
#include "px.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define DNS_TCP_IDLE_MS 10000
#define DNS_BATCH_MAX 64 /* queries listed in a second's dns.query event */
#define HOSTS_MAX (1u << 20)

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
				px_addr_str((struct sockaddr *)&ss[i], a, sizeof a);
				json_array_append_new(answers, json_string(a));
			}
	}
	size_t len = sbx_dns_answer(req, &q, rc, addrs, na, out, cap);
	char tb[16];
	const char *verdict = rc == SBX_DNS_NOERROR ? "allow" : "deny";
	json_t *r = px_rec_new(px, "dns");
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
 * refused one: counted (px_refusal). */
static void dns_record(struct sbx_proxy *px, json_t *r)
{
	if (!r)
		return;
	const char *verdict = json_string_value(json_object_get(r, "verdict"));
	if (verdict && strcmp(verdict, "allow")) {
		if (px_refusal(px, "dns", verdict, json_string_value(json_object_get(r, "domain")), NULL, 53,
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

void *px_dns_udp_thread(void *arg)
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

void *px_dns_tcp_thread(void *arg)
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
	px_side_done(c.px, &c.px->dns_tcp);
	return NULL;
}
