/* sbx-audit: list, filter and verify the audit trail.  Every listing mode
 * prints from the stored record through print_rec() and the one table
 * printer, so text, JSON and JSON lines cannot drift. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "cli.h"
#include "util.h"

#define PROG "sbx-audit"
static const char usage[] =
	"usage: sbx-audit [-q] [--json|--jsonl] [--no-headers] [--session ID] [--tenant T] [--type TYPE]\n"
	"                 [--since TIME] [--until TIME]\n"
	"       sbx-audit [-q] [--json] [--tenant T] verify\n"
	"       sbx-audit --chain [--tenant T]\n";

struct out {
	enum sbx_cli_mode mode;
	json_t *all; /* SBX_CLI_JSON */
	size_t n;
};

/* Every field but the columns, as key=value in stored (sorted) order;
 * arrays and objects as compact JSON.  Text must stay one line with
 * tab-separated fields whatever a record holds (a tampered log may hold
 * anything): strings are escaped. */
static void show_summary(const struct sbx_cli_table *t, json_t *rec, FILE *f)
{
	const char *k;
	json_t *v;
	int any = 0;
	json_object_foreach (rec, k, v) {
		if (!strcmp(k, "seq") || !strcmp(k, "time") || !strcmp(k, "type") || !strcmp(k, "session") ||
		    !strcmp(k, "prev"))
			continue;
		fprintf(f, "%s%s=", any++ ? " " : "", k);
		if (json_is_string(v)) {
			sbx_cli_put_string(t, json_string_value(v), f);
		} else if (json_is_real(v)) {
			fprintf(f, "%.6g", json_real_value(v));
		} else {
			/* compact JSON holds no raw tab or newline */
			char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			fputs(s ? s : "?", f);
			free(s);
		}
	}
	if (!any)
		putc('-', f);
}

static const struct sbx_cli_col cols[] = {
	{ "seq", "SEQ", NULL },         { "time", "TIME", NULL },          { "type", "TYPE", NULL },
	{ "session", "SESSION", NULL }, { NULL, "SUMMARY", show_summary },
};
static const struct sbx_cli_table records_table = { SBX_CLI_COLS(cols), .key = { "seq", NULL, NULL },
						    .flags = SBX_CLI_DASH_EMPTY | SBX_CLI_HEX_CR };

static int print_rec(json_t *rec, void *ctx)
{
	struct out *o = ctx;
	o->n++;
	if (o->mode == SBX_CLI_JSON)
		json_array_append(o->all, rec);
	else
		sbx_cli_table_row(&records_table, rec, o->mode);
	return 0;
}

static int list(struct sbx_state *st, const struct sbx_audit_filter *f, enum sbx_cli_mode mode, int headers,
		int json_err)
{
	struct out o = { .mode = mode, .all = mode == SBX_CLI_JSON ? json_array() : NULL };
	struct sbx_err err = { 0 };
	sbx_cli_table_header(&records_table, mode, headers);
	if (sbx_audit_read(st, f, print_rec, &o, &err) < 0) {
		json_decref(o.all);
		sbx_err_print(PROG, &err, json_err);
		return err.code;
	}
	if (o.all) {
		json_dumpf(o.all, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o.all);
	}
	int filtered = f->session || f->tenant || f->type || f->since_ns || f->until_ns;
	return filtered && o.n == 0 ? SBX_EXIT_FALSE : 0;
}

static int count_rec(json_t *rec, void *ctx)
{
	(void)rec;
	++*(uint64_t *)ctx;
	return 0;
}

/* --chain: one line per record; the caller's as stored (its bytes hash to
 * the next line's prev), another tenant's as its place in the chain only:
 * seq, prev and the SHA-256 of its line. */
static int chain_line(const char *line, size_t n, uint64_t seq, const char *sha256, const char *prev, void *ctx)
{
	(void)ctx;
	if (line) {
		fwrite(line, 1, n, stdout);
		putchar('\n');
		return 0;
	}
	json_t *o = json_pack("{s:I, s:s, s:s, s:b}", "seq", (json_int_t)seq, "prev", prev, "sha256", sha256,
			      "redacted", 1);
	json_dumpf(o, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(o);
	return 0;
}

/* Under a tenant, verify checks the whole chain (it must: a record of
 * any tenant's edited or removed breaks everyone's) but reports only what
 * says nothing of others' records: counts, a line number, the kind of
 * problem; and how many records are the tenant's. */
static int verify(struct sbx_state *st, int json, int quiet)
{
	struct sbx_audit_report r;
	struct sbx_err err = { 0 };
	uint64_t mine = 0;
	struct sbx_audit_filter f = { .tenant = sbx_state_tenant(st) };
	if (sbx_audit_verify(st, &r, &err) < 0 || (f.tenant && sbx_audit_read(st, &f, count_rec, &mine, &err) < 0)) {
		sbx_err_print(PROG, &err, json);
		return err.code;
	}
	if (json) {
		json_t *o = r.ok ? json_pack("{s:i, s:b, s:I, s:I, s:s, s:I}", "schema", 1, "ok", 1, "records",
					     (json_int_t)r.records, "last_seq", (json_int_t)r.last_seq, "last_hash",
					     r.last_hash, "segments", (json_int_t)r.segments)
				 : json_pack("{s:i, s:b, s:I, s:I, s:s, s:s, s:s}", "schema", 1, "ok", 0, "records",
					     (json_int_t)r.records, "line", (json_int_t)r.line, "problem",
					     sbx_audit_problem_name(r.problem), "detail", r.detail, "file", r.file);
		if (o && f.tenant) {
			json_object_set_new(o, "tenant", json_string(f.tenant));
			json_object_set_new(o, "tenant_records", json_integer((json_int_t)mine));
		}
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
	} else if (r.ok && !quiet && f.tenant) {
		printf("ok %llu records, %llu of tenant %s\n", (unsigned long long)r.records, (unsigned long long)mine,
		       f.tenant);
	} else if (r.ok && !quiet) {
		printf("ok %llu records\n", (unsigned long long)r.records);
	} else if (!r.ok) {
		fprintf(stderr, "%s: %s line %llu: %s: %s\n", PROG, r.file, (unsigned long long)r.line,
			sbx_audit_problem_name(r.problem), r.detail);
	}
	return r.ok ? 0 : SBX_EXIT_FALSE;
}

/* [a-z0-9_.], optionally ending in '*' (a prefix, as a trailing '.' is). */
static int type_arg_ok(const char *t)
{
	size_t n = strlen(t);
	if (n && t[n - 1] == '*')
		n--;
	if (n == 0 || n > 63)
		return 0;
	return strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789_.") == n;
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "chain", no_argument, NULL, 'c' },         { "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },          { "jsonl", no_argument, NULL, 'l' },
		{ "no-headers", no_argument, NULL, 'H' },    { "quiet", no_argument, NULL, 'q' },
		{ "session", required_argument, NULL, 'S' }, { "since", required_argument, NULL, 's' },
		{ "tenant", required_argument, NULL, 'T' },  { "type", required_argument, NULL, 't' },
		{ "until", required_argument, NULL, 'u' },   { NULL, 0, NULL, 0 },
	};
	struct sbx_audit_filter f = { 0 };
	const char *since = NULL, *until = NULL;
	int json = 0, jsonl = 0, quiet = 0, headers = 1, chain = 0, c;
	while ((c = getopt_long(argc, argv, "Hhq", opts, NULL)) != -1) {
		switch (c) {
		case 'H': headers = 0; break;
		case 'c': chain = 1; break;
		case 'S': f.session = optarg; break;
		case 'T': f.tenant = optarg; break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'j': json = 1; break;
		case 'l': jsonl = 1; break;
		case 'q': quiet = 1; break;
		case 's': since = optarg; break;
		case 't': f.type = optarg; break;
		case 'u': until = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	int do_verify = optind < argc && !strcmp(argv[optind], "verify");
	int filtered = f.session || f.type || since || until;
	if (argc - optind > do_verify || (json && jsonl) || (do_verify && (filtered || jsonl || chain)) ||
	    (chain && (filtered || json || jsonl || quiet)))
		return sbx_cli_usage(usage, 0);
	struct sbx_err err = { 0 };
	uint64_t now = sbx_now_ns();
	if ((f.session && sbx_id_check(f.session, "session", &err) < 0) ||

	    (since && sbx_audit_parse_time(since, now, &f.since_ns, &err) < 0) ||
	    (until && sbx_audit_parse_time(until, now, &f.until_ns, &err) < 0)) {
		sbx_err_print(PROG, &err, json);
		return err.code;
	}
	if (f.type && !type_arg_ok(f.type))
		return sbx_cli_fail(PROG, SBX_EXIT_INVALID, json, "invalid event type '%.80s'", f.type);
	struct sbx_state st;
	/* --tenant (or SBX_TENANT): only that tenant's records. */
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, f.tenant, &err) < 0) {
		sbx_err_print(PROG, &err, json);
		return err.code;
	}
	f.tenant = sbx_state_tenant(&st);
	enum sbx_cli_mode mode = jsonl ? SBX_CLI_JSONL : sbx_cli_mode_of(json, quiet);
	int rc;
	if (chain) {
		rc = sbx_audit_chain(&st, f.tenant, chain_line, NULL, &err) < 0 ? err.code : 0;
		if (rc)
			sbx_err_print(PROG, &err, 0);
	} else {
		rc = do_verify ? verify(&st, json, quiet) : list(&st, &f, mode, headers, json);
	}
	sbx_state_close(&st);
	return rc;
}
