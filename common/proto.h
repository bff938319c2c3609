/* sbx host<->guest and client<->monitor wire protocol.
 *
 * One codec serves both links: the monitor speaks it to guest-init over the
 * agent channel (virtio-serial or vsock) and to clients (sbx-exec, sbx-kill)
 * over its unix socket.  Every frame is
 *
 *   u32 len | u8 type | u8 flags | u16 reserved(0) | u32 stream | len bytes
 *
 * little endian, len <= SBX_FRAME_MAX.  A stream is one exec (its number in
 * the session); stream 0 is the connection itself (HELLO, PING, SHUTDOWN).
 * Structured payloads are a sequence of TLVs: u16 tag | u32 len | bytes.
 * Everything received is untrusted: the decoder bounds every length and
 * count, and a malformed frame ends the operation that carried it.
 * This module is freestanding (libc only) so the static guest-init links it.
 */
#ifndef SBX_PROTO_H
#define SBX_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define SBX_PROTO_VERSION 1
#define SBX_FRAME_HDR 12u
#define SBX_FRAME_MAX (1u << 20)      /* payload cap: 1 MiB (argv+env of one exec) */
#define SBX_DATA_CHUNK (64u << 10)    /* stdout/stderr/stdin bytes per DATA frame */
#define SBX_STDIN_WINDOW (256u << 10) /* initial stdin credit per exec */
/* Output credit per exec (SBX_EXEC_OUT_WINDOW): the guest sends at most
 * this many stdout and stderr bytes that the host has not given back by
 * WINDOW, so a client that reads slowly slows the command, as a pipe
 * would, and loses nothing.  WINDOW with SBX_WINDOW_OFF lifts it. */
#define SBX_OUTPUT_WINDOW (2u << 20)
#define SBX_WINDOW_OFF 0xffffffffu
#define SBX_MAX_ARGS 8192u
#define SBX_MAX_ENV 8192u
/* The guest agent's AF_VSOCK port, on VMMs that offer vsock instead of a
 * virtio-serial port (Cloud Hypervisor: the host opens it by writing
 * "CONNECT 1024\n" to the VM's hybrid vsock socket). */
#define SBX_AGENT_VSOCK_PORT 1024u
/* guest-init itself, bound read-only over this file in the guest's /run at
 * boot, so an exec can run its tools (`--watch`, guest-init/watch.c): a
 * guest's own programs never see the initramfs it came from. */
#define SBX_GUEST_TOOL_PATH "/run/sbx/guest-init"

enum sbx_frame_type {
	SBX_F_HELLO = 1,   /* guest->host: VERSION KERNEL HOSTNAME [FLAGS: SBX_GUEST_*];
			    * monitor->client: VERSION SESSION */
	SBX_F_EXEC = 2,    /* ARGV* ENV* CWD TIMEOUT_MS FLAGS ROWS COLS UID GID */
	SBX_F_STARTED = 3, /* PID (guest), EXEC_ID (monitor->client) */
	SBX_F_STDIN = 4,   /* raw bytes */
	SBX_F_STDOUT = 5,  /* raw bytes */
	SBX_F_STDERR = 6,  /* raw bytes */
	SBX_F_STDIN_EOF = 7,
	SBX_F_WINDOW = 8,  /* u32 LE: more bytes the sender of this frame will take: guest->host
			    * stdin credit, host->guest output credit (SBX_EXEC_OUT_WINDOW) */
	SBX_F_RESIZE = 9,  /* ROWS COLS */
	SBX_F_SIGNAL = 10, /* SIGNO: deliver to the exec's process (group) */
	SBX_F_KILL = 11,   /* end the exec's whole tree; reason "killed" */
	SBX_F_EXIT = 12,   /* STATUS SIGNO REASON WALL_US CPU_USER_US CPU_SYS_US MEM_PEAK */
	SBX_F_ERROR = 13,  /* CODE MSG: the operation on this stream failed */
	SBX_F_PING = 14,   /* echoed as PONG with the same payload */
	SBX_F_PONG = 15,
	SBX_F_SHUTDOWN = 16, /* host->guest: sync, power off; client->monitor: destroy session */
	SBX_F_INFO = 17,     /* reserved: nothing sends it (sbx-ps reads the records) */
	SBX_F_SECRETS = 18,  /* host->guest: (NAME VALUE)*, once, before any exec; guest->host:
			      * empty, the secrets are in place (or ERROR on stream 0) */
	/* Snapshots (19-22) */
	SBX_F_IDENTITY = 19, /* host->guest: HOSTNAME SEED TIME_NS [NEXT_STREAM] after a restore
			      * (or a pool claim): set the hostname and the clock, reseed the
			      * RNG, drop exec state (kept with NEXT_STREAM); guest->host:
			      * KERNEL HOSTNAME [FLAGS] once applied */
	SBX_F_QUIESCE = 20,  /* host->guest: [FLAGS: SBX_QUIESCE_*] about to be saved: without
			      * KEEP no exec may live (ERROR 5 on stream 0 otherwise),
			      * /run/secrets wiped; guest->host: empty, done */
	SBX_F_VMCTL = 21,    /* client->monitor: OP [PATH] [HOSTNAME]; monitor->client: OP STATE
			      * when done (or ERROR) */
	SBX_F_PROGRESS = 22, /* monitor->client: MSG DONE TOTAL, during a long VMCTL */
	/* Warm pool (23-25) */
	SBX_F_CLAIM = 23,   /* client->pool member's monitor: SESSION RECORD POLICY CLAIM_FLAGS,
			     * sent under the global lock; monitor->client: CLAIM_FLAGS
			     * SECRETS: send the SECRETS frame now; empty: committed, the
			     * member is renamed to SESSION, its record rewritten (or ERROR) */
	SBX_F_CLAIMED = 24, /* monitor->client: the claimed session is running (or ERROR) */
	/* Port forwarding, sbx-port (25-30).  On the agent channel the stream
	 * of a PORT_* frame is a forwarded connection, numbered by the monitor
	 * in an id space of its own (never an exec).  Both directions are
	 * under credit: a sender has SBX_PORT_WINDOW bytes per connection and
	 * gets more only by PORT_WINDOW, so one slow reader stalls only its
	 * own connection. */
	SBX_F_PORT_CONNECT = 25, /* host->guest: PORT: connect to 127.0.0.1:PORT in the guest;
				  * guest->host: empty, connected (or PORT_CLOSE with CODE MSG) */
	SBX_F_PORT_DATA = 26,    /* raw bytes, at most SBX_DATA_CHUNK, within the window */
	SBX_F_PORT_WINDOW = 27,  /* u32 LE: more bytes the receiver may send */
	SBX_F_PORT_EOF = 28,     /* the sender's side is done writing (half close) */
	SBX_F_PORT_CLOSE = 29,   /* the connection is over, either way [CODE MSG] */
	SBX_F_PORT = 30,         /* client->monitor: OP [PORT] [ADDR] (OPEN carries the listening
				  * socket as SCM_RIGHTS); monitor->client: OP, then for each
				  * forward PORT ADDR CONNS ACCEPTED REFUSED [MSG: its last
				  * connection error] (or ERROR) */
	SBX_F_PKG_REFUSED = 31,  /* guest->host, stream 0: PKG_TYPE REQUEST: an install the guest's
				  * own responder refused (guest-init/pkg.c); the host records it
				  * in packages.log as guest-reported, at a bounded rate */
	SBX_F_TYPE_MAX = 31
};

enum sbx_tag {
	SBX_T_VERSION = 1,       /* u32 */
	SBX_T_KERNEL = 2,        /* str */
	SBX_T_HOSTNAME = 3,      /* str */
	SBX_T_SESSION = 4,       /* str */
	SBX_T_ARGV = 5,          /* str, repeated in order */
	SBX_T_ENV = 6,           /* str NAME=VALUE, repeated */
	SBX_T_CWD = 7,           /* str */
	SBX_T_TIMEOUT_MS = 8,    /* u32, 0 = none */
	SBX_T_FLAGS = 9,         /* u32 SBX_EXEC_* */
	SBX_T_ROWS = 10,         /* u32 */
	SBX_T_COLS = 11,         /* u32 */
	SBX_T_UID = 12,          /* u32 */
	SBX_T_GID = 13,          /* u32 */
	SBX_T_PID = 14,          /* u32 */
	SBX_T_EXEC_ID = 15,      /* str */
	SBX_T_STATUS = 16,       /* u32 (exit code, or 128+signal) */
	SBX_T_SIGNO = 17,        /* u32 */
	SBX_T_REASON = 18,       /* u32 enum sbx_reason */
	SBX_T_WALL_US = 19,      /* u64 */
	SBX_T_CPU_USER_US = 20,  /* u64 */
	SBX_T_CPU_SYS_US = 21,   /* u64 */
	SBX_T_MEM_PEAK = 22,     /* u64 bytes */
	SBX_T_CODE = 23,         /* u32 sbx exit-status-style code */
	SBX_T_MSG = 24,          /* str */
	SBX_T_STATE = 25,        /* str */
	SBX_T_ACCEL = 26,        /* str */
	SBX_T_PIDS_MAX = 27,     /* u32: pids.max of the exec's cgroup */
	SBX_T_MEMORY_MAX = 28,   /* u64: memory.max of the exec's cgroup */
	SBX_T_SESSION_PIDS = 29, /* u32: pids.max over every exec together */
	SBX_T_PIDS_HIT = 30,     /* u64: forks refused by the exec's pids.max */
	SBX_T_NAME = 31,         /* str: a secret's name, [A-Z_][A-Z0-9_]* */
	SBX_T_VALUE = 32,        /* bytes: the secret named by the NAME before it */
	SBX_T_SEED = 33,         /* bytes: host randomness the guest mixes in and reseeds from */
	SBX_T_TIME_NS = 34,      /* u64: the host's CLOCK_REALTIME, ns */
	SBX_T_OP = 35,           /* u32 enum sbx_vmctl_op */
	SBX_T_PATH = 36,         /* str: a directory under LIB, relative to it */
	SBX_T_DONE = 37,         /* u64 bytes */
	SBX_T_TOTAL = 38,        /* u64 bytes, 0: unknown */
	SBX_T_RECORD = 39,       /* str: a session record (session.json), for CLAIM */
	SBX_T_CLAIM_FLAGS = 40,  /* u32 SBX_CLAIM_*, for CLAIM */
	SBX_T_POLICY = 41,       /* str: the effective policy (policy.json), for CLAIM */
	/* A session's environment (env.h, issue 15.2) */
	SBX_T_ENV_SECRET = 42, /* str NAME=SECRET, repeated, in EXEC: the guest sets NAME to
				* the value of the session secret SECRET (/run/secrets) */
	SBX_T_DISK_FULL = 43,  /* u32 SBX_DISK_FULL_*: writable disks with no space left at an exec's end */
	/* Port forwarding, sbx-port (44-48) */
	SBX_T_PORT = 44,        /* u32: a guest TCP port, 1-65535 */
	SBX_T_ADDR = 45,        /* str: a host address, "127.0.0.1:PORT", "[::1]:PORT" or "unix:PATH" */
	SBX_T_CONNS = 46,       /* u32: connections open now */
	SBX_T_ACCEPTED = 47,    /* u64: connections accepted so far */
	SBX_T_REFUSED = 48,     /* u64: connections the guest refused (nobody listening) or the bounds */
	SBX_T_PKG = 49,         /* str: sbx.pkg* parameters (pkgparams.h), in a claim's IDENTITY */
	SBX_T_MAX_BYTES = 50,   /* u64: the most a VMCTL SAVE may write (a tenant's snapshot_bytes left) */
	SBX_T_NEXT_STREAM = 51, /* u32, in IDENTITY: keep the running execs; the host's next exec
				 * is this stream (a restore continues the source's numbering) */
	SBX_T_TTL_MS = 52,      /* u64: a VMCTL TTL's time left */
	SBX_T_RLIMIT = 53,      /* 20 bytes, repeated, in EXEC: u32 RLIMIT_*, u64 soft, u64 hard (the
				 * guest sets them before it drops to the exec's user) */
	SBX_T_PKG_TYPE = 54,    /* str: "pypi", "npm" or "apt", in PKG_REFUSED */
	SBX_T_REQUEST = 55,     /* str: the request line's method and target, at most
				 * SBX_PKG_REQUEST_MAX bytes, printable ASCII, in PKG_REFUSED */
	SBX_T_MAX = 55
};
#define SBX_PKG_REQUEST_MAX 300

/* SBX_F_PORT's OP */
enum sbx_port_op {
	SBX_PORT_OPEN = 1, /* PORT ADDR (what the client bound; the fd is the truth) */
	SBX_PORT_RM = 2,   /* PORT or ADDR: end that forward and its connections */
	SBX_PORT_LIST = 3,
	SBX_PORT_OP_MAX = 3
};
#define SBX_PORT_WINDOW (64u << 10) /* bytes in flight per connection and direction */
#define SBX_PORT_CONNS_MAX 256      /* connections at once per session (both ends enforce it) */
#define SBX_PORT_ADDR_MAX 128       /* an ADDR's bytes with the NUL (unix: sun_path fits) */

enum sbx_claim_flags {
	SBX_CLAIM_SECRETS = 1u << 0, /* the client has secrets; the monitor asks for them */
};

enum sbx_vmctl_op {
	SBX_VMCTL_PAUSE = 1,
	SBX_VMCTL_RESUME = 2,
	SBX_VMCTL_SAVE = 3,     /* PATH: write the snapshot's data files there */
	SBX_VMCTL_IDENTITY = 4, /* a fresh identity (HOSTNAME: default the session ID) */
	SBX_VMCTL_SUSPEND = 5,  /* save memory into the session's directory, stop the VMM
				 * (RESUME, or any guest operation, restores it) */
	SBX_VMCTL_TTL = 6,      /* TTL_MS: the session ends that long from now (sbx-serve's
				 * set-timeout); the record's TTL follows */
	SBX_VMCTL_MAX = 6
};
#define SBX_TTL_LEFT_MAX_MS (24ull * 3600 * 1000) /* a VMCTL TTL's most */

/* The stream of the monitor's warm-up EXEC (monitor/warm.c): the host's
 * own exec before a new guest is ready, never a session's (theirs count
 * up from 1, far below it), so guest-init keeps it out of the numbering
 * its cgroup pool predicts. */
#define SBX_WARM_STREAM 0x30000000u

/* What a guest-init can do, in FLAGS of its HELLO and its IDENTITY reply
 * (none from one older than these). */
#define SBX_GUEST_OUT_WINDOW 1u /* keeps to output credit (SBX_EXEC_OUT_WINDOW) */
#define SBX_GUEST_KEEP_EXECS                                                                                           \
	2u /* QUIESCE with SBX_QUIESCE_KEEP and IDENTITY with NEXT_STREAM:                                             \
	    * saves and new identities keep running execs */

/* FLAGS of a QUIESCE from the host (none: an older monitor's, or padding). */
#define SBX_QUIESCE_KEEP                                                                                               \
	1u                     /* execs may run: answer, then send nothing more until a                                \
				* RELEASE, an IDENTITY or a new host (the image holds the rest) */
#define SBX_QUIESCE_RELEASE 2u /* the save is done: send on (no answer) */

enum sbx_exec_flags {
	SBX_EXEC_PTY = 1u << 0,       /* allocate a pty; stdout carries the terminal */
	SBX_EXEC_STDIN = 1u << 1,     /* the client sends stdin; otherwise /dev/null */
	SBX_EXEC_DETACH = 1u << 2,    /* client->monitor only: do not stream */
	SBX_EXEC_COPY = 1u << 3,      /* client->monitor only: sbx's own exec (sbx-cp), recorded as such */
	SBX_EXEC_OUT_WINDOW = 1u << 4 /* monitor->guest: output under credit; the guest's STARTED
				       * carries FLAGS with it set when it keeps to that.  Sent
				       * only to a guest whose HELLO (or IDENTITY reply) said
				       * SBX_GUEST_OUT_WINDOW: an older guest-init refuses an
				       * exec with a flag it does not know */
};

enum sbx_reason {
	SBX_R_NONE = 0,
	SBX_R_EXITED = 1,
	SBX_R_SIGNALLED = 2,
	SBX_R_TIMEOUT = 3,
	SBX_R_KILLED = 4,
	SBX_R_OOM = 5,
	SBX_R_SESSION_LOST = 6,
	SBX_R_MAX = 6
};

const char *sbx_reason_name(uint32_t reason);

struct sbx_frame {
	uint32_t len;
	uint8_t type;
	uint8_t flags;
	uint32_t stream;
	const uint8_t *payload; /* points into the caller's buffer */
};

/* Encode a header into out[SBX_FRAME_HDR]. */
void sbx_frame_hdr_put(uint8_t *out, uint8_t type, uint32_t stream, uint32_t len);

/* Parse a header.  Returns 0, or -1 when the header is malformed (unknown
 * type, reserved bits set, len > max).  max lets a link use a smaller cap. */
int sbx_frame_hdr_get(const uint8_t *in, struct sbx_frame *f, uint32_t max);

/* A growable output buffer for building payloads/frames. */
struct sbx_buf {
	uint8_t *data;
	size_t len, cap;
	int oom; /* sticky: set when an append failed */
};
void sbx_buf_free(struct sbx_buf *b);
void sbx_buf_reset(struct sbx_buf *b);
int sbx_buf_put(struct sbx_buf *b, const void *p, size_t n);
/* Start a frame; sbx_frame_end patches its length.  Returns the offset. */
size_t sbx_frame_begin(struct sbx_buf *b, uint8_t type, uint32_t stream);
int sbx_frame_end(struct sbx_buf *b, size_t off);
int sbx_tlv_put(struct sbx_buf *b, uint16_t tag, const void *p, uint32_t n);
int sbx_tlv_str(struct sbx_buf *b, uint16_t tag, const char *s);
int sbx_tlv_u32(struct sbx_buf *b, uint16_t tag, uint32_t v);
int sbx_tlv_u64(struct sbx_buf *b, uint16_t tag, uint64_t v);
/* A whole frame with raw payload. */
int sbx_frame_raw(struct sbx_buf *b, uint8_t type, uint32_t stream, const void *p, uint32_t n);
/* WINDOW for stream: n more bytes (u32 LE), or SBX_WINDOW_OFF. */
int sbx_frame_window(struct sbx_buf *b, uint32_t stream, uint32_t n);

/* TLV iteration over a payload.  sbx_tlv_next returns 1 with tag, val and n
 * set, 0 at the clean end, -1 on a truncated or oversized TLV. */
struct sbx_tlv_it {
	const uint8_t *p;
	size_t left;
};
void sbx_tlv_init(struct sbx_tlv_it *it, const uint8_t *p, size_t n);
int sbx_tlv_next(struct sbx_tlv_it *it, uint16_t *tag, const uint8_t **val, uint32_t *n);
/* Typed readers: -1 when the value has the wrong size. */
int sbx_tlv_as_u32(const uint8_t *val, uint32_t n, uint32_t *out);
int sbx_tlv_as_u64(const uint8_t *val, uint32_t n, uint64_t *out);

/* A decoded EXEC request.  Strings are NUL-terminated copies owned by the
 * struct; free with sbx_exec_req_free. */
#define SBX_EXEC_RLIMITS_MAX 16 /* Linux has RLIMIT_NLIMITS 16 */
struct sbx_exec_req {
	char **argv; /* NULL-terminated */
	size_t argc;
	char **env; /* NULL-terminated */
	size_t envc;
	char **env_secret; /* NAME=SECRET, NULL-terminated (SBX_T_ENV_SECRET) */
	size_t env_secretc;
	char *cwd;
	uint32_t timeout_ms, flags, rows, cols, uid, gid;
	int have_uid, have_gid;
	uint32_t pids_max, session_pids; /* 0: no limit */
	uint64_t memory_max;             /* 0: no limit */
	/* setrlimit(2)s for the command (an OCI container's process.rlimits):
	 * each resource at most once, soft <= hard, RLIM_INFINITY as ~0. */
	struct sbx_rlimit {
		uint32_t resource; /* RLIMIT_*, below RLIMIT_NLIMITS */
		uint64_t soft, hard;
	} rlimits[SBX_EXEC_RLIMITS_MAX];
	unsigned nrlimits;
};
/* Returns 0, or -1 with a static message in *why: empty argv, too many
 * args, embedded NUL, unknown tag, truncated TLV, ENV entry without '='. */
int sbx_exec_req_decode(const uint8_t *p, size_t n, struct sbx_exec_req *r, const char **why);
int sbx_exec_req_encode(struct sbx_buf *b, uint32_t stream, const struct sbx_exec_req *r);
void sbx_exec_req_free(struct sbx_exec_req *r);

/* A decoded EXIT report. */
struct sbx_exit_info {
	uint32_t status, signo, reason;
	uint64_t wall_us, cpu_user_us, cpu_sys_us, mem_peak;
	uint64_t pids_hit;
	uint32_t disk_full; /* SBX_DISK_FULL_* */
};
#define SBX_DISK_FULL_SCRATCH 1u /* the root's writable layer (the session's disk) */
#define SBX_DISK_FULL_VOLUME 2u  /* a writable volume (a workspace) */
int sbx_exit_decode(const uint8_t *p, size_t n, struct sbx_exit_info *e);
int sbx_exit_encode(struct sbx_buf *b, uint32_t stream, const struct sbx_exit_info *e);

/* Secrets (SBX_F_SECRETS): NAME then VALUE, pairs in order.  The values
 * are bytes (NULs allowed); the whole payload fits one frame. */
#define SBX_SECRETS_MAX 32
#define SBX_SECRET_NAME_MAX 63 /* as a policy's secret name */
#define SBX_SECRET_VALUE_MAX (64u << 10)
struct sbx_secret_ref {
	char name[SBX_SECRET_NAME_MAX + 1];
	const uint8_t *value; /* points into the decoded payload */
	uint32_t len;
};
/* 1 when s[0..n) is a secret name. */
int sbx_secret_name_ok(const char *s, size_t n);
/* Returns the number of secrets (0..SBX_SECRETS_MAX) decoded into
 * out[SBX_SECRETS_MAX], or -1 with a static message in *why: unknown tag,
 * a VALUE without its NAME, a bad or repeated name, too many or too long. */
int sbx_secrets_decode(const uint8_t *p, size_t n, struct sbx_secret_ref *out, const char **why);
/* Grow b so n more bytes fit without moving it again: a frame holding
 * secrets is written into place, leaving no stale copy behind a realloc. */
int sbx_buf_reserve(struct sbx_buf *b, size_t n);

/* An ERROR frame's CODE and MSG (either may be absent: code and msg keep
 * what the caller put there). */
void sbx_error_decode(const uint8_t *p, size_t n, uint32_t *code, char *msg, size_t cap);

/* Copy a TLV string value out as a NUL-terminated string; -1 when it holds a
 * NUL byte or exceeds cap-1 bytes. */
int sbx_tlv_as_str(const uint8_t *val, uint32_t n, char *out, size_t cap);

/* SBX_F_PORT payloads (sbx-port).  A request is OP, then PORT and/or
 * ADDR as the op needs; a LIST or OPEN reply is OP then one entry per
 * forward, each starting with its PORT. */
struct sbx_port_entry {
	uint32_t port;                /* guest port, 1-65535 */
	char addr[SBX_PORT_ADDR_MAX]; /* host side */
	uint32_t conns;
	uint64_t accepted, refused;
};
struct sbx_port_req {
	uint32_t op;
	uint32_t port;                /* 0: none given */
	char addr[SBX_PORT_ADDR_MAX]; /* "": none given */
};
/* Returns 0, or -1 with a static message in *why: unknown op or tag, a
 * port out of 1-65535, an address too long or with a NUL, repeated tags,
 * or what the op needs missing (OPEN: PORT and ADDR; RM: PORT or ADDR). */
int sbx_port_req_decode(const uint8_t *p, size_t n, struct sbx_port_req *r, const char **why);
int sbx_port_req_encode(struct sbx_buf *b, const struct sbx_port_req *r);
int sbx_port_entry_put(struct sbx_buf *b, const struct sbx_port_entry *e);
/* A reply's entries into out[max]; returns their number (OP in *op) or -1
 * with *why set: more than max, a field before its PORT, bad values. */
int sbx_port_list_decode(const uint8_t *p, size_t n, uint32_t *op, struct sbx_port_entry *out, size_t max,
			 const char **why);

#endif
