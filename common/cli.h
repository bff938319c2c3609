/* Helpers for main(): option parsing and reporting.  Only binaries call
 * these; they are the one place that prints. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdio.h>

#include <jansson.h>

#include "err.h"

int sbx_cli_uint(const char *s, unsigned min, unsigned max, unsigned *out);
/* Report a usage-level error (text or JSON) and return code. */
int sbx_cli_fail(const char *prog, int code, int json, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Operands, or one per line from stdin when there are none and stdin is not
 * a terminal (so `sbx-ps -q | sbx-kill` works).  Returns a NULL-terminated
 * array (free with sbx_cli_free_ids) or NULL on error. */
char **sbx_cli_ids(int argc, char **argv, size_t *n);
void sbx_cli_free_ids(char **ids);
/* {"schema": 1, "removed": removed} on one line of stdout: what rm and
 * prune print with --json. */
void sbx_cli_print_removed(json_t *removed);

/* A JSON array of objects as the commands print it: with json, the array
 * itself; with quiet, the value of key_col of each, one per line; else a
 * header line (unless headers is 0), then a tab-separated row per object
 * of cols[] (booleans as yes/no, numbers as they are, strings with "-"
 * for empty or absent).  With ref_col, column 0 shows that string key's
 * value up to its last '@' (a NAME@VERSION reference's NAME part). */
struct sbx_cli_table {
	const char *const *cols; /* JSON keys */
	const char *header;      /* "NAME\tVERSION..." */
	size_t ncols;
	const char *key_col;     /* for -q */
	const char *ref_col;     /* NULL: none */
};
void sbx_cli_print_table(const struct sbx_cli_table *t, json_t *rows, int json, int quiet, int headers);
/* sbx-template list and sbx-snapshot template list (sbx_template_list's rows). */
extern const struct sbx_cli_table sbx_cli_template_table;

#endif
