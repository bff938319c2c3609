/* Session records (LIB/sessions/ID/session.json) and the session life
 * cycle seen from the commands: create (spawn the monitor, wait for the
 * agent's hello), list, destroy. */
#ifndef SBX_SESSION_H
#define SBX_SESSION_H

#include <stdint.h>
#include "env.h"
#include "err.h"
#include "state.h"

#define SBX_RECORD_SCHEMA 1
/* The owner's name in records and listings of the operator's templates. */
#define SBX_TEMPLATE_OPERATOR "operator"
/* resources.output_session_cap when the policy does not say (and for a
 * session record written before there was one). */
#define SBX_OUTPUT_SESSION_CAP_DEFAULT (1ull << 30)
#define SBX_LIMIT_PATHS_MAX 32 /* = SBX_POLICY_PATHS_MAX */
#define SBX_LIMIT_PATH_LEN 256 /* = SBX_POLICY_PATH_LEN */

struct sbx_policy;

struct sbx_session {
	char id[SBX_ID_MAX + 1];
	char state[16]; /* creating running paused suspended crashed stopped expired */
	uint64_t created_ns, ready_ns, ended_ns;
	/* tmpl_name is the template's reference: NAME for the operator's,
	 * TENANT/NAME for a tenant's own (template.h); tmpl_owner "" for the
	 * operator. */
	char tmpl_name[64], tmpl_version[64], tmpl_dir[512];
	char tmpl_owner[SBX_ID_MAX + 1];
	char tmpl_req[140];          /* as requested: NAME or NAME@VERSION (not stored) */
	char tenant[SBX_ID_MAX + 1]; /* who the session is for; "" for none */
	unsigned vcpus, memory_mib;
	char accel[8], vmm[24];
	char spec[65]; /* sha256 of the spec, for idempotent --id */
	int monitor_pid, vmm_pid;
	uint64_t monitor_start, vmm_start;
	char boot_id[40];
	char kernel[80];           /* guest kernel release from HELLO */
	char end_reason[64];       /* why the VM ended, when it did */
	uint64_t boot_ms;          /* launch -> agent hello */
	uint64_t cpu_ns, mem_peak; /* host-measured VMM usage, saved when the VM ended */
	struct sbx_volume {        /* -v HOST:GUEST:ro, copied into an image at boot */
		char host[512], guest[128];
		/* Read with this user's rights (caller.h); 0: the operator's. */
		unsigned uid, gid;
	} vols[8];
	unsigned nvols;
	/* --workspace NAME: a persistent volume at /workspace (workspace.h),
	 * not part of a snapshot; "" for none. */
	char workspace[SBX_ID_MAX + 1];
	/* Warm pool (pool.h): pool says the session is a member waiting to be
	 * claimed (state "pooled"); from_pool that it was one, claimed in
	 * claim_ms.  cgroup is the host cgroup's name when it is not the ID: a
	 * member claimed where groups cannot be renamed (cgroup v2). */
	int pool, from_pool;
	uint64_t claim_ms;
	char cgroup[SBX_ID_MAX + 1];
	/* Restored from a snapshot (snapshot.h): its reference
	 * ("TENANT/NAME@VERSION", "_" for none, or "template:NAME@VERSION")
	 * and directory; "" for a session booted from a template. */
	char snapshot[200], snapshot_dir[700];
	/* Network (netns.h, egress.h): the guest NIC's MAC, random and fresh
	 * per session (a restored snapshot gets a new one too); "" for a
	 * session without a NIC.  The proxy's pid and start time, and why the
	 * session lost its network, when it did. */
	char mac[18];
	int proxy_pid;
	uint64_t proxy_start;
	char net_lost[96];
	/* Since when (CLOCK_REALTIME ns) the guest agent has not answered the
	 * monitor's pings while execs ran; 0: it answers.  sbx-ps shows the
	 * session as "unresponsive". */
	uint64_t agent_unresponsive_ns;
	/* Suspend to disk (snapshot.h): how often, the time spent paused and
	 * suspended so far (ns, not counting the current stretch), and since
	 * when (CLOCK_REALTIME ns) the session is in its current state, so
	 * sbx-ps splits running, paused and suspended seconds.  A suspended
	 * session's memory image is LIB/sessions/ID/suspend/memory.zst. */
	unsigned suspends;
	uint64_t paused_ns, suspended_ns, state_since_ns;
	uint64_t resume_ms; /* the last resume from disk: its VMM start to the agent answering */
	/* What every exec inherits unless it says otherwise (env.h): the
	 * template manifest's env, workdir and user beneath sbx-create's
	 * --env-file, -e and -w.  "" for the guest's defaults. */
	struct sbx_env env;
	char workdir[SBX_WORKDIR_MAX];
	char user[8];                             /* root, user or a uid */
	struct sbx_limits {                       /* compiled from the policy at create; the monitor enforces */
		uint64_t ttl_ms;                  /* 0: none */
		uint64_t exec_timeout_default_ms; /* 0: none */
		uint64_t exec_timeout_max_ms;     /* 0: none */
		uint64_t output_cap;              /* bytes kept per exec and stream */
		uint64_t output_session_cap;      /* bytes kept over every exec */
		uint64_t exec_memory;             /* memory.max per exec, 0: the VM's */
		uint64_t disk_bytes;              /* writable space */
		unsigned pids_per_exec, pids_per_session;
		unsigned cpu_milli; /* host CPU cap for the VMM, 1000 = one CPU */
		/* the writable disks' throttle (resources.disk_bps, disk_iops);
		 * 0: none, as in a record without them */
		uint64_t disk_bps;
		unsigned disk_iops;
		uint64_t net_rate; /* network.rate, bytes/s; 0: none (and in a record without it) */
		/* files: (sbx-cp); a record without them gets sbx-policy(5)'s
		 * defaults, so older sessions are neither closed nor opened up. */
		struct sbx_limit_paths {
			char path[SBX_LIMIT_PATHS_MAX][SBX_LIMIT_PATH_LEN];
			unsigned n;
		} writable, exportable;
		uint64_t max_transfer, max_session_transfer; /* bytes */
		/* network: egress 1 for allowlist (its rules are in the session's
		 * policy.json, which the proxy reads); 0 in a record without it */
		int egress;
		unsigned max_connections;
		uint64_t max_bytes;
		/* workspace: (policy) a new workspace's size, and how long an
		 * idle one is kept; 0 in a record without them */
		uint64_t workspace_size, workspace_retention_ms;
		/* packages: (the package cache, pkgcache.h); a record without
		 * them is offline. */
		struct sbx_limit_packages {
			int mode;        /* enum sbx_pkg_mode (policy.h) */
			char policy[64]; /* the policy's name in messages: its
					  * file's base name, or "defaults" */
			struct sbx_limit_registry {
				int type; /* enum sbx_registry_type */
				char url[512];
				/* apt (aptsrc.h): one suite of one archive
				 * per entry, its components ("main
				 * contrib"), and the keyring that signs it,
				 * copied beside the record as apt-N.gpg
				 * (N: the entry's place among apt's), with
				 * its SHA-256; host: the host's own sources
				 * named it (the guest keeps its own keys
				 * too), else a policy's url did. */
				char suite[64], components[64];
				char keyring[256], keyring_sha256[65];
				int host;
			} reg[16];
			unsigned nreg;
			uint64_t max_download; /* bytes */
			int require_hashes;
			int npm_scripts; /* enum sbx_npm_scripts (policy.h) */
			/* packages.allow, deny, pins, lock compiled (pkglock.h)
			 * into LIB/sessions/ID/pkgrules.json: its SHA-256, ""
			 * when the policy has none of them (and in a record
			 * from before them). */
			char rules[65];
			/* The lock file of each registry type (by enum
			 * sbx_registry_type): its path ("" none), SHA-256 and
			 * locked files, for the record and session.create. */
			struct sbx_limit_lock {
				char file[256];
				char sha256[65];
				unsigned entries;
			} lock[3];
			/* No apt entry and no egress: the guest answers
			 * apt itself with the refusal (guest-init). */
			int apt_local;
		} packages;
		/* lifecycle: (policy.h) 0: never; ttl_running: the TTL counts
		 * only running time */
		uint64_t idle_pause_ms, idle_suspend_ms;
		int ttl_running;
		int ttl_suspend; /* lifecycle.on_ttl: suspend */
	} limits;
};

/* One field table describes a session's scalar limits (record.c): its key
 * in session.json's "limits", its type and place in struct sbx_limits,
 * what a record written before the key existed means, and the compiled
 * policy's value it comes from (an offset into struct sbx_policy, or
 * SBX_LIMIT_DERIVED for the few the create computes).  The record is read
 * and written, and a create compiles the policy into it, through the
 * table: a new scalar limit is its policy key, its row and its enforcer. */
enum sbx_limit_type { SBX_LIMIT_U64, SBX_LIMIT_UINT, SBX_LIMIT_BOOL };
#define SBX_LIMIT_DERIVED ((size_t)-1)
struct sbx_limit_field {
	const char *key;
	enum sbx_limit_type type;
	size_t off;
	uint64_t absent;
	size_t policy_off;
};
extern const struct sbx_limit_field sbx_limit_fields[];
extern const size_t sbx_limit_nfields;
/* The table's limits from the policy p into l (derived ones left). */
void sbx_limits_compile(const struct sbx_policy *p, struct sbx_limits *l);

struct sbx_snapshot;
struct sbx_create_opts {
	const char *id;   /* NULL: generate */
	const char *tmpl; /* NAME or NAME@VERSION, default "default" */
	unsigned vcpus, memory_mib;
	const struct sbx_policy *policy; /* effective policy (policy.h); NULL: defaults */
	const char *tenant;              /* NULL: none */
	const char *vols[8];             /* "HOSTDIR:GUESTPATH[:ro]" */
	unsigned nvols;
	const char *workspace;                      /* NULL: none */
	const char *snapshot;                       /* -s NAME[@VERSION] of the tenant's snapshots; NULL: none */
	const struct sbx_snapshot *snapshot_direct; /* a snapshot found already (a fork's own); NULL: none */
	unsigned shape_set;                         /* SBX_SHAPE_*: given on the command line or by the policy */
	int progress_fd;                            /* a restore's progress is drawn there when a terminal; -1: never
						     * (0, as in a zeroed struct, is never a terminal we draw on) */
	int pool;                                   /* a warm-pool member (pool.h): ID pool-..., no TTL */
	int pool_nic;                               /* ... with a NIC, its namespace bare until a claim */
	/* The session's environment (env.h): the files first, then -e, the
	 * later winning; -e NAME alone takes the caller's $NAME. */
	const char *const *env_files;
	unsigned nenv_files;
	const char *const *env;
	unsigned nenv;
	const char *workdir; /* -w; NULL: the template's, else the guest's */
};

#define SBX_SHAPE_VCPUS 1u
#define SBX_SHAPE_MEMORY 2u
#define SBX_SHAPE_DISK 4u

/* The name of the session's host cgroups (cgroup.h). */
static inline const char *sbx_session_cgroup(const struct sbx_session *s)
{
	return s->cgroup[0] ? s->cgroup : s->id;
}

/* The record's file name in a session's directory under LIB/sessions. */
#define SBX_RECORD_FILE "session.json"
/* The record as stored, whoever's it is: for sbx's own bookkeeping
 * (capacity, the pool, gc, the monitor). */
int sbx_record_load(struct sbx_state *st, const char *id, struct sbx_session *s, struct sbx_err *err);
/* A session named by the caller: its record, and 4 ("no such session")
 * when it is another tenant's than st's scope (state.h), exactly as when
 * it does not exist.  Every command that takes a session ID goes through
 * here (or sbx_session_visible). */
int sbx_session_lookup(struct sbx_state *st, const char *id, struct sbx_session *s, struct sbx_err *err);
/* sbx_session_lookup without the record: 0 when the caller may see it. */
int sbx_session_visible(struct sbx_state *st, const char *id, struct sbx_err *err);
/* The record's text, already read: -1 when it is not a record of id, or
 * id is not a valid session ID (sbx_id_check): a record off a socket or
 * from disk needs no check of its ID besides this one. */
int sbx_record_parse(const char *txt, const char *id, struct sbx_session *s);
int sbx_record_save(struct sbx_state *st, const struct sbx_session *s, struct sbx_err *err);
/* The record as saved (JSON text, malloc'd); NULL when out of memory. */
char *sbx_record_text(const struct sbx_session *s);

/* The tenant's per-session ceilings (sbx.yaml quotas session_disk_bps,
 * session_disk_iops, session_network_rate) applied to p: a value above one,
 * or 0 (no limit), becomes the ceiling.  sbx_session_create applies them
 * itself; this is for showing the effective policy (--dry-run). */
int sbx_policy_ceilings(const char *tenant, struct sbx_policy *p, struct sbx_err *err);

/* Create a session; on success s is its record and *existed says whether an
 * identical session with this --id was already running. */
int sbx_session_create(struct sbx_state *st, const struct sbx_create_opts *o, struct sbx_session *s, int *existed,
		       struct sbx_err *err);
/* Destroy a session and everything it held.  A missing session is success
 * (*gone = 1), so kill is idempotent. */
int sbx_session_destroy(struct sbx_state *st, const char *id, int *gone, struct sbx_err *err);
/* Remove everything of a session whose monitor is gone: its VMM (pid checked
 * against the recorded start time), anything left in its cgroups, its
 * directories.  The caller holds the session lock. */
int sbx_session_reclaim(struct sbx_state *st, const char *id);
/* Seconds spent running, paused and suspended by a session so far (its
 * current stretch included, up to now or its end). */
void sbx_session_times(const struct sbx_session *s, uint64_t now_ns, double *running_s, double *paused_s,
		       double *suspended_s);
/* Live state: "running" only while the monitor holds the lock. */
const char *sbx_session_live_state(struct sbx_state *st, const struct sbx_session *s);
/* IDs of every session directory, sorted; free each and the array. */
int sbx_session_list(struct sbx_state *st, char ***ids, size_t *n, struct sbx_err *err);

/* Where the monitor binary lives: $SBX_LIBEXEC, else ../libexec/sbx next to
 * the running executable. */
int sbx_libexec_path(const char *name, char *buf, size_t n);
/* Launch -> agent hello deadline: SBX_BOOT_TIMEOUT seconds, default 60. */
unsigned sbx_boot_timeout_s(void);
#endif
