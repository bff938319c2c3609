/* The client side of a session monitor's socket (LIB/run/sessions/ID/
 * monitor.sock): connect, send frames, and one frame loop with a deadline
 * that hands each whole frame to the caller.  Every client of a monitor
 * (sbx-exec's stream, exec kill, vmctl, the pool's claim, destroy's
 * SHUTDOWN, sbx-port) goes through here.  Client layer: it uses only the
 * record (session.h's record half), proto and util. */
#ifndef SBX_MONCLIENT_H
#define SBX_MONCLIENT_H

#include <poll.h>
#include <stddef.h>

#include "err.h"
#include "proto.h"
#include "state.h"

/* Connect to a running session's monitor; 4 when the session does not
 * exist or is not running, 75 when it runs but does not answer. */
int sbx_monitor_connect(struct sbx_state *st, const char *id, struct sbx_err *err);
/* The same without the visibility check or a message: a connected fd, or
 * -1 (errno). */
int sbx_monitor_socket(struct sbx_state *st, const char *id);

/* Why the last send or loop on a connection failed, so a caller can word
 * it (each has its own message and, for a lost monitor, exit status). */
enum sbx_mon_fail {
	SBX_MON_OK = 0,
	SBX_MON_SEND,    /* the request could not be sent (errno) */
	SBX_MON_LOST,    /* the monitor closed the connection, or reading failed */
	SBX_MON_GARBAGE, /* a malformed frame header, or one over max */
	SBX_MON_LATE,    /* the deadline passed */
	SBX_MON_POLL,    /* poll(2) failed (errno) */
	SBX_MON_REFUSED  /* on_frame or ready said so (err is theirs) */
};

/* A connection.  Zeroed, with fd set (sbx_mon_open does both), it is
 * ready; sbx_mon_close frees it.  out is what to send: build frames into
 * it (sbx_frame_begin...), then sbx_mon_send, or let sbx_mon_loop flush it
 * as the socket takes it. */
struct sbx_mon {
	int fd;
	uint32_t max; /* largest frame payload accepted; 0: SBX_FRAME_MAX */
	struct sbx_buf in, out;
	size_t out_off;
	enum sbx_mon_fail fail;
};

/* sbx_monitor_connect into a fresh *m. */
int sbx_mon_open(struct sbx_state *st, const char *id, struct sbx_mon *m, struct sbx_err *err);
void sbx_mon_close(struct sbx_mon *m);
#define _cleanup_mon_ __attribute__((cleanup(sbx_mon_close)))

/* Send everything in m->out, blocking; with pass_fd >= 0 it travels with
 * the first bytes (SCM_RIGHTS).  -1 with errno (m->fail SBX_MON_SEND). */
int sbx_mon_send(struct sbx_mon *m, int pass_fd);

/* Send n bytes of the caller's as they are, blocking: for a frame that
 * must not be copied (secrets, written into place by secrets.c).  -1
 * with errno (m->fail SBX_MON_SEND).  Call with m->out empty. */
int sbx_mon_write(struct sbx_mon *m, const void *p, size_t n);

/* A whole frame, its payload valid until the callback returns.  Return 0
 * for more, > 0 when done (the loop returns it), < 0 with err set. */
typedef int (*sbx_mon_frame_fn)(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err);

/* Other fds the loop polls beside the connection (a stream's stdin, a
 * signalfd).  arm sets p[0..n) before each poll (fd -1: not this time);
 * ready is called after it with their revents, and returns as on_frame
 * does.  Either may queue frames in m->out. */
#define SBX_MON_FDS_MAX 4
struct sbx_mon_fds {
	size_t n;
	void (*arm)(void *ctx, struct sbx_mon *m, struct pollfd *p);
	int (*ready)(void *ctx, struct sbx_mon *m, const struct pollfd *p, struct sbx_err *err);
};

/* The frame loop: frames already read first, then poll the connection
 * (and fds, when given) until on_frame or ready says done or fails, the
 * monitor goes, or timeout_ms passes (0: no deadline).  Queued output is
 * flushed as the socket takes it.  Returns what the callback returned (> 0),
 * or -1 with err and m->fail set; the default messages are sbx-exec's. */
int sbx_mon_loop(struct sbx_mon *m, unsigned timeout_ms, sbx_mon_frame_fn on_frame, const struct sbx_mon_fds *fds,
		 void *ctx, struct sbx_err *err);
/* One call: send what is in m->out, then sbx_mon_loop without other fds. */
int sbx_mon_call(struct sbx_mon *m, unsigned timeout_ms, sbx_mon_frame_fn on_frame, void *ctx, struct sbx_err *err);

/* The next frame, whatever its type, within timeout_ms: *f with its
 * payload copied into buf (one over cap is garbage).  -1 as sbx_mon_loop. */
int sbx_mon_next(struct sbx_mon *m, unsigned timeout_ms, struct sbx_frame *f, uint8_t *buf, size_t cap,
		 struct sbx_err *err);

/* An ERROR frame as err: its CODE (default 70) and MSG (default dflt),
 * cleaned for a terminal (it may quote the guest).  Returns -1. */
int sbx_mon_error(const struct sbx_frame *f, const char *dflt, struct sbx_err *err);

#endif
