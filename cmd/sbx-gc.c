/* sbx-gc: reclaim crashed, expired and orphaned sessions and keep the warm
 * pool at its size; for cron. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "cli.h"
#include "gc.h"
#include "policy.h"

static const char usage[] = "usage: sbx-gc [-n|--dry-run] [--grace DURATION] [--pool-only] [--json]\n";

/* The object column: the session, or the workspace as NAME or TENANT/NAME. */
static void show_object(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	const char *ws = json_string_value(json_object_get(row, "workspace"));
	const char *tenant = json_string_value(json_object_get(row, "tenant"));
	if (!ws) {
		sbx_cli_put_value(t, json_object_get(row, "session"), f);
		return;
	}
	if (tenant) {
		sbx_cli_put_string(t, tenant, f);
		putc('/', f);
	}
	sbx_cli_put_string(t, ws, f);
}

static const struct sbx_cli_col cols[] = { { "action", NULL, NULL },
					   { "session", NULL, show_object },
					   { "detail", NULL, NULL } };
static const struct sbx_cli_table actions_table = { SBX_CLI_COLS(cols) };

struct out {
	json_t *arr; /* --json: the actions, printed at the end */
	unsigned reclaimed;
};

/* An action as it happens: a line for cron's mail, or a row of the JSON. */
static void print_action(const struct sbx_gc_action *a, void *ctx)
{
	struct out *o = ctx;
	o->reclaimed += (unsigned)sbx_gc_action_reclaims(a->action);
	json_t *row;
	if (a->workspace) {
		int t = a->tenant && a->tenant[0];
		row = json_pack("{s:s, s:s, s:s?, s:s?, s:s}", "action", a->action, "workspace", a->workspace, "tenant",
				t ? a->tenant : NULL, "session", a->session[0] ? a->session : NULL, "detail",
				a->detail);
	} else {
		row = json_pack("{s:s, s:s, s:s}", "action", a->action, "session", a->session, "detail", a->detail);
	}
	if (o->arr)
		json_array_append_new(o->arr, row);
	else {
		sbx_cli_table_row(&actions_table, row, SBX_CLI_TEXT);
		json_decref(row);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dry-run", no_argument, NULL, 'n' },   { "grace", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },      { "json", no_argument, NULL, 'j' },
		{ "pool-only", no_argument, NULL, 'P' }, { NULL, 0, NULL, 0 },
	};
	struct sbx_gc_opts o = { .grace_ms = 10 * 60 * 1000 };
	int json = 0, c;
	while ((c = getopt_long(argc, argv, "hn", opts, NULL)) != -1) {
		switch (c) {
		case 'g':
			if (sbx_parse_duration_ms(optarg, &o.grace_ms) < 0)
				return sbx_cli_fail("sbx-gc", SBX_EXIT_USAGE, json, "bad --grace '%s'", optarg);
			break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'j': json = 1; break;
		case 'n': o.dry_run = 1; break;
		case 'P': o.pool_only = 1; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	if (optind != argc)
		return sbx_cli_usage(usage, 0);
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
