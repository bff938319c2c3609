/* A sandbox's logs (GET /sandboxes/ID/logs, /v2/sandboxes/ID/logs): its
 * console's lines (the guest kernel's and guest-init's), as E2B's API
 * answers them.  Pure, and fuzzed (fuzz-serve): the text is the guest's. */
#ifndef SBX_SERVE_LOGS_H
#define SBX_SERVE_LOGS_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define SERVE_LOGS_TAIL (256u << 10) /* the console's last bytes read */
#define SERVE_LOGS_LIMIT 1000u       /* lines at most, and by default */

struct serve_logs_query {
	uint64_t from_ms; /* v1 start, v2 cursor: lines at or after it (0: all) */
	unsigned limit;   /* 1 to SERVE_LOGS_LIMIT */
	int backward;     /* v2 direction=backward: the newest first */
	int v2;           /* {"logs": [entry]} rather than v1's {"logs", "logEntries"} */
};

/* buf: the console's tail (cut_first: it starts mid-line, which is
 * dropped).  A line's time is the session's start (base_ms) plus the
 * kernel's "[ seconds.micros]" prefix where it has one, else the line
 * before it's. */
json_t *serve_logs(const char *buf, size_t n, int cut_first, uint64_t base_ms, const struct serve_logs_query *q);

#endif
