/* Session policy: a YAML file (sbx-policy(5)) compiled into plain structs.
 * Launch code reads only struct sbx_policy, never the YAML, so what the
 * file may say and what the host enforces meet in one place.  The loader
 * fails closed: anything it does not understand is an error naming the
 * file, line and column, code SBX_EXIT_INVALID. */
#ifndef SBX_POLICY_H
#define SBX_POLICY_H

/* resources.disk_bps and disk_iops when the policy does not say: about
 * what a busy TCG guest's writeback reaches on its own (so a normal
 * session is not slowed), well under what the host disk that every
 * session and the audit trail share can take. */
#define SBX_DISK_BPS_DEFAULT (64ull << 20)
#define SBX_DISK_IOPS_DEFAULT 2000u
/* network.rate when the policy does not say: above what a guest's
 * downloads through the proxy reach under TCG, far below a host link. */
#define SBX_NET_RATE_DEFAULT (32ull << 20)

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "session.h" /* SBX_OUTPUT_SESSION_CAP_DEFAULT */
#include "units.h"

#define SBX_POLICY_FILE_MAX (1u << 20) /* bytes */
#define SBX_POLICY_DEPTH_MAX 16        /* nested collections */
#define SBX_POLICY_ALLOW_MAX 128
#define SBX_POLICY_PORTS_MAX 16
#define SBX_POLICY_FWD_MAX 64 /* ports: entries (sbx-port) */
#define SBX_POLICY_REGISTRIES_MAX 16
#define SBX_POLICY_PATHS_MAX 32
#define SBX_POLICY_SECRETS_MAX 32
#define SBX_POLICY_PATH_LEN 256   /* with the NUL */
#define SBX_POLICY_DOMAIN_LEN 254 /* 253 and the NUL */
#define SBX_POLICY_URL_LEN 512
#define SBX_POLICY_NAME_LEN 64
#define SBX_POLICY_PKGPAT_MAX 64  /* packages.allow.TYPE, packages.deny.TYPE */
#define SBX_POLICY_PKGPAT_LEN 216 /* an npm name's 214, a glob's room, the NUL */
#define SBX_POLICY_PINS_MAX 128   /* packages.pins.TYPE */
#define SBX_POLICY_PIN_LEN 256    /* "NAME==VERSION" and the NUL */

enum sbx_egress { SBX_EGRESS_NONE, SBX_EGRESS_ALLOWLIST };
enum sbx_pkg_mode { SBX_PKG_OFFLINE, SBX_PKG_ALLOWLIST };
/* packages.npm_scripts: whether the cache serves npm packages that would
 * run install scripts (preinstall, install, postinstall, a binding.gyp). */
enum sbx_npm_scripts { SBX_NPM_SCRIPTS_ALLOW, SBX_NPM_SCRIPTS_DENY };
/* apt: a Debian archive (sbx-policy(5)); its url may be left out (the
 * host's own archive for the template's suite, resolved at create). */
enum sbx_registry_type { SBX_REG_PYPI, SBX_REG_NPM, SBX_REG_APT };
/* lifecycle.ttl_counts: the TTL runs on the wall clock from creation, or
 * only while the VM runs (paused and suspended time not counted). */
enum sbx_ttl_counts { SBX_TTL_WALL, SBX_TTL_RUNNING };
/* lifecycle.on_ttl: at its TTL a session ends, or is suspended to disk
 * (and given its TTL again, from when it is resumed). */
enum sbx_on_ttl { SBX_ON_TTL_END, SBX_ON_TTL_SUSPEND };

struct sbx_policy_rule {
	/* Either a domain ("pypi.org", or "*.example.com" for any name below
	 * example.com, lowercased) or an address block (family AF_INET or
	 * AF_INET6, host bits zero); domain[0] == 0 means the latter. */
	char domain[SBX_POLICY_DOMAIN_LEN];
	int family;
	uint8_t addr[16];
	unsigned prefix;
	uint16_t ports[SBX_POLICY_PORTS_MAX];
	unsigned nports;
};

struct sbx_policy_registry {
	enum sbx_registry_type type;
	char url[SBX_POLICY_URL_LEN]; /* "" for apt: the host's own archive */
	/* apt with a url: the archive's signing keys (an OpenPGP keyring, as
	 * gpgv takes it), a host path read at create; "" otherwise. */
	char keyring[SBX_POLICY_PATH_LEN];
};

struct sbx_policy_secret {
	char name[SBX_POLICY_NAME_LEN];
	/* Exactly one is non-empty: a host environment variable, or an
	 * absolute host path.  The policy names sources; it never holds values. */
	char from_env[128];
	char from_file[SBX_POLICY_PATH_LEN];
	int from_cli; /* --secret NAME=@FILE rather than the policy (for messages) */
};

/* packages.allow.TYPE and packages.deny.TYPE: glob patterns over the
 * normal form of names (PEP 503 for pypi); set: the key is present (an
 * empty allow list allows nothing). */
struct sbx_policy_pkgnames {
	char v[SBX_POLICY_PKGPAT_MAX][SBX_POLICY_PKGPAT_LEN];
	unsigned n;
	bool set;
};

/* packages.pins.TYPE: "NAME==VERSION", the name in its normal form. */
struct sbx_policy_pins {
	char v[SBX_POLICY_PINS_MAX][SBX_POLICY_PIN_LEN];
	unsigned n;
	bool set;
};

struct sbx_policy_paths {
	char path[SBX_POLICY_PATHS_MAX][SBX_POLICY_PATH_LEN];
	unsigned n;
};

/* Sizes are bytes, durations milliseconds; 0 means "none" where
 * sbx-policy(5) says so. */
/* Keys a policy file set (sbx_policy.set): a restored VM keeps its
 * snapshot's shape and refuses a policy that asks for another. */
#define SBX_POLICY_SET_VCPUS 1u  /* resources.vcpus */
#define SBX_POLICY_SET_MEMORY 2u /* resources.memory */
#define SBX_POLICY_SET_DISK 4u   /* resources.disk */

struct sbx_policy {
	char source[SBX_POLICY_PATH_LEN]; /* the file loaded, "" for defaults */
	unsigned set;                     /* SBX_POLICY_SET_*: what the file(s) parsed into it set */
	struct {
		unsigned vcpus;
		uint64_t memory; /* a whole number of MiB */
		uint64_t disk;
		unsigned cpu_limit_milli; /* host CPUs x 1000; 0: same as vcpus */
		unsigned pids_per_exec, pids_per_session;
		uint64_t exec_memory;
		uint64_t exec_timeout_default_ms, exec_timeout_max_ms;
		uint64_t ttl_ms;
		uint64_t output_cap;
		uint64_t output_session_cap; /* bytes of output kept over all execs */
		bool require_kvm;
		/* The session's writable disks together (one QEMU throttle
		 * group): bytes and requests per second; 0: unlimited. */
		uint64_t disk_bps;
		unsigned disk_iops;
	} resources;
	struct {
		enum sbx_egress egress;
		struct sbx_policy_rule allow[SBX_POLICY_ALLOW_MAX];
		unsigned nallow;
		bool dns;
		unsigned max_connections;
		uint64_t max_bytes;
		uint64_t rate; /* bytes/s each way on the guest's NIC; 0: unlimited */
	} network;
	struct {
		enum sbx_pkg_mode mode;
		struct sbx_policy_registry registries[SBX_POLICY_REGISTRIES_MAX];
		unsigned nregistries;
		uint64_t max_download;
		bool require_hashes;
		enum sbx_npm_scripts npm_scripts;
		/* Indexed by enum sbx_registry_type.  lock: a host path (the
		 * file is read at create, pkglock.h), "" for none; a type has
		 * a lock or pins, not both. */
		struct sbx_policy_pkgnames allow[3], deny[3];
		struct sbx_policy_pins pins[3];
		char lock[3][SBX_POLICY_PATH_LEN]; /* never apt's: it has no lock format */
	} packages;
	struct {
		struct sbx_policy_paths writable, exportable;
		uint64_t max_transfer, max_session_transfer;
	} files;
	struct sbx_policy_secret secrets[SBX_POLICY_SECRETS_MAX];
	unsigned nsecrets;
	struct {
		uint64_t size;         /* a new workspace's disk, bytes */
		uint64_t retention_ms; /* idle this long, sbx-gc removes it */
	} workspace;
	struct {            /* ports: the guest ports sbx-port may forward */
		bool set;   /* the policy says (else: any for the operator, none for a tenant) */
		unsigned n; /* set and n == 0: none */
		uint16_t lo[SBX_POLICY_FWD_MAX], hi[SBX_POLICY_FWD_MAX];
	} ports;
	/* lifecycle: what the monitor does with an idle session (no exec
	 * running, no client attached, no proxied or forwarded connection):
	 * pause it (RAM kept) after idle_pause, suspend it to disk after
	 * idle_suspend; 0: never.  With both, idle_suspend comes later. */
	struct {
		uint64_t idle_pause_ms, idle_suspend_ms;
		enum sbx_ttl_counts ttl_counts;
		enum sbx_on_ttl on_ttl;
	} lifecycle;
};

void sbx_policy_defaults(struct sbx_policy *p);
/* Defaults, then the file at path (symlinks followed; it must be a regular
 * file of at most SBX_POLICY_FILE_MAX bytes). */
int sbx_policy_load(const char *path, struct sbx_policy *p, struct sbx_err *err);
/* Parse buf (n bytes, name used in messages) over whatever p holds; callers
 * wanting a clean slate call sbx_policy_defaults first.  p->set gains the
 * SBX_POLICY_SET_* keys the file sets.  On error p is
 * partly updated and should not be used. */
int sbx_policy_parse(const char *name, const uint8_t *buf, size_t n, struct sbx_policy *p, struct sbx_err *err);
/* Set one scalar key ("resources.disk") from text, with the same syntax and
 * range as in the file; for command-line overrides.  Errors are
 * SBX_EXIT_USAGE and the message names only the value. */
int sbx_policy_set(struct sbx_policy *p, const char *key, const char *value, struct sbx_err *err);
/* Host CPUs the VMM may use, x 1000, with "same as vcpus" resolved. */
unsigned sbx_policy_cpu_limit_milli(const struct sbx_policy *p);
/* The effective policy as JSON (sizes in bytes, durations in ms); NULL when
 * out of memory. */
json_t *sbx_policy_json(const struct sbx_policy *p);

/* Read back the network section of sbx_policy_json's output into p (the
 * rest of p is left alone).  Errors are SBX_EXIT_INTERNAL: the file is
 * ours, so a bad one is corrupt, and nothing of it is used. */
int sbx_policy_network_from_json(json_t *o, struct sbx_policy *p, struct sbx_err *err);

/* ports: from an effective policy's JSON into p (the rest of p is left
 * alone); SBX_EXIT_INTERNAL when malformed, as for the network section. */
int sbx_policy_ports_from_json(json_t *o, struct sbx_policy *p, struct sbx_err *err);
/* May sbx-port forward guest port `port` of a session with this policy?
 * tenant: the session's ("" or NULL for the operator's). */
bool sbx_policy_port_allowed(const struct sbx_policy *p, unsigned port, const char *tenant);

/* Sizes and durations: units.h. */

#endif
