/* sbx-serve's TLS on its TCP listener: libmicrohttpd's own (GnuTLS), fed
 * a certificate and key that root reads before the front is forked and
 * jailed.  The front never opens a file; it gets the PEM in memory. */
#ifndef SBX_SERVE_TLS_H
#define SBX_SERVE_TLS_H

#include <stddef.h>

#include "err.h"

/* TLS 1.2 and 1.3 only: GnuTLS's NORMAL without the older versions. */
#define SERVE_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct serve_tls {
	char *cert; /* PEM, NUL-terminated (libmicrohttpd takes strings) */
	char *key;  /* the same; wiped by serve_tls_wipe */
	size_t cert_n, key_n;
};

/* Read cert_path and key_path (regular files, not through a symlink).
 * The key must be root's and readable by no one else (mode 0600 or
 * 0400): 3 otherwise, as for a file that is missing, empty or too large.
 * 69 when this libmicrohttpd was built without TLS. */
int serve_tls_load(struct serve_tls *t, const char *cert_path, const char *key_path, struct sbx_err *err);
/* Start libmicrohttpd with them on no socket and stop it again, so a key
 * that is no key, or is not the certificate's, is said at start, as root,
 * rather than by a front that has already dropped everything: 3. */
int serve_tls_check(const struct serve_tls *t, struct sbx_err *err);
/* Zero the key and free both. */
void serve_tls_wipe(struct serve_tls *t);

#endif
