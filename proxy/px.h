/* sbx-proxy's parts (proxy.h), shared among its files and private to
 * proxy/: proxy.c (the records, the connections accepted, the two halves
 * of the process), dns.c (resolving, the guest's DNS), tcp.c (deciding
 * and relaying the guest's TCP connections). */
#ifndef SBX_PX_H
#define SBX_PX_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "egress.h"
#include "err.h"
#include "pkgrules.h"
#include "policy.h"
#include "session.h"
#include "state.h"

#include "proxy.h"

#define RESOLVE_MAX 16  /* addresses of one name */
#define REFUSED_KEYS 64 /* (destination, reason) counted apart in a second */

struct sbx_proxy {
	struct sbx_state st;
	struct sbx_session s;
	struct sbx_policy pol;
	struct sbx_pkgrules rules; /* the package cache's (pkgrules.h), read once at start */
	int log_fd;
	pthread_mutex_t mu;       /* everything below, and net.log */
	pthread_mutex_t audit_mu; /* the audit trail: an append fsyncs, which may be slow,
				   * and must hold up neither answers nor the log */
	int audit_fd;             /* the halves' channel to the writer (wmsg.h); -1: the writer's own */
	int cache_fd;             /* the cache half's: its cache scope (pkgcache.h); -1: none */
	int pkglog_fd;            /* ... and the session's packages.log */
	char *apt_key[16];        /* ... and apt's keyrings (pkgcache.h), by place among apt's */
	size_t apt_key_len[16];
	uint64_t refused[4];    /* the writer's: messages refused, by why (malformed, not
				 * allowed, too large, over the rate) */
	int hosts_fd;           /* $SBX_HOSTS_FILE, opened while it could be */
	unsigned threads;       /* TCP connections accepted and not yet closed */
	unsigned active;        /* of them, admitted (connected out) */
	unsigned dns_tcp, pkg;  /* DNS/TCP and package cache connections open */
	int busy_fd;            /* to the monitor (proxy.h); -1: none */
	char busy_on, busy_off; /* this half's two bytes */
	int busy_sent;          /* what the monitor was last told: some open (1) or none */
	uint64_t bytes;         /* moved so far, both ways */
	json_t *dns_batch;      /* queries answered, not yet in the audit trail */
	uint64_t dns_more;      /* answered past DNS_BATCH_MAX this second */
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
	int log_full; /* the truncation line is written: count only */
	/* The budget of the session's proxy records in the trail (N5), kept
	 * by the half that writes them, under audit_mu: audit.session_max
	 * bytes, then one net.suppressed record and counts only. */
	struct {
		int dfd;                          /* the session's directory (its count, AUDIT_BUDGET_FILE); -1: none */
		uint64_t max, used, saved;        /* bytes: the budget, taken, last saved */
		int over;                         /* net.suppressed is written (for the session, across proxies) */
		int saved_over;                   /* ... and so saved */
		uint64_t left_out[4], left_bytes; /* this proxy's, by type (budget_types) */
	} budget;
};

/* One accepted connection, handed to its thread (malloc'd; the thread frees it). */
struct conn {
	struct sbx_proxy *px;
	int fd;
};

/* proxy.c */
json_t *px_rec_new(struct sbx_proxy *px, const char *proto);
/* The audit trail, with the session's tenant; -1 (err) when the record
 * could not be written. */
int px_audit(struct sbx_proxy *px, const char *type, json_t *f, struct sbx_err *err);
/* Count a refusal: 1 when it is to be written to net.log on its own. */
int px_refusal(struct sbx_proxy *px, const char *proto, const char *verdict, const char *domain, const char *address,
	       unsigned port, const char *reason);
void px_addr_str(const struct sockaddr *sa, char *out, size_t n);
/* One connection of a kind closed: its count down. */
void px_side_done(struct sbx_proxy *px, unsigned *count);

/* dns.c: thread bodies (arg: {px, fd} for UDP, a malloc'd struct conn for TCP) */
void *px_dns_udp_thread(void *arg);
void *px_dns_tcp_thread(void *arg);

/* tcp.c */
void *px_tcp_thread(void *arg);
/* A connection over a cap: reset at once, no thread, counted. */
void px_refuse_now(struct sbx_proxy *px, int fd, int kind, const char *reason);

#endif
