#include "capacity.h"
#include "hostconf.h"
#include "policy.h"
#include "session.h"
#include "workspace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>

static unsigned env_uint(const char *name, unsigned def)
{
	const char *e = getenv(name);
	char *end;
	unsigned long v = e ? strtoul(e, &end, 10) : 0;
	return e && *e && !*end && v > 0 && v < 1000000 ? (unsigned)v : def;
}

/* What one tenant's live sessions hold. */
struct tenant_use {
	unsigned sessions, vcpus;
	uint64_t memory_mib; /* guest memory */
};

/* One pass over the records: what is live, and how much of it is tenant's. */
static int measure(struct sbx_state *st, const char *tenant, struct sbx_capacity *c, struct tenant_use *tu,
		   struct sbx_err *err)
{
	memset(tu, 0, sizeof *tu);
	memset(c, 0, sizeof *c);
	struct sysinfo si;
	uint64_t host_mib = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit >> 20 : 4096;
	c->max_memory_mib = host_mib > 2048 ? host_mib - 1024 : host_mib / 2;
	const char *m = getenv("SBX_MAX_MEMORY");
	uint64_t bytes;
	if (m && *m && sbx_parse_size(m, &bytes) == 0 && bytes >= (1u << 20))
		c->max_memory_mib = bytes >> 20;
	c->max_sessions = env_uint("SBX_MAX_SESSIONS", 256);
	c->max_vcpus = env_uint("SBX_MAX_VCPUS", 4u * (unsigned)get_nprocs());
	c->max_starting = env_uint("SBX_MAX_STARTING", 8u * (unsigned)get_nprocs());
	c->max_per_tenant = env_uint("SBX_MAX_SESSIONS_PER_TENANT", c->max_sessions);
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct sbx_session s;
		if (sbx_record_load(st, ids[i], &s, NULL) == 0) {
			const char *live = sbx_session_live_state(st, &s);
			/* A pool member holds its VM's memory and vCPUs like any
			 * session, paused or not. */
			if (!strcmp(live, "running") || !strcmp(live, "creating") || !strcmp(live, "pooled") ||
			    !strcmp(live, "paused")) {
				c->sessions++;
				c->pooled += s.pool;
				c->starting += !strcmp(live, "creating");
				if (tenant && tenant[0] && !strcmp(s.tenant, tenant)) {
					tu->sessions++;
					tu->vcpus += s.vcpus;
					tu->memory_mib += s.memory_mib;
				}
				c->memory_mib += s.memory_mib + SBX_VMM_OVERHEAD_MIB;
				c->vcpus += s.vcpus;
			}
		}
		free(ids[i]);
	}
	free(ids);
	return 0;
}

int sbx_capacity_get(struct sbx_state *st, struct sbx_capacity *c, struct sbx_err *err)
{
	struct tenant_use unused;
	return measure(st, NULL, c, &unused, err);
}

/* The tenant's quotas (sbx.yaml(5) quotas:, and SBX_MAX_SESSIONS_PER_TENANT
 * for the session count): 75 with kind "tenant_quota" naming the one a
 * session of this size would exceed.  Not host capacity: the tenant must
 * end a session of its own, another host would refuse it too. */
static int tenant_admit_n(const char *tenant, const struct sbx_capacity *c, const struct tenant_use *tu, unsigned n,
			  unsigned vcpus, unsigned memory_mib, struct sbx_err *err)
{
	struct sbx_quota q;
	if (!tenant || !tenant[0])
		return 0;
	if (sbx_hostconf_tenant_quota(tenant, &q, err) < 0)
		return -1;
	unsigned max_sessions = c->max_per_tenant;
	if (q.sessions && q.sessions < max_sessions)
		max_sessions = q.sessions;
	const char *what = NULL;
	unsigned long long used = 0, want = 0, max = 0;
	const char *unit = "";
	uint64_t mem = (uint64_t)memory_mib * n, cpus = (uint64_t)vcpus * n;
	if ((uint64_t)tu->sessions + n > max_sessions)
		what = "sessions", used = tu->sessions, want = n, max = max_sessions;
	else if (q.memory_mib && tu->memory_mib + mem > q.memory_mib)
		what = "memory", used = tu->memory_mib, want = mem, max = q.memory_mib, unit = " MiB";
	else if (q.vcpus && tu->vcpus + cpus > q.vcpus)
		what = "vcpus", used = tu->vcpus, want = cpus, max = q.vcpus;
	if (!what)
		return 0;
	return sbx_err_tenant_quota(err, tenant, what, used, want, max, unit, "its sessions",
				    "end one of its sessions first");
}

static int tenant_admit(const char *tenant, const struct sbx_capacity *c, const struct tenant_use *tu, unsigned vcpus,
			unsigned memory_mib, struct sbx_err *err)
{
	return tenant_admit_n(tenant, c, tu, 1, vcpus, memory_mib, err);
}

int sbx_capacity_quota_n(struct sbx_state *st, const char *tenant, unsigned n, unsigned vcpus, unsigned memory_mib,
			 struct sbx_err *err)
{
	struct sbx_capacity c;
	struct tenant_use tu;
	if (!tenant || !tenant[0])
		return 0;
	if (measure(st, tenant, &c, &tu, err) < 0)
		return -1;
	return tenant_admit_n(tenant, &c, &tu, n, vcpus, memory_mib, err);
}

int sbx_capacity_admit(struct sbx_state *st, const char *tenant, unsigned vcpus, unsigned memory_mib,
		       struct sbx_err *err)
{
	if (sbx_state_room(st, 0, err) < 0)
		return -1;
	struct sbx_capacity c;
	struct tenant_use tu;
	if (measure(st, tenant, &c, &tu, err) < 0 || tenant_admit(tenant, &c, &tu, vcpus, memory_mib, err) < 0)
		return -1;
	const char *what = NULL;
	if (c.sessions + 1 > c.max_sessions)
		what = "sessions";
	else if (c.memory_mib + memory_mib + SBX_VMM_OVERHEAD_MIB > c.max_memory_mib)
		what = "memory";
	else if (c.vcpus + vcpus > c.max_vcpus)
		what = "vCPUs";
	else if (c.starting + 1 > c.max_starting)
		what = "concurrent starts";
	if (!what)
		return 0;
	sbx_err_set(
		err, SBX_EXIT_TEMPFAIL, 0,
		"host capacity reached (%s): %u sessions (%u starting), %llu/%llu MiB, %u/%u vCPUs in use; try again "
		"later or on another host",
		what, c.sessions, c.starting, (unsigned long long)c.memory_mib, (unsigned long long)c.max_memory_mib,
		c.vcpus, c.max_vcpus);
	/* A start frees its slot within seconds; memory and vCPUs only when a
	 * session ends. */
	err->retry_after_ms = !strcmp(what, "concurrent starts") ? 1000 : 5000;
	return -1;
}

int sbx_capacity_admit_claim(struct sbx_state *st, const char *tenant, unsigned vcpus, unsigned memory_mib,
			     struct sbx_err *err)
{
	struct sbx_capacity c;
	struct tenant_use tu;
	if (sbx_state_room(st, 0, err) < 0)
		return -1;
	if (!tenant || !tenant[0])
		return 0;
	if (measure(st, tenant, &c, &tu, err) < 0)
		return -1;
	return tenant_admit(tenant, &c, &tu, vcpus, memory_mib, err);
}

/* Workspaces the tenant has, or that its live sessions are about to make
 * (their monitor creates or grows the image after the global lock is
 * dropped; counting the records closes that window), by name: the largest
 * size any of them gives the name. */
struct ws_sizes {
	struct ws_size {
		char name[SBX_ID_MAX + 1];
		uint64_t size;
	} * v;
	size_t n, cap;
};

static int ws_add(struct ws_sizes *w, const char *name, uint64_t size)
{
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->v[i].name, name)) {
			if (size > w->v[i].size)
				w->v[i].size = size;
			return 0;
		}
	if (w->n == w->cap) {
		size_t nc = w->cap ? w->cap * 2 : 16;
		struct ws_size *nv = realloc(w->v, nc * sizeof *nv);
		if (!nv)
			return -1;
		w->v = nv;
		w->cap = nc;
	}
	snprintf(w->v[w->n].name, sizeof w->v[0].name, "%s", name);
	w->v[w->n++].size = size;
	return 0;
}

static uint64_t ws_total(const struct ws_sizes *w)
{
	uint64_t t = 0;
	for (size_t i = 0; i < w->n; i++)
		t += w->v[i].size;
	return t;
}

int sbx_capacity_admit_workspace(struct sbx_state *st, const char *tenant, const char *name, uint64_t size,
				 struct sbx_err *err)
{
	struct sbx_quota q;
	if (!tenant || !tenant[0] || !name || !name[0])
		return 0;
	if (sbx_hostconf_tenant_quota(tenant, &q, err) < 0)
		return -1;
	if (!q.workspace_bytes)
		return 0;
	struct ws_sizes w = { 0 };
	struct sbx_workspace_info *have = NULL;
	size_t nhave = 0;
	char **ids = NULL;
	size_t nids = 0;
	int rc = -1;
	if (sbx_workspace_list(st, tenant, &have, &nhave, err) < 0 || sbx_session_list(st, &ids, &nids, err) < 0)
		goto out;
	for (size_t i = 0; i < nhave; i++)
		if (ws_add(&w, have[i].name, have[i].size) < 0)
			goto oom;
	for (size_t i = 0; i < nids; i++) {
		struct sbx_session s;
		if (sbx_record_load(st, ids[i], &s, NULL) == 0 && s.workspace[0] && !strcmp(s.tenant, tenant) &&
		    sbx_state_up(sbx_session_live_state(st, &s)) &&
		    ws_add(&w, s.workspace, s.limits.workspace_size) < 0)
			goto oom;
	}
	uint64_t before = ws_total(&w);
	if (ws_add(&w, name, size) < 0)
		goto oom;
	uint64_t after = ws_total(&w);
	if (after <= q.workspace_bytes) {
		rc = 0;
		goto out;
	}
	sbx_err_tenant_quota(err, tenant, "workspace_bytes", before, after - before, q.workspace_bytes, " bytes",
			     "its workspaces", "remove one of its workspaces first");
	goto out;
oom:
	sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot count the workspaces of tenant %s", tenant);
out:
	for (size_t i = 0; i < nids; i++)
		free(ids[i]);
	free(ids);
	free(have);
	free(w.v);
	return rc;
}
