#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

void sbx_cli_print_table(const struct sbx_cli_table *t, json_t *rows, int json, int quiet, int headers)
{
	if (json) {
		json_dumpf(rows, stdout, JSON_INDENT(2));
		putchar('\n');
		return;
	}
	if (headers && !quiet)
		puts(t->header);
	size_t k;
	json_t *row;
	json_array_foreach(rows, k, row) {
		if (quiet) {
			const char *key = json_string_value(json_object_get(row, t->key_col));
			puts(key ? key : "-");
			continue;
		}
		const char *ref = t->ref_col ? json_string_value(json_object_get(row, t->ref_col)) : NULL;
		const char *at = ref ? strrchr(ref, '@') : NULL;
		for (size_t i = 0; i < t->ncols; i++) {
			json_t *v = json_object_get(row, t->cols[i]);
			const char *str = json_string_value(v);
			if (i)
				putchar('\t');
			if (i == 0 && at)
				printf("%.*s", (int)(at - ref), ref);
			else if (json_is_boolean(v))
				fputs(json_is_true(v) ? "yes" : "no", stdout);
			else if (json_is_integer(v))
				printf("%lld", (long long)json_integer_value(v));
			else
				fputs(str && *str ? str : "-", stdout);
		}
		putchar('\n');
	}
}

static const char *const template_cols[] = { "name", "version", "owner", "created", "snapshot", "in_use", "kernel" };
const struct sbx_cli_table sbx_cli_template_table = {
	.cols = template_cols,
	.ncols = sizeof template_cols / sizeof *template_cols,
	.header = "NAME\tVERSION\tOWNER\tCREATED\tSNAPSHOT\tIN_USE\tKERNEL",
	.key_col = "template",
	/* NAME is the reference -t takes: OWNER/NAME for a tenant's. */
	.ref_col = "template",
};
