#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

int sbx_cli_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int sbx_cli_fail(const char *prog, int code, int json, const char *fmt, ...)
{
	struct sbx_err e = { 0 };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.msg, sizeof e.msg, fmt, ap);
	va_end(ap);
	e.code = code;
	sbx_err_print(prog, &e, json);
	return code;
}

char **sbx_cli_ids(int argc, char **argv, size_t *n)
{
	size_t cap = argc > 0 ? (size_t)argc + 1 : 16;
	char **v = calloc(cap, sizeof *v);
	*n = 0;
	if (!v)
		return NULL;
	if (argc > 0) {
		for (int i = 0; i < argc; i++)
			v[(*n)++] = strdup(argv[i]);
		return v;
	}
	if (isatty(0))
		return v;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	while ((len = getline(&line, &lcap, stdin)) >= 0) {
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (!len)
			continue;
		if (*n + 1 >= cap) {
			char **nv = realloc(v, 2 * cap * sizeof *v);
			if (!nv)
				break;
			v = nv;
			cap *= 2;
		}
		v[(*n)++] = strdup(line);
		v[*n] = NULL;
	}
	free(line);
	return v;
}

void sbx_cli_free_ids(char **ids)
{
	for (size_t i = 0; ids && ids[i]; i++)
		free(ids[i]);
	free(ids);
}

void sbx_cli_print_removed(json_t *removed)
{
	json_t *j = json_pack("{s:i, s:O}", "schema", 1, "removed", removed);
	json_dumpf(j, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(j);
}

int sbx_cli_usage(const char *usage, int ok)
{
	fputs(usage, ok ? stdout : stderr);
	return ok ? SBX_EXIT_OK : SBX_EXIT_USAGE;
}

const struct sbx_cli_verb *sbx_cli_verb_find(const char *prog, const struct sbx_cli_verb *verbs, size_t n,
					     const char *verb, int json)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(verbs[i].name, verb))
			return &verbs[i];
	char list[300] = "";
	for (size_t i = 0; i < n; i++)
		if (!i || verbs[i].op != verbs[i - 1].op)
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", verbs[i].name);
	sbx_cli_fail(prog, SBX_EXIT_USAGE, json, "unknown command '%.40s' (%s)", verb, list);
	return NULL;
}

int sbx_cli_verb_done(const char *prog, int rc, const struct sbx_err *err, int json)
{
	if (rc > 0)
		return rc;
	if (rc < 0) {
		sbx_err_print(prog, err, json);
		return err->code ? err->code : SBX_EXIT_INTERNAL;
	}
	return 0;
}

void sbx_cli_put_string(const struct sbx_cli_table *t, const char *s, FILE *f)
{
	/* sbx-audit(1) documents every control character but tab and
	 * newline as \xNN: a carriage return too. */
	for (const char *cr; t->flags & SBX_CLI_HEX_CR && (cr = strchr(s, '\r')); s = cr + 1) {
		char *seg = strndup(s, (size_t)(cr - s));
		sbx_fputs_field(seg ? seg : "", f);
		free(seg);
		fputs("\\x0d", f);
	}
	sbx_fputs_field(s, f);
}

void sbx_cli_put_value(const struct sbx_cli_table *t, json_t *v, FILE *f)
{
	if (json_is_integer(v))
		fprintf(f, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		fprintf(f, "%.3f", json_real_value(v));
	else if (json_is_boolean(v))
		fputs(json_is_true(v) ? "yes" : "no", f);
	else if (json_is_string(v) && (*json_string_value(v) || !(t->flags & SBX_CLI_DASH_EMPTY)))
		sbx_cli_put_string(t, json_string_value(v), f);
	else
		putc('-', f);
}

void sbx_cli_table_header(const struct sbx_cli_table *t, enum sbx_cli_mode m, int headers)
{
	if (m != SBX_CLI_TEXT || !headers || !t->ncols || !t->cols[0].head)
		return;
	for (size_t i = 0; i < t->ncols; i++)
		printf("%s%s", i ? "\t" : "", t->cols[i].head);
	putchar('\n');
}

static void put_col(const struct sbx_cli_table *t, const struct sbx_cli_col *c, json_t *row)
{
	if (c->show)
		c->show(t, row, stdout);
	else
		sbx_cli_put_value(t, json_object_get(row, c->key), stdout);
}

void sbx_cli_table_row(const struct sbx_cli_table *t, json_t *row, enum sbx_cli_mode m)
{
	switch (m) {
	case SBX_CLI_JSON: return;
	case SBX_CLI_JSONL: json_dumpf(row, stdout, JSON_COMPACT); break;
	case SBX_CLI_QUIET: put_col(t, &t->key, row); break;
	case SBX_CLI_TEXT:
		for (size_t i = 0; i < t->ncols; i++) {
			if (i)
				putchar('\t');
			put_col(t, &t->cols[i], row);
		}
		break;
	}
	putchar('\n');
}

void sbx_cli_print_table(const struct sbx_cli_table *t, json_t *rows, enum sbx_cli_mode m, int headers)
{
	if (m == SBX_CLI_JSON) {
		json_dumpf(rows, stdout, JSON_INDENT(2));
		putchar('\n');
		return;
	}
	sbx_cli_table_header(t, m, headers);
	size_t k;
	json_t *row;
	json_array_foreach (rows, k, row)
		sbx_cli_table_row(t, row, m);
}

/* NAME is the reference -t takes (OWNER/NAME for a tenant's): the
 * template's NAME@VERSION up to its last '@'. */
static void show_ref_name(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	const char *ref = json_string_value(json_object_get(row, "template"));
	const char *at = ref ? strrchr(ref, '@') : NULL;
	if (at)
		fprintf(f, "%.*s", (int)(at - ref), ref);
	else
		sbx_cli_put_value(t, json_object_get(row, "name"), f);
}

static const struct sbx_cli_col template_cols[] = {
	{ "name", "NAME", show_ref_name }, { "version", "VERSION", NULL },   { "owner", "OWNER", NULL },
	{ "created", "CREATED", NULL },    { "snapshot", "SNAPSHOT", NULL }, { "in_use", "IN_USE", NULL },
	{ "kernel", "KERNEL", NULL },
};
const struct sbx_cli_table sbx_cli_template_table = {
	SBX_CLI_COLS(template_cols),
	.key = { "template", NULL, NULL },
	.flags = SBX_CLI_DASH_EMPTY,
};
