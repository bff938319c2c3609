/* sbx-create: boot a session and print its ID once the guest agent answers. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "session.h"

static void usage(FILE *f)
{
	fputs("usage: sbx-create [-q] [--json] [--id ID] [-t TEMPLATE[@VERSION]] [--cpus N] [--memory MiB]\n", f);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cpus", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "id", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "memory", required_argument, NULL, 'm' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "template", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	struct sbx_create_opts o = { 0 };
	struct sbx_err err = { 0 };
	int json = 0, quiet = 0, c;
	while ((c = getopt_long(argc, argv, "hqt:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (sbx_cli_uint(optarg, 1, 64, &o.vcpus) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "--cpus must be 1..64");
			break;
		case 'h': usage(stdout); return 0;
		case 'i': o.id = optarg; break;
		case 'j': json = 1; break;
		case 'm':
			if (sbx_cli_uint(optarg, 64, 1 << 20, &o.memory_mib) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "--memory must be 64..1048576 MiB");
			break;
		case 'q': quiet = 1; break;
		case 't': o.tmpl = optarg; break;
		default: usage(stderr); return SBX_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return SBX_EXIT_USAGE;
	}
	struct sbx_state st;
	struct sbx_session s;
	int existed;
	if (sbx_state_open(&st, &err) < 0 || sbx_session_create(&st, &o, &s, &existed, &err) < 0) {
		sbx_err_print("sbx-create", &err, json);
		return err.code;
	}
	if (!strcmp(s.accel, "tcg") && !quiet && !existed)
		fprintf(stderr, "sbx-create: notice: running under TCG emulation, not KVM (slower, and not a "
				"hardware isolation boundary)\n");
	if (json) {
		json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:b, s:I}", "schema", 1, "id", s.id, "state", s.state,
				      "accel", s.accel, "kernel", s.kernel, "existed", existed, "boot_ms",
				      (json_int_t)s.boot_ms);
		json_dumpf(j, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(j);
	} else {
		printf("%s\n", s.id);
	}
	return 0;
}
