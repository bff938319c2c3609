/* An HTTP/1.x request head (RFC 9112), as the guest sends it: one parser
 * for the proxy's two readers of requests, the egress flow check
 * (egress.c: every request on a connection names the allowed host) and
 * the package cache (pkgcache.h: the request it serves).  Each adds its
 * own rules on what it accepts; the syntax is checked here, and anything a
 * server and the proxy could read in two ways is refused. */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define SBX_HTTP_HEAD_MAX 8192 /* request line and headers */
#define SBX_HTTP_HEADERS_MAX 64

/* sbx_http_head_parse's flags */
#define SBX_HTTP_ORIGIN_FORM 1u /* the target must be a path ("/..."): no absolute URL, no CONNECT */

struct sbx_http_head {
	size_t len;         /* of the head, its blank line included */
	char method[8];     /* upper-case letters, terminated */
	const char *target; /* in the caller's buffer, not terminated */
	size_t target_len;
	unsigned minor;   /* HTTP/1.x */
	const char *host; /* the Host field's value without white space, in the buffer; NULL: none */
	size_t host_len;
	int64_t length; /* Content-Length; -1: none */
	int chunked;    /* Transfer-Encoding (its last coding is chunked) */
	int upgrade;    /* an Upgrade field: the stream may stop being HTTP */
	int pip;        /* User-Agent: pip/... */
};

/* Parse the head at the start of buf[0..n).  Returns its length (> 0),
 * 0 when buf holds no complete head yet, -1 when it is malformed or over
 * the bounds, *status then 400, 414 (a target of target_max bytes or more;
 * 0: no bound but the head's), 431 (over SBX_HTTP_HEAD_MAX or
 * SBX_HTTP_HEADERS_MAX) or 505 (not HTTP/1.x).  *status is 0 on success.
 *
 * Lines end in CRLF or a bare LF; the head ends at the first empty one.
 * Refused: a control character (but tab) or DEL in any line, a bare CR,
 * an empty CRLF line after a line ended by a bare LF (where a head ends
 * is then a matter of opinion); a method that is not 1 to 7 upper-case
 * letters; a target with a space, a byte outside printable ASCII or a
 * '#'; folded fields, a field name that is not a token or is followed by
 * anything but ':'; two Host, Content-Length or Transfer-Encoding
 * fields; a Content-Length that is not 1 to 15 digits; a
 * Transfer-Encoding whose last coding is not chunked, or with a
 * Content-Length. */
int sbx_http_head_parse(const char *buf, size_t n, size_t target_max, unsigned flags, struct sbx_http_head *h,
			int *status);

#endif
