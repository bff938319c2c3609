/* sbx-audit: list, filter and verify the audit trail.  Every listing mode
 * prints from the stored record through print_rec(), so text, JSON and
 * JSON lines cannot drift. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "cli.h"
#include "util.h"

#define PROG "sbx-audit"
#define USAGE                                                                                                 \
	"usage: sbx-audit [-q] [--json|--jsonl] [--no-headers] [--session ID] [--tenant T] [--type TYPE]\n" \
	"                 [--since TIME] [--until TIME]\n"                                                   \
	"       sbx-audit [-q] [--json] [--tenant T] verify\n"                                               \
	"       sbx-audit --chain [--tenant T]\n"

enum mode { M_TEXT, M_QUIET, M_JSON, M_JSONL };

struct out {
	enum mode mode;
	json_t *all; /* M_JSON */
	size_t n;
};

/* Text must stay one line with tab-separated fields whatever a record
 * holds (a tampered log may hold anything). */
static void put_escaped(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\\')
			fputs("\\\\", stdout);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
}

static void put_str(json_t *rec, const char *key)
{
	const char *v = json_string_value(json_object_get(rec, key));
	put_escaped(v && *v ? v : "-");
}

/* Every field but the columns, as key=value in stored (sorted) order;
 * arrays and objects as compact JSON. */
static void put_summary(json_t *rec)
{
	const char *k;
	json_t *v;
	int any = 0;
	json_object_foreach(rec, k, v) {
		if (!strcmp(k, "seq") || !strcmp(k, "time") || !strcmp(k, "type") || !strcmp(k, "session") ||
		    !strcmp(k, "prev"))
			continue;
		printf("%s%s=", any++ ? " " : "", k);
		if (json_is_string(v)) {
			put_escaped(json_string_value(v));
		} else if (json_is_real(v)) {
			printf("%.6g", json_real_value(v));
		} else {
			/* compact JSON holds no raw tab or newline */
			char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			fputs(s ? s : "?", stdout);
			free(s);
		}
	}
	if (!any)
		putchar('-');
}

static int print_rec(json_t *rec, void *ctx)
{
	struct out *o = ctx;
	o->n++;
	switch (o->mode) {
	case M_JSON:
		json_array_append(o->all, rec);
		break;
	case M_JSONL:
		json_dumpf(rec, stdout, JSON_COMPACT);
		putchar('\n');
		break;
	case M_QUIET:
		printf("%lld\n", (long long)json_integer_value(json_object_get(rec, "seq")));
		break;
	case M_TEXT:
		printf("%lld\t", (long long)json_integer_value(json_object_get(rec, "seq")));
		put_str(rec, "time");
		putchar('\t');
		put_str(rec, "type");
		putchar('\t');
		put_str(rec, "session");
		putchar('\t');
		put_summary(rec);
		putchar('\n');
		break;
	}
	return 0;
}

static int list(struct sbx_state *st, const struct sbx_audit_filter *f, enum mode mode, int headers, int json_err)
{
	struct out o = { .mode = mode, .all = mode == M_JSON ? json_array() : NULL };
	struct sbx_err err = { 0 };
	if (mode == M_TEXT && headers)
		puts("SEQ\tTIME\tTYPE\tSESSION\tSUMMARY");
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
	static const struct option opts[] = {
		{ "chain", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "jsonl", no_argument, NULL, 'l' },
		{ "no-headers", no_argument, NULL, 'H' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "session", required_argument, NULL, 'S' },
		{ "since", required_argument, NULL, 's' },
		{ "tenant", required_argument, NULL, 'T' },
		{ "type", required_argument, NULL, 't' },
		{ "until", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
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
		case 'h': fputs(USAGE, stdout); return 0;
		case 'j': json = 1; break;
		case 'l': jsonl = 1; break;
		case 'q': quiet = 1; break;
		case 's': since = optarg; break;
		case 't': f.type = optarg; break;
		case 'u': until = optarg; break;
		default: fputs(USAGE, stderr); return SBX_EXIT_USAGE;
		}
	}
	int do_verify = optind < argc && !strcmp(argv[optind], "verify");
	int filtered = f.session || f.type || since || until;
	if (argc - optind > do_verify || (json && jsonl) || (do_verify && (filtered || jsonl || chain)) ||
	    (chain && (filtered || json || jsonl || quiet))) {
		fputs(USAGE, stderr);
		return SBX_EXIT_USAGE;
	}
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
	enum mode mode = json ? M_JSON : jsonl ? M_JSONL : quiet ? M_QUIET : M_TEXT;
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
