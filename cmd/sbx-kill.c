/* sbx-kill: destroy sessions and everything they held; idempotent. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "execrec.h"
#include "session.h"

static const char usage[] = "usage: sbx-kill [--json] [--tenant TENANT] SESSION...\n"
			    "       sbx-kill --exec EXEC [--json] [--tenant TENANT] SESSION\n";

/* --exec EXEC SESSION: end one exec's whole process tree. */
static int kill_exec(int argc, char **argv, const char *exec, int json, const char *tenant)
{
	if (argc != 1)
		return sbx_cli_usage(usage, 0);
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0 ||
	    sbx_exec_kill(&st, argv[0], exec, &err) < 0) {
		sbx_err_print("sbx-kill", &err, json);
		return err.code;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "exec", required_argument, NULL, 'x' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "tenant", required_argument, NULL, 'U' },
		{ NULL, 0, NULL, 0 },
	};
	int json = 0, c;
	const char *exec = NULL, *tenant = NULL;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'x': exec = optarg; break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'j': json = 1; break;
		case 'U': tenant = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	if (exec)
		return kill_exec(argc - optind, argv + optind, exec, json, tenant);
	size_t n;
	char **ids = sbx_cli_ids(argc - optind, argv + optind, &n);
	if (!ids || (n == 0 && isatty(0))) {
		sbx_cli_free_ids(ids);
		return sbx_cli_usage(usage, 0);
	}
	/* IDs from a pipe that carried none: nothing to do, as with xargs -r,
	 * so `sbx-ps -q --state=crashed | sbx-kill` works when none crashed. */
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0) {
		sbx_err_print("sbx-kill", &err, json);
		sbx_cli_free_ids(ids);
		return err.code;
	}
	/* Check every ID before touching anything: bad input changes nothing. */
	for (size_t i = 0; i < n; i++)
		if (sbx_id_check(ids[i], "session", &err) < 0) {
			sbx_err_print("sbx-kill", &err, json);
			sbx_cli_free_ids(ids);
			return err.code;
		}
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		int gone;
		struct sbx_err e = { 0 };
		if (sbx_session_destroy(&st, ids[i], &gone, &e) < 0) {
			sbx_err_print("sbx-kill", &e, json);
			if (!rc)
				rc = e.code;
		}
	}
	sbx_cli_free_ids(ids);
	return rc;
}
