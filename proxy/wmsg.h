/* The proxy's writer channel (proxy.c): what its two unprivileged halves
 * (the network half and the package cache) send to the root-only writer
 * of the session's audit trail and counters, and what it answers.  Pure:
 * no I/O, fuzzed (tests/fuzz/fuzz-wmsg.c).
 *
 * One SOCK_SEQPACKET message each way:
 *   record  TYPE '\0' JSON          TYPE one of wmsg_types[] the channel may
 *                                   send; JSON an object (parsed by the
 *                                   writer, which forces its session and
 *                                   tenant): answer one byte, 0 when it is
 *                                   in the trail
 *   budget  '\1' TAKE GIVE          u64 little-endian each: the session's
 *                                   packages.max_download counter; answer
 *                                   one byte (0 granted, 1 refused, 2 not
 *                                   accounted) and USED, a u64
 * A message past WMSG_MAX, or one that does not decode, is refused (the
 * one-byte answer 1) and counted; it never ends the writer. */
#ifndef SBX_PROXY_WMSG_H
#define SBX_PROXY_WMSG_H

#include <stddef.h>
#include <stdint.h>

#define WMSG_MAX 65536 /* a message, either kind */
#define WMSG_BUDGET_OP 1

enum wmsg_type { WMSG_NET_CONNECT, WMSG_NET_CLOSE, WMSG_DNS_QUERY, WMSG_NET_REFUSED, WMSG_PACKAGE_FETCH, WMSG_TYPES };
extern const char *const wmsg_types[WMSG_TYPES];

/* What each channel may send: a bit per wmsg_type, WMSG_ALLOW_BUDGET for
 * budget operations. */
#define WMSG_BIT(t) (1u << (t))
#define WMSG_ALLOW_BUDGET (1u << 31)
#define WMSG_ALLOW_NET                                                                                                 \
	(WMSG_BIT(WMSG_NET_CONNECT) | WMSG_BIT(WMSG_NET_CLOSE) | WMSG_BIT(WMSG_DNS_QUERY) | WMSG_BIT(WMSG_NET_REFUSED))
#define WMSG_ALLOW_PKG (WMSG_BIT(WMSG_PACKAGE_FETCH) | WMSG_BIT(WMSG_NET_REFUSED) | WMSG_ALLOW_BUDGET)

enum wmsg_kind { WMSG_RECORD = 1, WMSG_BUDGET };

struct wmsg {
	enum wmsg_kind kind;
	enum wmsg_type type; /* a record's */
	const char *json;    /* a record's fields, not NUL-terminated: json_loadb */
	size_t json_len;
	uint64_t take, give; /* a budget operation's */
};

/* Why a message was refused (wmsg_decode's negative returns), counted by
 * the writer. */
enum wmsg_refusal { WMSG_OK = 0, WMSG_MALFORMED = -1, WMSG_NOT_ALLOWED = -2, WMSG_TOO_LARGE = -3 };

/* Decode buf[0..n) as sent on a channel that may send what allow says.
 * 0 with *m filled, or a wmsg_refusal. */
int wmsg_decode(const uint8_t *buf, size_t n, unsigned allow, struct wmsg *m);
/* Encode a budget operation into out (17 bytes). */
size_t wmsg_budget_encode(uint8_t out[17], uint64_t take, uint64_t give);

#endif
