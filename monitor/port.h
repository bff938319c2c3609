/* sbx-monitor: what port.c (the connections) and portctl.c (the forwards
 * and the requests that manage them) share.  Only those two include it. */
#ifndef SBX_MON_PORT_H
#define SBX_MON_PORT_H

#include "mon.h"
#include "portwin.h"

#define FWD_MAX 16        /* forwards per session */
#define FWD_CONNS_MAX 128 /* connections at once per forward; SBX_PORT_CONNS_MAX per session */

struct fwd {
	struct src src; /* SRC_PORT_LISTEN: first, so the loop's src is the fwd */
	struct fwd *next;
	uint32_t port;
	char addr[SBX_PORT_ADDR_MAX];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* a unix socket's, "" for TCP */
	dev_t dev;
	ino_t ino;
	unsigned uid;
	unsigned nconns;
	uint64_t accepted, refused;
	char last_error[160];
	int accepting; /* in epoll for EPOLLIN */
};

struct pconn {
	struct src src; /* SRC_PORT_CONN; SRC_DEAD once closed */
	struct pconn *next;
	struct fwd *fwd;
	uint32_t id;
	int connected;         /* the guest said so */
	uint32_t events;       /* in epoll now */
	struct sbx_portwin pw; /* the bytes both ways and their windows (the peer is the guest) */
	int guest_closed;
};

struct mports {
	struct fwd *fwds;
	struct pconn *conns;
	unsigned nfwds, nconns;
	uint32_t next_id;
	int starved; /* a connection waits for the agent queue to drain */
	/* Closed in this loop turn: the turn's later events may still point
	 * at them (epoll_wait returned them together), so their memory lives,
	 * as SRC_DEAD, until port_reap after the turn. */
	struct pconn *dead_conns;
	struct fwd *dead_fwds;
};

struct mports *port_state(struct mon *m);
/* End a connection from the host side: the guest hears PORT_CLOSE (with
 * why as its reason, when given). */
void port_conn_abort(struct mon *m, struct pconn *p, const char *why);

#endif
