/* sbx-monitor's privilege separation (docs/design.md, "Splitting the
 * monitor"): the request channel between the privileged half (the parent,
 * root) and the unprivileged half (the child, which speaks to the guest and
 * to clients).
 *
 * One SOCK_SEQPACKET socket pair.  A message is a u32 (little-endian): the
 * request (child to parent), PRIV_REPLY or PRIV_PROGRESS (parent to child),
 * then TLVs in proto.c's encoding with the tags below, each at most once;
 * file descriptors ride along by SCM_RIGHTS.  The child sends one request
 * and waits for its reply (progress messages may come first); the parent
 * answers one request at a time and checks every field: a message it cannot
 * decode, or a request it does not expect, ends the session as a crash. */
#ifndef SBX_MON_PRIV_H
#define SBX_MON_PRIV_H

#include <stddef.h>
#include <stdint.h>

#define PRIV_MSG_MAX (192u << 10) /* the largest message either way */
#define PRIV_FDS_MAX 9            /* a resume's: the VMM's five, the proxy's four */
/* The unprivileged half's uid and gid: SBX_JAIL_UID_BASE + 2^23 + its host
 * pid, beside the VMM's (+ pid) and the proxy's network half's (+ 2^22 +
 * pid); pid_max is at most 2^22, so the three ranges never meet. */
#define PRIV_UID_OFFSET (1u << 23)

enum priv_op {
	PRIV_READY = 1, /* child: jailed, serving (the first message) */
	PRIV_EXIT,      /* child: done, STATUS is the monitor's exit status */
	PRIV_AUDIT,     /* TYPE FIELDS: an audit record of this session */
	PRIV_RECORD,    /* [STATE] [UNRESPONSIVE_NS] [KERNEL] [CLAIM_MS] [RESUME_MS] [TTL_MS]: save the record */
	PRIV_END,       /* STATE REASON: the VM ended, the record stays (expired, crashed, stopped) */
	PRIV_DESTROY,   /* [FLAG: also the claimed member's runtime directory] -> FLAG (left) */
	PRIV_VM_KILL,
	PRIV_VM_REAP, /* -> FLAG (reaped) STATUS */
	PRIV_VM_PAUSE,
	PRIV_VM_RESUME,
	PRIV_PROXY_STOP,
	PRIV_PROXY_REAP,  /* -> FLAG (reaped) REASON (net_lost) */
	PRIV_CG_USAGE,    /* -> NUM_A (cpu ns) NUM_B (memory peak) */
	PRIV_CG_SET_CPU,  /* the record's CPU cap */
	PRIV_WS_RELEASE,  /* FLAG (failed) */
	PRIV_LOG_SIZES,   /* -> NUM_A (net.log) NUM_B (packages.log) */
	PRIV_VIOLATIONS,  /* NUM_A NUM_B (offsets) -> TEXT (JSON) */
	PRIV_POLICY,      /* -> TEXT (policy.json) */
	PRIV_PORTS_SAVE,  /* [TEXT] (ports.json; none: removed) */
	PRIV_PORT_REG,    /* PATH, fd: a unix listener handed over -> NUM_A (dev) NUM_B (ino) */
	PRIV_PORT_UNLINK, /* PATH: a registered listener's socket file */
	PRIV_SNAP_DIR,    /* PATH: where the next save writes (relative to LIB) */
	PRIV_SNAP_SAVE,   /* NUM_A [TEXT: the running execs (snapexec.c)]: memory, disk and
			   * exec records into that directory (progress comes back) */
	PRIV_SUSP_IMAGE,  /* -> NUM_A (bytes) */
	PRIV_SUSP_DISCARD,
	PRIV_SUSP_ROOM,
	PRIV_SUSP_VMM,   /* -> PID START, fds: console, vmm.log, agent, pidfd [, events]; with a NIC
			  * also the proxy's (as PRIV_NET_ATTACH's, last; NUM_A: how many) */
	PRIV_CLAIM,      /* ID TEXT (record) TEXT2 (policy) -> FLAG (0 committed, 1 failed after) TEXT */
	PRIV_NET_ATTACH, /* the claimed member's bare namespace completed, its proxy started
			  * -> PROXY_PID PROXY_START NUM_A (fds: 2 or 3), fds: [proxy.log,] its pipe, pidfd */
	PRIV_PEER,       /* fd: a client of monitor.sock; the answer: sbx's own root or not (peer.h) */
	PRIV_OP_MAX = PRIV_PEER,
	PRIV_REPLY = 100, /* CODE [MSG] [ERRNO] and the request's results */
	PRIV_PROGRESS,    /* WHAT NUM_A (done) NUM_B (total) */
};

enum priv_tag {
	PT_TYPE = 1,    /* str: an audit record's type */
	PT_FIELDS,      /* str: its fields, a JSON object */
	PT_STATE,       /* str: a session state */
	PT_REASON,      /* str */
	PT_UNRESP_NS,   /* u64 */
	PT_KERNEL,      /* str */
	PT_CLAIM_MS,    /* u64 */
	PT_RESUME_MS,   /* u64 */
	PT_FLAG,        /* u64: 0 or 1 */
	PT_STATUS,      /* u64 */
	PT_NUM_A,       /* u64 */
	PT_NUM_B,       /* u64 */
	PT_TEXT,        /* str */
	PT_TEXT2,       /* str */
	PT_PATH,        /* str */
	PT_ID,          /* str */
	PT_CODE,        /* u64: an exit status, 0: ok */
	PT_MSG,         /* str */
	PT_ERRNO,       /* u64 */
	PT_PID,         /* u64 */
	PT_START,       /* u64 */
	PT_WHAT,        /* str */
	PT_PROXY_PID,   /* u64 */
	PT_PROXY_START, /* u64 */
	PT_TTL_MS,      /* u64: the record's TTL (a VMCTL TTL set it) */
	PT_MAX
};

/* A decoded message.  Strings point into the caller's buffer, which
 * priv_decode NUL-terminates in place (each value is followed by the next
 * TLV's header or the end; see priv.c). */
struct priv_msg {
	uint32_t op;
	uint32_t have; /* bit per tag */
	const char *str[PT_MAX];
	uint64_t num[PT_MAX];
	int fds[PRIV_FDS_MAX];
	int nfds;
};

/* Decode buf[0..n) (n < size: the buffer has room for one more byte).
 * Returns 0, or -1 when it is malformed: too short, an unknown op or tag,
 * a tag twice, a number not of 8 bytes, a string with a NUL or longer than
 * its tag allows, a truncated TLV.  Nothing else is checked here: what a
 * request may carry is the handler's to check. */
int priv_decode(uint8_t *buf, size_t n, size_t size, struct priv_msg *m);
int priv_has(const struct priv_msg *m, int tag);

#endif
