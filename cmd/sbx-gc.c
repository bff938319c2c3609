/* sbx-gc: reclaim crashed, expired and orphaned sessions and keep the warm
 * pool at its size; for cron. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "cli.h"
#include "gc.h"
#include "policy.h"

struct out {
	json_t *arr;
	unsigned reclaimed;
};

static void print_action(const struct sbx_gc_action *a, void *ctx)
{
	struct out *o = ctx;
	o->reclaimed += (unsigned)sbx_gc_action_reclaims(a->action);
	if (a->workspace) {
		/* The object column names the workspace: NAME, or TENANT/NAME. */
		int t = a->tenant && a->tenant[0];
		if (o->arr)
			json_array_append_new(o->arr, json_pack("{s:s, s:s, s:s?, s:s?, s:s}", "action", a->action,
								"workspace", a->workspace, "tenant", t ? a->tenant : NULL,
								"session", a->session[0] ? a->session : NULL, "detail",
								a->detail));
		else
			printf("%s\t%s%s%s\t%s\n", a->action, t ? a->tenant : "", t ? "/" : "", a->workspace, a->detail);
	} else if (o->arr) {
		json_array_append_new(o->arr, json_pack("{s:s, s:s, s:s}", "action", a->action, "session", a->session,
							"detail", a->detail));
	} else {
		printf("%s\t%s\t%s\n", a->action, a->session, a->detail);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dry-run", no_argument, NULL, 'n' },
		{ "grace", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "pool-only", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct sbx_gc_opts o = { .grace_ms = 10 * 60 * 1000 };
	int json = 0, c;
	while ((c = getopt_long(argc, argv, "hn", opts, NULL)) != -1) {
		switch (c) {
		case 'g':
			if (sbx_parse_duration_ms(optarg, &o.grace_ms) < 0)
				return sbx_cli_fail("sbx-gc", SBX_EXIT_USAGE, json, "bad --grace '%s'", optarg);
			break;
		case 'h': puts("usage: sbx-gc [-n|--dry-run] [--grace DURATION] [--pool-only] [--json]"); return 0;
		case 'j': json = 1; break;
		case 'n': o.dry_run = 1; break;
		case 'P': o.pool_only = 1; break;
		default: fputs("usage: sbx-gc [-n|--dry-run] [--grace DURATION] [--pool-only] [--json]\n", stderr); return 2;
		}
	}
	if (optind != argc) {
		fputs("usage: sbx-gc [-n|--dry-run] [--grace DURATION] [--pool-only] [--json]\n", stderr);
		return SBX_EXIT_USAGE;
	}
	struct sbx_state st;
	struct sbx_err err = { 0 };
	struct out out = { .arr = json ? json_array() : NULL };
	if (sbx_state_open(&st, &err) < 0 || sbx_gc_run(&st, &o, print_action, &out, &err) < 0) {
		sbx_err_print("sbx-gc", &err, json);
		json_decref(out.arr);
		return err.code;
	}
	if (out.arr) {
		json_t *j = json_pack("{s:i, s:b, s:i, s:o}", "schema", 1, "dry_run", o.dry_run, "reclaimed",
				      (int)out.reclaimed, "actions", out.arr);
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	} else if (out.reclaimed) {
		fprintf(stderr, "sbx-gc: %s %u item%s\n", o.dry_run ? "would reclaim" : "reclaimed", out.reclaimed,
			out.reclaimed == 1 ? "" : "s");
	}
	return 0;
}
