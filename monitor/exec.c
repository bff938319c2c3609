/* sbx-monitor: execs: start, output kept and streamed, the end, deadlines and pings. */
#include "mon.h"

#include <poll.h>

static int emit_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n, uint64_t credit);

/* --- execs ------------------------------------------------------------- */

struct exec *exec_find(struct mon *m, uint32_t n)
{
	for (struct exec *e = m->execs; e; e = e->next)
		if (e->n == n)
			return e;
	return NULL;
}

/* The spare: execs/.next (no exec's name: sbx_exec_id_check, sbx-ps and
 * count_execs skip it) with an exec's files made empty, renamed to the
 * exec's name at its start.  Why: on a host that makes and removes files
 * all the time (sessions come and go), ext4 skips inodes freed in the
 * last 30 seconds when it allocates one (recently_deleted), reading
 * inode table blocks as it goes; perf put that at most of the monitor's
 * CPU for an exec `true` under the suite's churn.  A rename allocates
 * nothing.  Made at most once between execs, and not again after a
 * failure until an exec has ended (a full disk is not retried every
 * loop turn). */
#define SPARE_DIR ".next"
static const char *const spare_tmp[] = { ".request.tmp", ".result.tmp" };

void exec_spare_make(struct mon *m)
{
	m->spare.want = 0;
	if (m->spare.dfd >= 0 || m->execs_dfd < 0)
		return;
	if (mkdirat(m->execs_dfd, SPARE_DIR, 0700) < 0 && errno != EEXIST)
		return;
	int dfd = openat(m->execs_dfd, SPARE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int out = dfd < 0 ? -1 : openat(dfd, "stdout", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	int err = out < 0 ? -1 : openat(dfd, "stderr", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	int ok = err >= 0;
	for (size_t i = 0; ok && i < SBX_ARRAY_LEN(spare_tmp); i++) {
		int fd = openat(dfd, spare_tmp[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		ok = fd >= 0;
		if (fd >= 0)
			close(fd);
	}
	if (!ok) {
		int fds[] = { dfd, out, err };
		for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return;
	}
	m->spare.dfd = dfd;
	m->spare.out = out;
	m->spare.err = err;
}

/* Write a spare's file (.request.tmp, .result.tmp) before its rename into
 * place.  Not with O_TRUNC: the file is there already and empty, and on
 * ext4 truncating a file that exists (even an empty one) marks it for a
 * flush on close (auto_da_alloc), about 40 us per file on this host,
 * twice per exec.  A longer leftover is cut after the write.  -1: not
 * opened; -2: not (wholly) written. */
static int spare_write(int dfd, const char *name, const char *txt)
{
	_cleanup_close_ int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	struct stat sb;
	size_t n = strlen(txt);
	if (fd < 0)
		return -1;
	if (sbx_write_all(fd, txt, n) < 0 || fstat(fd, &sb) < 0 ||
	    (sb.st_size > (off_t)n && ftruncate(fd, (off_t)n) < 0))
		return -2;
	return 0;
}

/* The spare as the exec's directory: 0, or -1 when there is none or its
 * rename failed (the caller makes one itself, as without a spare). */
static int spare_take(struct mon *m, struct exec *ex)
{
	if (m->spare.dfd < 0)
		return -1;
	if (renameat2(m->execs_dfd, SPARE_DIR, m->execs_dfd, ex->id, RENAME_NOREPLACE) < 0) {
		close(m->spare.dfd);
		close(m->spare.out);
		close(m->spare.err);
		m->spare.dfd = m->spare.out = m->spare.err = -1;
		return -1;
	}
	ex->dfd = m->spare.dfd;
	ex->out_fd = m->spare.out;
	ex->err_fd = m->spare.err;
	m->spare.dfd = m->spare.out = m->spare.err = -1;
	return 0;
}

/* The exec's directory without a spare, made here: 0, or -1 (errno set)
 * with nothing left behind, since a directory with no result reads as a
 * running exec (sbx-ps, --wait). */
static int exec_dir_make(struct mon *m, struct exec *ex)
{
	if (mkdirat(m->execs_dfd, ex->id, 0700) < 0)
		return -1;
	if ((ex->dfd = openat(m->execs_dfd, ex->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0 &&
	    (ex->out_fd = openat(ex->dfd, "stdout", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) >= 0 &&
	    (ex->err_fd = openat(ex->dfd, "stderr", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) >= 0)
		return 0;
	int e = errno;
	if (ex->out_fd >= 0)
		close(ex->out_fd);
	if (ex->dfd >= 0)
		close(ex->dfd);
	ex->out_fd = ex->dfd = -1;
	sbx_rm_rf_at(m->execs_dfd, ex->id);
	errno = e;
	return -1;
}

void exec_spare_remove(int execs_dfd)
{
	_cleanup_close_ int dfd = openat(execs_dfd, SPARE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return;
	unlinkat(dfd, "stdout", 0);
	unlinkat(dfd, "stderr", 0);
	for (size_t i = 0; i < SBX_ARRAY_LEN(spare_tmp); i++)
		unlinkat(dfd, spare_tmp[i], 0);
	unlinkat(execs_dfd, SPARE_DIR, AT_REMOVEDIR);
}

void exec_spare_drop(struct mon *m)
{
	if (m->spare.dfd < 0)
		return;
	close(m->spare.dfd);
	close(m->spare.out);
	close(m->spare.err);
	m->spare.dfd = m->spare.out = m->spare.err = -1;
	if (m->execs_dfd >= 0)
		exec_spare_remove(m->execs_dfd);
}

void exec_free(struct mon *m, struct exec *ex)
{
	m->spare.want = 1; /* the next exec's, after this one's end */
	for (struct exec **pp = &m->execs; *pp; pp = &(*pp)->next)
		if (*pp == ex) {
			*pp = ex->next;
			break;
		}
	if (ex->client) {
		ex->client->ex = NULL;
		ex->client->nmark = 0; /* an exec that is gone needs no credit */
	}
	close(ex->out_fd);
	close(ex->err_fd);
	close(ex->dfd);
	sbx_scrub_end(&ex->sc_out, NULL);
	sbx_scrub_end(&ex->sc_err, NULL);
	json_decref(ex->req);
	sbx_buf_free(&ex->tail);
	sbx_trace_end(&ex->tr, 0); /* no-op once ended */
	free(ex);
}

/* Which of the session's limits the exec ran into, in one place for a
 * caller to read (a timeout from an OOM from an attempted escape): the
 * proxy's refusals while it ran (egress, DNS, package fetches; the
 * session's, so an exec running beside another shares them), the guest's
 * pids and memory limits, the output caps. */
static json_t *violations(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	json_t *v = mon_violations(m, ex->net_off, ex->pkg_off); /* no logs: zeros */
	if (!v)
		return json_null();
	json_object_set_new(v, "pids_limit", json_boolean(e->pids_hit > 0));
	json_object_set_new(v, "oom", json_boolean(e->reason == SBX_R_OOM));
	json_object_set_new(v, "timeout", json_boolean(e->reason == SBX_R_TIMEOUT));
	json_object_set_new(v, "disk_full", json_boolean(e->disk_full != 0));
	if (e->disk_full)
		json_object_set_new(v, "disk_full_on",
				    json_pack("[s*s*]", (e->disk_full & SBX_DISK_FULL_SCRATCH) ? "scratch" : NULL,
					      (e->disk_full & SBX_DISK_FULL_VOLUME) ? "workspace" : NULL));
	/* The proxy gone (its pidfd says so even before the loop's turn has
	 * reaped it): the exec ran without network, whatever its logs say. */
	struct pollfd pf = { .fd = m->proxy.fd, .events = POLLIN };
	if (m->proxy.fd >= 0 && poll(&pf, 1, 0) > 0)
		mon_proxy_reap(m);
	if (m->s.net_lost[0])
		json_object_set_new(v, "network_lost", json_string(m->s.net_lost));
	json_object_set_new(
		v, "output_truncated",
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
			      (int)e->status, "reason", sbx_reason_name(e->reason), "signal", (int)e->signo, "started",
			      t0, "ended", t1, "wall_s", (double)e->wall_us / 1e6, "cpu_user_s",
			      (double)e->cpu_user_us / 1e6, "cpu_sys_s", (double)e->cpu_sys_us / 1e6, "memory_peak",
			      "bytes", (json_int_t)e->mem_peak, "guest_reported", 1, "stdout_bytes",
			      (json_int_t)ex->out_total, "stderr_bytes", (json_int_t)ex->err_total, "truncated",
			      ex->out_emitted > ex->out_size || ex->err_emitted > ex->err_size);
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
	if (o)
		susp_exec_fields(m, ex, o); /* ran across a suspend? */
	char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
	_cleanup_free_ char *line = NULL;
	/* No fsync: an exec record is as durable as the session it belongs to.
	 * The first result's .result.tmp is the spare's, if it had one.  Put
	 * in place even if cut short (a full disk): the exec has ended, and a
	 * reader must not wait for it. */
	if (s && asprintf(&line, "%s\n", s) >= 0 && spare_write(ex->dfd, ".result.tmp", line) != -1)
		renameat(ex->dfd, ".result.tmp", ex->dfd, "result.json");
	free(s);
	json_decref(o);
}

/* argv as the audit trail keeps it: bounded (an audit record is at most
 * 64 KiB, a command line up to 1 MiB), with the SHA-256 of the whole
 * argv so the record still names exactly what ran. */
static void audit_argv(json_t *f, json_t *argv)
{
	SHA2_CTX c;
	char hex[2 * SHA256_DIGEST_LENGTH + 1];
	json_t *out = json_array(), *a;
	size_t i, total = 0;
	int cut = 0;
	SHA256Init(&c);
	json_array_foreach (argv, i, a) {
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
	SHA256End(&c, hex);
	json_object_set_new(f, "argv", out);
	json_object_set_new(f, "argv_sha256", json_string(hex));
	if (cut)
		json_object_set_new(f, "argv_truncated", json_true());
}

/* exec.end in the audit trail: what ran, how it ended; never its output. */
static void audit_exec_end(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	json_t *f =
		json_pack("{s:s, s:s, s:i, s:s, s:i, s:f, s:f, s:I, s:I, s:I}", "session", m->s.id, "exec", ex->id,
			  "status", (int)e->status, "reason", sbx_reason_name(e->reason), "signal", (int)e->signo,
			  "wall_s", (double)e->wall_us / 1e6, "cpu_s", (double)(e->cpu_user_us + e->cpu_sys_us) / 1e6,
			  "memory_peak_bytes", (json_int_t)e->mem_peak, "stdout_bytes", (json_int_t)ex->out_total,
			  "stderr_bytes", (json_int_t)ex->err_total);
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

/* The bytes held back in case they began a secret are none: out they go. */
static void scrub_flush(struct mon *m, struct exec *ex)
{
	struct sbx_buf b = { 0 };
	sbx_scrub_end(&ex->sc_out, &b);
	if (b.len && !b.oom)
		emit_output(m, ex, SBX_F_STDOUT, b.data, (uint32_t)b.len, 0);
	sbx_buf_reset(&b);
	sbx_scrub_end(&ex->sc_err, &b);
	if (b.len && !b.oom)
		emit_output(m, ex, SBX_F_STDERR, b.data, (uint32_t)b.len, 0);
	sbx_buf_free(&b);
}

/* End an exec from the host side (VM lost, session destroyed). */
void exec_abort(struct mon *m, struct exec *ex, uint32_t reason)
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
	/* ... and the session's variables whose values the guest takes from a
	 * secret (env.h): their names too, never which secret or its value. */
	for (size_t i = 0; i < r->env_secretc; i++)
		json_array_append_new(env, json_stringn(r->env_secret[i], strcspn(r->env_secret[i], "=")));
	_cleanup_free_ char *cwd = r->cwd ? sbx_scrub_str(&m->sec, r->cwd) : NULL;
	json_t *o = json_pack("{s:o, s:o, s:s?, s:I, s:b, s:b, s:i, s:s}", "argv", argv, "env", env, "cwd", cwd,
			      "timeout_ms", (json_int_t)r->timeout_ms, "tty", !!(r->flags & SBX_EXEC_PTY), "stdin",
			      !!(r->flags & SBX_EXEC_STDIN), "uid", r->have_uid ? (int)r->uid : 1000, "kind",
			      r->flags & SBX_EXEC_COPY ? "copy" : "command");
	return o;
}

/* Why the session cannot take an exec now (a code, msg filled), or 0. */
static int exec_refusal(struct mon *m, const struct client *c, char *msg, size_t n)
{
	const char *why = NULL;
	int code = 0;
	if (c->ex) {
		why = "one exec per connection";
		code = SBX_EXIT_INVALID;
	} else if (m->stopping || m->vm_dead) {
		why = "the session is ending";
		code = SBX_EXIT_NOENT;
	} else if (m->agent.fd < 0) {
		why = "the guest agent is gone";
		code = SBX_EXIT_INTERNAL;
	} else {
		snap_check_deadline(m);
		if (m->snap.paused) {
			snprintf(msg, n,
				 "session %s is paused: resume it (sbx-snapshot resume %s, or sbx-exec --resume)",
				 m->s.id, m->s.id);
			return SBX_EXIT_NOENT;
		}
		if (m->snap.saving) {
			why = "a snapshot of the session is being saved";
			code = SBX_EXIT_TEMPFAIL;
		}
	}
	if (why)
		snprintf(msg, n, "%s", why);
	return code;
}

/* The session's limits written over the request: they come from its
 * policy, never from the client.  0, or SBX_EXIT_INVALID with msg. */
static int exec_limits(struct mon *m, struct sbx_exec_req *r, char *msg, size_t n)
{
	const struct sbx_limits *lim = &m->s.limits;
	r->pids_max = lim->pids_per_exec;
	r->session_pids = lim->pids_per_session;
	r->memory_max = lim->exec_memory;
	if (!r->timeout_ms && lim->exec_timeout_default_ms)
		r->timeout_ms = (uint32_t)(lim->exec_timeout_default_ms > UINT32_MAX ? UINT32_MAX
										     : lim->exec_timeout_default_ms);
	if (lim->exec_timeout_max_ms && (!r->timeout_ms || r->timeout_ms > lim->exec_timeout_max_ms)) {
		char max[32], asked[40] = "";
		sbx_fmt_duration(max, sizeof max, lim->exec_timeout_max_ms);
		if (r->timeout_ms) {
			asked[0] = ' ';
			sbx_fmt_duration(asked + 1, sizeof asked - 1, r->timeout_ms);
		}
		snprintf(msg, n, "the exec timeout%s %s the policy's maximum of %s (resources.exec_timeout.max)", asked,
			 r->timeout_ms ? "exceeds" : "must be set within", max);
		return SBX_EXIT_INVALID;
	}
	return 0;
}

/* A new exec for the request, with its directory (a spare's, or made),
 * its deadline and its recorded request; the request's flags as the guest
 * gets them.  NULL with msg when there is no memory or no directory. */
static struct exec *exec_new(struct mon *m, struct sbx_exec_req *r, uint64_t t0, int *detach, char *msg, size_t n)
{
	struct exec *ex = calloc(1, sizeof *ex);
	if (!ex) {
		snprintf(msg, n, "out of memory");
		return NULL;
	}
	ex->n = ++m->next_exec;
	snprintf(ex->id, sizeof ex->id, "e%u", ex->n);
	ex->out_fd = ex->err_fd = ex->dfd = -1;
	if (spare_take(m, ex) < 0 && exec_dir_make(m, ex) < 0) {
		snprintf(msg, n, "cannot store exec output: %s", strerror(errno));
		free(ex);
		return NULL;
	}
	sbx_trace_begin_at(&ex->tr, "exec.monitor", t0);
	ex->started_ns = sbx_now_ns();
	if (r->timeout_ms)
		ex->deadline = sbx_mono_ns() + ((uint64_t)r->timeout_ms + EXEC_TIMEOUT_GRACE_MS) * 1000000u;
	ex->credit = SBX_STDIN_WINDOW;
	ex->flags = r->flags;
	ex->req = req_json(m, r);
	*detach = r->flags & SBX_EXEC_DETACH;
	r->flags &= ~(uint32_t)(SBX_EXEC_DETACH | SBX_EXEC_COPY | SBX_EXEC_OUT_WINDOW);
	if (*detach)
		r->flags &= ~(uint32_t)SBX_EXEC_STDIN;
	else if (m->guest_caps & SBX_GUEST_OUT_WINDOW)
		r->flags |= SBX_EXEC_OUT_WINDOW; /* a streamed exec's output under credit */
	return ex;
}

/* What is running, for sbx-ps --execs, before any result exists
 * (request.json), and the audit trail's exec.start.  Nothing of it is the
 * guest's to wait for: it runs while the guest starts the command.  -1
 * with aerr when the trail cannot be written. */
static int exec_record_start(struct mon *m, struct exec *ex, const struct sbx_exec_req *r, struct sbx_err *aerr)
{
	char *rq = json_dumps(ex->req, JSON_COMPACT);
	/* whole or not there, for a reader (a spare's file: no new inode) */
	if (rq && (spare_write(ex->dfd, ".request.tmp", rq) < 0 ||
		   renameat(ex->dfd, ".request.tmp", ex->dfd, "request.json") < 0))
		unlinkat(ex->dfd, ".request.tmp", 0);
	free(rq);
	json_t *af =
		json_pack("{s:s, s:s, s:s?, s:i}", "session", m->s.id, "exec", ex->id, "cwd",
			  json_string_value(json_object_get(ex->req, "cwd")), "user", r->have_uid ? (int)r->uid : 1000);
	if (af)
		audit_argv(af, json_object_get(ex->req, "argv"));
	int arc = mon_audit(m, "exec.start", af, aerr);
	json_decref(af);
	return arc;
}

void client_exec(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	struct sbx_exec_req r;
	const char *why = "invalid request";
	char msg[200];
	uint64_t t0 = sbx_mono_ns();
	int code = exec_refusal(m, c, msg, sizeof msg), detach;
	if (code)
		return client_error(m, c, f->stream, code, msg);
	if (sbx_exec_req_decode(f->payload, f->len, &r, &why) < 0)
		return client_error(m, c, f->stream, SBX_EXIT_INVALID, why);
	code = exec_limits(m, &r, msg, sizeof msg);
	struct exec *ex = code ? NULL : exec_new(m, &r, t0, &detach, msg, sizeof msg);
	if (!ex) {
		sbx_exec_req_free(&r);
		return client_error(m, c, f->stream, code ? code : SBX_EXIT_INTERNAL, msg);
	}
	ex->next = m->execs;
	m->execs = ex;
	if (sbx_mono_ns() - m->time_synced > MON_TIME_SYNC_NS)
		agent_time_sync(m, 0);
	/* The proxy's log sizes, the start of what this exec ran into, read
	 * before the guest can start it: read after (a round trip to the
	 * privileged half, behind a busy host's scheduler) they missed a
	 * command's first refusals under load (t1500 on CI). */
	mon_log_sizes(m, &ex->net_off, &ex->pkg_off);
	sbx_trace_step(&ex->tr, "prepare");
	sbx_exec_req_encode(&m->aout, ex->n, &r);
	agent_flush(m);
	sbx_trace_step(&ex->tr, "sent");
	/* Recorded while the guest already starts it (off the critical path);
	 * an exec that cannot be recorded does not run: fail closed. */
	struct sbx_err aerr = { 0 };
	int arc = exec_record_start(m, ex, &r, &aerr);
	sbx_exec_req_free(&r);
	sbx_trace_step(&ex->tr, "audit");
	if (arc < 0) {
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		agent_flush(m);
		char amsg[600];
		snprintf(amsg, sizeof amsg, "cannot write the audit trail, the command was stopped: %s", aerr.msg);
		return client_error(m, c, ex->n, SBX_EXIT_INTERNAL, amsg);
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

/* ---- output credit (SBX_EXEC_OUT_WINDOW) ----
 * A guest that keeps to it has at most SBX_OUTPUT_WINDOW bytes of an
 * exec's output unaccounted for: in flight, queued for the exec's client,
 * or consumed here and owed back.  Bytes are consumed when the client has
 * read them (client_flush, by the marks), or at once when nobody streams
 * them (no client, or one that lags: the files are the stream then).  So
 * a slow client slows the command instead of falling behind past what
 * the files keep, and the monitor's queue per client stays under the
 * window.  WINDOW goes back in quarters of it, not per frame. */
void exec_out_credit(struct mon *m, struct exec *ex, uint64_t n)
{
	if (!ex->out_flow || ex->done || !n)
		return;
	ex->out_owed += n;
	if (ex->out_owed < SBX_OUTPUT_WINDOW / 4)
		return;
	uint32_t v = ex->out_owed > SBX_OUTPUT_WINDOW ? SBX_OUTPUT_WINDOW : (uint32_t)ex->out_owed;
	ex->out_owed = 0;
	sbx_frame_window(&m->aout, ex->n, v);
	agent_flush(m);
}

/* The guest's STARTED: its FLAGS say whether it keeps to output credit
 * (a guest-init from before it says nothing, and streams as it always did). */
void exec_started(struct mon *m, struct exec *ex, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t len, flags = 0;
	ex->started = 1;
	sbx_trace_step(&ex->tr, "guest_started");
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &val, &len) == 1)
		if (tag == SBX_T_FLAGS && sbx_tlv_as_u32(val, len, &flags) < 0)
			flags = 0;
	ex->out_flow = !(ex->flags & SBX_EXEC_DETACH) && (flags & SBX_EXEC_OUT_WINDOW);
}

/* Tell the guest to stop counting: the exec is over for us (the host's
 * timeout), and what it still sends is dropped, so nothing may wait on
 * credit that will never come. */
static void out_credit_off(struct mon *m, struct exec *ex)
{
	if (!ex->out_flow)
		return;
	sbx_frame_window(&m->aout, ex->n, SBX_WINDOW_OFF);
	ex->out_flow = 0;
}

static void client_mark(struct client *c, uint64_t n)
{
	uint64_t end = c->q_out + (c->out.len - c->out_off);
	if (c->nmark == OUT_MARKS) {
		/* Merged into the newest: its credit comes back a little later. */
		c->mark[OUT_MARKS - 1].end = end;
		c->mark[OUT_MARKS - 1].n += n;
		return;
	}
	c->mark[c->nmark++] = (struct out_mark){ .end = end, .n = n };
}

/* Output as stored and as streamed: the two are the same bytes (secrets
 * already scrubbed), so a client that lags and reads on from the files
 * resumes exactly where its stream stopped.  CREDIT guest bytes are
 * accounted to the frame queued here; returns 0 when none was (the
 * caller gives them back at once). */
static int emit_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n, uint64_t credit)
{
	int out = type == SBX_F_STDOUT;
	uint64_t *size = out ? &ex->out_size : &ex->err_size;
	uint64_t before_out = ex->out_size, before_err = ex->err_size;
	*(out ? &ex->out_emitted : &ex->err_emitted) += n;
	uint32_t keep =
		*size >= m->output_cap ? 0 : (m->output_cap - *size < n ? (uint32_t)(m->output_cap - *size) : n);
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
		return 0;
	if (!c->lag && c->out.len - c->out_off < CLIENT_BUF_MAX) {
		sbx_frame_raw(&c->out, type, ex->n, p, n);
		if (credit && ex->out_flow)
			client_mark(c, credit);
		client_flush(m, c);
		return 1;
	}
	/* Past the queue's bound: only a guest that ignores its credit (or
	 * a guest-init from before it) gets here. */
	if (!c->lag) {
		c->lag = 1;
		c->lag_out = before_out;
		c->lag_err = before_err;
		client_flush(m, c);
	}
	return 0;
}

void exec_store_output(struct mon *m, struct exec *ex, uint8_t type, const uint8_t *p, uint32_t n)
{
	int out = type == SBX_F_STDOUT;
	*(out ? &ex->out_total : &ex->err_total) += n;
	int queued = 0;
	if (!m->sec.patmax) {
		queued = emit_output(m, ex, type, p, n, n);
	} else {
		struct sbx_buf b = { 0 };
		/* Out of memory loses this chunk rather than store it unscrubbed. */
		if (sbx_scrub(&m->sec, out ? &ex->sc_out : &ex->sc_err, p, n, &b) == 0 && b.len)
			queued = emit_output(m, ex, type, b.data, (uint32_t)(b.len < UINT32_MAX ? b.len : UINT32_MAX),
					     n);
		sbx_buf_free(&b);
	}
	if (!queued)
		exec_out_credit(m, ex, n);
}

/* The exec has ended (its EXIT, or the host's timeout): record it, tell
 * its client, audit it; freed unless a lagging client is still owed it. */
void exec_end(struct mon *m, struct exec *ex, const struct sbx_exit_info *e)
{
	sbx_trace_step(&ex->tr, "guest_exit");
	scrub_flush(m, ex);
	exec_result(m, ex, e);
	sbx_trace_step(&ex->tr, "result");
	if (ex->client && ex->client->lag) {
		/* The client still reads from the files: the EXIT waits
		 * behind the output it has not seen yet. */
		sbx_buf_reset(&ex->tail);
		sbx_exit_encode(&ex->tail, ex->n, e);
		ex->done = 1;
	} else {
		send_exit(m, ex, e);
	}
	sbx_trace_step(&ex->tr, "reply");
	sbx_trace_end(&ex->tr, 1);
	/* After the reply: the fsynced append is not the client's wait.
	 * It still lands before this monitor handles anything else. */
	audit_exec_end(m, ex, e);
	if (!ex->done)
		exec_free(m, ex);
}

/* Host backstop: an exec past its timeout and the grace is ended here, as
 * "timeout" enforced by the host, and the guest is asked afresh to kill
 * it; whatever the guest says of it later is ignored. */
void exec_deadlines(struct mon *m)
{
	uint64_t now = sbx_mono_ns();
	if (m->snap.paused || m->pool_paused || m->susp.suspended)
		return;
	for (struct exec *ex = m->execs, *next; ex; ex = next) {
		next = ex->next;
		if (ex->done || !ex->deadline || now < ex->deadline)
			continue;
		sbx_frame_raw(&m->aout, SBX_F_KILL, ex->n, NULL, 0);
		out_credit_off(m, ex);
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
void mon_heartbeat(struct mon *m)
{
	uint64_t now = sbx_mono_ns(), iv = m->hb.interval;
	if (!iv || m->snap.paused || m->pool_paused || m->susp.suspended || m->agent.fd < 0)
		return;
	if (!m->hb.sent) {
		if (!execs_running(m) || now < m->hb.next)
			return;
		m->hb.token = 0x40000000u | (++m->hb.n & 0x3fffffffu);
		agent_time_sync(m, m->hb.token);
		m->hb.sent = now;
		return;
	}
	uint64_t age = now - m->hb.sent;
	if (age >= 3 * iv && !m->s.agent_unresponsive_ns) {
		m->s.agent_unresponsive_ns = sbx_now_ns() - age;
		mon_record_save(m, NULL);
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

int mon_heartbeat_wait_ms(const struct mon *m)
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
int exec_wait_ms(const struct mon *m)
{
	uint64_t first = 0, now = sbx_mono_ns();
	if (m->snap.paused || m->pool_paused || m->susp.suspended)
		return -1;
	for (const struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done && ex->deadline && (!first || ex->deadline < first))
			first = ex->deadline;
	if (!first)
		return -1;
	return first <= now ? 0 : (int)((first - now) / 1000000u) + 1;
}
