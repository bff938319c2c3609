/* sbx-proxy: a session's egress proxy and resolver, and the package cache
 * (pkgcache.h) in its threads.  The program's own interface: nothing in
 * common/ includes this header. */
#ifndef SBX_PROXY_H
#define SBX_PROXY_H

#include <sys/socket.h>

#include <jansson.h>

#include "egress.h"
#include "err.h"

struct sbx_proxy_args {
	const char *id;
	int tcp_fd, dns_udp_fd, dns_tcp_fd, pkg_fd; /* from netns.h; -1: none */
	int busy_fd;                                /* to the monitor: connections open or none (netns.h); -1: none */
	int ready_fd;                               /* to the monitor: 'R' once running, or 'E' CODE ' ' MESSAGE '\n'
						     * when it cannot start (netns.h); -1: none */
};

/* Runs until SIGTERM, SIGINT or SIGHUP (0), or fails to start (-1, err,
 * also written to a->ready_fd).
 * $SBX_HOSTS_FILE: a hosts(5) file consulted before the system resolver
 * (tests, operators). */
int sbx_proxy_run(const struct sbx_proxy_args *a, struct sbx_err *err);

/* The package cache (pkgcache.h) serves connections to 10.0.2.2:3141 in
 * threads of the proxy. */
struct sbx_proxy;
/* Resolve name (hosts file, then the system) into at most max addresses
 * that pass the deny list and are not the host's own; port set in each.
 * Returns the count; 0 with *why set when none is left. */
unsigned sbx_proxy_resolve(struct sbx_proxy *px, const char *name, unsigned port, struct sockaddr_storage *out,
			   unsigned max, const char **why);
/* Append one JSON object (borrowed) as a line of net.log. */
void sbx_proxy_log(struct sbx_proxy *px, json_t *rec);

#endif
