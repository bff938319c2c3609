/* guest-init: the guest end of sbx-port (port.c).  The agent owns the
 * epoll set and the output queue; this module owns the connections. */
#ifndef SBX_GUEST_PORT_H
#define SBX_GUEST_PORT_H

#include <stdint.h>

#include "proto.h"

struct sbx_gports;
/* kind: the low byte of every epoll tag this module registers in ep. */
struct sbx_gports *sbx_gports_new(int ep, uint8_t kind);
void sbx_gports_free(struct sbx_gports *g);
/* A PORT_CONNECT/DATA/WINDOW/EOF/CLOSE frame from the host; replies go to out. */
void sbx_gports_frame(struct sbx_gports *g, const struct sbx_frame *f, struct sbx_buf *out);
/* An epoll event whose tag has our kind. */
void sbx_gports_io(struct sbx_gports *g, uint64_t tag, uint32_t events, struct sbx_buf *out);
/* The output queue is full (1) or has room again (0): stop or resume reading. */
void sbx_gports_pause(struct sbx_gports *g, int paused);
/* The host went away: its connections with it. */
void sbx_gports_reset(struct sbx_gports *g);

#endif
