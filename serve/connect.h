/* Connect RPC's framing with JSON messages, as envd speaks it
 * (connectrpc.com/docs/protocol): a streaming body is a sequence of
 * envelopes, each a flags byte (0: a message, 2: the end of the stream),
 * a 32-bit big-endian length and that many bytes of JSON.  What envd's
 * process.proto messages look like in JSON is written here too.  Pure
 * functions over bytes: fuzzed (tests/fuzz/fuzz-serve-connect.c). */
#ifndef SBX_SERVE_CONNECT_H
#define SBX_SERVE_CONNECT_H

#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

/* The one message of a request body: an envelope of flags 0 holding a
 * JSON object, and nothing after it; NULL for anything else. */
json_t *serve_cx_unwrap(const char *body, size_t n);

/* Envelopes into buf (at most max bytes): the length written, or -1 when
 * it does not fit.  One of flags around j (consumed; NULL: -1): */
ssize_t serve_cx_envelope(char *buf, size_t max, unsigned flags, json_t *j);
ssize_t serve_cx_start_event(char *buf, size_t max, unsigned pid);
ssize_t serve_cx_keepalive(char *buf, size_t max);
/* Raw bytes a data event of max bytes can carry (base64 inside). */
size_t serve_cx_data_room(size_t max);
ssize_t serve_cx_data_event(char *buf, size_t max, const char *which, const char *raw, size_t n);
/* The end event of a command from the back's answer ({"ok": true,
 * "status", "signal"}), then the end of the stream; an answer that is not
 * ok (or NULL) ends the stream with an error instead. */
ssize_t serve_cx_end(char *buf, size_t max, json_t *ans);
ssize_t serve_cx_end_error(char *buf, size_t max, const char *code, const char *msg);
/* The user an envd call asks to run as: HTTP Basic's user name ("user:"
 * in base64).  1 with user set, 0 when there is none or it is malformed. */
int serve_cx_user(const char *authorization, char *user, size_t n);

#endif
