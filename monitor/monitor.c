#include "monitor.h"
#include "netns.h"
#include "egress.h"
#include "audit.h"
#include "cgroup.h"
#include "disk.h"
#include "pkgparams.h"
#include "pool.h"
#include "policy.h"
#include "proto.h"
#include "secrets.h"
#include "session.h"
#include "state.h"
#include "template.h"
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

enum src_kind { SRC_LISTEN, SRC_AGENT_LISTEN, SRC_AGENT, SRC_CLIENT, SRC_VMM, SRC_SIGNAL, SRC_TIMER, SRC_READY, SRC_PROXY,
		SRC_VMEV, SRC_VMMOUT };

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
	uint64_t out_size, err_size; /* bytes kept in the files */
	uint64_t out_total, err_total; /* bytes the guest sent */
	uint64_t out_emitted, err_emitted; /* the same, secrets scrubbed */
	struct sbx_scrub sc_out, sc_err;
	uint64_t started_ns;
	uint64_t net_off, pkg_off; /* net.log's and packages.log's sizes at its start */
	uint32_t credit; /* stdin bytes the guest will accept */
	uint32_t flags;
	int started;
	struct client *client;
	json_t *req; /* argv, cwd, ... for result.json */
	int done;             /* ended; kept until its lagging client caught up */
	int session_cut;      /* output dropped for the session's total cap */
	uint64_t deadline;    /* CLOCK_MONOTONIC: the host ends it then (0: no timeout) */
	int host_timeout;     /* ... which it did: enforced_by "host" */
	struct sbx_buf tail;  /* the EXIT frame owed to that client */
};

struct client {
	struct src src;
	struct client *next;
	struct sbx_buf in, out;
	size_t out_off;
	struct exec *ex;
	int lag;
	uint64_t lag_out, lag_err;
	struct sbx_buf held; /* one STDIN frame waiting for guest credit */
	int paused;          /* EPOLLIN off while a frame is held */
	int want_out;
	uint32_t ping_token;
	int shutdown_ack;    /* answer once the session is gone */
	int dead;
	int pool_era;        /* connected while the session was a pool member */
};

struct mon {
	struct sbx_state st;
	struct sbx_session s;
	int ep;
	int lib_dfd, run_dfd, execs_dfd;
	struct src listen, agent_listen, agent, vmm, sig, timer, readyp;
	struct sbx_vm vm;
	struct src vmev;  /* the VMM's event stream (vm.event_fd); fd -1: none */
	struct vmmout console, vmmlog; /* the VMM's stdout (serial) and stderr */
	struct vmmout proxylog;        /* the proxy's stderr */
	int vm_shutdown;  /* it said the VM stopped (guest power-off) */
	int guest_spoke;  /* a frame came from the guest agent: its kernel ran guest-init */
	struct sbx_buf ain, aout;
	size_t aout_off;
	int agent_want_out;
	int ready, stopping, vm_dead, expired;
	int killed_in_boot; /* a SHUTDOWN arrived before the agent answered */
	uint32_t next_exec, next_ping;
	struct exec *execs;
	struct client *clients;
	unsigned nclients;
	uint64_t output_cap;
	uint64_t output_session_cap, output_kept; /* over every exec of the session */
	char vm_end[128];
	struct sbx_secrets sec; /* only to scrub stored output; see boot() */
	struct sbx_workspace ws; /* --workspace: held for the session's life */
	struct src proxy;        /* the egress proxy's pidfd (netns.h); fd -1: none */
	int proxy_pid;
	int secrets_sent;
	char secrets_err[256];  /* the guest refused them */
	int pool_paused;        /* a pool member's vCPUs, stopped while it waits */
	uint64_t paused_since;  /* sbx-snapshot pause: exec deadlines stand still */
	struct {                /* pings while execs run, see heartbeat() */
		uint64_t interval, sent, next; /* ns; sent: CLOCK_MONOTONIC of the one unanswered, 0: none */
		uint32_t token, n;
	} hb;
	struct {                /* a warm-pool claim (pool.h), see claim_begin */
		int stage;      /* CLAIM_* */
		struct client *c; /* the claimer, while connected */
		uint64_t t0, deadline;
		uint32_t ping;  /* the PING whose PONG says the guest took it all */
		int secrets_ok, code;
		char from[SBX_ID_MAX + 1], err[256];
	} claim;
	struct {                /* snapshots (snapshot.h), see vmctl */
		int paused;     /* the VM is stopped (sbx-snapshot pause) */
		int saving;     /* QUIESCE sent for a save, awaiting the guest */
		uint64_t deadline; /* ... until then */
		int identity;   /* IDENTITY sent, awaiting the guest */
		struct client *c; /* the client waiting for op, while connected */
		unsigned op;
		char dir[PATH_MAX]; /* where a save writes */
		int restoring;  /* booted from a snapshot: ready after IDENTITY */
		int told;       /* ... which was sent */
		char err[256];  /* the restored guest refused its identity */
		uint64_t progress_ns;
	} snap;
};

/* An audit event of this session, with its tenant: a tenant-scoped view
 * of the trail shows everything of that tenant. */
static int mon_audit(struct mon *m, const char *type, json_t *f, struct sbx_err *err)
{
	if (f && m->s.tenant[0])
		json_object_set_new(f, "tenant", json_string(m->s.tenant));
	return sbx_audit_append(&m->st, type, f, err);
}

static void ep_mod(struct mon *m, struct src *s, uint32_t ev, int op)
{
	struct epoll_event e = { .events = ev, .data.ptr = s };
	epoll_ctl(m->ep, op, s->fd, &e);
}

/* --- output to the agent ---------------------------------------------- */

static void agent_flush(struct mon *m)
{
	while (m->agent.fd >= 0 && m->aout_off < m->aout.len) {
		ssize_t w = write(m->agent.fd, m->aout.data + m->aout_off, m->aout.len - m->aout_off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				m->aout_off = m->aout.len; /* the VM is going: drop */
			break;
		}
		m->aout_off += (size_t)w;
	}
	if (m->aout_off == m->aout.len) {
		sbx_buf_reset(&m->aout);
		m->aout_off = 0;
	}
	int want = m->aout_off < m->aout.len;
	if (m->agent.fd >= 0 && want != m->agent_want_out) {
		ep_mod(m, &m->agent, EPOLLIN | (want ? EPOLLOUT : 0), EPOLL_CTL_MOD);
		m->agent_want_out = want;
	}
}

/* --- output to clients ------------------------------------------------- */

static void client_drop(struct mon *m, struct client *c);

/* Warm pool: the member's side of a claim (further down). */
enum { CLAIM_NONE, CLAIM_GUEST, CLAIM_DONE, CLAIM_FAILED };
static void claim_begin(struct mon *m, struct client *c, const struct sbx_frame *f);
static void vmctl(struct mon *m, struct client *c, const struct sbx_frame *f);
static int snap_identity_queue(struct mon *m, const char *hostname);
static void snap_identity_reply(struct mon *m, const struct sbx_frame *f);
static int snap_guest_error(struct mon *m, const struct sbx_frame *f);
static void snap_save_run(struct mon *m);
static void snap_check_deadline(struct mon *m);
static int snap_restored(struct mon *m, struct sbx_err *err);
static int snap_restore_disk(struct mon *m, const char *scratch, struct sbx_err *err);
static void snap_boot_progress(void *ctx, const char *what, uint64_t done, uint64_t total);
static void claim_guest_answered(struct mon *m);
static void claim_fail(struct mon *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void client_flush(struct mon *m, struct client *c)
{
	while (c->out_off < c->out.len) {
		ssize_t w = send(c->src.fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				c->dead = 1;
			break;
		}
		c->out_off += (size_t)w;
	}
	if (c->out_off == c->out.len) {
		sbx_buf_reset(&c->out);
		c->out_off = 0;
	}
	int want = c->out_off < c->out.len || c->lag;
	if (!c->dead && want != c->want_out) {
		ep_mod(m, &c->src, (c->paused ? 0 : EPOLLIN) | (want ? EPOLLOUT : 0), EPOLL_CTL_MOD);
		c->want_out = want;
	}
}

/* A client that fell behind reads the rest from the exec's files: the
 * monitor never blocks on a slow client and never drops what it stored. */
static void exec_free(struct mon *m, struct exec *ex);

static void client_catch_up(struct mon *m, struct client *c)
{
	struct exec *ex = c->ex;
	uint8_t buf[SBX_DATA_CHUNK];
	while (c->lag && ex && c->out.len - c->out_off < CLIENT_BUF_LOW) {
		int fd = c->lag_out < ex->out_size ? ex->out_fd : ex->err_fd;
		uint64_t *off = c->lag_out < ex->out_size ? &c->lag_out : &c->lag_err;
		uint64_t end = fd == ex->out_fd ? ex->out_size : ex->err_size;
		if (*off >= end) {
			c->lag = 0;
			break;
		}
		size_t want = end - *off < sizeof buf ? (size_t)(end - *off) : sizeof buf;
		ssize_t r = pread(fd, buf, want, (off_t)*off);
		if (r <= 0) {
			c->lag = 0;
			break;
		}
		sbx_frame_raw(&c->out, fd == ex->out_fd ? SBX_F_STDOUT : SBX_F_STDERR, ex->n, buf, (uint32_t)r);
		*off += (uint64_t)r;
	}
	if (!c->lag && ex && ex->done) {
		/* All output is out: now the EXIT it was owed. */
		sbx_buf_put(&c->out, ex->tail.data, ex->tail.len);
		exec_free(m, ex);
	}
}

static void client_send(struct mon *m, struct client *c, struct sbx_buf *frame)
{
	sbx_buf_put(&c->out, frame->data, frame->len);
	client_flush(m, c);
}

static void client_error(struct mon *m, struct client *c, uint32_t stream, int code, const char *msg)
{
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_ERROR, stream);
	sbx_tlv_u32(&b, SBX_T_CODE, (uint32_t)code);
	sbx_tlv_str(&b, SBX_T_MSG, msg);
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

/* --- execs ------------------------------------------------------------- */

static struct exec *exec_find(struct mon *m, uint32_t n)
{
	for (struct exec *e = m->execs; e; e = e->next)
		if (e->n == n)
			return e;
	return NULL;
}

static void exec_free(struct mon *m, struct exec *ex)
{
	for (struct exec **pp = &m->execs; *pp; pp = &(*pp)->next)
		if (*pp == ex) {
			*pp = ex->next;
			break;
		}
	if (ex->client)
		ex->client->ex = NULL;
	close(ex->out_fd);
	close(ex->err_fd);
	close(ex->dfd);
	sbx_scrub_end(&ex->sc_out, NULL);
	sbx_scrub_end(&ex->sc_err, NULL);
	json_decref(ex->req);
	sbx_buf_free(&ex->tail);
	free(ex);
}

static uint64_t file_size(int dfd, const char *name)
{
	struct stat st;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_size : 0;
}

/* Which of the session's limits the exec ran into, in one place for a
 * caller to read (a timeout from an OOM from an attempted escape): the
 * proxy's refusals while it ran (egress, DNS, package fetches; the
 * session's, so an exec running beside another shares them), the guest's
 * pids and memory limits, the output caps. */
static json_t *violations(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	json_t *v = sbx_netlog_violations(m->lib_dfd, ex->net_off, ex->pkg_off); /* no logs: zeros */
	if (!v)
		return json_null();
	json_object_set_new(v, "pids_limit", json_boolean(e->pids_hit > 0));
	json_object_set_new(v, "oom", json_boolean(e->reason == SBX_R_OOM));
	json_object_set_new(v, "timeout", json_boolean(e->reason == SBX_R_TIMEOUT));
	json_object_set_new(v, "output_truncated",
			    json_boolean(ex->session_cut || ex->out_emitted > ex->out_size || ex->err_emitted > ex->err_size));
	return v;
}

static void exec_result(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	char t0[40], t1[40];
	uint64_t now = sbx_now_ns();
	sbx_fmt_time(ex->started_ns, t0, sizeof t0);
	sbx_fmt_time(now, t1, sizeof t1);
	json_t *o = json_pack("{s:i, s:s, s:s, s:O, s:i, s:s, s:i, s:s, s:s, s:f, s:f, s:f, s:{s:I, s:b},"
			      " s:I, s:I, s:b}",
			      "schema", 1, "exec", ex->id, "session", m->s.id, "request", ex->req, "status",
			      (int)e->status, "reason", sbx_reason_name(e->reason), "signal", (int)e->signo,
			      "started", t0, "ended", t1, "wall_s", (double)e->wall_us / 1e6, "cpu_user_s",
			      (double)e->cpu_user_us / 1e6, "cpu_sys_s", (double)e->cpu_sys_us / 1e6,
			      "memory_peak", "bytes", (json_int_t)e->mem_peak, "guest_reported", 1,
			      "stdout_bytes", (json_int_t)ex->out_total, "stderr_bytes", (json_int_t)ex->err_total,
			      "truncated", ex->out_emitted > ex->out_size || ex->err_emitted > ex->err_size);
	if (o)
		json_object_set_new(o, "pids_limit_hit", json_integer((json_int_t)e->pids_hit));
	if (o && ex->host_timeout) /* the guest did not end it in time: the host did */
		json_object_set_new(o, "enforced_by", json_string("host"));
	if (o && ex->session_cut) /* which cap: the exec's own, or the session's total */
		json_object_set_new(o, "truncated_by", json_string("output_session_cap"));
	else if (o && (ex->out_emitted > ex->out_size || ex->err_emitted > ex->err_size))
		json_object_set_new(o, "truncated_by", json_string("output_cap"));
	if (o)
		json_object_set_new(o, "violations", violations(m, ex, e));
	char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	/* No fsync: an exec record is as durable as the session it belongs to. */
	if (s) {
		int fd = openat(ex->dfd, ".result.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			sbx_write_all(fd, s, strlen(s));
			sbx_write_all(fd, "\n", 1);
			close(fd);
			renameat(ex->dfd, ".result.tmp", ex->dfd, "result.json");
		}
	}
	free(s);
	json_decref(o);
}

/* argv as the audit trail keeps it: bounded (an audit record is at most
 * 64 KiB, a command line up to 1 MiB), with the SHA-256 of the whole
 * argv so the record still names exactly what ran. */
static void audit_argv(json_t *f, json_t *argv)
{
	SHA2_CTX c;
	uint8_t d[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];
	json_t *out = json_array(), *a;
	size_t i, total = 0;
	int cut = 0;
	SHA256Init(&c);
	json_array_foreach(argv, i, a) {
		const char *s = json_string_value(a);
		size_t n = s ? strlen(s) : 0;
		SHA256Update(&c, (const uint8_t *)(s ? s : ""), n + 1);
		if (i >= 64 || total > 16384) {
			cut = 1;
			continue;
		}
		cut |= n > 512;
		json_array_append_new(out, json_stringn(s ? s : "", n > 512 ? 512 : n));
		total += n > 512 ? 512 : n;
	}
	SHA256Final(d, &c);
	for (int k = 0; k < SHA256_DIGEST_LENGTH; k++)
		snprintf(hex + 2 * k, 3, "%02x", d[k]);
	json_object_set_new(f, "argv", out);
	json_object_set_new(f, "argv_sha256", json_string(hex));
	if (cut)
		json_object_set_new(f, "argv_truncated", json_true());
}

/* exec.end in the audit trail: what ran, how it ended; never its output. */
static void audit_exec_end(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	json_t *f = json_pack("{s:s, s:s, s:i, s:s, s:i, s:f, s:f, s:I, s:I, s:I}", "session", m->s.id, "exec",
			      ex->id, "status", (int)e->status, "reason",
			      sbx_reason_name(e->reason), "signal", (int)e->signo, "wall_s", (double)e->wall_us / 1e6,
			      "cpu_s", (double)(e->cpu_user_us + e->cpu_sys_us) / 1e6, "memory_peak_bytes",
			      (json_int_t)e->mem_peak, "stdout_bytes", (json_int_t)ex->out_total, "stderr_bytes",
			      (json_int_t)ex->err_total);
	if (f && ex->host_timeout)
		json_object_set_new(f, "enforced_by", json_string("host"));
	if (f && (ex->out_emitted > ex->out_size || ex->err_emitted > ex->err_size))
		json_object_set_new(f, "output_truncated",
				    json_string(ex->session_cut ? "output_session_cap" : "output_cap"));
	if (f)
		audit_argv(f, json_object_get(ex->req, "argv"));
	mon_audit(m, "exec.end", f, NULL);
	json_decref(f);
}

/* The exit report to the exec's attached client, if any. */
static void send_exit(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	if (!ex->client)
		return;
	struct sbx_buf b = { 0 };
	sbx_exit_encode(&b, ex->n, e);
	client_send(m, ex->client, &b);
	sbx_buf_free(&b);
}

static void emit_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n);

/* The bytes held back in case they began a secret are none: out they go. */
static void scrub_flush(struct mon *m, struct exec *ex)
{
	struct sbx_buf b = { 0 };
	sbx_scrub_end(&ex->sc_out, &b);
	if (b.len && !b.oom)
		emit_output(m, ex, SBX_F_STDOUT, b.data, (uint32_t)b.len);
	sbx_buf_reset(&b);
	sbx_scrub_end(&ex->sc_err, &b);
	if (b.len && !b.oom)
		emit_output(m, ex, SBX_F_STDERR, b.data, (uint32_t)b.len);
	sbx_buf_free(&b);
}

/* End an exec from the host side (VM lost, session destroyed). */
static void exec_abort(struct mon *m, struct exec *ex, uint32_t reason)
{
	if (ex->done) {
		exec_free(m, ex);
		return;
	}
	struct sbx_exit_info e = { .status = reason == SBX_R_KILLED ? 137 : 255, .reason = reason };
	e.wall_us = (sbx_now_ns() - ex->started_ns) / 1000u;
	scrub_flush(m, ex);
	exec_result(m, ex, &e);
	send_exit(m, ex, &e);
	audit_exec_end(m, ex, &e);
	exec_free(m, ex);
}

/* What is recorded of a request (request.json, result.json, the audit
 * trail): argv and cwd with the session's secrets scrubbed, env names only. */
static json_t *req_json(struct mon *m, const struct sbx_exec_req *r)
{
	json_t *argv = json_array();
	for (size_t i = 0; i < r->argc; i++) {
		char *a = sbx_scrub_str(&m->sec, r->argv[i]);
		json_array_append_new(argv, json_string(a ? a : "[unrecorded]"));
		free(a);
	}
	json_t *env = json_array(); /* names only: values may be secrets */
	for (size_t i = 0; i < r->envc; i++)
		json_array_append_new(env, json_stringn(r->env[i], strcspn(r->env[i], "=")));
	_cleanup_free_ char *cwd = r->cwd ? sbx_scrub_str(&m->sec, r->cwd) : NULL;
	json_t *o = json_pack("{s:o, s:o, s:s?, s:I, s:b, s:b, s:i, s:s}", "argv", argv, "env", env, "cwd", cwd,
			      "timeout_ms", (json_int_t)r->timeout_ms, "tty", !!(r->flags & SBX_EXEC_PTY), "stdin",
			      !!(r->flags & SBX_EXEC_STDIN), "uid", r->have_uid ? (int)r->uid : 1000, "kind",
			      r->flags & SBX_EXEC_COPY ? "copy" : "command");
	return o;
}

static void client_exec(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	struct sbx_exec_req r;
	const char *why = "invalid request";
	if (c->ex)
		return client_error(m, c, f->stream, SBX_EXIT_INVALID, "one exec per connection");
	if (m->stopping || m->vm_dead)
		return client_error(m, c, f->stream, SBX_EXIT_NOENT, "the session is ending");
	if (m->agent.fd < 0)
		return client_error(m, c, f->stream, SBX_EXIT_INTERNAL, "the guest agent is gone");
	snap_check_deadline(m);
	if (m->snap.paused) {
		char msg[200];
		snprintf(msg, sizeof msg, "session %s is paused: resume it (sbx-snapshot resume %s, or sbx-exec --resume)",
			 m->s.id, m->s.id);
		return client_error(m, c, f->stream, SBX_EXIT_NOENT, msg);
	}
	if (m->snap.saving)
		return client_error(m, c, f->stream, SBX_EXIT_TEMPFAIL, "a snapshot of the session is being saved");
	if (sbx_exec_req_decode(f->payload, f->len, &r, &why) < 0)
		return client_error(m, c, f->stream, SBX_EXIT_INVALID, why);
	const struct sbx_limits *lim = &m->s.limits;
	/* Limits come from the session's policy, never from the client. */
	r.pids_max = lim->pids_per_exec;
	r.session_pids = lim->pids_per_session;
	r.memory_max = lim->exec_memory;
	if (!r.timeout_ms && lim->exec_timeout_default_ms)
		r.timeout_ms = (uint32_t)(lim->exec_timeout_default_ms > UINT32_MAX ? UINT32_MAX
										      : lim->exec_timeout_default_ms);
	if (lim->exec_timeout_max_ms && (!r.timeout_ms || r.timeout_ms > lim->exec_timeout_max_ms)) {
		char msg[200], max[32], asked[40] = "";
		sbx_fmt_duration(max, sizeof max, lim->exec_timeout_max_ms);
		if (r.timeout_ms) {
			asked[0] = ' ';
			sbx_fmt_duration(asked + 1, sizeof asked - 1, r.timeout_ms);
		}
		snprintf(msg, sizeof msg, "the exec timeout%s %s the policy's maximum of %s (resources.exec_timeout.max)",
			 asked, r.timeout_ms ? "exceeds" : "must be set within", max);
		sbx_exec_req_free(&r);
		return client_error(m, c, f->stream, SBX_EXIT_INVALID, msg);
	}
	struct exec *ex = calloc(1, sizeof *ex);
	if (!ex) {
		sbx_exec_req_free(&r);
		return client_error(m, c, f->stream, SBX_EXIT_INTERNAL, "out of memory");
	}
	ex->n = ++m->next_exec;
	snprintf(ex->id, sizeof ex->id, "e%u", ex->n);
	ex->out_fd = ex->err_fd = ex->dfd = -1;
	if (mkdirat(m->execs_dfd, ex->id, 0700) < 0 ||
	    (ex->dfd = openat(m->execs_dfd, ex->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    (ex->out_fd = openat(ex->dfd, "stdout", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0 ||
	    (ex->err_fd = openat(ex->dfd, "stderr", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
		char msg[200];
		snprintf(msg, sizeof msg, "cannot store exec output: %s", strerror(errno));
		if (ex->out_fd >= 0)
			close(ex->out_fd);
		if (ex->dfd >= 0)
			close(ex->dfd);
		free(ex);
		sbx_exec_req_free(&r);
		return client_error(m, c, f->stream, SBX_EXIT_INTERNAL, msg);
	}
	ex->started_ns = sbx_now_ns();
	ex->net_off = file_size(m->lib_dfd, "net.log");
	ex->pkg_off = file_size(m->lib_dfd, "packages.log");
	if (r.timeout_ms)
		ex->deadline = sbx_mono_ns() + ((uint64_t)r.timeout_ms + EXEC_TIMEOUT_GRACE_MS) * 1000000u;
	ex->credit = SBX_STDIN_WINDOW;
	ex->flags = r.flags;
	ex->req = req_json(m, &r);
	/* What is running, for sbx-ps --execs, before any result exists. */
	char *rq = json_dumps(ex->req, JSON_COMPACT);
	int rfd = rq ? openat(ex->dfd, "request.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
	if (rfd >= 0) {
		sbx_write_all(rfd, rq, strlen(rq));
		close(rfd);
	}
	free(rq);
	int detach = r.flags & SBX_EXEC_DETACH;
	r.flags &= ~(uint32_t)(SBX_EXEC_DETACH | SBX_EXEC_COPY);
	if (detach)
		r.flags &= ~(uint32_t)SBX_EXEC_STDIN;
	ex->next = m->execs;
	m->execs = ex;
	sbx_exec_req_encode(&m->aout, ex->n, &r);
	agent_flush(m);
	/* Recorded while the guest already starts it (off the critical path);
	 * an exec that cannot be recorded does not run: fail closed. */
	json_t *af = json_pack("{s:s, s:s, s:s?, s:i}", "session", m->s.id, "exec", ex->id, "cwd",
			       json_string_value(json_object_get(ex->req, "cwd")), "user", r.have_uid ? (int)r.uid : 1000);
	if (af)
		audit_argv(af, json_object_get(ex->req, "argv"));
	struct sbx_err aerr = { 0 };
	int arc = mon_audit(m, "exec.start", af, &aerr);
	json_decref(af);
	sbx_exec_req_free(&r);
	if (arc < 0) {
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		agent_flush(m);
		char msg[600];
		snprintf(msg, sizeof msg, "cannot write the audit trail, the command was stopped: %s", aerr.msg);
		return client_error(m, c, ex->n, SBX_EXIT_INTERNAL, msg);
	}
	if (!detach) {
		ex->client = c;
		c->ex = ex;
	}
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_STARTED, ex->n);
	sbx_tlv_str(&b, SBX_T_EXEC_ID, ex->id);
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

/* --- frames from the guest --------------------------------------------- */

/* Output as stored and as streamed: the two are the same bytes (secrets
 * already scrubbed), so a client that lags and reads on from the files
 * resumes exactly where its stream stopped. */
static void emit_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n)
{
	int out = type == SBX_F_STDOUT;
	uint64_t *size = out ? &ex->out_size : &ex->err_size;
	uint64_t before_out = ex->out_size, before_err = ex->err_size;
	*(out ? &ex->out_emitted : &ex->err_emitted) += n;
	uint32_t keep = *size >= m->output_cap ? 0 : (m->output_cap - *size < n ? (uint32_t)(m->output_cap - *size) : n);
	/* ... and what the session as a whole may still keep. */
	uint64_t room = m->output_kept >= m->output_session_cap ? 0 : m->output_session_cap - m->output_kept;
	if (keep > room) {
		keep = (uint32_t)room;
		ex->session_cut = 1;
	}
	if (keep && pwrite(out ? ex->out_fd : ex->err_fd, p, keep, (off_t)*size) == (ssize_t)keep) {
		*size += keep;
		m->output_kept += keep;
	}
	struct client *c = ex->client;
	if (!c)
		return;
	if (!c->lag && c->out.len - c->out_off < CLIENT_BUF_MAX) {
		sbx_frame_raw(&c->out, type, ex->n, p, n);
		client_flush(m, c);
	} else if (!c->lag) {
		c->lag = 1;
		c->lag_out = before_out;
		c->lag_err = before_err;
		client_flush(m, c);
	}
}

static void store_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n)
{
	int out = type == SBX_F_STDOUT;
	*(out ? &ex->out_total : &ex->err_total) += n;
	if (!m->sec.patmax)
		return emit_output(m, ex, type, p, n);
	struct sbx_buf b = { 0 };
	/* Out of memory loses this chunk rather than store it unscrubbed. */
	if (sbx_scrub(&m->sec, out ? &ex->sc_out : &ex->sc_err, p, n, &b) == 0 && b.len)
		emit_output(m, ex, type, b.data, (uint32_t)(b.len < UINT32_MAX ? b.len : UINT32_MAX));
	sbx_buf_free(&b);
}

/* The exec has ended (its EXIT, or the host's timeout): record it, tell
 * its client, audit it; freed unless a lagging client is still owed it. */
static void exec_end(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	scrub_flush(m, ex);
	exec_result(m, ex, e);
	if (ex->client && ex->client->lag) {
		/* The client still reads from the files: the EXIT waits
		 * behind the output it has not seen yet. */
		sbx_buf_reset(&ex->tail);
		sbx_exit_encode(&ex->tail, ex->n, e);
		ex->done = 1;
	} else {
		send_exit(m, ex, e);
	}
	/* After the reply: the fsynced append is not the client's wait.
	 * It still lands before this monitor handles anything else. */
	audit_exec_end(m, ex, e);
	if (!ex->done)
		exec_free(m, ex);
}

/* Host backstop: an exec past its timeout and the grace is ended here, as
 * "timeout" enforced by the host, and the guest is asked afresh to kill
 * it; whatever the guest says of it later is ignored. */
static void exec_deadlines(struct mon *m)
{
	uint64_t now = sbx_mono_ns();
	if (m->snap.paused || m->pool_paused)
		return;
	for (struct exec *ex = m->execs, *next; ex; ex = next) {
		next = ex->next;
		if (ex->done || !ex->deadline || now < ex->deadline)
			continue;
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		agent_flush(m);
		struct sbx_exit_info e = { .status = 124, .reason = SBX_R_TIMEOUT };
		e.wall_us = (sbx_now_ns() - ex->started_ns) / 1000u;
		ex->host_timeout = 1;
		exec_end(m, ex, &e);
	}
}

static int execs_running(const struct mon *m)
{
	for (const struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done)
			return 1;
	return 0;
}

/* Is the agent alive while execs run?  A PING (its own token space, apart
 * from the clients' 0x80000000 one), and what an unanswered one means. */
static void heartbeat(struct mon *m)
{
	uint64_t now = sbx_mono_ns(), iv = m->hb.interval;
	if (!iv || m->snap.paused || m->pool_paused || m->agent.fd < 0)
		return;
	if (!m->hb.sent) {
		if (!execs_running(m) || now < m->hb.next)
			return;
		m->hb.token = 0x40000000u | (++m->hb.n & 0x3fffffffu);
		sbx_frame_raw(&m->aout, SBX_F_PING, m->hb.token, NULL, 0);
		agent_flush(m);
		m->hb.sent = now;
		return;
	}
	uint64_t age = now - m->hb.sent;
	if (age >= 3 * iv && !m->s.agent_unresponsive_ns) {
		m->s.agent_unresponsive_ns = sbx_now_ns() - age;
		sbx_record_save(&m->st, &m->s, NULL);
		json_t *af = json_pack("{s:s, s:I}", "session", m->s.id, "silent_ms", (json_int_t)(age / 1000000u));
		mon_audit(m, "session.unresponsive", af, NULL);
		json_decref(af);
	}
	if (age >= 12 * iv)
		for (struct exec *ex = m->execs, *next; ex; ex = next) {
			next = ex->next;
			if (!ex->done)
				exec_abort(m, ex, SBX_R_SESSION_LOST);
		}
}

static int heartbeat_wait_ms(const struct mon *m)
{
	uint64_t now = sbx_mono_ns(), iv = m->hb.interval, at;
	if (!iv || m->snap.paused || m->pool_paused || m->agent.fd < 0 || (!m->hb.sent && !execs_running(m)))
		return -1;
	if (!m->hb.sent)
		at = m->hb.next;
	else if (now - m->hb.sent >= 12 * iv)
		return -1; /* lost: a new exec, an event, wakes the loop anyway */
	else
		at = m->hb.sent + (m->s.agent_unresponsive_ns ? 12 : 3) * iv;
	return at <= now ? 0 : (int)((at - now) / 1000000u) + 1;
}

/* Until the next exec deadline, ms, for epoll; -1: none. */
static int exec_wait_ms(const struct mon *m)
{
	uint64_t first = 0, now = sbx_mono_ns();
	if (m->snap.paused || m->pool_paused)
		return -1;
	for (const struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done && ex->deadline && (!first || ex->deadline < first))
			first = ex->deadline;
	if (!first)
		return -1;
	return first <= now ? 0 : (int)((first - now) / 1000000u) + 1;
}

static void client_resume(struct mon *m, struct client *c);
static void client_frame(struct mon *m, void *ctx, const struct sbx_frame *f);
static int drain_frames(struct sbx_buf *in, void (*fn)(struct mon *, void *, const struct sbx_frame *),
			struct mon *m, void *ctx, const int *stop);

/* The guest kernel's release, from a HELLO or an identity reply. */
static void note_kernel(struct mon *m, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &v, &n) == 1)
		if (tag == SBX_T_KERNEL)
			sbx_tlv_as_str(v, n, m->s.kernel, sizeof m->s.kernel);
}

/* The guest is up (HELLO, or a restore's identity applied): ready now, or
 * secrets first and ready only once the guest has them in place, so no exec
 * can ever run before its secrets exist.  Written into reserved room so no
 * stale copy is left behind a realloc. */
static void secrets_then_ready(struct mon *m)
{
	if (!m->sec.n) {
		m->ready = 1;
		return;
	}
	if (sbx_buf_reserve(&m->aout, m->sec.frame_len) == 0)
		sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
	else
		snprintf(m->secrets_err, sizeof m->secrets_err, "out of memory");
	m->secrets_sent = 1;
	agent_flush(m);
}

static void agent_frame(struct mon *m, const struct sbx_frame *f)
{
	struct exec *ex = f->stream ? exec_find(m, f->stream) : NULL;
	m->guest_spoke = 1;
	/* An exec that has ended (its EXIT still owed to a lagging client)
	 * hears nothing more from the guest: another EXIT would rewrite its
	 * record, append to the audit trail and grow its tail; more output
	 * would land after the end. */
	if (ex && ex->done)
		return;
	switch (f->type) {
	case SBX_F_HELLO: {
		note_kernel(m, f);
		if (m->ready || m->secrets_sent || m->snap.restoring)
			break; /* a guest saying hello again (reconnect) gets nothing more */
		secrets_then_ready(m);
		break;
	}
	case SBX_F_SECRETS:
		if (m->claim.stage == CLAIM_GUEST && m->secrets_sent && !f->len) {
			if (m->aout.data) /* as below */
				explicit_bzero(m->aout.data + m->aout.len, m->aout.cap - m->aout.len);
			m->claim.secrets_ok = 1;
			break;
		}
		if (!m->secrets_sent || m->ready || f->len)
			break;
		/* The guest read the whole frame: wipe what is left of it here. */
		if (m->aout.data)
			explicit_bzero(m->aout.data + m->aout.len, m->aout.cap - m->aout.len);
		m->ready = 1;
		break;
	case SBX_F_STARTED:
		if (ex)
			ex->started = 1;
		break;
	case SBX_F_STDOUT:
	case SBX_F_STDERR:
		if (ex)
			store_output(m, ex, f->type, f->payload, f->len);
		break;
	case SBX_F_WINDOW: {
		uint32_t more;
		if (ex && sbx_tlv_as_u32(f->payload, f->len, &more) == 0) {
			ex->credit = ex->credit + more > SBX_STDIN_WINDOW ? SBX_STDIN_WINDOW : ex->credit + more;
			if (ex->client)
				client_resume(m, ex->client);
		}
		break;
	}
	case SBX_F_EXIT: {
		struct sbx_exit_info e;
		/* A lying guest cannot end another exec, forge a shape, or claim
		 * the session was lost: only the host knows that. */
		if (!ex || sbx_exit_decode(f->payload, f->len, &e) < 0 || e.reason == SBX_R_SESSION_LOST)
			break;
		exec_end(m, ex, &e);
		break;
	}
	case SBX_F_QUIESCE:
		if (m->snap.saving && !f->stream && !f->len)
			snap_save_run(m);
		break;
	case SBX_F_IDENTITY:
		snap_identity_reply(m, f);
		break;
	case SBX_F_ERROR: {
		if (!f->stream && m->claim.stage == CLAIM_GUEST) {
			char msg[200] = "refused";
			uint32_t code = 0;
			sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
			sbx_text_clean(msg); /* the guest's words, shown to people */
			claim_fail(m, SBX_EXIT_UNAVAIL, "the guest refused the claim: %s", msg);
			break;
		}
		if (snap_guest_error(m, f))
			break;
		if (!f->stream && m->secrets_sent && !m->ready) {
			char msg[200] = "refused";
			uint32_t code = 0;
			sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
			sbx_text_clean(msg); /* the guest's words, shown to people */
			snprintf(m->secrets_err, sizeof m->secrets_err, "%s", msg);
			break;
		}
		if (!ex)
			break;
		char msg[256] = "the guest refused the command";
		uint32_t code = SBX_EXIT_INTERNAL;
		sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
		sbx_text_clean(msg); /* the guest's words, shown to people */
		/* After STARTED an ERROR is only news: the guest ends the exec
		 * and reports EXIT.  Before it, the exec never ran. */
		if (ex->started || ex->done)
			break;
		if (code != SBX_EXIT_INVALID && code != SBX_EXIT_TEMPFAIL)
			code = SBX_EXIT_INTERNAL;
		if (ex->client)
			client_error(m, ex->client, ex->n, (int)code, msg);
		exec_abort(m, ex, SBX_R_SESSION_LOST);
		break;
	}
	case SBX_F_PONG: {
		if (m->claim.stage == CLAIM_GUEST && f->stream == m->claim.ping)
			claim_guest_answered(m);
		if (m->hb.sent && f->stream == m->hb.token) {
			m->hb.sent = 0;
			m->hb.next = sbx_mono_ns() + m->hb.interval;
			if (m->s.agent_unresponsive_ns) {
				m->s.agent_unresponsive_ns = 0;
				sbx_record_save(&m->st, &m->s, NULL);
				json_t *af = json_pack("{s:s}", "session", m->s.id);
				mon_audit(m, "session.responsive", af, NULL);
				json_decref(af);
			}
		}
		for (struct client *c = m->clients; c; c = c->next)
			if (c->ping_token && c->ping_token == f->stream) {
				struct sbx_buf b = { 0 };
				sbx_frame_raw(&b, SBX_F_PONG, 0, f->payload, f->len);
				client_send(m, c, &b);
				sbx_buf_free(&b);
				c->ping_token = 0;
			}
		break;
	}
	default:
		break; /* unexpected from a guest: ignore, never trust */
	}
}

/* Parse whole frames out of buf; returns -1 when the stream is corrupt. */
static int drain_frames(struct sbx_buf *in, void (*fn)(struct mon *, void *, const struct sbx_frame *),
			struct mon *m, void *ctx, const int *stop)
{
	size_t off = 0;
	int rc = 0;
	/* stop: a client whose STDIN frame is held keeps the frames behind it
	 * unparsed, so they cannot overtake it (an EOF before the data). */
	while (in->len - off >= SBX_FRAME_HDR && !(stop && *stop)) {
		struct sbx_frame f;
		if (sbx_frame_hdr_get(in->data + off, &f, SBX_FRAME_MAX) < 0) {
			rc = -1;
			break;
		}
		if (in->len - off - SBX_FRAME_HDR < f.len)
			break;
		f.payload = in->data + off + SBX_FRAME_HDR;
		off += SBX_FRAME_HDR + f.len;
		fn(m, ctx, &f);
	}
	if (off) {
		memmove(in->data, in->data + off, in->len - off);
		in->len -= off;
	}
	return rc;
}

static void agent_frame_cb(struct mon *m, void *ctx, const struct sbx_frame *f)
{
	(void)ctx;
	agent_frame(m, f);
}

static int read_into(int fd, struct sbx_buf *b)
{
	uint8_t tmp[SBX_DATA_CHUNK + SBX_FRAME_HDR];
	for (int i = 0; i < 16; i++) {
		ssize_t r = read(fd, tmp, sizeof tmp);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? 1 : -1;
		if (r == 0)
			return 0;
		if (sbx_buf_put(b, tmp, (size_t)r) < 0)
			return -1;
	}
	return 1;
}

static void agent_readable(struct mon *m)
{
	int r = read_into(m->agent.fd, &m->ain);
	if (drain_frames(&m->ain, agent_frame_cb, m, NULL, NULL) < 0 || r <= 0) {
		/* A corrupt stream or the guest closing the port: the agent is
		 * gone; execs cannot finish.  The VMM's own exit says why. */
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->agent.fd, NULL);
		close(m->agent.fd);
		m->agent.fd = -1;
		while (m->execs)
			exec_abort(m, m->execs, SBX_R_SESSION_LOST);
	}
}

/* --- frames from clients ----------------------------------------------- */

static void forward_to_guest(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	sbx_frame_raw(&m->aout, f->type, c->ex->n, f->payload, f->len);
	agent_flush(m);
}

static void client_resume(struct mon *m, struct client *c)
{
	if (!c->held.len || !c->ex)
		return;
	uint32_t n = (uint32_t)(c->held.len - SBX_FRAME_HDR);
	if (n > c->ex->credit || m->aout.len - m->aout_off >= AGENT_BUF_MAX)
		return;
	c->ex->credit -= n;
	sbx_buf_put(&m->aout, c->held.data, c->held.len);
	sbx_buf_reset(&c->held);
	agent_flush(m);
	c->paused = 0;
	ep_mod(m, &c->src, EPOLLIN | (c->want_out ? EPOLLOUT : 0), EPOLL_CTL_MOD);
	/* Frames that arrived behind the held one are parsed now. */
	if (drain_frames(&c->in, client_frame, m, c, &c->paused) < 0)
		c->dead = 1;
}

static void client_frame(struct mon *m, void *ctx, const struct sbx_frame *f)
{
	struct client *c = ctx;
	if (c->dead)
		return;
	/* A pool member serves only its claim (and sbx-kill); whoever spoke
	 * to the member has nothing to say to the session it became. */
	if (f->type == SBX_F_CLAIM)
		return claim_begin(m, c, f);
	if (c->pool_era && !m->s.pool) {
		/* ... and is hung up on, so an sbx-kill of the member returns. */
		client_error(m, c, f->stream, SBX_EXIT_NOENT, "the pool member was claimed in the meantime");
		c->dead = 1;
		return;
	}
	if ((m->s.pool || m->claim.stage == CLAIM_GUEST) && f->type != SBX_F_SHUTDOWN && f->type != SBX_F_PING)
		return client_error(m, c, f->stream, m->s.pool ? SBX_EXIT_NOENT : SBX_EXIT_TEMPFAIL,
				    m->s.pool ? "a warm-pool member is not a session in use" : "the session is still being created");
	switch (f->type) {
	case SBX_F_EXEC:
		client_exec(m, c, f);
		return;
	case SBX_F_PING:
		if (m->agent.fd < 0)
			return client_error(m, c, 0, SBX_EXIT_NOENT, "the guest agent is gone");
		c->ping_token = 0x80000000u | (++m->next_ping & 0x7fffffffu);
		sbx_frame_raw(&m->aout, SBX_F_PING, c->ping_token, f->payload, f->len);
		agent_flush(m);
		return;
	case SBX_F_SHUTDOWN:
		c->shutdown_ack = 1;
		m->stopping = 1;
		if (!m->ready)
			m->killed_in_boot = 1;
		return;
	case SBX_F_VMCTL:
		vmctl(m, c, f);
		return;
	default:
		break;
	}
	if (!c->ex && f->type == SBX_F_KILL) {
		/* sbx-kill --exec: end an exec some other client started. */
		struct exec *ex = f->stream ? exec_find(m, f->stream) : NULL;
		if (!ex || ex->done)
			return client_error(m, c, f->stream, SBX_EXIT_NOENT, "no such running exec");
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		agent_flush(m);
		struct sbx_buf b = { 0 };
		sbx_frame_raw(&b, SBX_F_KILL, ex->n, NULL, 0);
		client_send(m, c, &b);
		sbx_buf_free(&b);
		return;
	}
	if (!c->ex)
		return;
	switch (f->type) {
	case SBX_F_STDIN:
		if (f->len > SBX_DATA_CHUNK)
			return client_error(m, c, f->stream, SBX_EXIT_INVALID, "stdin chunk too large");
		if (f->len <= c->ex->credit && m->aout.len - m->aout_off < AGENT_BUF_MAX) {
			c->ex->credit -= f->len;
			forward_to_guest(m, c, f);
		} else {
			/* Hold it and stop reading this client until the guest
			 * has room: per-exec flow control. */
			sbx_buf_reset(&c->held);
			sbx_frame_raw(&c->held, SBX_F_STDIN, c->ex->n, f->payload, f->len);
			c->paused = 1;
			ep_mod(m, &c->src, c->want_out ? EPOLLOUT : 0, EPOLL_CTL_MOD);
		}
		return;
	case SBX_F_STDIN_EOF:
	case SBX_F_RESIZE:
	case SBX_F_SIGNAL:
	case SBX_F_KILL:
		forward_to_guest(m, c, f);
		return;
	default:
		return;
	}
}

static void client_readable(struct mon *m, struct client *c)
{
	int r = read_into(c->src.fd, &c->in);
	/* Stop parsing while a STDIN frame is held: the rest waits in order. */
	if (c->paused)
		return;
	if (drain_frames(&c->in, client_frame, m, c, &c->paused) < 0 || r <= 0)
		c->dead = 1;
}

static void client_drop(struct mon *m, struct client *c)
{
	for (struct client **pp = &m->clients; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	/* The exec goes on without its client: output still lands on disk and
	 * the guest enforces its timeout. */
	if (c->ex && c->ex->done)
		exec_free(m, c->ex);
	else if (c->ex)
		c->ex->client = NULL;
	if (m->claim.c == c)
		m->claim.c = NULL;
	if (m->snap.c == c)
		m->snap.c = NULL; /* a save goes on: its directory is sbx-gc's */
	epoll_ctl(m->ep, EPOLL_CTL_DEL, c->src.fd, NULL);
	close(c->src.fd);
	sbx_buf_free(&c->in);
	sbx_buf_free(&c->out);
	sbx_buf_free(&c->held);
	free(c);
	m->nclients--;
}

static void accept_clients(struct mon *m)
{
	for (;;) {
		int fd = accept4(m->listen.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		if (m->nclients >= MAX_CLIENTS) {
			close(fd);
			continue;
		}
		struct client *c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			return;
		}
		c->src.kind = SRC_CLIENT;
		c->src.fd = fd;
		c->pool_era = m->s.pool;
		c->next = m->clients;
		m->clients = c;
		m->nclients++;
		ep_mod(m, &c->src, EPOLLIN, EPOLL_CTL_ADD);
		struct sbx_buf b = { 0 };
		size_t off = sbx_frame_begin(&b, SBX_F_HELLO, 0);
		sbx_tlv_u32(&b, SBX_T_VERSION, SBX_PROTO_VERSION);
		sbx_tlv_str(&b, SBX_T_SESSION, m->s.id);
		sbx_frame_end(&b, off);
		client_send(m, c, &b);
		sbx_buf_free(&b);
	}
}

/* --- what the VMM writes: bounded files in RUN ------------------------- */

static int vmmout_open(int dfd, struct vmmout *o, const char *name, uint64_t cap, int *wr, struct sbx_err *err)
{
	int p[2];
	o->name = name;
	o->cap = cap;
	o->fd = openat(dfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (o->fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", name);
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe for %s", name);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	/* Room for what the VMM writes while the monitor is busy elsewhere
	 * (a restore's memory load): the VMM blocks when it is full, and so
	 * does the guest's serial port; nothing is lost. */
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	o->src.fd = p[0];
	*wr = p[1];
	return 0;
}

/* Keep the last cap/2 bytes, at the front, behind a line that counts what
 * went.  Copied forward in place: the monitor is the file's only writer. */
static void vmmout_compact(struct vmmout *o)
{
	uint8_t buf[SBX_DATA_CHUNK];
	uint64_t keep = o->size < o->cap / 2 ? o->size : o->cap / 2, from = o->size - keep;
	o->dropped += from;
	char line[128];
	int hl = snprintf(line, sizeof line, "[sbx: %llu earlier bytes of this log were dropped; it keeps at most %llu]\n",
			  (unsigned long long)o->dropped, (unsigned long long)o->cap);
	if (hl < 0 || (uint64_t)hl >= from) /* cannot happen: from >= cap/4 */
		hl = 0;
	for (uint64_t done = 0; done < keep;) {
		size_t n = keep - done < sizeof buf ? (size_t)(keep - done) : sizeof buf;
		ssize_t r = pread(o->fd, buf, n, (off_t)(from + done));
		if (r <= 0 || pwrite(o->fd, buf, (size_t)r, (off_t)((uint64_t)hl + done)) != r) {
			keep = done;
			break;
		}
		done += (uint64_t)r;
	}
	if (hl)
		pwrite(o->fd, line, (size_t)hl, 0);
	o->size = (uint64_t)hl + keep;
	if (ftruncate(o->fd, (off_t)o->size) < 0)
		o->size = (uint64_t)lseek(o->fd, 0, SEEK_END);
}

static void vmmout_put(struct vmmout *o, const uint8_t *p, size_t n)
{
	if (o->fd < 0 || !n)
		return;
	if (n > o->cap / 4) { /* only the end of a chunk this big can stay */
		o->dropped += n - o->cap / 4;
		p += n - o->cap / 4;
		n = o->cap / 4;
	}
	if (o->size + n > o->cap)
		vmmout_compact(o);
	if (pwrite(o->fd, p, n, (off_t)o->size) == (ssize_t)n)
		o->size += n;
}

/* Everything the pipe has now (all of it once the VMM is gone). */
static void vmmout_drain(struct mon *m, struct vmmout *o)
{
	uint8_t buf[SBX_DATA_CHUNK];
	for (int i = 0; o->src.fd >= 0 && i < 64; i++) {
		ssize_t r = read(o->src.fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			epoll_ctl(m->ep, EPOLL_CTL_DEL, o->src.fd, NULL);
			close(o->src.fd);
			o->src.fd = -1;
			return;
		}
		vmmout_put(o, buf, (size_t)r);
	}
}

static void vmmout_drain_all(struct mon *m)
{
	vmmout_drain(m, &m->console);
	vmmout_drain(m, &m->vmmlog);
	vmmout_drain(m, &m->proxylog);
}

static void vmmout_close(struct vmmout *o)
{
	if (o->src.fd >= 0)
		close(o->src.fd);
	if (o->fd >= 0)
		close(o->fd);
	o->src.fd = o->fd = -1;
}

/* --- set-up, the loop, the end ----------------------------------------- */

static int listen_unix(const char *name, struct sbx_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", name);
	unlink(name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot listen on %s", name);
	}
	return fd;
}

/* Did the guest kernel panic?  The panic line comes before its stack
 * trace, so look further back than the tail shown in messages. */
static int console_says_panic(int dfd)
{
	_cleanup_close_ int fd = openat(dfd, "console.log", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	static char buf[65536];
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
	ssize_t r = pread(fd, buf, sizeof buf - 1, start);
	if (r <= 0)
		return 0;
	buf[r] = 0;
	return memmem(buf, (size_t)r, "Kernel panic", 12) != NULL;
}

static void on_vmm_exit(struct mon *m)
{
	int status = 0;
	if (waitpid(m->vm.pid, &status, WNOHANG) <= 0)
		return;
	m->vm.pid = 0;
	m->vm_dead = 1;
	/* The VMM is gone: what it wrote last is in the pipes still. */
	uint64_t log_before = m->vmmlog.size + m->vmmlog.dropped;
	vmmout_drain_all(m);
	const struct sbx_vmm_ops *ops = m->vm.ops;
	/* The guest's pvpanic device, which only its kernel drives (once
	 * guest-init loaded the driver, so after the guest spoke); QEMU prints
	 * nothing when it exits for it, and an error exit does. */
	if (ops && ops->panic_status && WIFEXITED(status) && WEXITSTATUS(status) == ops->panic_status &&
	    m->guest_spoke && m->vmmlog.size + m->vmmlog.dropped == log_before)
		snprintf(m->vm_end, sizeof m->vm_end, "guest panic");
	/* Text on the console is the guest's to write: it is reported as
	 * what it is, never as a panic the host saw. */
	else if (console_says_panic(m->run_dfd))
		snprintf(m->vm_end, sizeof m->vm_end, "console reported a panic");
	else if (WIFSIGNALED(status))
		snprintf(m->vm_end, sizeof m->vm_end, "VMM killed by signal %d", WTERMSIG(status));
	else if (WEXITSTATUS(status) && !m->vm_shutdown)
		snprintf(m->vm_end, sizeof m->vm_end, "VMM exited with status %d", WEXITSTATUS(status));
	else
		snprintf(m->vm_end, sizeof m->vm_end, "guest powered off");
}

/* The VMM's own account (Cloud Hypervisor's event monitor).  A panic or a
 * reset ends the session here, since that VMM would boot the guest again
 * (it has no -no-reboot); a power-off is noted, and the exit follows. */
static void on_vm_event(struct mon *m)
{
	int ev = m->vm.ops && m->vm.ops->events ? m->vm.ops->events(&m->vm) : SBX_VM_EV_EOF;
	if (ev == SBX_VM_EV_EOF) {
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->vmev.fd, NULL);
		return;
	}
	if (ev == SBX_VM_EV_SHUTDOWN)
		m->vm_shutdown = 1;
	if ((ev != SBX_VM_EV_PANIC && ev != SBX_VM_EV_REBOOT) || !m->vm.pid)
		return;
	epoll_ctl(m->ep, EPOLL_CTL_DEL, m->vmev.fd, NULL);
	sbx_vm_kill(&m->vm); /* closes the pidfd: it leaves the epoll set */
	m->vmm.fd = -1;
	m->vm_dead = 1;
	vmmout_drain_all(m);
	snprintf(m->vm_end, sizeof m->vm_end, "%s",
		 ev == SBX_VM_EV_PANIC		    ? "guest panic"
		 : console_says_panic(m->run_dfd) ? "console reported a panic"
						  : "guest rebooted");
}

/* The proxy is the session's only way out: without it the guest's
 * connections are refused in its namespace.  The session runs on, without
 * network, and says so (net.lost in the record and the audit trail). */
static void on_proxy_exit(struct mon *m)
{
	int status = 0;
	if (m->proxy_pid <= 0 || waitpid(m->proxy_pid, &status, WNOHANG) <= 0)
		return;
	epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	close(m->proxy.fd);
	m->proxy.fd = -1;
	m->proxy_pid = 0;
	if (WIFSIGNALED(status))
		snprintf(m->s.net_lost, sizeof m->s.net_lost, "proxy killed by signal %d", WTERMSIG(status));
	else
		snprintf(m->s.net_lost, sizeof m->s.net_lost, "proxy exited with status %d", WEXITSTATUS(status));
	sbx_record_save(&m->st, &m->s, NULL);
	json_t *f = json_pack("{s:s, s:s}", "session", m->s.id, "reason", m->s.net_lost);
	mon_audit(m, "net.lost", f, NULL);
	json_decref(f);
}

static void stop_proxy(struct mon *m)
{
	if (m->proxy.fd >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	sbx_netns_stop_proxy(&m->proxy_pid, &m->proxy.fd);
}

/* A session with a NIC (its record has a MAC): its namespace, then its
 * proxy, before the VMM; the VMM gets the TAP and the namespace.  The
 * proxy's pid and start time go into the record at once, so sbx-kill and
 * sbx-gc can end a proxy whose monitor died. */
static int start_network(struct mon *m, struct sbx_netns *n, struct sbx_vm_config *c, struct sbx_err *err)
{
	if (sbx_netns_create(n, err) < 0)
		return -1;
	_cleanup_close_ int log = -1;
	if (vmmout_open(m->lib_dfd, &m->proxylog, "proxy.log", PROXY_LOG_CAP, &log, err) < 0)
		return -1;
	ep_mod(m, &m->proxylog.src, EPOLLIN, EPOLL_CTL_ADD);
	uint64_t start = 0;
	if (sbx_netns_spawn_proxy(m->s.id, n, log, &m->proxy_pid, &m->proxy.fd, &start, err) < 0)
		return -1;
	ep_mod(m, &m->proxy, EPOLLIN, EPOLL_CTL_ADD);
	m->s.proxy_pid = m->proxy_pid;
	m->s.proxy_start = start;
	if (sbx_record_save(&m->st, &m->s, err) < 0)
		return -1;
	c->netns_fd = n->netns_fd;
	c->tap_fd = n->tap_fd;
	c->tap_name = SBX_NET_TAP;
	c->mac = m->s.mac;
	return 0;
}

static int loop_once(struct mon *m, int timeout_ms)
{
	struct epoll_event ev[32];
	int n = epoll_wait(m->ep, ev, 32, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	for (int i = 0; i < n; i++) {
		struct src *s = ev[i].data.ptr;
		switch (s->kind) {
		case SRC_LISTEN:
			accept_clients(m);
			break;
		case SRC_AGENT_LISTEN: {
			int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0 && m->agent.fd < 0) {
				m->agent.fd = fd;
				ep_mod(m, &m->agent, EPOLLIN, EPOLL_CTL_ADD);
				/* one VMM, one connection: stop listening */
				epoll_ctl(m->ep, EPOLL_CTL_DEL, s->fd, NULL);
			} else if (fd >= 0) {
				close(fd);
			}
			break;
		}
		case SRC_AGENT:
			if (ev[i].events & EPOLLOUT)
				agent_flush(m);
			if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				agent_readable(m);
			break;
		case SRC_CLIENT: {
			struct client *c = (struct client *)s;
			if (ev[i].events & EPOLLOUT) {
				client_catch_up(m, c);
				client_flush(m, c);
			}
			if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				client_readable(m, c);
			break;
		}
		case SRC_VMM:
			on_vmm_exit(m);
			break;
		case SRC_PROXY:
			on_proxy_exit(m);
			break;
		case SRC_VMEV:
			on_vm_event(m);
			break;
		case SRC_VMMOUT:
			vmmout_drain(m, s == &m->console.src ? &m->console
					: s == &m->vmmlog.src ? &m->vmmlog
								: &m->proxylog);
			break;
		case SRC_SIGNAL: {
			struct signalfd_siginfo si;
			while (read(s->fd, &si, sizeof si) == sizeof si)
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP) {
					m->stopping = 1;
					if (!m->ready)
						m->killed_in_boot = 1; /* sbx-kill before we listened */
				}
			if (m->vm.pid)
				on_vmm_exit(m);
			break;
		}
		case SRC_READY:
			/* sbx-create is gone (interrupted, killed): nobody will
			 * learn this session's ID, so do not finish booting it. */
			if (!m->ready)
				m->stopping = 1;
			epoll_ctl(m->ep, EPOLL_CTL_DEL, s->fd, NULL);
			break;
		case SRC_TIMER: {
			uint64_t x;
			if (read(s->fd, &x, sizeof x) == sizeof x && m->ready)
				m->expired = 1; /* the session TTL */
			break;
		}
		}
	}
	for (struct client *c = m->clients, *next; c; c = next) {
		next = c->next;
		if (c->dead && !c->shutdown_ack)
			client_drop(m, c);
	}
	/* Stdin held back by AGENT_BUF_MAX goes once there is room again
	 * (client_resume does nothing while there is none, or no credit). */
	for (struct client *c = m->clients; c && m->aout.len - m->aout_off < AGENT_BUF_MAX; c = c->next)
		if (c->held.len && !c->dead)
			client_resume(m, c);
	return 0;
}

static void report(int fd, const struct sbx_err *err)
{
	if (fd < 0)
		return;
	json_t *o = err ? json_pack("{s:b, s:i, s:s}", "ok", 0, "code", err->code, "message", err->msg)
			: json_pack("{s:b}", "ok", 1);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s) {
		sbx_write_all(fd, s, strlen(s));
		sbx_write_all(fd, "\n", 1);
	}
	free(s);
	json_decref(o);
}

/* --workspace: take it for the session's life (5 when another session
 * got there first), made on first use; audited. */
static int attach_workspace(struct mon *m, struct sbx_err *err)
{
	const struct sbx_limits *l = &m->s.limits;
	uint64_t size = l->workspace_size ? l->workspace_size : 1ull << 30;
	uint64_t keep = l->workspace_retention_ms ? l->workspace_retention_ms : 7ull * 24 * 3600 * 1000;
	if (sbx_workspace_attach(&m->st, m->s.tenant, m->s.workspace, size, keep, m->s.id, &m->ws, err) < 0)
		return -1;
	const struct sbx_workspace_info *i = &m->ws.info;
	if (m->ws.created) {
		json_t *f = json_pack("{s:s, s:s, s:I, s:I}", "session", m->s.id, "workspace", i->name, "size",
				      (json_int_t)i->size, "retention_ms", (json_int_t)i->retention_ms);
		mon_audit(m, "workspace.create", f, NULL);
		json_decref(f);
	}
	json_t *f = json_pack("{s:s, s:s, s:I}", "session", m->s.id, "workspace", i->name, "size", (json_int_t)i->size);
	if (f && m->ws.grown_from)
		json_object_set_new(f, "grown_from", json_integer((json_int_t)m->ws.grown_from));
	mon_audit(m, "workspace.attach", f, NULL);
	json_decref(f);
	return 0;
}

/* Give the workspace back: last_used recorded, lock dropped, so whoever
 * learns that this session ended (sbx-kill's acknowledgement, sbx-create's
 * failure) can attach it at once.  A workspace made for a session that
 * never came up goes with it. */
static void drop_workspace(struct mon *m, int failed)
{
	if (m->ws.lock_fd < 0)
		return;
	int removed = failed && m->ws.created;
	sbx_workspace_release(&m->st, &m->ws, failed);
	if (removed) {
		json_t *f = json_pack("{s:s, s:s, s:s}", "session", m->s.id, "workspace", m->ws.info.name, "reason",
				      "the session that created it did not come up");
		mon_audit(m, "workspace.remove", f, NULL);
		json_decref(f);
	}
}

/* A workspace outlives the VM: before the VM goes, the guest kills its
 * execs, syncs and powers off (SHUTDOWN), so what they wrote reaches the
 * image.  Bounded: a guest that does not comply is killed like any other
 * (the journal keeps the file system consistent; recent writes may be
 * lost).  The execs end as killed first, as they would without it. */
static void guest_poweroff(struct mon *m)
{
	while (m->execs)
		exec_abort(m, m->execs, SBX_R_KILLED);
	if (m->vm_dead || !m->vm.pid || m->agent.fd < 0)
		return;
	/* A paused guest cannot sync: it runs again only to power off. */
	struct sbx_err ignored = { 0 };
	if (m->snap.paused && sbx_vm_resume(&m->vm, &ignored) == 0)
		m->snap.paused = 0;
	sbx_frame_raw(&m->aout, SBX_F_SHUTDOWN, 0, NULL, 0);
	agent_flush(m);
	uint64_t deadline = sbx_mono_ns() + 10ull * 1000000000u;
	for (uint64_t now; !m->vm_dead && (now = sbx_mono_ns()) < deadline;)
		if (loop_once(m, (int)((deadline - now) / 1000000u) + 1) < 0)
			break;
}

/* One try at the agent channel of a VMM the monitor connects to:
 * -1 with err on a failure that is final, 0 otherwise (connected, or the
 * guest is not listening yet). */
static int agent_connect(struct mon *m, const struct sbx_vm_config *c, struct sbx_err *err)
{
	struct sbx_err e = { 0 };
	int fd = m->vm.ops->agent_connect(&m->vm, c, &e);
	if (fd < 0 && e.code) {
		*err = e;
		return -1;
	}
	if (fd >= 0) {
		m->agent.fd = fd;
		ep_mod(m, &m->agent, EPOLLIN, EPOLL_CTL_ADD);
	}
	return 0;
}

static int boot(struct mon *m, struct sbx_err *err)
{
	struct sbx_template t;
	if (sbx_template_find(&m->st, m->s.tmpl_name[0] ? m->s.tmpl_name : "default", &t, err) < 0)
		return -1;
	if (strcmp(t.version, m->s.tmpl_version)) {
		char spec[200];
		snprintf(spec, sizeof spec, "%s@%s", m->s.tmpl_name, m->s.tmpl_version);
		if (sbx_template_find(&m->st, spec, &t, err) < 0)
			return -1;
	}
	/* The session's writable disk is exactly its quota: ENOSPC in the
	 * guest when full, never more on the host. */
	char scratch[1200], vols[8][1200];
	snprintf(scratch, sizeof scratch, "%s/sessions/%s/scratch.img", m->st.lib, m->s.id);
	/* From a snapshot: its disk as it was saved. */
	if (m->s.snapshot_dir[0] ? snap_restore_disk(m, scratch, err) < 0
				 : sbx_disk_scratch(scratch, m->s.limits.disk_bytes ? m->s.limits.disk_bytes : 1ull << 30,
						    err) < 0)
		return -1;
	for (unsigned i = 0; i < m->s.nvols; i++) {
		snprintf(vols[i], sizeof vols[i], "%s/sessions/%s/vol%u.img", m->st.lib, m->s.id, i);
		if (sbx_disk_from_dir(vols[i], m->s.vols[i].host, err) < 0)
			return -1;
	}
	if (m->s.workspace[0] && attach_workspace(m, err) < 0)
		return -1;
	const struct sbx_vmm_ops *ops = sbx_vmm_lookup(m->s.vmm[0] ? m->s.vmm : "qemu");
	if (!ops)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record names an unknown VMM '%s'", m->s.vmm);
	/* The agent channel: the VMM connects to agent.sock (QEMU), or we
	 * connect to the VM's vsock socket once the guest listens. */
	int accept_agent = ops->agent_mode == SBX_AGENT_ACCEPT;
	if ((m->listen.fd = listen_unix("monitor.sock", err)) < 0 ||
	    (accept_agent && (m->agent_listen.fd = listen_unix("agent.sock", err)) < 0))
		return -1;
	struct sbx_vm_config c = {
		.ops = ops, .kernel = t.kernel, .initrd = t.initrd, .rootfs = t.rootfs, .scratch = scratch,
		.agent_sock = accept_agent ? "agent.sock" : NULL, .vsock_sock = accept_agent ? NULL : "vsock/agent.sock",
		.qmp_sock = "qmp.sock",
		.hostname = m->s.id, .vcpus = m->s.vcpus, .memory_mib = m->s.memory_mib,
		.accel = strcmp(m->s.accel, "kvm") ? SBX_ACCEL_TCG : SBX_ACCEL_KVM,
		.tsc_khz = sbx_host_tsc_khz(), .sandbox = 1,
	};
	/* Where the guest's pip and npm go (pkgcache.h). */
	char pkg_params[160];
	sbx_pkgcache_guest_params(&m->s.limits.packages, pkg_params, sizeof pkg_params);
	c.guest_params = pkg_params;
	c.restore_dir = m->s.snapshot_dir[0] ? m->s.snapshot_dir : NULL;
	if (c.restore_dir) {
		m->vm.progress = snap_boot_progress;
		m->vm.progress_ctx = m;
	}
	/* The VMM's host cgroup: a hard CPU cap (so a spinning guest cannot
	 * starve other sessions), guest memory plus the VMM's own overhead,
	 * and a pids cap for its threads. */
	/* A restore loads the VM's memory before any guest code runs: the
	 * cap comes once it is loaded (snap_restored), so the load is not
	 * throttled (a 1-CPU cap made it 60 ms slower). */
	struct sbx_cg_limits cl = {
		.cpu_milli = m->s.snapshot_dir[0] ? 0
			     : m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000,
		.memory = ((uint64_t)m->s.memory_mib + 512) << 20,
		.pids = 512,
	};
	if (sbx_cgroup_create(m->s.id, &cl, c.cg_fds, &c.cg_nfds, err) < 0)
		return -1;
	for (unsigned i = 0; i < m->s.nvols; i++) {
		c.vol_path[i] = vols[i];
		c.vol_guest[i] = m->s.vols[i].guest;
	}
	c.nvols = m->s.nvols;
	if (m->ws.lock_fd >= 0 && c.nvols < 8) {
		c.vol_path[c.nvols] = m->ws.disk;
		c.vol_guest[c.nvols] = SBX_WORKSPACE_GUEST;
		c.vol_rw_mask |= 1u << c.nvols;
		c.nvols++;
	}
	/* The proxy's listeners and the TAP are theirs once they run: the
	 * monitor keeps none of the namespace. */
	struct sbx_netns net = { -1, -1, -1, -1, -1, -1 };
	if (m->s.mac[0] && start_network(m, &net, &c, err) < 0) {
		sbx_netns_close(&net);
		for (int i = 0; i < c.cg_nfds; i++)
			close(c.cg_fds[i]);
		return -1;
	}
	/* The console and the VMM's messages: pipes to bounded files. */
	_cleanup_close_ int con_w = -1, log_w = -1;
	if (vmmout_open(m->run_dfd, &m->console, "console.log", CONSOLE_CAP, &con_w, err) < 0 ||
	    vmmout_open(m->run_dfd, &m->vmmlog, "vmm.log", VMM_LOG_CAP, &log_w, err) < 0) {
		sbx_netns_close(&net);
		for (int i = 0; i < c.cg_nfds; i++)
			close(c.cg_fds[i]);
		return -1;
	}
	c.stdout_fd = con_w;
	c.stderr_fd = log_w;
	ep_mod(m, &m->console.src, EPOLLIN, EPOLL_CTL_ADD);
	ep_mod(m, &m->vmmlog.src, EPOLLIN, EPOLL_CTL_ADD);
	uint64_t t0 = sbx_mono_ns();
	int brc = sbx_vm_boot(&c, &m->vm, err);
	close(sbx_steal_fd(&con_w)); /* only the VMM writes them now */
	close(sbx_steal_fd(&log_w));
	sbx_netns_close(&net);
	for (int i = 0; i < c.cg_nfds; i++)
		close(c.cg_fds[i]);
	m->vm.progress = NULL;
	if (brc < 0) {
		/* What the VMM said before it went is in the pipe still. */
		char tail[200];
		vmmout_drain_all(m);
		sbx_log_tail(m->run_dfd, "vmm.log", tail, sizeof tail);
		size_t l = strlen(err->msg);
		if (tail[0] && !strstr(err->msg, tail) && l < sizeof err->msg - 1)
			snprintf(err->msg + l, sizeof err->msg - l, "; vmm.log: %s", tail);
		return -1;
	}
	if (c.restore_dir && snap_restored(m, err) < 0)
		return -1;
	m->vmm.fd = m->vm.pidfd;
	ep_mod(m, &m->listen, EPOLLIN, EPOLL_CTL_ADD);
	if (accept_agent)
		ep_mod(m, &m->agent_listen, EPOLLIN, EPOLL_CTL_ADD);
	ep_mod(m, &m->vmm, EPOLLIN, EPOLL_CTL_ADD);
	if ((m->vmev.fd = m->vm.event_fd) > 0)
		ep_mod(m, &m->vmev, EPOLLIN, EPOLL_CTL_ADD);
	if (m->readyp.fd >= 0)
		ep_mod(m, &m->readyp, 0, EPOLL_CTL_ADD); /* EPOLLERR: the reader closed */
	unsigned timeout_s = sbx_boot_timeout_s();
	uint64_t deadline = t0 + (uint64_t)timeout_s * 1000000000u, next_connect = 0;
	while (!m->ready && !m->vm_dead && !m->stopping && !m->secrets_err[0] && !m->snap.err[0]) {
		uint64_t now = sbx_mono_ns(), until = deadline;
		if (now >= deadline)
			break;
		/* A restored guest says no HELLO: it is told who it is now. */
		if (m->snap.restoring && !m->snap.told && m->agent.fd >= 0) {
			if (snap_identity_queue(m, NULL) < 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send the guest its identity");
			m->snap.told = 1;
		}
		if (!accept_agent && m->agent.fd < 0 && now >= next_connect) {
			/* Until the guest listens, every ~15 ms. */
			if (agent_connect(m, &c, err) < 0)
				return -1;
			next_connect = now + 15000000u;
		}
		if (!accept_agent && m->agent.fd < 0 && next_connect < until)
			until = next_connect;
		loop_once(m, (int)((until - now) / 1000000u) + 1);
	}
	if (m->ready) {
		m->s.boot_ms = (sbx_mono_ns() - t0) / 1000000u;
		return 0;
	}
	char tail[400];
	vmmout_drain_all(m);
	sbx_log_tail(m->run_dfd, m->vm_dead ? "vmm.log" : "console.log", tail, sizeof tail);
	if (!tail[0])
		sbx_log_tail(m->run_dfd, "console.log", tail, sizeof tail);
	if (m->secrets_err[0])
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest did not take the secrets: %s", m->secrets_err);
	if (m->snap.err[0])
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the restored guest refused its new identity: %s", m->snap.err);
	if (m->secrets_sent && !m->vm_dead && !m->stopping)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest did not confirm the secrets within %u s", timeout_s);
	if (m->vm_dead)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VM ended during boot (%s)%s%s", m->vm_end,
				   tail[0] ? ": " : "", tail);
	if (m->stopping && m->killed_in_boot)
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "session %s was destroyed (sbx-kill) while it was being created",
				   m->s.id);
	if (m->stopping)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "interrupted during boot");
	if (m->snap.restoring)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the restored guest did not answer within %u s%s%s", timeout_s,
				   tail[0] ? "; console: " : "", tail);
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest agent did not answer within %u s%s%s", timeout_s,
			   tail[0] ? "; console: " : "", tail);
}

static void destroy_files(struct mon *m)
{
	stop_proxy(m);
	/* Under the global lock, so a create of the same ID never sees half a
	 * session.  No deadlock although we hold the session lock: whoever
	 * holds the global lock takes session locks without waiting. */
	int g = sbx_lock_global(&m->st, NULL);
	sbx_cgroup_remove(sbx_session_cgroup(&m->s));
	sbx_rm_rf_at(m->st.sessions_fd, m->s.id);
	sbx_rm_rf_at(m->st.rsessions_fd, m->s.id);
	if (g >= 0)
		close(g);
}

static int setup(struct mon *m, const struct sbx_monitor_args *a, struct sbx_err *err)
{
	/* First: sbx-create waits to hand them over.  Kept in memory only. */
	if (a->secrets_fd >= 0) {
		int rc = sbx_secrets_read_fd(a->secrets_fd, &m->sec, err);
		close(a->secrets_fd);
		if (rc < 0)
			return -1;
	}
	if (sbx_state_open(&m->st, err) < 0)
		return -1;
	if (sbx_record_load(&m->st, a->id, &m->s, err) < 0)
		return -1;
	m->lib_dfd = openat(m->st.sessions_fd, a->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	m->run_dfd = openat(m->st.rsessions_fd, a->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (m->lib_dfd < 0 || m->run_dfd < 0 || fchdir(m->run_dfd) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the session directories");
	if (mkdirat(m->lib_dfd, "execs", 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create the exec directory");
	m->execs_dfd = openat(m->lib_dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m->execs_dfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the exec directory");
	m->ep = epoll_create1(EPOLL_CLOEXEC);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	m->sig.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (m->ep < 0 || m->sig.fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set up the event loop");
	ep_mod(m, &m->sig, EPOLLIN, EPOLL_CTL_ADD);
	m->s.monitor_pid = getpid();
	m->s.monitor_start = sbx_proc_start_time(getpid());
	/* Known from the start, so sbx-kill can end a monitor stuck in boot. */
	return sbx_record_save(&m->st, &m->s, err);
}

/* The TTL counts from creation, on the wall clock, so it also holds across
 * a suspended host. */
static int arm_ttl(struct mon *m)
{
	m->timer.fd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK);
	if (m->timer.fd < 0)
		return -1;
	uint64_t at = m->s.created_ns + m->s.limits.ttl_ms * 1000000u;
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at / 1000000000u),
						.tv_nsec = (long)(at % 1000000000u) } };
	if (timerfd_settime(m->timer.fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
		return -1;
	ep_mod(m, &m->timer, EPOLLIN, EPOLL_CTL_ADD);
	return 0;
}

/* The VM is gone and the session ends without sbx-kill (TTL, crash,
 * power-off): record it, keep the record and output for the user, release
 * the host resources.  The audit fields are consumed. */
static void end_session(struct mon *m, const char *state, const char *why, const char *event, json_t *fields)
{
	stop_proxy(m); /* its last lines in net.log before the record says "ended" */
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	m->s.ended_ns = sbx_now_ns();
	mon_audit(m, event, fields, NULL);
	json_decref(fields);
	sbx_cgroup_usage(sbx_session_cgroup(&m->s), &m->s.cpu_ns, &m->s.mem_peak);
	sbx_record_save(&m->st, &m->s, NULL);
	sbx_cgroup_remove(sbx_session_cgroup(&m->s));
	unlinkat(m->run_dfd, "monitor.sock", 0);
	unlinkat(m->run_dfd, "agent.sock", 0);
	unlinkat(m->run_dfd, "qmp.sock", 0);
}

/* Tell every sbx-kill waiting on us that the session is gone. */
static void ack_shutdowns(struct mon *m)
{
	for (struct client *c = m->clients; c; c = c->next)
		if (c->shutdown_ack) {
			uint8_t h[SBX_FRAME_HDR];
			sbx_frame_hdr_put(h, SBX_F_SHUTDOWN, 0, 0);
			send(c->src.fd, h, sizeof h, MSG_NOSIGNAL);
		}
}

/* Release everything: a clean exit lets the sanitizers see real leaks. */
static void mon_free(struct mon *m)
{
	stop_proxy(m);
	while (m->clients)
		client_drop(m, m->clients);
	while (m->execs)
		exec_free(m, m->execs);
	vmmout_close(&m->console);
	vmmout_close(&m->vmmlog);
	vmmout_close(&m->proxylog);
	sbx_buf_free(&m->ain);
	if (m->aout.data)
		explicit_bzero(m->aout.data, m->aout.cap);
	sbx_buf_free(&m->aout);
	sbx_secrets_free(&m->sec);
	int fds[] = { m->listen.fd, m->agent_listen.fd, m->agent.fd, m->sig.fd, m->timer.fd, m->ep,
		      m->lib_dfd, m->run_dfd, m->execs_dfd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
		if (fds[i] > 0)
			close(fds[i]);
	if (m->vm.pidfd >= 0)
		close(m->vm.pidfd);
	m->vm.pidfd = -1;
	if (m->vm.ops)
		sbx_vm_kill(&m->vm); /* what the backend still holds (the VMM is gone) */
	sbx_state_close(&m->st);
}

/* --- warm pool (pool.h): the member's side of a claim ------------------ */

/* Ready and pooled: stop the vCPUs, so a member waiting costs no CPU.  A
 * backend that cannot pause leaves it running. */
static void pool_park(struct mon *m)
{
	struct sbx_err e = { 0 };
	if (sbx_vm_pause(&m->vm, &e) == 0)
		m->pool_paused = 1;
}

/* A file of the claim, written aside in the member's directory and renamed
 * into place at the commit.  Not synced: it is rewritten (synced) once the
 * claim completes, and a host that crashes before then has lost the
 * session anyway; the commit runs under the global lock, and is short. */
static int claim_write_aside(struct mon *m, const char *name, const char *txt)
{
	_cleanup_close_ int fd = openat(m->lib_dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	return fd < 0 || !txt ? -1 : sbx_write_all(fd, txt, strlen(txt));
}

static int claim_wait_ms(const struct mon *m)
{
	if (m->claim.stage != CLAIM_GUEST)
		return -1;
	uint64_t now = sbx_mono_ns();
	return now >= m->claim.deadline ? 0 : (int)((m->claim.deadline - now) / 1000000u) + 1;
}

static void claim_fail(struct mon *m, int code, const char *fmt, ...)
{
	if (m->claim.stage != CLAIM_GUEST)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->claim.err, sizeof m->claim.err, fmt, ap);
	va_end(ap);
	m->claim.code = code;
	m->claim.stage = CLAIM_FAILED;
	m->stopping = 1; /* destroyed, then sbx-create boots the session cold */
}

/* A claim that did not complete: the session is gone by now (destroyed
 * under its new ID); say so in the trail and to sbx-create. */
static void claim_abandoned(struct mon *m)
{
	if (m->claim.stage == CLAIM_GUEST) { /* stopped by sbx-kill or a signal */
		snprintf(m->claim.err, sizeof m->claim.err, "session %s was destroyed while it was being created", m->s.id);
		m->claim.code = SBX_EXIT_CONFLICT;
	}
	/* Half renamed (the runtime directory's rename failed and could not
	 * be undone): the member's old name goes too. */
	sbx_rm_rf_at(m->st.rsessions_fd, m->claim.from);
	json_t *f = json_pack("{s:s, s:b, s:i, s:s, s:b, s:s}", "session", m->s.id, "ok", 0, "code", m->claim.code,
			      "error", m->claim.err, "from_pool", 1, "member", m->claim.from);
	mon_audit(m, "session.create", f, NULL);
	json_decref(f);
	if (m->claim.c) {
		client_error(m, m->claim.c, 0, m->claim.code, m->claim.err);
		m->claim.c = NULL;
	}
}

static void claim_check_deadline(struct mon *m)
{
	if (m->claim.stage == CLAIM_GUEST && sbx_mono_ns() >= m->claim.deadline)
		claim_fail(m, SBX_EXIT_UNAVAIL, "the guest did not answer within %u ms of the claim", SBX_CLAIM_TIMEOUT_MS);
}

/* Everything the guest was sent has been acted on (its PONG follows the
 * answers to the identity and the secrets): the session is ready. */
static void claim_guest_answered(struct mon *m)
{
	struct sbx_err err = { 0 };
	if (m->snap.identity) /* answered in order: IDENTITY before the PONG */
		return claim_fail(m, SBX_EXIT_UNAVAIL, "the guest did not take its new identity");
	if (m->sec.n && !m->claim.secrets_ok)
		return claim_fail(m, SBX_EXIT_INTERNAL, "the guest did not take the secrets");
	snprintf(m->s.state, sizeof m->s.state, "running");
	m->s.ready_ns = sbx_now_ns();
	m->s.claim_ms = (sbx_mono_ns() - m->claim.t0) / 1000000u;
	m->output_cap = m->s.limits.output_cap;
	m->output_session_cap = m->s.limits.output_session_cap;
	if (m->s.limits.ttl_ms && arm_ttl(m) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot arm the session TTL");
	if (sbx_record_save(&m->st, &m->s, &err) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "%s", err.msg);
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", m->s.tmpl_name, m->s.tmpl_version);
	json_t *cf = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:s, s:I}", "session", m->s.id,
			       "template", tmpl, "vcpus", (int)m->s.vcpus, "memory_mib", (int)m->s.memory_mib, "accel",
			       m->s.accel, "vmm", m->s.vmm, "boot_ms", (json_int_t)m->s.boot_ms, "ttl_s",
			       (json_int_t)(m->s.limits.ttl_ms / 1000), "disk_bytes", (json_int_t)m->s.limits.disk_bytes,
			       "volumes", (json_int_t)0, "from_pool", 1, "member", m->claim.from, "claim_ms",
			       (json_int_t)m->s.claim_ms);
	if (cf && m->sec.n) {
		json_t *names = json_array(); /* names only, never values */
		for (unsigned i = 0; i < m->sec.n; i++)
			json_array_append_new(names, json_string(m->sec.s[i].name));
		json_object_set_new(cf, "secrets", names);
	}
	/* Fail closed, as for a cold boot: a session that cannot be audited is
	 * not handed out. */
	int rc = mon_audit(m, "session.create", cf, &err);
	json_decref(cf);
	if (rc < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot write the audit trail: %s", err.msg);
	m->claim.stage = CLAIM_DONE;
	if (m->claim.c) {
		struct sbx_buf b = { 0 };
		sbx_frame_raw(&b, SBX_F_CLAIMED, 0, NULL, 0);
		client_send(m, m->claim.c, &b);
		sbx_buf_free(&b);
		m->claim.c = NULL;
	}
}

/* After the commit: the host side first (the CPU cap of the new policy),
 * then the guest (running again, a new identity, the secrets), then a PING
 * whose PONG says it has taken all of it. */
static void claim_guest(struct mon *m, unsigned member_cpu)
{
	struct sbx_err e = { 0 };
	unsigned cpu = m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000;
	if (cpu != member_cpu && sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), cpu) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot set the CPU cap of the host cgroup: %s", strerror(errno));
	if (m->pool_paused) {
		if (sbx_vm_resume(&m->vm, &e) < 0)
			return claim_fail(m, SBX_EXIT_UNAVAIL, "cannot resume the VM: %s", e.msg);
		m->pool_paused = 0;
	}
	if (m->agent.fd < 0)
		return claim_fail(m, SBX_EXIT_UNAVAIL, "the guest agent is gone");
	/* Its own hostname (the session ID), the host's clock (the guest's
	 * stood still while paused) and fresh randomness. */
	if (snap_identity_queue(m, NULL) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot send the guest its identity");
	if (m->sec.n) {
		if (sbx_buf_reserve(&m->aout, m->sec.frame_len) < 0)
			return claim_fail(m, SBX_EXIT_INTERNAL, "out of memory");
		sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
		m->secrets_sent = 1;
	}
	m->claim.ping = 0x80000000u | (++m->next_ping & 0x7fffffffu);
	sbx_frame_raw(&m->aout, SBX_F_PING, m->claim.ping, "claim", 5);
	agent_flush(m);
}

/* CLAIM from sbx-create, which holds the global lock and has checked that
 * the new ID is free.  The commit is the directories' rename: a failure
 * before it leaves the member as it was; after it the session is finished
 * or destroyed, whether or not sbx-create is still there. */
static void claim_begin(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	uint64_t t0 = sbx_mono_ns();
	if (!m->s.pool || !m->ready || m->claim.stage || m->stopping || m->vm_dead)
		return client_error(m, c, 0, SBX_EXIT_TEMPFAIL, "not a pool member waiting to be claimed");
	char id[SBX_ID_MAX + 1] = "";
	_cleanup_free_ char *rec = NULL, *pol = NULL;
	uint32_t flags = 0;
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n;
	int r;
	sbx_tlv_init(&it, f->payload, f->len);
	while ((r = sbx_tlv_next(&it, &tag, &v, &n)) == 1) {
		if (tag == SBX_T_SESSION && sbx_tlv_as_str(v, n, id, sizeof id) == 0)
			continue;
		if (tag == SBX_T_RECORD && !rec && (rec = malloc((size_t)n + 1)) && sbx_tlv_as_str(v, n, rec, (size_t)n + 1) == 0)
			continue;
		if (tag == SBX_T_CLAIM_FLAGS && sbx_tlv_as_u32(v, n, &flags) == 0)
			continue;
		if (tag == SBX_T_POLICY && !pol && (pol = malloc((size_t)n + 1)) && sbx_tlv_as_str(v, n, pol, (size_t)n + 1) == 0)
			continue;
		r = -1;
		break;
	}
	struct sbx_session ns;
	if (r < 0 || !rec || !pol || sbx_id_check(id, "session", NULL) < 0 || sbx_pool_member_id(id) ||
	    sbx_record_parse(rec, id, &ns) < 0)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "malformed claim");
	if (!sbx_pool_member_fits(&m->s, &ns))
		return client_error(m, c, 0, SBX_EXIT_INVALID, "the session does not fit this pool member");
	/* Everything the session needs from sbx-create is here before the
	 * commit, so the commit never waits for it: the secrets, asked for and
	 * read straight into locked memory, bounded. */
	struct sbx_err e = { 0 };
	if (flags & SBX_CLAIM_SECRETS) {
		struct sbx_buf b = { 0 };
		size_t off = sbx_frame_begin(&b, SBX_F_CLAIM, 0);
		sbx_tlv_u32(&b, SBX_T_CLAIM_FLAGS, SBX_CLAIM_SECRETS);
		sbx_frame_end(&b, off);
		client_send(m, c, &b);
		sbx_buf_free(&b);
		if (sbx_secrets_read_fd(c->src.fd, &m->sec, &e) < 0) {
			sbx_secrets_free(&m->sec);
			c->dead = 1; /* out of step */
			return client_error(m, c, 0, SBX_EXIT_INTERNAL, e.msg);
		}
	}
	unsigned member_cpu = m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000;
	/* The request's record; what only this monitor knows, from its own.
	 * The host cgroups follow the ID where the kernel lets them (v1);
	 * where it does not (v2), the record keeps their name. */
	snprintf(m->claim.from, sizeof m->claim.from, "%s", m->s.id);
	const char *from = m->claim.from;
	char cg[SBX_ID_MAX + 1];
	snprintf(cg, sizeof cg, "%s", sbx_session_cgroup(&m->s));
	int cg_renamed = sbx_cgroup_rename(cg, id) == 0;
	snprintf(ns.cgroup, sizeof ns.cgroup, "%s", cg_renamed ? "" : cg);
	snprintf(ns.state, sizeof ns.state, "creating");
	ns.pool = 0;
	ns.from_pool = 1;
	ns.monitor_pid = m->s.monitor_pid;
	ns.monitor_start = m->s.monitor_start;
	ns.vmm_pid = m->s.vmm_pid;
	ns.vmm_start = m->s.vmm_start;
	ns.boot_ms = m->s.boot_ms;
	ns.ready_ns = ns.ended_ns = ns.cpu_ns = ns.mem_peak = 0;
	snprintf(ns.boot_id, sizeof ns.boot_id, "%s", m->s.boot_id);
	snprintf(ns.kernel, sizeof ns.kernel, "%s", m->s.kernel);
	snprintf(ns.tmpl_dir, sizeof ns.tmpl_dir, "%s", m->s.tmpl_dir);
	/* The commit, in an order that never shows a record of one ID under
	 * the other's name: the new record and policy written aside, both
	 * directories renamed (RENAME_NOREPLACE: an ID that exists after all
	 * is refused, not overwritten), the two files moved into place. */
	_cleanup_free_ char *txt = sbx_record_text(&ns);
	int code = SBX_EXIT_INTERNAL;
	int rc = claim_write_aside(m, ".claim.json", txt);
	if (rc == 0)
		rc = claim_write_aside(m, ".claim-policy.json", pol);
	if (rc == 0 && renameat2(m->st.sessions_fd, from, m->st.sessions_fd, id, RENAME_NOREPLACE) < 0) {
		code = errno == EEXIST ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL;
		rc = -1;
	} else if (rc == 0 && renameat2(m->st.rsessions_fd, from, m->st.rsessions_fd, id, RENAME_NOREPLACE) < 0) {
		code = errno == EEXIST ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL;
		rc = -1;
		if (renameat2(m->st.sessions_fd, id, m->st.sessions_fd, from, RENAME_NOREPLACE) < 0) {
			m->s = ns; /* half renamed: only destroying is left */
			m->claim.stage = CLAIM_GUEST;
			return claim_fail(m, SBX_EXIT_INTERNAL, "cannot rename the runtime directory");
		}
	}
	if (rc < 0) {
		/* Not committed: the member is as it was, holding no secret. */
		sbx_secrets_free(&m->sec);
		unlinkat(m->lib_dfd, ".claim.json", 0);
		unlinkat(m->lib_dfd, ".claim-policy.json", 0);
		if (cg_renamed)
			sbx_cgroup_rename(id, cg);
		return client_error(m, c, 0, code, "cannot take the session's ID");
	}
	int unmoved = renameat(m->lib_dfd, ".claim.json", m->lib_dfd, "session.json") == 0 ? 0 : errno;
	if (!unmoved && renameat(m->lib_dfd, ".claim-policy.json", m->lib_dfd, "policy.json") < 0)
		unmoved = errno;
	m->s = ns;
	m->claim.stage = CLAIM_GUEST;
	m->claim.t0 = t0;
	m->claim.deadline = t0 + (uint64_t)SBX_CLAIM_TIMEOUT_MS * 1000000u;
	if (unmoved)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot write the session record: %s", strerror(unmoved));
	m->claim.c = c;
	struct sbx_buf b = { 0 };
	sbx_frame_raw(&b, SBX_F_CLAIM, 0, NULL, 0);
	client_send(m, c, &b);
	sbx_buf_free(&b);
	claim_guest(m, member_cpu);
}

/* --- snapshots: pause, resume, save, a fresh identity (snapshot.h) -------- */

#define SNAP_QUIESCE_NS (30ull * 1000000000u)
#define SNAP_RINSE_FRAMES 5 /* of SBX_FRAME_MAX bytes: see snap_save_begin */

static void snap_reply(struct mon *m, struct client *c, unsigned op)
{
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_VMCTL, 0);
	sbx_tlv_u32(&b, SBX_T_OP, op);
	sbx_tlv_str(&b, SBX_T_STATE, m->snap.paused ? "paused" : "running");
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

/* The record's state follows the VM's (sbx-ps shows it); a change that
 * cannot be audited is undone. */
static int snap_set_paused(struct mon *m, int paused, struct sbx_err *err)
{
	if (m->snap.paused == paused)
		return 0;
	if ((paused ? sbx_vm_pause(&m->vm, err) : sbx_vm_resume(&m->vm, err)) < 0)
		return -1;
	json_t *f = json_pack("{s:s}", "session", m->s.id);
	int rc = mon_audit(m, paused ? "session.pause" : "session.resume", f, err);
	json_decref(f);
	if (rc < 0) {
		struct sbx_err ignored = { 0 };
		if (paused)
			sbx_vm_resume(&m->vm, &ignored);
		else
			sbx_vm_pause(&m->vm, &ignored);
		sbx_err_wrap(err, "cannot write the audit trail");
		err->code = SBX_EXIT_INTERNAL;
		return -1;
	}
	if (paused && !m->snap.paused) {
		m->paused_since = sbx_mono_ns();
	} else if (!paused && m->snap.paused && m->paused_since) {
		/* The guest's clock stood still: so do the timeouts. */
		uint64_t d = sbx_mono_ns() - m->paused_since;
		for (struct exec *ex = m->execs; ex; ex = ex->next)
			if (ex->deadline)
				ex->deadline += d;
		m->paused_since = 0;
	}
	m->snap.paused = paused;
	snprintf(m->s.state, sizeof m->s.state, "%s", paused ? "paused" : "running");
	sbx_record_save(&m->st, &m->s, NULL);
	return 0;
}

/* A fresh identity for the guest: the hostname (default the session ID),
 * the host's wall clock, and randomness to mix in and reseed from.  For a
 * restored VM, VMCTL IDENTITY and a warm-pool claim.  Queued and flushed;
 * the guest answers with IDENTITY (snap_identity_reply), or an ERROR on
 * stream 0 (snap_guest_error). */
static int snap_identity_queue(struct mon *m, const char *hostname)
{
	uint8_t seed[64];
	if (getrandom(seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		return -1;
	size_t off = sbx_frame_begin(&m->aout, SBX_F_IDENTITY, 0);
	sbx_tlv_str(&m->aout, SBX_T_HOSTNAME, hostname && *hostname ? hostname : m->s.id);
	sbx_tlv_put(&m->aout, SBX_T_SEED, seed, sizeof seed);
	sbx_tlv_u64(&m->aout, SBX_T_TIME_NS, sbx_now_ns());
	sbx_frame_end(&m->aout, off);
	explicit_bzero(seed, sizeof seed);
	if (m->aout.oom)
		return -1;
	m->snap.identity = 1;
	agent_flush(m);
	return 0;
}

static void snap_identity_reply(struct mon *m, const struct sbx_frame *f)
{
	if (!m->snap.identity || f->stream)
		return;
	m->snap.identity = 0;
	note_kernel(m, f);
	if (m->snap.c && m->snap.op == SBX_VMCTL_IDENTITY) {
		snap_reply(m, m->snap.c, SBX_VMCTL_IDENTITY);
		m->snap.c = NULL;
		m->snap.op = 0;
	}
	/* A restore: like a boot's HELLO, ready now, or once the secrets
	 * (this session's own; the snapshot has none) are in place. */
	if (m->snap.restoring && !m->ready && !m->secrets_sent)
		secrets_then_ready(m);
}

/* A paused session runs while its guest prepares for a save (only the
 * agent can: no exec is running); when the save does not happen after
 * all, it is stopped again. */
static void snap_repause(struct mon *m)
{
	struct sbx_err ignored = { 0 };
	if (m->snap.paused)
		sbx_vm_pause(&m->vm, &ignored);
}

/* The secrets again after a save wiped them from the guest. */
static void snap_secrets_back(struct mon *m)
{
	if (!m->sec.n || m->agent.fd < 0 || sbx_buf_reserve(&m->aout, m->sec.frame_len) < 0)
		return;
	sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
	agent_flush(m);
}

/* An ERROR on stream 0 answering our QUIESCE or IDENTITY: 1 when it was. */
static int snap_guest_error(struct mon *m, const struct sbx_frame *f)
{
	if (f->stream || (!m->snap.saving && !m->snap.identity))
		return 0;
	char msg[200] = "refused";
	uint32_t code = 0;
	sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
	sbx_text_clean(msg); /* the guest's words, shown to people */
	char why[300];
	if (m->snap.saving) {
		m->snap.saving = 0;
		snap_repause(m);
		snap_secrets_back(m); /* some may be gone already */
		snprintf(why, sizeof why, "cannot save session %s: the guest refused (%s)", m->s.id, msg);
		code = code == SBX_EXIT_CONFLICT ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL;
	} else {
		m->snap.identity = 0;
		if (m->snap.restoring && !m->ready)
			snprintf(m->snap.err, sizeof m->snap.err, "%s", msg);
		snprintf(why, sizeof why, "the guest refused its new identity: %s", msg);
		code = SBX_EXIT_INTERNAL;
	}
	if (m->snap.c)
		client_error(m, m->snap.c, 0, (int)code, why);
	m->snap.c = NULL;
	m->snap.op = 0;
	return 1;
}

static void snap_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	struct mon *m = ctx;
	uint64_t now = sbx_mono_ns();
	if (!m->snap.c || (now - m->snap.progress_ns < 100000000u && done != total))
		return;
	m->snap.progress_ns = now;
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_PROGRESS, 0);
	sbx_tlv_str(&b, SBX_T_MSG, what);
	sbx_tlv_u64(&b, SBX_T_DONE, done);
	sbx_tlv_u64(&b, SBX_T_TOTAL, total);
	sbx_frame_end(&b, off);
	client_send(m, m->snap.c, &b);
	sbx_buf_free(&b);
}

/* The guest is quiet (no exec, no secret): stop the VM, write its state
 * and its disk (the VMM flushed it when it stopped), and let it go on as
 * it was, running or paused.  Synchronous: nothing else can happen to a stopped VM,
 * and new execs are refused meanwhile. */
static void snap_save_run(struct mon *m)
{
	struct client *c = m->snap.c;
	struct sbx_err err = { 0 };
	int was_paused = m->snap.paused; /* then resumed only for the quiesce */
	m->vm.progress = snap_progress;
	m->vm.progress_ctx = m;
	int rc = sbx_vm_pause(&m->vm, &err);
	if (rc == 0)
		rc = sbx_vm_save(&m->vm, m->snap.dir, &err);
	if (rc == 0) {
		char scratch[1200];
		snprintf(scratch, sizeof scratch, "%s/sessions/%s/scratch.img", m->st.lib, m->s.id);
		_cleanup_close_ int dfd = open(m->snap.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		rc = dfd < 0 ? sbx_err_set(&err, SBX_EXIT_INTERNAL, errno, "cannot open the snapshot directory")
			     : sbx_zdisk_pack(scratch, dfd, "scratch.zst", snap_progress, m, &err);
	}
	m->vm.progress = NULL;
	struct sbx_err rerr = { 0 };
	if (!was_paused && sbx_vm_resume(&m->vm, &rerr) < 0) {
		/* Still stopped: say so rather than pretend. */
		m->snap.paused = 1;
		snprintf(m->s.state, sizeof m->s.state, "paused");
		sbx_record_save(&m->st, &m->s, NULL);
		if (rc == 0) {
			err = rerr;
			rc = -1;
		}
	}
	snap_secrets_back(m);
	m->snap.saving = 0;
	m->snap.c = NULL;
	m->snap.op = 0;
	if (!c)
		return; /* sbx-snapshot went away: its directory is sbx-gc's */
	if (rc == 0)
		snap_reply(m, c, SBX_VMCTL_SAVE);
	else
		client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
}

/* Where a save writes: LIB/snapshots/TENANT/.tmp-*, given relative to
 * LIB, of this session's tenant, every component checked and opened
 * without following links. */
static int snap_dir_ok(struct mon *m, const char *rel)
{
	char buf[512], *part[4], *save = NULL;
	int n = 0;
	snprintf(buf, sizeof buf, "%s", rel);
	for (char *p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save))
		if (n < 4)
			part[n++] = p;
		else
			return -1;
	const char *tenant = m->s.tenant[0] ? m->s.tenant : "_";
	if (n != 3 || strcmp(part[0], "snapshots") || strcmp(part[1], tenant) || strncmp(part[2], ".tmp-", 5) ||
	    strstr(part[2], "..") || strspn(part[2], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-") !=
					     strlen(part[2]))
		return -1;
	int fd = m->st.lib_fd;
	for (int i = 0; i < 3; i++) {
		int next = openat(fd, part[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (fd != m->st.lib_fd)
			close(fd);
		if (next < 0)
			return -1;
		fd = next;
	}
	close(fd);
	snprintf(m->snap.dir, sizeof m->snap.dir, "%s/%s", m->st.lib, rel);
	return 0;
}

static void snap_save_begin(struct mon *m, struct client *c, const char *rel)
{
	if (m->s.nvols || m->s.workspace[0] || m->s.mac[0])
		return client_error(m, c, 0, SBX_EXIT_CONFLICT,
				    "a session with volumes, a workspace or a network device cannot be saved: those are "
				    "not part of a snapshot");
	if (m->agent.fd < 0)
		return client_error(m, c, 0, SBX_EXIT_INTERNAL, "the guest agent is gone");
	unsigned running = 0;
	char first[16] = "";
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done && running++ == 0)
			snprintf(first, sizeof first, "%s", ex->id);
	if (running) {
		char msg[200];
		snprintf(msg, sizeof msg,
			 "%u exec%s still running (%s%s): wait for them or end them (sbx-kill --exec), then save", running,
			 running > 1 ? "s are" : " is", first, running > 1 ? ", ..." : "");
		return client_error(m, c, 0, SBX_EXIT_CONFLICT, msg);
	}
	if (snap_dir_ok(m, rel) < 0)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "not a snapshot directory of this session's tenant");
	struct sbx_err err = { 0 };
	if (m->snap.paused && sbx_vm_resume(&m->vm, &err) < 0)
		return client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
	/* The guest first: it refuses while anything runs there, and wipes
	 * its secrets.  Its answer (snap_save_run) is the last thing it says
	 * before the VM stops, so the channel is between two frames.
	 *
	 * Before it, with secrets, zeros: the guest kernel keeps what came in
	 * over the port in a ring of page buffers (1024 of them: virtio-mmio
	 * offers the largest ring), so the secrets frame would stay in one of
	 * them, in the image.  5 MiB passing through the ring overwrites every
	 * buffer; they go as PONG frames, which the guest reads and ignores. */
	m->snap.saving = 1;
	m->snap.deadline = sbx_mono_ns() + SNAP_QUIESCE_NS;
	m->snap.c = c;
	m->snap.op = SBX_VMCTL_SAVE;
	for (int i = 0; m->sec.n && i < SNAP_RINSE_FRAMES; i++) {
		size_t off = sbx_frame_begin(&m->aout, SBX_F_PONG, 0);
		if (sbx_buf_reserve(&m->aout, SBX_FRAME_MAX) == 0) {
			memset(m->aout.data + m->aout.len, 0, SBX_FRAME_MAX);
			m->aout.len += SBX_FRAME_MAX;
		}
		sbx_frame_end(&m->aout, off);
	}
	sbx_frame_raw(&m->aout, SBX_F_QUIESCE, 0, NULL, 0);
	agent_flush(m);
}

/* A guest that never answered a QUIESCE does not keep the session busy. */
static void snap_check_deadline(struct mon *m)
{
	if (!m->snap.saving || sbx_mono_ns() < m->snap.deadline)
		return;
	m->snap.saving = 0;
	snap_repause(m);
	snap_secrets_back(m);
	if (m->snap.c)
		client_error(m, m->snap.c, 0, SBX_EXIT_UNAVAIL, "the guest did not get ready for the save in time");
	m->snap.c = NULL;
	m->snap.op = 0;
}

/* VMCTL from a client (sbx-snapshot, sbx-exec --resume). */
static void vmctl(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n, op = 0;
	char path[400] = "", host[SBX_ID_MAX + 1] = "";
	struct sbx_err err = { 0 };
	sbx_tlv_init(&it, f->payload, f->len);
	int rc;
	while ((rc = sbx_tlv_next(&it, &tag, &v, &n)) == 1) {
		if ((tag == SBX_T_OP && sbx_tlv_as_u32(v, n, &op) == 0) ||
		    (tag == SBX_T_PATH && sbx_tlv_as_str(v, n, path, sizeof path) == 0) ||
		    (tag == SBX_T_HOSTNAME && sbx_tlv_as_str(v, n, host, sizeof host) == 0 &&
		     (!host[0] || sbx_id_check(host, "hostname", NULL) == 0)))
			continue;
		rc = -1;
		break;
	}
	if (rc < 0 || !op || op > SBX_VMCTL_MAX)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "malformed request");
	snap_check_deadline(m);
	if (!m->ready || m->stopping || m->vm_dead)
		return client_error(m, c, 0, SBX_EXIT_NOENT, "the session is not running");
	if (m->snap.c || m->snap.saving || m->snap.identity)
		return client_error(m, c, 0, SBX_EXIT_TEMPFAIL, "another snapshot operation is in progress; try again");
	switch (op) {
	case SBX_VMCTL_PAUSE:
	case SBX_VMCTL_RESUME:
		if (snap_set_paused(m, op == SBX_VMCTL_PAUSE, &err) < 0)
			return client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		return snap_reply(m, c, op);
	case SBX_VMCTL_SAVE:
		return snap_save_begin(m, c, path);
	case SBX_VMCTL_IDENTITY:
		if (m->snap.paused)
			return client_error(m, c, 0, SBX_EXIT_CONFLICT, "the session is paused: resume it first");
		/* The guest drops all exec state with a new identity. */
		for (struct exec *ex = m->execs; ex; ex = ex->next)
			if (!ex->done)
				return client_error(m, c, 0, SBX_EXIT_CONFLICT, "execs are running: a new identity would end them");
		if (m->agent.fd < 0 || snap_identity_queue(m, host) < 0)
			return client_error(m, c, 0, SBX_EXIT_INTERNAL, "cannot send the guest its identity");
		m->snap.c = c;
		m->snap.op = op;
		return;
	}
}

/* A restore's progress, for sbx-create to draw: lines on the readiness
 * pipe before the verdict, at most 10 a second. */
static void snap_boot_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	struct mon *m = ctx;
	uint64_t now = sbx_mono_ns();
	if (m->readyp.fd < 0 || (now - m->snap.progress_ns < 100000000u && done != total))
		return;
	m->snap.progress_ns = now;
	char line[160];
	int n = snprintf(line, sizeof line, "{\"progress\":{\"what\":\"%s\",\"done\":%llu,\"total\":%llu}}\n", what,
			 (unsigned long long)done, (unsigned long long)total);
	if (n > 0 && (size_t)n < sizeof line)
		sbx_write_all(m->readyp.fd, line, (size_t)n);
}

/* A restored VM: the VMM loaded it paused; run it.  It is ready once the
 * guest has taken its new identity (queued when the agent channel is up). */
static int snap_restored(struct mon *m, struct sbx_err *err)
{
	/* The CPU cap, held back while the VMM loaded the memory (boot). */
	unsigned cpu = m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000;
	if (sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), cpu) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the CPU cap of the host cgroup");
	if (sbx_vm_resume(&m->vm, err) < 0)
		return -1;
	m->snap.restoring = 1;
	return 0;
}

/* The session's disk as it was saved. */
static int snap_restore_disk(struct mon *m, const char *scratch, struct sbx_err *err)
{
	_cleanup_close_ int dfd = open(m->s.snapshot_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t size;
	if (dfd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, errno, "snapshot %s is gone", m->s.snapshot);
	if (sbx_zdisk_unpack(dfd, "scratch.zst", scratch, &size, err) < 0)
		return -1;
	if (size != m->s.limits.disk_bytes)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "snapshot %s: its disk is not the size its manifest says",
				   m->s.snapshot);
	return 0;
}

int sbx_monitor_main(const struct sbx_monitor_args *a)
{
	struct mon m = { 0 };
	struct sbx_err err = { 0 };
	int rc = 0;
	m.listen = (struct src){ SRC_LISTEN, -1 };
	m.agent_listen = (struct src){ SRC_AGENT_LISTEN, -1 };
	m.agent = (struct src){ SRC_AGENT, -1 };
	m.vmm = (struct src){ SRC_VMM, -1 };
	m.sig = (struct src){ SRC_SIGNAL, -1 };
	m.timer = (struct src){ SRC_TIMER, -1 };
	m.readyp = (struct src){ SRC_READY, a->ready_fd };
	m.proxy = (struct src){ SRC_PROXY, -1 };
	m.vmev = (struct src){ SRC_VMEV, -1 };
	m.console = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m.vmmlog = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m.proxylog = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m.vm.pidfd = -1;
	m.ws.lock_fd = m.ws.dir_fd = -1;

	/* Inherited without O_CLOEXEC so they survive our exec; the VMM must
	 * not hold the session lock or the readiness pipe. */
	fcntl(a->lock_fd, F_SETFD, FD_CLOEXEC);
	if (a->ready_fd >= 0)
		fcntl(a->ready_fd, F_SETFD, FD_CLOEXEC);
	if (a->secrets_fd >= 0)
		fcntl(a->secrets_fd, F_SETFD, FD_CLOEXEC);
	if (setup(&m, a, &err) < 0 || boot(&m, &err) < 0) {
		if (m.vm.pid)
			sbx_vm_kill(&m.vm);
		drop_workspace(&m, 1);
		if (m.st.lib_fd >= 0 && m.s.id[0]) {
			json_t *ff = json_pack("{s:s, s:b, s:i, s:s}", "session", m.s.id, "ok", 0, "code", err.code,
					       "error", err.msg);
			mon_audit(&m, "session.create", ff, NULL);
			json_decref(ff);
		}
		if (m.st.sessions_fd >= 0 && m.s.id[0])
			destroy_files(&m);
		report(a->ready_fd, &err);
		ack_shutdowns(&m);
		rc = err.code ? err.code : SBX_EXIT_INTERNAL;
		goto out;
	}
	/* A warm-pool member waits for a claim, paused (pool.h). */
	snprintf(m.s.state, sizeof m.s.state, m.s.pool ? "pooled" : "running");
	m.s.ready_ns = sbx_now_ns();
	/* The policy's cap as it is, 0 included (keep no output). */
	m.output_cap = m.s.limits.output_cap;
	m.output_session_cap = m.s.limits.output_session_cap;
	if (m.s.limits.ttl_ms && arm_ttl(&m) < 0) {
		sbx_err_set(&err, SBX_EXIT_INTERNAL, errno, "cannot arm the session TTL");
		sbx_vm_kill(&m.vm);
		drop_workspace(&m, 1);
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
	m.s.vmm_pid = m.vm.pid;
	m.s.vmm_start = m.vm.start_time;
	if (sbx_record_save(&m.st, &m.s, &err) < 0) {
		sbx_vm_kill(&m.vm);
		drop_workspace(&m, 1);
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
	if (m.s.pool) {
		/* No session.create for a member: it is nobody's session until
		 * a claim makes it one. */
		pool_park(&m);
		goto ready;
	}
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", m.s.tmpl_name, m.s.tmpl_version);
	json_t *cf = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:I}", "session", m.s.id, "template",
			       tmpl, "vcpus", (int)m.s.vcpus, "memory_mib", (int)m.s.memory_mib, "accel", m.s.accel,
			       "vmm", m.s.vmm, "boot_ms", (json_int_t)m.s.boot_ms, "ttl_s",
			       (json_int_t)(m.s.limits.ttl_ms / 1000), "disk_bytes", (json_int_t)m.s.limits.disk_bytes,
			       "volumes", (json_int_t)m.s.nvols);
	if (cf && m.s.snapshot[0])
		json_object_set_new(cf, "from_snapshot", json_string(m.s.snapshot));
	if (cf && m.sec.n) {
		json_t *names = json_array(); /* names only, never values */
		for (unsigned i = 0; i < m.sec.n; i++)
			json_array_append_new(names, json_string(m.sec.s[i].name));
		json_object_set_new(cf, "secrets", names);
	}
	int crc = mon_audit(&m, "session.create", cf, &err);
	json_decref(cf);
	if (crc < 0) {
		/* A session that cannot be audited is not handed out. */
		sbx_err_wrap(&err, "cannot write the audit trail");
		err.code = SBX_EXIT_INTERNAL;
		sbx_vm_kill(&m.vm);
		drop_workspace(&m, 1);
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
ready:
	report(a->ready_fd, NULL);
	if (a->ready_fd >= 0) {
		epoll_ctl(m.ep, EPOLL_CTL_DEL, a->ready_fd, NULL);
		close(a->ready_fd);
	}

	const char *hbe = getenv("SBX_AGENT_PING_MS");
	m.hb.interval = (hbe && atoi(hbe) > 0 ? (uint64_t)atoi(hbe) : AGENT_PING_MS) * 1000000u;
	while (!m.stopping && !m.vm_dead && !m.expired) {
		int w = claim_wait_ms(&m), x = exec_wait_ms(&m), h = heartbeat_wait_ms(&m);
		if (x >= 0 && (w < 0 || x < w))
			w = x;
		if (h >= 0 && (w < 0 || h < w))
			w = h;
		if (loop_once(&m, w) < 0)
			break;
		claim_check_deadline(&m);
		exec_deadlines(&m);
		heartbeat(&m);
	}

	if (m.expired && !m.stopping && !m.vm_dead) {
		/* TTL: the VM goes, the record and the output stay so the user
		 * sees what happened; sbx-kill (or sbx-gc) removes them. */
		if (m.ws.lock_fd >= 0)
			guest_poweroff(&m);
		sbx_vm_kill(&m.vm);
		drop_workspace(&m, 0);
		while (m.execs)
			exec_abort(&m, m.execs, SBX_R_KILLED);
		char why[64];
		snprintf(why, sizeof why, "ttl of %llu s expired", (unsigned long long)(m.s.limits.ttl_ms / 1000));
		json_t *ef = json_pack("{s:s, s:I}", "session", m.s.id, "ttl_s", (json_int_t)(m.s.limits.ttl_ms / 1000));
		end_session(&m, "expired", why, "session.expire", ef);
		goto out;
	}

	if (m.stopping) {
		if (m.ws.lock_fd >= 0)
			guest_poweroff(&m);
		sbx_vm_kill(&m.vm);
		drop_workspace(&m, 0);
		while (m.execs)
			exec_abort(&m, m.execs, SBX_R_KILLED);
		uint64_t cpu = 0, peak = 0;
		sbx_cgroup_usage(sbx_session_cgroup(&m.s), &cpu, &peak);
		destroy_files(&m);
		if (m.claim.stage == CLAIM_FAILED) {
			claim_abandoned(&m); /* its session.create ok:false is the record */
			ack_shutdowns(&m);
			goto out;
		}
		if (m.claim.stage == CLAIM_GUEST)
			claim_abandoned(&m); /* sbx-kill came first: sbx-create exits 5 */
		int left = faccessat(m.st.sessions_fd, m.s.id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
			   faccessat(m.st.rsessions_fd, m.s.id, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
		json_t *df = json_pack("{s:s, s:s, s:f, s:f, s:s}", "session", m.s.id, "reason", "sbx-kill", "duration_s",
				       (double)(sbx_now_ns() - m.s.created_ns) / 1e9, "cpu_s", (double)cpu / 1e9, "cleanup",
				       left ? "incomplete" : "complete");
		mon_audit(&m, "session.destroy", df, NULL);
		json_decref(df);
		ack_shutdowns(&m); /* after the record: sbx-kill returns on this */
		goto out;
	}
	if (m.claim.stage == CLAIM_GUEST) {
		/* Never half a claimed session: it goes, sbx-create boots cold. */
		claim_fail(&m, SBX_EXIT_UNAVAIL, "the VM ended during the claim (%s)", m.vm_end);
		destroy_files(&m);
		claim_abandoned(&m);
		goto out;
	}
	/* The VM ended on its own: keep the record and the output so the user
	 * can see what happened; sbx-kill (or sbx-gc) reclaims the rest. */
	while (m.execs)
		exec_abort(&m, m.execs, SBX_R_SESSION_LOST);
	drop_workspace(&m, 0);
	int crashed = strcmp(m.vm_end, "guest powered off") != 0;
	json_t *xf = json_pack("{s:s, s:s}", "session", m.s.id, "reason", m.vm_end);
	end_session(&m, crashed ? "crashed" : "stopped", m.vm_end, crashed ? "session.crash" : "session.stop", xf);
out:
	drop_workspace(&m, rc != 0);
	mon_free(&m);
	return rc;
}
