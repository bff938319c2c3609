/* The host configuration: /etc/sbx/sbx.yaml, or $SBX_ROOT/etc/sbx/sbx.yaml
 * when SBX_ROOT is set (sbx.yaml(5)).  It says how this host runs sessions,
 * not what a session may do (that is the policy's job): the warm pool's
 * sizes, and the host paths and variables tenants may name (hostpath.h).
 * Parsed like a policy, with libyaml's event API
 * against a fixed schema, failing closed: anything it does not understand
 * is SBX_EXIT_INVALID naming the file, line and column.  A missing file is
 * an empty configuration (no pool, no host path for any tenant). */
#ifndef SBX_HOSTCONF_H
#define SBX_HOSTCONF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SBX_HOSTCONF_FILE_MAX (64u << 10)
#define SBX_POOL_TEMPLATES_MAX 16
#define SBX_POOL_SIZE_MAX 64

struct sbx_pool_conf {
	char tmpl[130];      /* NAME, or NAME@VERSION for a pinned version */
	unsigned size;       /* members to keep; 0: none */
	unsigned vcpus;      /* the members' shape: a create is served from the */
	unsigned memory_mib; /* pool only when it asks for exactly this */
	uint64_t disk;       /* bytes of writable disk (resources.disk) */
	unsigned network;    /* of the size, members with a NIC (for sessions with egress or
			      * package registries; the others serve the rest) */
};

/* Host paths a tenant may name (hostpath.h): roots beneath which a
 * session created with --tenant may read (secrets, -v, sbx-cp uploads) or
 * write (sbx-cp downloads), and the environment variables its secrets may
 * come from.  "{tenant}" in a root stands for the tenant's ID.  Empty: none. */
#define SBX_HOSTPATH_ROOTS_MAX 16
#define SBX_HOSTPATH_ROOT_LEN 257
#define SBX_ENV_ALLOW_MAX 32
struct sbx_hostpath_conf {
	char read[SBX_HOSTPATH_ROOTS_MAX][SBX_HOSTPATH_ROOT_LEN];
	char write[SBX_HOSTPATH_ROOTS_MAX][SBX_HOSTPATH_ROOT_LEN];
	unsigned nread, nwrite;
	char env_allow[SBX_ENV_ALLOW_MAX][128];
	unsigned nenv;
};

/* Per-tenant quotas (capacity.h): what one tenant's live sessions may hold
 * together.  0: no limit.  per_tenant applies to every tenant; an entry of
 * tenants[] replaces the values it sets, for that tenant. */
#define SBX_QUOTA_TENANTS_MAX 64
struct sbx_quota {
	unsigned sessions;
	uint64_t memory_mib; /* guest memory */
	unsigned vcpus;
	uint64_t workspace_bytes; /* the sizes of its workspaces */
	uint64_t snapshot_bytes;  /* the sizes of its snapshots */
	uint64_t cache_bytes;     /* its package cache (else packages.cache_quota) */
	/* Ceilings on each of its sessions, not totals: a policy asking for
	 * more, or for no limit, gets the ceiling (resources.disk_bps,
	 * disk_iops, network.rate). */
	uint64_t session_disk_bps;
	unsigned session_disk_iops;
	uint64_t session_network_rate;
};
struct sbx_quota_conf {
	struct sbx_quota per_tenant;
	struct sbx_tenant_quota {
		char tenant[64];
		struct sbx_quota q;
	} tenants[SBX_QUOTA_TENANTS_MAX];
	unsigned ntenants;
};

/* packages: the package cache's host-side bounds (pkgcache.h). */
struct sbx_hostconf_packages {
	uint64_t cache_quota; /* bytes each cache scope (a tenant's, or the shared
			       * one) may keep; 0: not set (SBX_PKGCACHE_QUOTA_DEFAULT) */
};
#define SBX_PUBLISHERS_MAX 64

/* audit: retention of the trail (audit.h).  max_size: the log rotates
 * into a segment once it holds this many bytes (0: never); keep: sbx-gc
 * drops the oldest segments beyond this many (0: keeps them all);
 * session_max: the bytes of a session's proxy records (net.connect,
 * net.close, dns.query, net.refused) the trail takes, past which they are
 * only counted (0: not set, SBX_AUDIT_SESSION_MAX_DEFAULT); reserve: the
 * free space on LIB's filesystem below which new work is refused, so that
 * the trail's appends still find room.  Unset (0, or *_set 0) means the
 * defaults below. */
struct sbx_hostconf_audit {
	uint64_t max_size;
	unsigned keep;
	int keep_set;
	uint64_t session_max;
	uint64_t reserve;
	int reserve_set;
};
/* The trail then takes at most about 65 x 64 MiB, a size an operator can
 * plan a disk for: a trail that grows without end fills LIB, and then
 * every tenant's work fails closed.  What retention drops is recorded
 * (audit.retention); the full history is kept off the host
 * (sbx-audit --jsonl), or here with keep: 0. */
#define SBX_AUDIT_MAX_SIZE_DEFAULT (64ull << 20)
#define SBX_AUDIT_KEEP_DEFAULT 64u
/* The reserve: the larger of 256 MiB and 2% of LIB's filesystem, room for
 * some hundred thousand records while the operator frees space, but no
 * more than 4 GiB (about what the default retention lets the trail keep). */
#define SBX_AUDIT_RESERVE_MIN (256ull << 20)
#define SBX_AUDIT_RESERVE_MAX (4ull << 30)
#define SBX_AUDIT_RESERVE_PCT 2u
/* The reserve in bytes for a filesystem of fs_bytes. */
uint64_t sbx_hostconf_reserve(const struct sbx_hostconf_audit *a, uint64_t fs_bytes);
/* A guest drives its proxy's records: 64 MiB is some 150000 connections
 * with their DNS queries, far more than a build or a test run makes,
 * and a day of N5's flood would be 2 GB without it. */
#define SBX_AUDIT_SESSION_MAX_DEFAULT (64ull << 20)

/* serve: sbx-serve(8)'s listeners, and which host users are which
 * tenants on its unix socket (root is the operator; others are refused). */
#define SBX_SERVE_USERS_MAX 64
struct sbx_hostconf_serve {
	char socket[108]; /* "": RUN/serve.sock */
	char listen[64];  /* ADDR:PORT of a TCP listener (API keys); "": none */
	/* serve.tls: the TCP listener's certificate (chain) and key, PEM
	 * files read as root at start; "": plain HTTP.  Both or neither. */
	char tls_cert[256];
	char tls_key[256];
	struct sbx_serve_user {
		char user[33]; /* a user name, or a uid in decimal */
		char tenant[64];
	} users[SBX_SERVE_USERS_MAX];
	unsigned nusers;
	unsigned rate; /* requests a second per caller (a burst of twice that); 0: SBX_SERVE_RATE_DEFAULT */
	/* serve.policy: the operator's policy file for every sandbox the
	 * service makes (a request narrows it, never widens it); "": the
	 * defaults (no network). */
	char policy[256];
};
#define SBX_SERVE_RATE_DEFAULT 50u

/* oci: the policies an OCI container may name with the org.sbx.policy
 * annotation (sbx-oci(1)), each a NAME for a policy file the operator
 * chose, and the one a container that names none gets ("": sbx's
 * defaults).  A bundle names an entry, never a path. */
#define SBX_OCI_POLICIES_MAX 32
struct sbx_hostconf_oci {
	struct sbx_oci_policy {
		char name[64];
		char file[256];
	} policies[SBX_OCI_POLICIES_MAX];
	unsigned npolicies;
	char default_policy[64];
	/* oci.templates: NAME to a template (NAME or NAME@VERSION) a
	 * container may boot instead of its bundle's root (org.sbx.template). */
	struct sbx_oci_template {
		char name[64];
		char tmpl[130];
	} templates[SBX_OCI_POLICIES_MAX];
	unsigned ntemplates;
};

struct sbx_hostconf {
	char source[600]; /* the file read; "" when there was none */
	struct sbx_hostconf_audit audit;
	struct sbx_pool_conf pool[SBX_POOL_TEMPLATES_MAX];
	unsigned npool;
	struct sbx_hostconf_packages packages;
	struct sbx_hostpath_conf paths; /* host_paths:, secrets: */
	struct sbx_quota_conf quotas;   /* quotas: */
	/* templates.publishers: tenants that may publish templates of their
	 * own (sbx-snapshot save --template); none by default. */
	char publishers[SBX_PUBLISHERS_MAX][64];
	unsigned npublishers;
	struct sbx_hostconf_serve serve;
	struct sbx_hostconf_oci oci;
};

/* The file of oci.policies' entry name; NULL when there is none. */
const char *sbx_hostconf_oci_policy(const struct sbx_hostconf *hc, const char *name);
/* The template of oci.templates' entry name; NULL when there is none. */
const char *sbx_hostconf_oci_template(const struct sbx_hostconf *hc, const char *name);

/* The quota that applies to tenant (per_tenant, overridden key by key by
 * its own entry). */
void sbx_hostconf_quota(const struct sbx_hostconf *hc, const char *tenant, struct sbx_quota *q);

/* The same, read from sbx.yaml (sbx_hostconf_load) for this call. */
int sbx_hostconf_tenant_quota(const char *tenant, struct sbx_quota *q, struct sbx_err *err);

/* Is tenant listed in templates.publishers? */
int sbx_hostconf_publisher(const struct sbx_hostconf *hc, const char *tenant);

/* Where the file is: /etc/sbx/sbx.yaml under SBX_ROOT (if set). */
const char *sbx_hostconf_path(char *buf, size_t n);
/* Read it; a missing file leaves hc empty (npool 0) and succeeds. */
int sbx_hostconf_load(struct sbx_hostconf *hc, struct sbx_err *err);
/* Is it valid (missing counts as valid)?  -1 with the parser's message,
 * SBX_EXIT_INVALID, when it is not. */
int sbx_hostconf_check(struct sbx_err *err);
/* Parse n bytes (name used in messages) into hc, which is reset first. */
int sbx_hostconf_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_hostconf *hc, struct sbx_err *err);
#endif
