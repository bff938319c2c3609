/* Helpers for main(): option parsing and reporting.  Only binaries call
 * these; they are the one place that prints. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdio.h>
#include "err.h"

int sbx_cli_uint(const char *s, unsigned min, unsigned max, unsigned *out);
/* Report a usage-level error (text or JSON) and return code. */
int sbx_cli_fail(const char *prog, int code, int json, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Operands, or one per line from stdin when there are none and stdin is not
 * a terminal (so `sbx-ps -q | sbx-kill` works).  Returns a NULL-terminated
 * array (free with sbx_cli_free_ids) or NULL on error. */
char **sbx_cli_ids(int argc, char **argv, size_t *n);
void sbx_cli_free_ids(char **ids);

#endif
