/* sbx-monitor's own header: the state of one session's monitor (struct
 * mon) and the functions its files share.  Nothing outside monitor/
 * includes it. */
#ifndef SBX_MON_H
#define SBX_MON_H

#include "monitor.h"
#include "netns.h"
#include "peer.h"
#include "netlog.h"
#include "audit.h"
#include "cgroup.h"
#include "disk.h"
#include "pkgparams.h"
#include "pool.h"
#include "policy.h"
#include "proto.h"
#include "secrets.h"
#include "snapshot.h"
#include "session.h"
#include "state.h"
#include "template.h"
#include "trace.h"
#include "util.h"
#include "vmm.h"
#include "workspace.h"
#include "zstream.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <jansson.h>
#include <sha2.h>

#define CLIENT_BUF_MAX (8u << 20)   /* queued for one client before it lags */
#define CLIENT_BUF_LOW (256u << 10) /* refill from the files below this */
#define MAX_CLIENTS 1024
/* Queued for the guest before clients' stdin waits: a guest that grants
 * stdin credit but never reads cannot make the monitor hold a client's
 * whole input. */
#define AGENT_BUF_MAX (4u << 20)
/* The guest enforces each exec's timeout; root in the guest can stop it.
 * The host ends an exec whose EXIT has not come this long after its
 * timeout: the guest's own kill and report come first when it works. */
#define EXEC_TIMEOUT_GRACE_MS 5000u
/* While execs run the monitor pings the agent every AGENT_PING_MS
 * ($SBX_AGENT_PING_MS, for tests); a ping unanswered for 3 intervals makes
 * the session "unresponsive" (sbx-ps), for 12 its execs end as
 * session-lost: a guest that stops answering is not waited on until the
 * TTL. */
#define AGENT_PING_MS 10000u
/* The clock (agent_time_sync): the PING's stream, apart from the
 * heartbeat's (0x4...) and the claim's; and how stale a sync may be when
 * an exec starts. */
#define MON_TIME_TOKEN 0x20000000u
#define MON_TIME_SYNC_NS (10ull * 1000000000u)

enum src_kind {
	SRC_LISTEN,
	SRC_AGENT_LISTEN,
	SRC_AGENT,
	SRC_CLIENT,
	SRC_VMM,
	SRC_SIGNAL,
	SRC_TIMER,
	SRC_READY,
	SRC_PROXY,
	SRC_PROXY_BUSY,
	SRC_VMEV,
	SRC_VMMOUT,
	SRC_PORT_LISTEN,
	SRC_PORT_CONN,
	SRC_DEAD /* closed in this loop turn, freed after it (port.c) */
};

/* Warm pool: the stages of the member's side of a claim (claim.c). */
enum { CLAIM_NONE, CLAIM_GUEST, CLAIM_DONE, CLAIM_FAILED };

struct src {
	enum src_kind kind;
	int fd;
};

/* What the VMM writes (the guest's serial console on its stdout, its own
 * messages on stderr) comes through a pipe the monitor reads, into a file
 * in RUN that never grows past cap: when it would, its last cap/2 bytes
 * move to the front behind one line saying how much was dropped.  A guest
 * that floods its console costs the host at most cap bytes of /run. */
#define CONSOLE_CAP (1u << 20)
#define VMM_LOG_CAP (256u << 10)
/* The proxy's stderr (LIB/sessions/ID/proxy.log): the same way, since the
 * guest drives what it says (one line per refused package request). */
#define PROXY_LOG_CAP (1u << 20)
/* mon->proxy_busy: the halves of the proxy with a connection open, and a
 * proxy that said something else (busy for as long as it runs). */
#define PROXY_BUSY_NET 1u
#define PROXY_BUSY_PKG 2u
#define PROXY_BUSY_LIED 4u

struct vmmout {
	struct src src;   /* the pipe's read end, nonblocking; fd -1: closed */
	const char *name; /* the file under RUN */
	int fd;           /* the file */
	uint64_t size, cap;
	uint64_t dropped; /* bytes written that are no longer kept */
};

struct client;

struct exec {
	struct exec *next;
	uint32_t n;
	char id[16];
	int dfd, out_fd, err_fd;
	uint64_t out_size, err_size;       /* bytes kept in the files */
	uint64_t out_total, err_total;     /* bytes the guest sent */
	uint64_t out_emitted, err_emitted; /* the same, secrets scrubbed */
	struct sbx_scrub sc_out, sc_err;
	uint64_t started_ns;
	uint64_t net_off, pkg_off; /* net.log's and packages.log's sizes at its start */
	uint32_t credit;           /* stdin bytes the guest will accept */
	uint32_t flags;
	int started;
	struct client *client;
	json_t *req;         /* argv, cwd, ... for result.json */
	int done;            /* ended; kept until its lagging client caught up */
	int session_cut;     /* output dropped for the session's total cap */
	uint64_t deadline;   /* CLOCK_MONOTONIC: the host ends it then (0: no timeout) */
	int host_timeout;    /* ... which it did: enforced_by "host" */
	struct sbx_buf tail; /* the EXIT frame owed to that client */
	int out_flow;        /* the guest sends output under our credit (SBX_EXEC_OUT_WINDOW) */
	uint64_t out_owed;   /* guest output bytes consumed, not yet given back by WINDOW */
	int restored_flow;   /* kept by a restore from a streamed exec: credit off after IDENTITY */
	struct sbx_trace tr; /* SBX_TRACE: make bench's exec steps */
};

/* Where in a client's queue the output of so many guest bytes ends: once
 * the client has read past it, those bytes are the guest's credit again. */
struct out_mark {
	uint64_t end; /* client.q_out once the frame is out */
	uint64_t n;   /* guest bytes it carried */
};
#define OUT_MARKS 8

struct client {
	struct src src;
	struct client *next;
	struct sbx_buf in, out;
	size_t out_off;
	uint64_t q_out;                  /* bytes sent to it, ever */
	struct out_mark mark[OUT_MARKS]; /* its exec's output in .out, oldest first */
	unsigned nmark;
	struct exec *ex;
	int lag;
	uint64_t lag_out, lag_err;
	struct sbx_buf held; /* one STDIN frame waiting for guest credit */
	int paused;          /* EPOLLIN off while a frame is held */
	int want_out;
	uint32_t ping_token;
	int shutdown_ack; /* answer once the session is gone */
	int dead;
	int pool_era; /* connected while the session was a pool member */
	int port_fd1; /* a listening socket handed over (port.c), plus 1; 0: none */
};

/* Privilege separation (priv.c): which half this is, its channel. */
enum { PRIV_ROLE_NONE, PRIV_ROLE_PARENT, PRIV_ROLE_CHILD };

struct mon {
	struct sbx_trace boot_tr; /* SBX_TRACE: make bench's start-up steps */
	struct {
		int role;    /* PRIV_ROLE_*: NONE, one process (not split) */
		int fd;      /* the request channel; -1: none */
		pid_t child; /* the parent's: the child's pid and pidfd */
		int child_pidfd;
		sbx_zprogress progress; /* the child's: a request's progress goes here */
		void *progress_ctx;
		int ended;          /* the session's end is recorded (or it is destroyed) */
		int claimed;        /* the parent's: a claim committed, its running is due */
		int ws_released;    /* the child's: the workspace went back */
		int snap_dir_set;   /* the parent's: PRIV_SNAP_DIR checked m->snap.dir */
		int proxylog_child; /* the parent's: the child holds proxy.log (the parent, none of it) */
		int bare_netns;     /* the child's: the parent holds a pool member's bare namespace */
		struct {
			char path[108];
			uint64_t dev, ino;
		} ports[16]; /* the parent's: unix listeners */
	} priv;
	struct sbx_state st;
	struct sbx_session s;
	int ep;
	int lib_dfd, run_dfd, execs_dfd;
	/* packages.log, for installs the guest refused itself (agent.c:
	 * SBX_F_PKG_REFUSED), at most PKGREP_RATE a second and PKGREP_MAX in
	 * all; -1: none */
	int pkglog_fd;
	struct {
		uint64_t window; /* the second being counted (mono ns / 1e9) */
		unsigned in_window, total, dropped;
	} pkgrep;
	struct src listen, agent_listen, agent, vmm, sig, timer, readyp;
	struct sbx_vm vm;
	struct src vmev;               /* the VMM's event stream (vm.event_fd); fd -1: none */
	struct vmmout console, vmmlog; /* the VMM's stdout (serial) and stderr */
	struct vmmout proxylog;        /* the proxy's stderr */
	int vm_shutdown;               /* it said the VM stopped (guest power-off) */
	int guest_spoke;               /* a frame came from the guest agent: its kernel ran guest-init */
	struct sbx_buf ain, aout;
	uint64_t agent_rx; /* bytes from the guest's agent (a boot that never answers says) */
	size_t aout_off;
	int agent_want_out;
	int ready, stopping, vm_dead, expired;
	int killed_in_boot; /* a SHUTDOWN arrived before the agent answered */
	uint32_t next_exec, next_ping;
	uint64_t time_synced; /* CLOCK_MONOTONIC of the last agent_time_sync */
	struct {
		uint64_t deadline; /* CLOCK_MONOTONIC; 0: no warm-up exec is awaited (warm.c) */
	} warm;
	struct exec *execs;
	struct {                   /* the next exec's directory, made ahead (exec_spare_make) */
		int dfd, out, err; /* execs/.next and its stdout, stderr; -1: none */
		int want;          /* make one at the end of this loop turn */
		int on;            /* the process that writes execs/ (never before the split) */
	} spare;
	struct client *clients;
	unsigned nclients;
	uint64_t output_cap;
	uint32_t guest_caps;                      /* SBX_GUEST_*: what the guest-init said it can do */
	uint64_t output_session_cap, output_kept; /* over every exec of the session */
	char vm_end[128];
	char boot_console[700];  /* a failed boot: where its whole console was kept */
	struct sbx_secrets sec;  /* only to scrub stored output; see mon_boot() */
	struct sbx_workspace ws; /* --workspace: held for the session's life */
	struct src proxy;        /* the egress proxy's pidfd (netns.h); fd -1: none */
	int proxy_pid;
	struct src proxybusy; /* the proxy's pipe: its connections open or none (netns.h) */
	unsigned proxy_busy;  /* PROXY_BUSY_*: which half has some open; 0: none */
	int secrets_sent;
	char secrets_err[256]; /* the guest refused them */
	int pool_paused;       /* a pool member's vCPUs, stopped while it waits */
	int bare_netns;        /* a pool member's namespace, its TAP only (mon_start_network); -1: none */
	uint64_t paused_since; /* sbx-snapshot pause: exec deadlines stand still */
	struct {               /* pings while execs run, see mon_heartbeat() */
		uint64_t interval, sent, next; /* ns; sent: CLOCK_MONOTONIC of the one unanswered, 0: none */
		uint32_t token, n;
	} hb;
	struct {                  /* a warm-pool claim (pool.h), see claim_begin */
		int stage;        /* CLAIM_* */
		struct client *c; /* the claimer, while connected */
		uint64_t t0, deadline;
		uint32_t ping; /* the PING whose PONG says the guest took it all */
		int secrets_ok, code;
		char from[SBX_ID_MAX + 1], err[256];
		char pkg[SBX_PKGPARAMS_MAX]; /* the member's sbx.pkg* parameters, as it booted */
		int touched;                 /* the guest was resumed for the claim: never pooled again */
	} claim;
	struct {                   /* snapshots (snapshot.h), see mon_vmctl */
		int paused;        /* the VM is stopped (sbx-snapshot pause) */
		int saving;        /* QUIESCE sent for a save, awaiting the guest */
		int keep;          /* ... with SBX_QUIESCE_KEEP: it holds its output until released */
		uint64_t deadline; /* ... until then */
		int identity;      /* IDENTITY sent, awaiting the guest */
		struct client *c;  /* the client waiting for op, while connected */
		unsigned op;
		char dir[PATH_MAX]; /* where a save writes */
		uint64_t max_bytes; /* ... and the most it may write there (the
				     * client's SBX_T_MAX_BYTES; 0: no cap but memory's) */
		int restoring;      /* booted from a snapshot: ready after IDENTITY */
		int told;           /* ... which was sent */
		char err[256];      /* the restored guest refused its identity */
		uint64_t progress_ns;
	} snap;
	struct mports *ports;  /* sbx-port's forwards (port.c); NULL: none yet */
	struct {               /* suspend to disk, the idle policy: see suspend.c */
		int suspended; /* no VMM: its memory is in LIB/sessions/ID/suspend */
		int busy;      /* a suspend or resume is under way */
		int hold;      /* nothing past hold_end is written to the agent (agent_flush) */
		size_t hold_end;
		int wake;          /* a client wants the guest meanwhile: resume at once */
		int want;          /* VMCTL SUSPEND asked: done from the main loop (susp_tick) */
		struct client *c;  /* ... for this client, while connected */
		uint32_t token, n; /* the PING whose PONG ends the agent's traffic */
		int ponged;
		uint64_t since_mono; /* suspended since (CLOCK_MONOTONIC) */
		uint64_t idle_mono;  /* last seen busy (CLOCK_MONOTONIC) */
		int idle_paused;     /* the idle policy paused it */
		/* lifecycle.on_ttl: suspend (susp_ttl): ttl_due, the TTL ran out
		 * and the suspend is to be done from the main loop; ttl_hit, it
		 * is suspended for it, and gets ttl_len again when it runs. */
		int ttl_due, ttl_hit;
		uint64_t ttl_len; /* ms: the TTL as last given (created, or set) */
		struct {
			uint64_t from, to;
		} iv[32]; /* recent suspends (CLOCK_REALTIME), for exec records */
		unsigned niv;
	} susp;
};

/* An audit event of this session, with its tenant: a tenant-scoped view
 * of the trail shows everything of that tenant. */

/* exec.c */
struct exec *exec_find(struct mon *m, uint32_t n);
void exec_free(struct mon *m, struct exec *ex);
/* The next exec's directory made ahead, off any client's path (at the
 * end of a loop turn once the session is ready, and after each exec), so
 * that an exec's start and end allocate no inode; dropped, files and
 * all, when the monitor ends (exec_spare_drop). */
void exec_spare_make(struct mon *m);
void exec_spare_drop(struct mon *m);
/* execs/.next removed, whoever made it and whether or not it is tracked
 * (the privileged half's end of a session, end_direct). */
void exec_spare_remove(int execs_dfd);
void exec_abort(struct mon *m, struct exec *ex, uint32_t reason);
void client_exec(struct mon *m, struct client *c, const struct sbx_frame *f);
void exec_store_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n);
void exec_out_credit(struct mon *m, struct exec *ex, uint64_t n);
void exec_started(struct mon *m, struct exec *ex, const struct sbx_frame *f);
void exec_end(struct mon *m, struct exec *ex, const struct sbx_exit_info *e);
void exec_deadlines(struct mon *m);
void mon_heartbeat(struct mon *m);
int mon_heartbeat_wait_ms(const struct mon *m);
int exec_wait_ms(const struct mon *m);

/* agent.c */
void agent_flush(struct mon *m);
void agent_note_guest(struct mon *m, const struct sbx_frame *f);
void agent_secrets_then_ready(struct mon *m);
void agent_time_sync(struct mon *m, uint32_t token);
/* warm.c: the warm-up exec before a new guest is ready */
void warm_start(struct mon *m);
int warm_frame(struct mon *m, const struct sbx_frame *f); /* 1: the warm-up's, taken */
void warm_check(struct mon *m);
int mon_drain_frames(struct sbx_buf *in, void (*fn)(struct mon *, void *, const struct sbx_frame *), struct mon *m,
		     void *ctx, const int *stop);
int mon_read_into(int fd, struct sbx_buf *b);
void agent_readable(struct mon *m);

/* client.c */
void client_flush(struct mon *m, struct client *c);
void client_catch_up(struct mon *m, struct client *c);
void client_send(struct mon *m, struct client *c, struct sbx_buf *frame);
void client_error(struct mon *m, struct client *c, uint32_t stream, int code, const char *msg);
void client_resume(struct mon *m, struct client *c);
void client_readable(struct mon *m, struct client *c);
void client_drop(struct mon *m, struct client *c);
void client_accept(struct mon *m);

/* vmmout.c */
int vmmout_open(int dfd, struct vmmout *o, const char *name, uint64_t cap, int *wr, struct sbx_err *err);
void vmmout_drain(struct mon *m, struct vmmout *o);
void vmmout_drain_all(struct mon *m);
void vmmout_explain(struct mon *m, struct sbx_err *err);
int vmmout_pipe(struct vmmout *o, const char *name, int *wr, struct sbx_err *err);
int vmmout_reopen(struct mon *m, struct vmmout *o, int *wr, struct sbx_err *err);
void vmmout_close(struct vmmout *o);
void vmmout_close_pipes(struct mon *m);

/* priv.c: the privileged steps of a running session (requests in the
 * unprivileged half, the steps themselves elsewhere), and the split */
static inline int mon_is_child(const struct mon *m)
{
	return m->priv.role == PRIV_ROLE_CHILD;
}
int mon_audit(struct mon *m, const char *type, json_t *f, struct sbx_err *err);
/* The process title names the session the monitor now serves (a claimed
 * pool member's was the member's): `ps`/`pgrep -f` find it by its ID. */
void mon_title(struct mon *m);
int mon_record_save(struct mon *m, struct sbx_err *err);
void mon_note_state(struct sbx_session *s, const char *state);
void mon_end(struct mon *m, const char *state, const char *why);
int mon_destroy(struct mon *m, int member_too);
void mon_vm_kill(struct mon *m);
int mon_vm_reap(struct mon *m, int *status);
int mon_vm_pause(struct mon *m, struct sbx_err *err);
int mon_vm_resume(struct mon *m, struct sbx_err *err);
int mon_vm_resume_within(struct mon *m, unsigned timeout_ms, struct sbx_err *err);
/* The signals the loop takes from its signalfd (blocked otherwise). */
static inline void mon_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGCHLD);
}
void mon_proxy_stop(struct mon *m);
void mon_proxy_reap(struct mon *m);
/* The proxy's pipe (mon->proxybusy): read what it says; closed, and its
 * halves none, at EOF (mon_proxy_busy_close). */
void mon_proxy_busy_read(struct mon *m);
/* Out of the loop and closed, and no connection counted: the proxy is
 * gone or another takes its place. */
void mon_proxy_busy_close(struct mon *m);
void mon_cg_usage(struct mon *m, uint64_t *cpu, uint64_t *peak);
int mon_cg_set_cpu(struct mon *m);
/* The VMM's host CPU cap (1000 = one CPU): the policy's, else its vCPUs. */
unsigned mon_cpu_milli(const struct mon *m);
/* The CPU weight of the VMM's host cgroup: low for a warm-pool member
 * (its boot and wait take no CPU from live sessions); 0 (the default,
 * not written) for a session.  A claim sets the default (mon_cg_set_cpu). */
unsigned mon_cpu_weight(const struct mon *m);
int mon_has_workspace(const struct mon *m);
void mon_drop_workspace(struct mon *m, int failed);
void mon_log_sizes(struct mon *m, uint64_t *net, uint64_t *pkg);
json_t *mon_violations(struct mon *m, uint64_t net_off, uint64_t pkg_off);
char *mon_policy_text(struct mon *m);
void mon_ports_save(struct mon *m, const char *txt);
int mon_peer_check(struct mon *m, int fd, struct sbx_err *err);
int mon_port_reg(struct mon *m, int fd, const char *path, uint64_t *dev, uint64_t *ino);
void mon_port_unlink(struct mon *m, const char *path, uint64_t dev, uint64_t ino);
int mon_snap_dir(struct mon *m, const char *rel);
int mon_snap_write(struct mon *m, sbx_zprogress progress, const char *execs, struct sbx_err *err);
int mon_susp_image(struct mon *m, uint64_t *bytes, struct sbx_err *err);
void mon_susp_discard(struct mon *m);
int mon_susp_room(struct mon *m, struct sbx_err *err);
int mon_susp_vmm(struct mon *m, struct sbx_err *err);
int mon_claim_commit(struct mon *m, const char *id, const char *rec, const char *pol, int *code, char *why, size_t n);
int mon_claim_network(struct mon *m, struct sbx_err *err);
int mon_priv_start(struct mon *m, int lock_fd, struct sbx_err *err);
int mon_priv_serve(struct mon *m);
int mon_priv_exit(struct mon *m, int rc);

/* loop.c */
void mon_ep_mod(struct mon *m, struct src *s, uint32_t ev, int op);
int mon_listen_unix(const char *name, struct sbx_err *err);
int mon_start_network(struct mon *m, struct sbx_netns *n, struct sbx_vm_config *c, struct sbx_err *err);
int mon_attach_network(struct mon *m, int netns_fd, struct sbx_err *err);
void mon_stop_network(struct mon *m);
int mon_loop_once(struct mon *m, int timeout_ms);
int mon_arm_ttl(struct mon *m);
void mon_set_ttl(struct mon *m, struct client *c, uint64_t left_ms);
/* The TTL ends left_ms from now: the timer and the record (no client). */
int mon_ttl_from_now(struct mon *m, uint64_t left_ms, struct sbx_err *err);
/* A VMCTL's answer: OP and the VM's state (running or paused). */
void snap_reply(struct mon *m, struct client *c, unsigned op);

/* boot.c */
void mon_workspace_release(struct mon *m, int failed);
void mon_guest_poweroff(struct mon *m);
int mon_boot(struct mon *m, struct sbx_err *err);
void mon_vm_volumes(struct mon *m, struct sbx_vm_config *c, char (*vols)[1200]);

/* claim.c */
int claim_commit(struct mon *m, const char *id, const char *rec, const char *pol, int *code, char *why, size_t n);
void claim_pool_park(struct mon *m);
int claim_wait_ms(const struct mon *m);
void claim_fail(struct mon *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void claim_abandoned(struct mon *m);
void claim_check_deadline(struct mon *m);
void claim_guest_answered(struct mon *m);
void claim_begin(struct mon *m, struct client *c, const struct sbx_frame *f);

/* snap.c */
int snap_dir_ok(struct mon *m, const char *rel);
uint64_t snap_stream_max(const struct mon *m);
int snap_write(struct mon *m, sbx_zprogress progress, void *ctx, uint64_t max_bytes, const char *execs,
	       struct sbx_err *err);
int snap_identity_queue(struct mon *m, const char *hostname, const char *pkg, int keep);
void snap_identity_reply(struct mon *m, const struct sbx_frame *f);
int snap_guest_error(struct mon *m, const struct sbx_frame *f);
void snap_save_run(struct mon *m);
void snap_release(struct mon *m);
void snap_check_deadline(struct mon *m);
void mon_vmctl(struct mon *m, struct client *c, const struct sbx_frame *f);
void snap_boot_progress(void *ctx, const char *what, uint64_t done, uint64_t total);
int snap_restored(struct mon *m, struct sbx_err *err);
int snap_restore_disk(struct mon *m, const char *scratch, struct sbx_err *err);
int snap_set_paused(struct mon *m, int paused, struct sbx_err *err);

/* snapexec.c: running execs across a save and a restore */
char *snap_execs_state(struct mon *m, int *none);
int snap_execs_write(struct mon *m, int sdfd, const char *state, uint64_t *bytes, struct sbx_err *err);
int snap_execs_restore(struct mon *m, struct sbx_err *err);
void snap_execs_flow_off(struct mon *m);
json_t *snap_execs_ids(const struct mon *m);

/* suspend.c */
void susp_fault_point(const struct mon *m, const char *at);
int susp_write_image(struct mon *m, uint64_t *bytes, struct sbx_err *err);
int susp_take_room(struct mon *m, struct sbx_err *err);
int susp_boot_vmm(struct mon *m, int fds[3], struct sbx_err *err);
int susp_vmctl(struct mon *m, struct client *c, unsigned op);
int susp_wake(struct mon *m, struct client *c, const struct sbx_frame *f);
/* The same for anything else that needs the guest (a connection to a
 * forwarded port): -1 and err when it cannot run again. */
int susp_wake_guest(struct mon *m, struct sbx_err *err);
void susp_pong(struct mon *m, uint32_t token);
int susp_wait_ms(struct mon *m);
void susp_tick(struct mon *m);
void susp_discard(struct mon *m);
void susp_exec_fields(struct mon *m, const struct exec *ex, json_t *o);
void susp_note_state(struct mon *m, const char *state);
int susp_arm_ttl(struct mon *m);
/* The TTL timer fired: 0 when lifecycle.on_ttl: suspend takes it (the
 * session is, or will be, suspended), -1 when the session ends. */
int susp_ttl(struct mon *m);

/* port.c */
void port_event(struct mon *m, struct src *s, uint32_t events);
void port_tick(struct mon *m);
void port_rearm(struct mon *m);
/* After each loop turn: free the connections and forwards closed in it. */
void port_reap(struct mon *m);
void port_agent_frame(struct mon *m, const struct sbx_frame *f);
void port_agent_lost(struct mon *m);
void port_client(struct mon *m, struct client *c, const struct sbx_frame *f);
int port_read_client(struct client *c);
void port_end(struct mon *m, const char *reason);
unsigned port_connections(const struct mon *m);

#endif
