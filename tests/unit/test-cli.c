/* The listing commands' one table printer (common/cli.c): text, -q and
 * JSON from the same rows, headers on and off, derived columns, escapes,
 * the two format flags; and the policy's mask of the keys a file set,
 * which sbx-create goes by instead of parsing the file twice. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "policy.h"
#include "tap.h"

/* What fn printed on stdout. */
static char *capture(void (*fn)(void *), void *arg)
{
	fflush(stdout);
	FILE *tmp = tmpfile();
	int saved = dup(1);
	if (!tmp || saved < 0 || dup2(fileno(tmp), 1) < 0)
		return strdup("(no capture)");
	fn(arg);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	long len = ftell(tmp);
	char *buf = calloc(1, len > 0 ? (size_t)len + 1 : 1);
	rewind(tmp);
	if (buf && len > 0 && fread(buf, 1, (size_t)len, tmp) != (size_t)len)
		buf[0] = 0;
	fclose(tmp);
	return buf;
}

static void show_both(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	sbx_cli_put_value(t, json_object_get(row, "a"), f);
	putc('+', f);
	sbx_cli_put_string(t, json_string_value(json_object_get(row, "s")) ?: "", f);
}

static const struct sbx_cli_col cols[] = {
	{ "id", "ID", NULL }, { "n", "N", NULL }, { "r", "R", NULL },          { "b", "B", NULL },
	{ "s", "S", NULL },   { "x", "X", NULL }, { NULL, "BOTH", show_both },
};
static struct sbx_cli_table table = { SBX_CLI_COLS(cols), .key = { "id", NULL, NULL } };

struct job {
	json_t *rows;
	enum sbx_cli_mode mode;
	int headers;
	const struct sbx_cli_table *t;
};

static void print(void *arg)
{
	struct job *j = arg;
	sbx_cli_print_table(j->t ? j->t : &table, j->rows, j->mode, j->headers);
}

static void stream(void *arg)
{
	struct job *j = arg;
	sbx_cli_table_header(&table, j->mode, j->headers);
	size_t k;
	json_t *row;
	json_array_foreach (j->rows, k, row)
		sbx_cli_table_row(&table, row, j->mode);
}

static char *run_table(const struct sbx_cli_table *t, json_t *rows, enum sbx_cli_mode mode, int headers)
{
	struct job j = { rows, mode, headers, t };
	return capture(print, &j);
}

static char *run(json_t *rows, enum sbx_cli_mode mode, int headers)
{
	return run_table(&table, rows, mode, headers);
}

static void table_printer(void)
{
	json_t *rows =
		json_pack("[{s:s, s:i, s:f, s:b, s:s, s:s}, {s:s, s:i, s:f, s:b, s:s}]", "id", "one", "n", 7, "r", 1.5,
			  "b", 1, "s", "a\tb\nc\\d\x1b", "a", "A", "id", "two", "n", -3, "r", 0.0004, "b", 0, "s", "");
	char *s = run(rows, SBX_CLI_TEXT, 1);
	ok(!strcmp(s, "ID\tN\tR\tB\tS\tX\tBOTH\n"
		      "one\t7\t1.500\tyes\ta\\tb\\nc\\\\d\\x1b\t-\tA+a\\tb\\nc\\\\d\\x1b\n"
		      "two\t-3\t0.000\tno\t\t-\t-+\n"),
	   "text: a header, then a row each: integers, reals to 3 places, yes/no, escapes, '-' for absent");
	free(s);
	s = run(rows, SBX_CLI_TEXT, 0);
	ok(!strncmp(s, "one\t", 4) && strstr(s, "\ntwo\t"), "--no-headers: the rows alone");
	free(s);
	s = run(rows, SBX_CLI_QUIET, 1);
	ok(!strcmp(s, "one\ntwo\n"), "-q: the key column only, no header");
	free(s);
	s = run(rows, SBX_CLI_JSON, 1);
	json_t *back = json_loads(s, 0, NULL);
	ok(back && json_equal(back, rows), "--json: the very rows, whatever headers says");
	ok(s[0] == '[' && strstr(s, "\n  {") && s[strlen(s) - 1] == '\n', "indented, ending in a newline");
	json_decref(back);
	free(s);

	struct job j = { rows, SBX_CLI_TEXT, 1, NULL };
	char *whole = run(rows, SBX_CLI_TEXT, 1), *streamed = capture(stream, &j);
	ok(!strcmp(whole, streamed), "row by row prints what the whole table does");
	free(whole);
	free(streamed);
	j.mode = SBX_CLI_JSON;
	s = capture(stream, &j);
	ok(!strcmp(s, ""), "row by row, JSON is left to the caller");
	free(s);
	j.mode = SBX_CLI_JSONL;
	s = capture(stream, &j);
	char *nl = strchr(s, '\n');
	ok(nl && !strncmp(s, "{\"id\":\"one\"", 11) && !strncmp(nl + 1, "{\"id\":\"two\"", 11) && !strchr(nl + 1, '\t'),
	   "JSON lines: one compact object a line, no header");
	free(s);

	table.flags = SBX_CLI_DASH_EMPTY;
	s = run(rows, SBX_CLI_TEXT, 0);
	ok(strstr(s, "two\t-3\t0.000\tno\t-\t-\t-+\n") != NULL, "DASH_EMPTY: an empty string is '-' (not in show())");
	free(s);
	json_t *cr = json_pack("[{s:s, s:s}]", "id", "c", "s", "x\ry");
	table.flags = 0;
	s = run(cr, SBX_CLI_TEXT, 0);
	ok(strstr(s, "\tx\\ry\t") != NULL, "a carriage return is \\r");
	free(s);
	table.flags = SBX_CLI_HEX_CR;
	s = run(cr, SBX_CLI_TEXT, 0);
	ok(strstr(s, "\tx\\x0dy\t") != NULL && strstr(s, "+x\\x0dy\n"), "HEX_CR: \\x0d, in show() too (sbx-audit(1))");
	free(s);
	table.flags = 0;
	json_decref(cr);
	json_decref(rows);

	static const struct sbx_cli_col bare[] = { { "a", NULL, NULL }, { "b", NULL, NULL } };
	static const struct sbx_cli_table headless = { SBX_CLI_COLS(bare) };
	rows = json_pack("[{s:s, s:i}]", "a", "x", "b", 1);
	s = run_table(&headless, rows, SBX_CLI_TEXT, 1);
	ok(!strcmp(s, "x\t1\n"), "a table without headers prints none even when asked");
	free(s);
	json_decref(rows);
}

static void template_table(void)
{
	json_t *rows = json_pack("[{s:s, s:s, s:s, s:s, s:i}]", "template", "acme/py@1.0", "name", "py", "version",
				 "1.0", "owner", "", "in_use", 2);
	char *text = run_table(&sbx_cli_template_table, rows, SBX_CLI_TEXT, 1);
	char *quiet = run_table(&sbx_cli_template_table, rows, SBX_CLI_QUIET, 1);
	ok(!strcmp(text, "NAME\tVERSION\tOWNER\tCREATED\tSNAPSHOT\tIN_USE\tKERNEL\n"
			 "acme/py\t1.0\t-\t-\t-\t2\t-\n"),
	   "templates: NAME is the reference's name part, '-' for empty");
	ok(!strcmp(quiet, "acme/py@1.0\n"), "-q: the whole reference");
	free(text);
	free(quiet);
	json_decref(rows);
}

static int parse(const char *yaml, struct sbx_policy *p)
{
	struct sbx_err err = { 0 };
	sbx_policy_defaults(p);
	return sbx_policy_parse("p.yaml", (const uint8_t *)yaml, strlen(yaml), p, &err);
}

static void policy_mask(void)
{
	static struct sbx_policy p;
	ok(parse("network: {egress: none}\n", &p) == 0 && p.set == 0, "a file without resources sets no shape key");
	ok(parse("resources: {vcpus: 1, ttl: 1h}\n", &p) == 0 && p.set == SBX_POLICY_SET_VCPUS,
	   "vcpus, even at its default value");
	ok(parse("resources: {memory: 512M}\n", &p) == 0 && p.set == SBX_POLICY_SET_MEMORY, "memory");
	ok(parse("resources: {disk: 2G, vcpus: 2, memory: 256M}\n", &p) == 0 &&
		   p.set == (SBX_POLICY_SET_VCPUS | SBX_POLICY_SET_MEMORY | SBX_POLICY_SET_DISK),
	   "all three");
	sbx_policy_defaults(&p);
	ok(p.set == 0, "the defaults set none");
}

int main(void)
{
	table_printer();
	template_table();
	policy_mask();
	return tap_done();
}
