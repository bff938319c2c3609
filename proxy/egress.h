/* Network egress of a session (policy network.egress: allowlist): what the
 * session's proxy (libexec/sbx/sbx-proxy) does, in two halves.
 *
 * egress.c (here, in proxy/: only the proxy parses these bytes), pure
 * functions over hostile bytes (bounded, no I/O, fuzzed by
 * tests/fuzz/fuzz-egress.c): the host name a connection asks for (TLS SNI
 * or HTTP Host), DNS queries and answers, the allowlist and the fixed deny
 * list.
 *
 * proxy/ (proxy.c, the process; tcp.c; dns.c): a transparent TCP listener (10.0.2.2:3128 in the
 * session's namespace, netns.h) that admits a connection by its name or,
 * for a raw address, by a cidr rule, resolves names itself, checks every
 * address against the deny list when it connects, then copies bytes both
 * ways under the session's connection and byte caps; a resolver
 * (10.0.2.2:53, UDP and TCP) answering only allowlisted names; the package
 * cache's listener (10.0.2.2:3141, pkgcache.h).  Every attempt goes to
 * LIB/sessions/ID/net.log (JSON lines) and to the audit trail. */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "err.h"
#include "policy.h"
#include "state.h"

/* ---- the name a connection asks for ---- */

/* The most the proxy reads before it decides: one TLS record. */
#define SBX_SNIFF_MAX (5 + 16384)
#define SBX_HOST_LEN 254 /* 253 and the NUL */

enum sbx_sniff {
	SBX_SNIFF_MORE = 0, /* could still name a host: read more */
	SBX_SNIFF_TLS,      /* a TLS ClientHello; host its SNI, "" without one */
	SBX_SNIFF_HTTP,     /* an HTTP/1.x request; host its Host header, no port */
	SBX_SNIFF_OTHER,    /* neither TLS nor HTTP: no name */
	SBX_SNIFF_BAD,      /* TLS or HTTP, but malformed (or a name that is not one) */
	SBX_SNIFF_CONFLICT, /* HTTP whose absolute-form (or CONNECT) target names
			     * another host than its Host header; host is the Host */
};

/* Look at the first n bytes the guest sent.  host (hn >= SBX_HOST_LEN) is
 * lowercased, without a trailing dot or port, and holds only letters,
 * digits, '-', '.', or is an IP literal (IPv6 without brackets). */
enum sbx_sniff sbx_sniff_host(const uint8_t *buf, size_t n, char *host, size_t hn);
const char *sbx_sniff_name(enum sbx_sniff k);

/* Every request on an HTTP connection, not just the first: the guest's
 * bytes go through sbx_http_flow_scan before they are forwarded, and each
 * request head must name the host the connection was admitted for (Host,
 * and an absolute-form target agreeing with it).  Bodies are skipped by
 * their framing (Content-Length, chunked); after a request with Upgrade
 * the guest's bytes wait for the server's answer: a 101 makes the rest
 * opaque, anything else means more requests. */
enum sbx_http_state {
	SBX_HTTP_HEAD,
	SBX_HTTP_BODY,
	SBX_HTTP_CHUNK_SIZE,
	SBX_HTTP_CHUNK_DATA,
	SBX_HTTP_CHUNK_END,
	SBX_HTTP_TRAILER,
	SBX_HTTP_UPGRADE_WAIT,
	SBX_HTTP_OPAQUE,
	SBX_HTTP_DENIED,
};
enum { SBX_FLOW_OK, SBX_FLOW_WAIT, SBX_FLOW_DENY };
struct sbx_http_flow {
	char host[SBX_HOST_LEN]; /* the name the connection was admitted for */
	enum sbx_http_state state;
	uint64_t left;     /* of the body or chunk */
	int upgrade;       /* the current request asked for one */
	unsigned requests; /* heads checked */
	char why[320];     /* after SBX_FLOW_DENY */
};
void sbx_http_flow_init(struct sbx_http_flow *f, const char *host);
/* Of the n bytes the guest sent (continuing where the last call left
 * off), how many may be forwarded now; the rest are kept and offered
 * again with more.  *verdict: SBX_FLOW_OK; SBX_FLOW_WAIT (forward, then
 * read nothing more until sbx_http_flow_response); SBX_FLOW_DENY (forward
 * the bytes returned, then close: f->why). */
size_t sbx_http_flow_scan(struct sbx_http_flow *f, const uint8_t *b, size_t n, int *verdict);
/* The server's first bytes after an Upgrade request. */
void sbx_http_flow_response(struct sbx_http_flow *f, const uint8_t *b, size_t n);

/* ---- DNS ---- */

#define SBX_DNS_MAX 512 /* UDP answers (no EDNS) */

enum {
	SBX_DNS_NOERROR = 0,
	SBX_DNS_FORMERR = 1,
	SBX_DNS_SERVFAIL = 2,
	SBX_DNS_NXDOMAIN = 3,
	SBX_DNS_NOTIMP = 4,
	SBX_DNS_REFUSED = 5
};
enum { SBX_DNS_A = 1, SBX_DNS_AAAA = 28 };

struct sbx_dns_query {
	uint16_t id, flags, qtype, qclass;
	char name[SBX_HOST_LEN]; /* lowercased, no trailing dot */
	size_t qlen;             /* bytes of the question, after the header */
};

/* Parse one query.  0: a well-formed standard query of one question;
 * -1: nothing to answer (too short, a response); otherwise the rcode to
 * answer with (FORMERR, NOTIMP), q->id and q->flags filled. */
int sbx_dns_parse(const uint8_t *p, size_t n, struct sbx_dns_query *q);
/* Write the answer to the query req (as parsed into q) into out: rcode,
 * and for NOERROR the addresses (4 bytes each for A, 16 for AAAA) as
 * records with a 60 s TTL, as many as fit in cap.  Returns its length. */
size_t sbx_dns_answer(const uint8_t *req, const struct sbx_dns_query *q, int rcode, const uint8_t *addrs,
		      unsigned naddrs, uint8_t *out, size_t cap);

/* ---- policy ---- */

/* The first allow rule for name on port (0: any port), or -1.  name as
 * sbx_sniff_host gives it; an IP literal matches no domain rule. */
int sbx_egress_match_name(const struct sbx_policy *p, const char *name, unsigned port);
/* The first cidr rule holding the address on port, or -1. */
int sbx_egress_match_addr(const struct sbx_policy *p, const struct sockaddr *sa, unsigned port);
/* The fixed deny list, which beats any allowlist: NULL when the address
 * may be reached, else why not ("loopback", "private (RFC 1918)", ...).
 * The host's own addresses are the proxy's check (they change). */
const char *sbx_egress_denied(const struct sockaddr *sa);
/* Whether sa is in the subnet of the interface address ifa with netmask
 * mask (getifaddrs(3)); NULL mask: ifa itself.  1 or 0. */
int sbx_egress_in_subnet(const struct sockaddr *sa, const struct sockaddr *ifa, const struct sockaddr *mask);

/* The fixed deny list, then the host's own addresses and every address on
 * a subnet of its links (getifaddrs, read at each call): what the proxy
 * and the package cache check before they connect anywhere.  NULL, or why
 * not. */
const char *sbx_egress_denied_here(const struct sockaddr *sa);
#endif
