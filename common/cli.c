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
