/* sbx-audit-append: append events to the audit log, for tests and tools
 * (the commands append their own events through sbx_audit_append; this is
 * not installed).  Usage: sbx-audit-append [-n COUNT] TYPE JSON-OBJECT...
 * Each TYPE JSON pair is appended COUNT times (default 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "cli.h"

int main(int argc, char **argv)
{
	unsigned count = 1;
	int c;
	while ((c = getopt(argc, argv, "n:")) != -1) {
		if (c != 'n' || sbx_cli_uint(optarg, 1, 1000000, &count) < 0) {
			fputs("usage: sbx-audit-append [-n COUNT] TYPE JSON-OBJECT...\n", stderr);
			return SBX_EXIT_USAGE;
		}
	}
	if (optind >= argc || (argc - optind) % 2) {
		fputs("usage: sbx-audit-append [-n COUNT] TYPE JSON-OBJECT...\n", stderr);
		return SBX_EXIT_USAGE;
	}
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) < 0) {
		sbx_err_print("sbx-audit-append", &err, 0);
		return err.code;
	}
	for (int i = optind; i < argc; i += 2) {
		json_error_t je;
		json_t *fields = json_loads(argv[i + 1], 0, &je);
		if (!fields)
			return sbx_cli_fail("sbx-audit-append", SBX_EXIT_INVALID, 0, "bad JSON '%s': %s", argv[i + 1],
					    je.text);
		for (unsigned k = 0; k < count; k++) {
			if (sbx_audit_append(&st, argv[i], fields, &err) < 0) {
				sbx_err_print("sbx-audit-append", &err, 0);
				return err.code;
			}
		}
		json_decref(fields);
	}
	sbx_state_close(&st);
	return 0;
}
