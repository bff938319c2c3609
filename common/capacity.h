/* Host capacity: how many sessions, guest memory and vCPUs this host
 * takes.  A create that would exceed it fails with 75 (try again, or try
 * another node) instead of overcommitting the host. */
#ifndef SBX_CAPACITY_H
#define SBX_CAPACITY_H

#include <stdint.h>
#include "err.h"
#include "state.h"

struct sbx_capacity {
	unsigned sessions, max_sessions;
	uint64_t memory_mib, max_memory_mib; /* guest memory plus the VMM's allowance */
	unsigned vcpus, max_vcpus;
	unsigned starting, max_starting; /* sessions still booting */
	unsigned max_per_tenant;         /* sessions of one tenant */
	unsigned pooled;                 /* of sessions: warm-pool members (pool.h) */
};

/* What live sessions use now, and the limits: SBX_MAX_STARTING (boots at
 * once; each costs a burst of CPU, under TCG seconds of it), SBX_MAX_SESSIONS,
 * SBX_MAX_MEMORY (a size, e.g. 16G), SBX_MAX_VCPUS; defaults from the host
 * (its memory less 1 GiB; 4 vCPUs per host CPU, an overcommit that suits
 * mostly idle agent sessions). */
int sbx_capacity_get(struct sbx_state *st, struct sbx_capacity *c, struct sbx_err *err);
/* 75 with retry_after_ms when a session of this size does not fit.
 * Call with the global lock held so two creates cannot both fit. */
/* Would n more sessions of this size take tenant past its quotas?  75
 * (kind tenant_quota) when so; host capacity is each create's to check. */
int sbx_capacity_quota_n(struct sbx_state *st, const char *tenant, unsigned n, unsigned vcpus, unsigned memory_mib,
			 struct sbx_err *err);
int sbx_capacity_admit(struct sbx_state *st, const char *tenant, unsigned vcpus, unsigned memory_mib,
		       struct sbx_err *err);
/* Both first check the tenant's quotas (sbx.yaml(5) quotas:, and
 * SBX_MAX_SESSIONS_PER_TENANT): 75 too, but err->kind "tenant_quota" and
 * err->quota the quota's name (sessions, memory, vcpus).
 * The same for a claim of a warm-pool member of this size, which is
 * counted already: only the tenant's quotas can refuse it. */
int sbx_capacity_admit_claim(struct sbx_state *st, const char *tenant, unsigned vcpus, unsigned memory_mib,
			     struct sbx_err *err);

/* The tenant's workspace_bytes quota, for a create that attaches the
 * workspace name of size bytes (made, or grown, by its monitor): the sizes
 * of its workspaces and of those its live sessions are making, with this
 * one.  75 with kind tenant_quota, quota workspace_bytes.  Under the
 * global lock, like sbx_capacity_admit. */
int sbx_capacity_admit_workspace(struct sbx_state *st, const char *tenant, const char *name, uint64_t size,
				 struct sbx_err *err);

#define SBX_VMM_OVERHEAD_MIB 512u

#endif
