/* TAP for the C unit tests: one "ok N - WHAT" line per assertion, which
 * prove sees one by one (t0001-unit.t passes them through), and the plan
 * at the end.  main() returns tap_done(). */
#ifndef SBX_TESTS_TAP_H
#define SBX_TESTS_TAP_H

#include <stdio.h>

static int n, failed;

static void ok(int cond, const char *what)
{
	printf("%sok %d - %s\n", cond ? "" : "not ", ++n, what);
	failed += !cond;
}

static inline int tap_done(void)
{
	printf("1..%d\n", n);
	return failed != 0;
}

#endif
