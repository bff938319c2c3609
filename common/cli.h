/* Helpers for main(): option parsing and reporting.  Only binaries call
 * these; they are the one place that prints. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdio.h>

#include <jansson.h>

#include "err.h"

/* Run by a user other than root, a command goes through sbx-serve: its
 * argv, stdin, stdout, stderr and working directory are sent to the
 * service's CLI socket (SBX_SERVE_CLI, else cli.sock beside serve.socket
 * of sbx.yaml, else $SBX_ROOT/run/sbx-serve/cli.sock), which runs it for
 * the user's tenant (sbx-serve(8), USERS); signals the command gets are
 * passed on.  Returns 1 with *status the command's exit status then (its
 * output already written), 0 when run by root (go on here). */
int sbx_cli_remote(int argc, char **argv, int *status);

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

/* Print a usage string: for -h/--help (ok) to stdout, returning 0; for
 * bad usage to stderr, returning SBX_EXIT_USAGE. */
int sbx_cli_usage(const char *usage, int ok);

/* A command's subcommands (sbx-template, sbx-snapshot): each verb's name
 * and what the command does for it (op: its own code).  An alias repeats
 * the op of the entry before it. */
struct sbx_cli_verb {
	const char *name;
	int op;
};
/* verb's entry, or NULL once "unknown command 'VERB' (a, b, ...)" (the
 * table's names, aliases left out) is reported. */
const struct sbx_cli_verb *sbx_cli_verb_find(const char *prog, const struct sbx_cli_verb *verbs, size_t n,
					     const char *verb, int json);
/* The exit status of a subcommand that returned rc: > 0 a usage error it
 * reported itself, < 0 err (printed here), 0 success. */
int sbx_cli_verb_done(const char *prog, int rc, const struct sbx_err *err, int json);

/* The one table printer of the listing commands: rows are JSON objects,
 * and text, -q and JSON are all printed from them, so they cannot drift.
 *
 * Text is an optional header line, then a line per row of the columns
 * joined by tabs: integers as they are, reals with three decimals,
 * booleans as yes/no, strings with control characters and the backslash
 * written as C escapes (so each row stays one line), "-" for an absent or
 * null value (and, with SBX_CLI_DASH_EMPTY, for an empty string).  A
 * column with a show() prints itself (a value derived from the row).
 * Quiet prints the key column per row; JSON the array as it is. */
enum sbx_cli_mode { SBX_CLI_TEXT, SBX_CLI_QUIET, SBX_CLI_JSON, SBX_CLI_JSONL };

#define SBX_CLI_DASH_EMPTY 1u /* an empty string is "-" */
#define SBX_CLI_HEX_CR 2u     /* a carriage return is \x0d, not \r (sbx-audit(1)) */

struct sbx_cli_table;
struct sbx_cli_col {
	const char *key;  /* JSON key */
	const char *head; /* header; the table has none when column 0's is NULL */
	void (*show)(const struct sbx_cli_table *t, json_t *row, FILE *f);
};
struct sbx_cli_table {
	const struct sbx_cli_col *cols;
	size_t ncols;
	struct sbx_cli_col key; /* for -q */
	unsigned flags;         /* SBX_CLI_* */
};
#define SBX_CLI_COLS(c) .cols = (c), .ncols = sizeof(c) / sizeof *(c)

static inline enum sbx_cli_mode sbx_cli_mode_of(int json, int quiet)
{
	return json ? SBX_CLI_JSON : quiet ? SBX_CLI_QUIET : SBX_CLI_TEXT;
}
/* Streaming: the header (text only, when headers and the table has one),
 * then one row at a time (text, quiet, or a compact JSON line; nothing
 * for SBX_CLI_JSON, whose caller collects the rows). */
void sbx_cli_table_header(const struct sbx_cli_table *t, enum sbx_cli_mode m, int headers);
void sbx_cli_table_row(const struct sbx_cli_table *t, json_t *row, enum sbx_cli_mode m);
/* A whole listing: for SBX_CLI_JSON the array, indented, else the header
 * and every row. */
void sbx_cli_print_table(const struct sbx_cli_table *t, json_t *rows, enum sbx_cli_mode m, int headers);
/* One value as a text column prints it, and a string's escapes (for
 * show() callbacks; no "-" for an empty one). */
void sbx_cli_put_value(const struct sbx_cli_table *t, json_t *v, FILE *f);
void sbx_cli_put_string(const struct sbx_cli_table *t, const char *s, FILE *f);

/* sbx-template list and sbx-snapshot template list (sbx_template_list's rows). */
extern const struct sbx_cli_table sbx_cli_template_table;

#endif
