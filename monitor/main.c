/* sbx-monitor: started by sbx-create, never by hand.  See monitor.h (monitor/). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "monitor.h"

extern char **environ;

int main(int argc, char **argv)
{
	/* A claim renames the session: its title follows (mon_title). */
	setproctitle_init(argc, argv, environ);
	static const struct option opts[] = {
		{ "id", required_argument, NULL, 'i' },
		{ "lock-fd", required_argument, NULL, 'l' },
		{ "ready-fd", required_argument, NULL, 'r' },
		{ "secrets-fd", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	struct sbx_monitor_args a = { .ready_fd = -1, .lock_fd = -1, .secrets_fd = -1 };
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'i': a.id = optarg; break;
		case 'l': a.lock_fd = atoi(optarg); break;
		case 'r': a.ready_fd = atoi(optarg); break;
		case 's': a.secrets_fd = atoi(optarg); break;
		default: return SBX_EXIT_USAGE;
		}
	}
	if (!a.id || a.lock_fd < 0) {
		fprintf(stderr, "sbx-monitor: internal helper of sbx-create; not for direct use\n");
		return SBX_EXIT_USAGE;
	}
	return sbx_monitor_main(&a);
}
