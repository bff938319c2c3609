/* What the session's proxy leaves for the commands and the monitor to
 * read: its connection log (LIB/sessions/ID/net.log) and the refusals an
 * exec's record counts.  The proxy itself (proxy/egress.h) writes them. */
#ifndef SBX_NETLOG_H
#define SBX_NETLOG_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "state.h"

/* The session's connection log (LIB/sessions/ID/net.log) as a JSON array
 * of its records, oldest first; empty for a session without network.  4
 * when the session does not exist. */
int sbx_netlog_read(struct sbx_state *st, const char *id, json_t **out, struct sbx_err *err);
/* What the session's package cache served and refused, for sbx-ps
 * --packages: from LIB/sessions/ID/packages.log, the package files (npm
 * tarballs, PyPI files) and every refusal (of a name, an index page or
 * metadata too), oldest first, HEAD requests left out; each row as the
 * log has it plus "execs", the IDs of the session's execs that were
 * running when the request came (inferred by the host from their start and
 * end times: the guest does not say which process asked, and an install
 * left running in the background after its exec ended has none).  Empty
 * for a session without a cache; past the log's cap its last line,
 * {"truncated": true, "max_bytes": N}, as it is.  With them, the egress
 * proxy's connections (net.log) as kind "fetch", registry "egress": what
 * else the session downloaded (git, curl, a registry reached directly),
 * by name, port and bytes (TLS passes through: no path).  Oldest first.
 * 4 when the session does not exist. */
int sbx_pkglog_read(struct sbx_state *st, const char *id, json_t **out, struct sbx_err *err);
/* What the session's proxy refused since the logs held net_off and pkg_off
 * bytes (the sizes when an exec started), under the session directory
 * dfd: {"egress": {"denied", "first"}, "dns": {...}, "packages":
 * {"refused", "first"}}, counts and the first few destinations.  Reads at
 * most 4 MiB of each log; NULL only when out of memory.  dfd -1: no logs,
 * the zero counts. */
#define SBX_VIOLATIONS_FIRST 5
json_t *sbx_netlog_violations(int dfd, uint64_t net_off, uint64_t pkg_off);

#endif
