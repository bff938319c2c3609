/* guest-init entry point.  As PID 1: boot, then serve the host until
 * SHUTDOWN.  PID 1 must never return from main (the kernel panics when init
 * exits), so every way out is a logged power-off.  Run by hand or by the
 * tests (`guest-init --agent-fd N`) it serves the agent protocol alone on an
 * inherited, already connected fd.  An exec runs it (SBX_GUEST_TOOL_PATH)
 * for its tools: `--watch` (watch.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "init.h"

static void __attribute__((noreturn)) pid1_main(void)
{
	struct sbx_guest_cfg cfg;
	int fd;

	sbx_guest_cmdline(&cfg);
	fd = sbx_guest_boot(&cfg);
	if (fd < 0) {
		sbx_guest_log("boot failed, powering off");
		sbx_guest_poweroff();
	}
	if (sbx_agent_run(fd, 1) < 0)
		sbx_guest_log("agent failed, powering off");
	sbx_guest_poweroff();
}

static int usage(void)
{
	fputs("usage: guest-init --agent-fd N\n"
	      "       guest-init --watch [--recursive] PATH\n"
	      "  (as PID 1 it takes no arguments and boots the guest)\n",
	      stderr);
	return 2;
}

int main(int argc, char **argv)
{
	char *end;
	long fd;

	if (getpid() == 1)
		pid1_main();
	if (argc == 3 && !strcmp(argv[1], "--watch"))
		return sbx_guest_watch(argv[2], 0);
	if (argc == 4 && !strcmp(argv[1], "--watch") && !strcmp(argv[2], "--recursive"))
		return sbx_guest_watch(argv[3], 1);
	if (argc != 3 || strcmp(argv[1], "--agent-fd") != 0)
		return usage();
	errno = 0;
	fd = strtol(argv[2], &end, 10);
	if (errno || *end || end == argv[2] || fd < 0 || fd > INT_MAX || fcntl((int)fd, F_GETFD) < 0) {
		fprintf(stderr, "guest-init: --agent-fd %s: not an open file descriptor\n", argv[2]);
		return 2;
	}
	return sbx_agent_run((int)fd, 0) == 0 ? 0 : 1;
}
