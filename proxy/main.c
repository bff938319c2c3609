/* sbx-proxy: a session's egress proxy and resolver, started by its
 * sbx-monitor with listening sockets made in the session's network
 * namespace; never by hand.  See egress.h. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "proxy.h"

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "busy-fd", required_argument, NULL, 'b' },    { "dns-tcp-fd", required_argument, NULL, 'd' },
		{ "dns-udp-fd", required_argument, NULL, 'u' }, { "id", required_argument, NULL, 'i' },
		{ "pkg-fd", required_argument, NULL, 'p' },     { "ready-fd", required_argument, NULL, 'r' },
		{ "tcp-fd", required_argument, NULL, 't' },     { NULL, 0, NULL, 0 },
	};
	struct sbx_proxy_args a = {
		.tcp_fd = -1, .dns_udp_fd = -1, .dns_tcp_fd = -1, .pkg_fd = -1, .busy_fd = -1, .ready_fd = -1
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'b': a.busy_fd = atoi(optarg); break;
		case 'd': a.dns_tcp_fd = atoi(optarg); break;
		case 'i': a.id = optarg; break;
		case 'p': a.pkg_fd = atoi(optarg); break;
		case 'r': a.ready_fd = atoi(optarg); break;
		case 't': a.tcp_fd = atoi(optarg); break;
		case 'u': a.dns_udp_fd = atoi(optarg); break;
		default: return SBX_EXIT_USAGE;
		}
	}
	if (!a.id || a.tcp_fd < 0) {
		fprintf(stderr, "sbx-proxy: internal helper of sbx-monitor; not for direct use\n");
		return SBX_EXIT_USAGE;
	}
	struct sbx_err err = { 0 };
	int rc = 0;
	if (sbx_proxy_run(&a, &err) < 0) {
		sbx_err_print("sbx-proxy", &err, 0);
		rc = err.code ? err.code : SBX_EXIT_INTERNAL;
	}
	/* _exit, not exit: each half ends in a root with no /proc, where a
	 * sanitized build's exit-time leak check cannot list its threads and
	 * reports only that it failed (jail.c); nothing buffered is left. */
	fflush(NULL);
	_exit(rc);
}
