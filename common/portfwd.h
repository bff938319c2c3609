/* sbx-port, the client side: bind the host end with the caller's own
 * rights (loopback TCP, or a unix socket), hand it to the session's
 * monitor (which holds it for the session's life), remove and list
 * forwards.  The monitor re-checks everything it is handed. */
#ifndef SBX_PORTFWD_H
#define SBX_PORTFWD_H

#include "err.h"
#include "proto.h"
#include "state.h"

#define SBX_PORTFWD_LIST_MAX 64

/* spec: "127.0.0.1:PORT", "[::1]:PORT", "localhost:PORT" or NULL
 * (127.0.0.1:0, a free port); unix_path: a socket path to create instead
 * (made absolute; it must not exist).  Anything but loopback is 3, a host
 * port or path in use is 5.  On success out holds what the monitor holds. */
int sbx_port_open(struct sbx_state *st, const char *session, unsigned guest_port, const char *spec,
		  const char *unix_path, struct sbx_port_entry *out, struct sbx_err *err);
/* target: a guest port ("8080"), an address as listed ("127.0.0.1:41234",
 * "unix:/path") or a socket path; 4 when no forward matches. */
int sbx_port_rm(struct sbx_state *st, const char *session, const char *target, struct sbx_err *err);
/* The session's forwards into out[SBX_PORTFWD_LIST_MAX]; errors[i] (may
 * be NULL) gets each one's last connection error, "" for none. */
int sbx_port_list(struct sbx_state *st, const char *session, struct sbx_port_entry *out, size_t *n, char (*errors)[160],
		  struct sbx_err *err);

/* The forwards a running session's monitor recorded
 * (LIB/sessions/ID/ports.json) as a JSON array for sbx-ps; an empty one
 * when there are none or the file is not what the monitor writes. */
struct json_t *sbx_port_recorded(struct sbx_state *st, const char *session);

#endif
