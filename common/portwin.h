/* One sbx-port connection's bytes and windows, the same at both ends of
 * the agent channel: the monitor (monitor/port.c, a host client's socket)
 * and the guest (guest-init/port.c, a connection to the guest's server).
 * Each direction has SBX_PORT_WINDOW bytes of credit: data from the peer
 * is refused past what we gave, given back (PORT_WINDOW) only once
 * written to the socket; we read the socket only while the peer has room.
 * libc and proto.c only: guest-init links it too.  The connection tables,
 * and what a broken rule costs, stay with each end. */
#ifndef SBX_PORTWIN_H
#define SBX_PORTWIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

struct sbx_portwin {
	struct sbx_buf w; /* from the peer, not yet written to the socket */
	size_t w_off;
	uint32_t recv_used;   /* bytes from the peer not yet given back by WINDOW */
	uint32_t send_credit; /* bytes we may still send to the peer */
	int peer_eof;         /* the peer is done writing */
	int peer_eof_done;    /* ... and the socket was shut down for writing */
	int sock_eof;         /* the socket read EOF: PORT_EOF sent */
	int hup;              /* epoll said HUP: reported whatever we ask for */
};

/* What sbx_portwin_data refused. */
enum { SBX_PORTWIN_OK, SBX_PORTWIN_AFTER_EOF, SBX_PORTWIN_OVER, SBX_PORTWIN_NOMEM };

/* A new connection's state: the peer's whole window is ours to send. */
void sbx_portwin_init(struct sbx_portwin *pw);
void sbx_portwin_free(struct sbx_portwin *pw);
/* A PORT_DATA payload from the peer, kept for the socket; SBX_PORTWIN_*
 * other than OK: nothing kept, the connection is to end. */
int sbx_portwin_data(struct sbx_portwin *pw, const void *p, uint32_t n);
/* A PORT_WINDOW payload: -1 when malformed or beyond what was sent. */
int sbx_portwin_window(struct sbx_portwin *pw, const uint8_t *p, uint32_t n);
/* Write what is kept to the nonblocking socket fd (send flags besides
 * MSG_NOSIGNAL): the bytes written, -1 when the socket is broken.  Once
 * all is written the buffer is emptied (sbx_portwin_drained). */
ssize_t sbx_portwin_flush(struct sbx_portwin *pw, int fd, int flags);
int sbx_portwin_drained(const struct sbx_portwin *pw);
/* Drained after the peer's EOF: shut the socket down for writing, once. */
void sbx_portwin_shut(struct sbx_portwin *pw, int fd);
/* Give n written bytes back to the peer: a PORT_WINDOW on stream id. */
void sbx_portwin_credit(struct sbx_portwin *pw, struct sbx_buf *out, uint32_t id, uint32_t n);
/* Read the socket into PORT_DATA frames on stream id, at most four
 * chunks, within the credit and while full(ctx) is 0: 0, or 1 at EOF (a
 * PORT_EOF queued, sock_eof set), or -1 when the socket failed. */
int sbx_portwin_read(struct sbx_portwin *pw, int fd, int flags, struct sbx_buf *out, uint32_t id,
		     int (*full)(void *ctx), void *ctx);
/* The epoll events to ask for: EPOLLOUT with bytes to write (or when
 * want_out), EPOLLIN when may_read and the socket is open and the peer
 * has room; none at all after a HUP with nothing to read for (HUP comes
 * whatever the mask; level-triggered, it would wake us forever). */
uint32_t sbx_portwin_events(const struct sbx_portwin *pw, int want_out, int may_read);

#endif
