/* A session's network namespace (policy network.egress: allowlist).
 *
 * Fixed layout, the same in every session: a TAP device sbx0 with
 * 10.0.2.2/24 and a fixed MAC (the gateway the guest sees), the guest at 10.0.2.15/24,
 * the resolver at 10.0.2.2:53.  There is no route and no veth out of the
 * namespace: the only way out is the session's proxy (sbx-proxy), which
 * runs in the host's namespace and holds listening sockets made inside
 * this one.  nftables in the namespace DNATs every TCP connection from
 * the guest to the proxy's transparent listener and drops everything
 * else (the ruleset in netns.c).
 *
 * The namespace is held by file descriptors only (no /run/netns name): it
 * goes when the VMM (TAP fd) and the proxy (listening sockets) are gone. */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

#include <stdint.h>

#include "err.h"

#define SBX_NET_TAP "sbx0"
/* sbx0's MAC, the same in every namespace: a guest restored from a
 * snapshot or resumed from suspend finds its gateway in a fresh namespace
 * at the address its ARP cache holds (a random one would leave it sending
 * to the old TAP's address until the entry went stale, up to a minute). */
#define SBX_NET_GW_MAC                                                                                                 \
	{                                                                                                              \
		0x02, 0x73, 0x62, 0x78, 0x00, 0x02                                                                     \
	}
#define SBX_NET_GW "10.0.2.2"
#define SBX_NET_GUEST "10.0.2.15"
#define SBX_NET_PREFIX 24
#define SBX_NET_PROXY_PORT 3128 /* transparent TCP */
#define SBX_NET_DNS_PORT 53     /* UDP and TCP */
#define SBX_NET_PKG_PORT 3141   /* the package cache (pkgcache.h) */

struct sbx_netns {
	int netns_fd;   /* the namespace (/proc/PID/ns/net of its maker) */
	int tap_fd;     /* sbx0, IFF_TAP | IFF_NO_PI: the VMM's end */
	int tcp_fd;     /* listening on 10.0.2.2:3128 */
	int dns_udp_fd; /* bound to 10.0.2.2:53 */
	int dns_tcp_fd; /* listening on 10.0.2.2:53 */
	int pkg_fd;     /* listening on 10.0.2.2:3141 */
};

/* Make and configure a new namespace (in a short-lived child, so the
 * caller never leaves its own): loopback, sbx0 (netlink), the nftables
 * ruleset (libnftables) with the rate cap (policy network.rate, bytes/s
 * each way on sbx0; 0: none), the listening sockets.  Every fd is O_CLOEXEC.
 * Failures are 69 (the host cannot give sessions a network) or 70. */
int sbx_netns_create(struct sbx_netns *n, uint64_t rate, struct sbx_err *err);
/* A namespace holding only sbx0 (down, no address, no rules, no
 * listener: nothing reaches anything through it), for a VM whose egress
 * is decided later: n gets netns_fd and tap_fd, the rest -1.  A warm-pool
 * member boots with it (pool.h). */
int sbx_netns_create_bare(struct sbx_netns *n, struct sbx_err *err);
/* Finish a namespace made by sbx_netns_create_bare, whose TAP the VMM
 * holds: what sbx_netns_create does after the TAP (addresses, the
 * ruleset, the listeners), in a child that joins it.  n gets the four
 * listeners (netns_fd and tap_fd -1).  Failures as sbx_netns_create's. */
int sbx_netns_complete(int netns_fd, uint64_t rate, struct sbx_netns *n, struct sbx_err *err);
/* Close whatever n still holds (fds < 0 are skipped) and set them to -1. */
void sbx_netns_close(struct sbx_netns *n);
/* The session's proxy (libexec/sbx/sbx-proxy, egress.h), started with the
 * listening sockets of n, the write end of a pipe (below) and that of a
 * readiness pipe and nothing else across exec, stdout and stderr on
 * log_fd; it dies with the caller (PR_SET_PDEATHSIG).  Returns once the
 * proxy says it runs (its configuration, sbx.yaml included, accepted,
 * both halves set up), at most SBX_PROXY_START_TIMEOUT_S later; a proxy
 * that cannot start is reaped and its own status and message are the
 * error ("the session's proxy did not start: ...").  Fills pid, a pidfd,
 * the start time and busy_fd, the pipe's read end (O_NONBLOCK,
 * O_CLOEXEC). */
#define SBX_PROXY_START_TIMEOUT_S 10
int sbx_netns_spawn_proxy(const char *id, const struct sbx_netns *n, int log_fd, int *pid, int *pidfd, uint64_t *start,
			  int *busy_fd, struct sbx_err *err);
/* What the proxy says on that pipe, for the idle policy (a session with a
 * connection open is not idle): one byte each time a half of the proxy
 * goes from no connection open (TCP, DNS over TCP, the package cache) to
 * some, or back.  'N'/'n': the network half has some/none; 'P'/'p': the
 * cache half (the package cache).  Both start at none.  The proxy
 * parses the guest's bytes, so its reader takes anything else as "some,
 * for as long as this proxy runs", and EOF (the proxy gone, its
 * connections with it) as none. */
#define SBX_PROXY_BUSY_NET 'N'
#define SBX_PROXY_IDLE_NET 'n'
#define SBX_PROXY_BUSY_PKG 'P'
#define SBX_PROXY_IDLE_PKG 'p'
/* End it: SIGTERM (it flushes its DNS audit batch), SIGKILL after 1 s,
 * reaped.  Sets *pid to 0 and closes *pidfd. */
void sbx_netns_stop_proxy(int *pid, int *pidfd);

/* A fresh guest MAC, locally administered and unicast, into out[18]
 * ("02:xx:xx:xx:xx:xx" form). */
void sbx_netns_mac_new(char out[18]);

#endif
