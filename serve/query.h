/* The control API's list filters (E2B's GET /v2/sandboxes): metadata
 * (its query value: KEY=VALUE pairs joined by '&', each side
 * percent-encoded) and state (running, paused; comma-separated).  Pure:
 * fuzzed with the rest (tests/fuzz/fuzz-serve.c). */
#ifndef SBX_SERVE_QUERY_H
#define SBX_SERVE_QUERY_H

#include <jansson.h>

/* The sandboxes of list (not consumed) that match, as a new array; NULL
 * with *why set when a filter is malformed. */
json_t *serve_list_filter(json_t *list, const char *metadata, const char *state, const char **why);

#endif
