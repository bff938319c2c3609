#include "monitor.h"
#include "audit.h"
#include "cgroup.h"
#include "disk.h"
#include "proto.h"
#include "secrets.h"
#include "session.h"
#include "state.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
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

enum src_kind { SRC_LISTEN, SRC_AGENT_LISTEN, SRC_AGENT, SRC_CLIENT, SRC_VMM, SRC_SIGNAL, SRC_TIMER, SRC_READY };

struct src {
	enum src_kind kind;
	int fd;
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
	uint32_t credit; /* stdin bytes the guest will accept */
	uint32_t flags;
	int started;
	struct client *client;
	json_t *req; /* argv, cwd, ... for result.json */
	int done;             /* ended; kept until its lagging client caught up */
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
};

struct mon {
	struct sbx_state st;
	struct sbx_session s;
	int ep;
	int lib_dfd, run_dfd, execs_dfd;
	struct src listen, agent_listen, agent, vmm, sig, timer, readyp;
	struct sbx_vm vm;
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
	char vm_end[128];
	struct sbx_secrets sec; /* only to scrub stored output; see boot() */
	int secrets_sent;
	char secrets_err[256];  /* the guest refused them */
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
	json_t *o = json_pack("{s:o, s:o, s:s?, s:I, s:b, s:b, s:i}", "argv", argv, "env", env, "cwd", cwd,
			      "timeout_ms", (json_int_t)r->timeout_ms, "tty", !!(r->flags & SBX_EXEC_PTY), "stdin",
			      !!(r->flags & SBX_EXEC_STDIN), "uid", r->have_uid ? (int)r->uid : 1000);
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
		char msg[160];
		snprintf(msg, sizeof msg, "the exec timeout %s the policy's maximum of %llu ms (resources.exec_timeout.max)",
			 r.timeout_ms ? "exceeds" : "must be set within", (unsigned long long)lim->exec_timeout_max_ms);
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
	r.flags &= ~(uint32_t)SBX_EXEC_DETACH;
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
	if (keep && pwrite(out ? ex->out_fd : ex->err_fd, p, keep, (off_t)*size) == (ssize_t)keep)
		*size += keep;
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

static void client_resume(struct mon *m, struct client *c);
static void client_frame(struct mon *m, void *ctx, const struct sbx_frame *f);
static int drain_frames(struct sbx_buf *in, void (*fn)(struct mon *, void *, const struct sbx_frame *),
			struct mon *m, void *ctx, const int *stop);

static void agent_frame(struct mon *m, const struct sbx_frame *f)
{
	struct exec *ex = f->stream ? exec_find(m, f->stream) : NULL;
	switch (f->type) {
	case SBX_F_HELLO: {
		struct sbx_tlv_it it;
		uint16_t tag;
		const uint8_t *v;
		uint32_t n;
		sbx_tlv_init(&it, f->payload, f->len);
		while (sbx_tlv_next(&it, &tag, &v, &n) == 1)
			if (tag == SBX_T_KERNEL)
				sbx_tlv_as_str(v, n, m->s.kernel, sizeof m->s.kernel);
		if (m->ready || m->secrets_sent)
			break; /* a guest saying hello again (reconnect) gets nothing more */
		if (!m->sec.n) {
			m->ready = 1;
			break;
		}
		/* Secrets first, ready only once the guest has them in place:
		 * no exec can ever run before its secrets exist.  Written into
		 * reserved room so no stale copy is left behind a realloc. */
		if (sbx_buf_reserve(&m->aout, m->sec.frame_len) == 0)
			sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
		else
			snprintf(m->secrets_err, sizeof m->secrets_err, "out of memory");
		m->secrets_sent = 1;
		agent_flush(m);
		break;
	}
	case SBX_F_SECRETS:
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
		scrub_flush(m, ex);
		exec_result(m, ex, &e);
		if (ex->client && ex->client->lag) {
			/* The client still reads from the files: the EXIT waits
			 * behind the output it has not seen yet. */
			sbx_exit_encode(&ex->tail, ex->n, &e);
			ex->done = 1;
		} else {
			send_exit(m, ex, &e);
		}
		/* After the reply: the fsynced append is not the client's wait.
		 * It still lands before this monitor handles anything else. */
		audit_exec_end(m, ex, &e);
		if (!ex->done)
			exec_free(m, ex);
		break;
	}
	case SBX_F_ERROR: {
		if (!f->stream && m->secrets_sent && !m->ready) {
			char msg[200] = "refused";
			uint32_t code = 0;
			sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
			snprintf(m->secrets_err, sizeof m->secrets_err, "%s", msg);
			break;
		}
		if (!ex)
			break;
		char msg[256] = "the guest refused the command";
		uint32_t code = SBX_EXIT_INTERNAL;
		sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
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
	if (n > c->ex->credit)
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
		if (f->len <= c->ex->credit) {
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

/* The last lines of a log, for error messages that say what happened. */
static void log_tail(int dfd, const char *name, char *out, size_t n)
{
	out[0] = 0;
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[400];
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
	ssize_t r = pread(fd, buf, sizeof buf - 1, start);
	if (r <= 0)
		return;
	buf[r] = 0;
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r' || (unsigned char)*p < 0x20)
			*p = ' ';
	char *p = buf;
	while (*p == ' ')
		p++;
	snprintf(out, n, "%s", p);
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
	char tail[400];
	log_tail(m->run_dfd, "console.log", tail, sizeof tail);
	if (strstr(tail, "Kernel panic") || console_says_panic(m->run_dfd))
		snprintf(m->vm_end, sizeof m->vm_end, "guest panic");
	else if (WIFSIGNALED(status))
		snprintf(m->vm_end, sizeof m->vm_end, "VMM killed by signal %d", WTERMSIG(status));
	else if (WEXITSTATUS(status))
		snprintf(m->vm_end, sizeof m->vm_end, "VMM exited with status %d", WEXITSTATUS(status));
	else
		snprintf(m->vm_end, sizeof m->vm_end, "guest powered off");
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
	if (sbx_disk_scratch(scratch, m->s.limits.disk_bytes ? m->s.limits.disk_bytes : 1ull << 30, err) < 0)
		return -1;
	for (unsigned i = 0; i < m->s.nvols; i++) {
		snprintf(vols[i], sizeof vols[i], "%s/sessions/%s/vol%u.img", m->st.lib, m->s.id, i);
		if (sbx_disk_from_dir(vols[i], m->s.vols[i].host, err) < 0)
			return -1;
	}
	if ((m->listen.fd = listen_unix("monitor.sock", err)) < 0 ||
	    (m->agent_listen.fd = listen_unix("agent.sock", err)) < 0)
		return -1;
	const struct sbx_vmm_ops *ops = sbx_vmm_lookup(m->s.vmm[0] ? m->s.vmm : "qemu");
	if (!ops)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record names an unknown VMM '%s'", m->s.vmm);
	struct sbx_vm_config c = {
		.ops = ops, .kernel = t.kernel, .initrd = t.initrd, .rootfs = t.rootfs, .scratch = scratch, .agent_sock = "agent.sock",
		.qmp_sock = "qmp.sock", .console_path = "console.log", .log_path = "vmm.log",
		.hostname = m->s.id, .vcpus = m->s.vcpus, .memory_mib = m->s.memory_mib,
		.accel = strcmp(m->s.accel, "kvm") ? SBX_ACCEL_TCG : SBX_ACCEL_KVM,
		.tsc_khz = sbx_host_tsc_khz(), .sandbox = 1,
	};
	/* The VMM's host cgroup: a hard CPU cap (so a spinning guest cannot
	 * starve other sessions), guest memory plus the VMM's own overhead,
	 * and a pids cap for its threads. */
	struct sbx_cg_limits cl = {
		.cpu_milli = m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000,
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
	uint64_t t0 = sbx_mono_ns();
	int brc = sbx_vm_boot(&c, &m->vm, err);
	for (int i = 0; i < c.cg_nfds; i++)
		close(c.cg_fds[i]);
	if (brc < 0)
		return -1;
	m->vmm.fd = m->vm.pidfd;
	ep_mod(m, &m->listen, EPOLLIN, EPOLL_CTL_ADD);
	ep_mod(m, &m->agent_listen, EPOLLIN, EPOLL_CTL_ADD);
	ep_mod(m, &m->vmm, EPOLLIN, EPOLL_CTL_ADD);
	if (m->readyp.fd >= 0)
		ep_mod(m, &m->readyp, 0, EPOLL_CTL_ADD); /* EPOLLERR: the reader closed */
	unsigned timeout_s = sbx_boot_timeout_s();
	uint64_t deadline = t0 + (uint64_t)timeout_s * 1000000000u;
	while (!m->ready && !m->vm_dead && !m->stopping && !m->secrets_err[0]) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			break;
		loop_once(m, (int)((deadline - now) / 1000000u) + 1);
	}
	if (m->ready) {
		m->s.boot_ms = (sbx_mono_ns() - t0) / 1000000u;
		return 0;
	}
	char tail[400];
	log_tail(m->run_dfd, m->vm_dead ? "vmm.log" : "console.log", tail, sizeof tail);
	if (!tail[0])
		log_tail(m->run_dfd, "console.log", tail, sizeof tail);
	if (m->secrets_err[0])
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest did not take the secrets: %s", m->secrets_err);
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
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest agent did not answer within %u s%s%s", timeout_s,
			   tail[0] ? "; console: " : "", tail);
}

static void destroy_files(struct mon *m)
{
	/* Under the global lock, so a create of the same ID never sees half a
	 * session.  No deadlock although we hold the session lock: whoever
	 * holds the global lock takes session locks without waiting. */
	int g = sbx_lock_global(&m->st, NULL);
	sbx_cgroup_remove(m->s.id);
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
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	m->s.ended_ns = sbx_now_ns();
	mon_audit(m, event, fields, NULL);
	json_decref(fields);
	sbx_cgroup_usage(m->s.id, &m->s.cpu_ns, &m->s.mem_peak);
	sbx_record_save(&m->st, &m->s, NULL);
	sbx_cgroup_remove(m->s.id);
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
	while (m->clients)
		client_drop(m, m->clients);
	while (m->execs)
		exec_free(m, m->execs);
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
	sbx_state_close(&m->st);
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
	m.vm.pidfd = -1;

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
	snprintf(m.s.state, sizeof m.s.state, "running");
	m.s.ready_ns = sbx_now_ns();
	/* The policy's cap as it is, 0 included (keep no output). */
	m.output_cap = m.s.limits.output_cap;
	if (m.s.limits.ttl_ms && arm_ttl(&m) < 0) {
		sbx_err_set(&err, SBX_EXIT_INTERNAL, errno, "cannot arm the session TTL");
		sbx_vm_kill(&m.vm);
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
	m.s.vmm_pid = m.vm.pid;
	m.s.vmm_start = m.vm.start_time;
	if (sbx_record_save(&m.st, &m.s, &err) < 0) {
		sbx_vm_kill(&m.vm);
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", m.s.tmpl_name, m.s.tmpl_version);
	json_t *cf = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:I}", "session", m.s.id, "template",
			       tmpl, "vcpus", (int)m.s.vcpus, "memory_mib", (int)m.s.memory_mib, "accel", m.s.accel,
			       "vmm", m.s.vmm, "boot_ms", (json_int_t)m.s.boot_ms, "ttl_s",
			       (json_int_t)(m.s.limits.ttl_ms / 1000), "disk_bytes", (json_int_t)m.s.limits.disk_bytes,
			       "volumes", (json_int_t)m.s.nvols);
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
		destroy_files(&m);
		report(a->ready_fd, &err);
		rc = err.code;
		goto out;
	}
	report(a->ready_fd, NULL);
	if (a->ready_fd >= 0) {
		epoll_ctl(m.ep, EPOLL_CTL_DEL, a->ready_fd, NULL);
		close(a->ready_fd);
	}

	while (!m.stopping && !m.vm_dead && !m.expired)
		if (loop_once(&m, -1) < 0)
			break;

	if (m.expired && !m.stopping && !m.vm_dead) {
		/* TTL: the VM goes, the record and the output stay so the user
		 * sees what happened; sbx-kill (or sbx-gc) removes them. */
		sbx_vm_kill(&m.vm);
		while (m.execs)
			exec_abort(&m, m.execs, SBX_R_KILLED);
		char why[64];
		snprintf(why, sizeof why, "ttl of %llu s expired", (unsigned long long)(m.s.limits.ttl_ms / 1000));
		json_t *ef = json_pack("{s:s, s:I}", "session", m.s.id, "ttl_s", (json_int_t)(m.s.limits.ttl_ms / 1000));
		end_session(&m, "expired", why, "session.expire", ef);
		goto out;
	}

	if (m.stopping) {
		sbx_vm_kill(&m.vm);
		while (m.execs)
			exec_abort(&m, m.execs, SBX_R_KILLED);
		uint64_t cpu = 0, peak = 0;
		sbx_cgroup_usage(m.s.id, &cpu, &peak);
		destroy_files(&m);
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
	/* The VM ended on its own: keep the record and the output so the user
	 * can see what happened; sbx-kill (or sbx-gc) reclaims the rest. */
	while (m.execs)
		exec_abort(&m, m.execs, SBX_R_SESSION_LOST);
	int crashed = strcmp(m.vm_end, "guest powered off") != 0;
	json_t *xf = json_pack("{s:s, s:s}", "session", m.s.id, "reason", m.vm_end);
	end_session(&m, crashed ? "crashed" : "stopped", m.vm_end, crashed ? "session.crash" : "session.stop", xf);
out:
	mon_free(&m);
	return rc;
}
