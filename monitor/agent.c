/* sbx-monitor: the agent channel: frames from the guest, output to it. */
#include "mon.h"

/* --- output to the agent ---------------------------------------------- */

void agent_flush(struct mon *m)
{
	/* A suspend's PING is the last thing the guest gets (suspend.c). */
	size_t end = m->susp.hold ? m->susp.hold_end : m->aout.len;
	while (m->agent.fd >= 0 && m->aout_off < end) {
		ssize_t w = write(m->agent.fd, m->aout.data + m->aout_off, end - m->aout_off);
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
		m->aout_off = m->susp.hold_end = 0;
		end = 0; /* all written: nothing to wait for (EPOLLOUT armed here woke the loop for nothing) */
	}
	int want = m->aout_off < end;
	if (m->agent.fd >= 0 && want != m->agent_want_out) {
		mon_ep_mod(m, &m->agent, EPOLLIN | (want ? EPOLLOUT : 0), EPOLL_CTL_MOD);
		m->agent_want_out = want;
	}
}

/* The guest kernel's release and what its guest-init can do, from a HELLO or
 * an identity reply. */
void agent_note_guest(struct mon *m, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n;
	uint32_t caps = 0;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &v, &n) == 1)
		if (tag == SBX_T_KERNEL)
			sbx_tlv_as_str(v, n, m->s.kernel, sizeof m->s.kernel);
		else if (tag == SBX_T_FLAGS && sbx_tlv_as_u32(v, n, &caps) < 0)
			caps = 0;
	/* What this guest-init can do (SBX_GUEST_*): each HELLO or identity
	 * reply says it afresh (a restore may bring another guest-init). */
	m->guest_caps = caps;
}

/* The guest's clock follows the host's: a PING carrying CLOCK_REALTIME,
 * which guest-init slews toward (guest-init/agent.c, clock_follow).  Its
 * PONG, on a stream no one waits on, is dropped.  Sent when the guest says
 * hello, with each heartbeat, after a resume, and before an exec when the
 * last was long ago: under TCG a guest's clock loses time under load. */
void agent_time_sync(struct mon *m, uint32_t token)
{
	if (m->agent.fd < 0)
		return;
	size_t off = sbx_frame_begin(&m->aout, SBX_F_PING, token ? token : MON_TIME_TOKEN);
	sbx_tlv_u64(&m->aout, SBX_T_TIME_NS, sbx_now_ns());
	sbx_frame_end(&m->aout, off);
	m->time_synced = sbx_mono_ns();
	agent_flush(m);
}

/* The guest is up (HELLO, or a restore's identity applied): ready now, or
 * secrets first and ready only once the guest has them in place, so no exec
 * can ever run before its secrets exist.  Written into reserved room so no
 * stale copy is left behind a realloc. */
void agent_secrets_then_ready(struct mon *m)
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

/* The guest took the secrets frame (an empty SECRETS back): for a claim,
 * the claim's secrets are in place; for a boot, the session is ready. */
static void agent_secrets_taken(struct mon *m, const struct sbx_frame *f)
{
	if (m->claim.stage == CLAIM_GUEST && m->secrets_sent && !f->len) {
		if (m->aout.data) /* as below */
			explicit_bzero(m->aout.data + m->aout.len, m->aout.cap - m->aout.len);
		m->claim.secrets_ok = 1;
		return;
	}
	if (!m->secrets_sent || m->ready || f->len)
		return;
	/* The guest read the whole frame: wipe what is left of it here. */
	if (m->aout.data)
		explicit_bzero(m->aout.data + m->aout.len, m->aout.cap - m->aout.len);
	m->ready = 1;
}

/* An ERROR from the guest: a claim refused, a snapshot step failed, the
 * secrets refused, or an exec that could not start (ex, if any). */
static void agent_error(struct mon *m, struct exec *ex, const struct sbx_frame *f)
{
	if (!f->stream && m->claim.stage == CLAIM_GUEST) {
		char msg[200] = "refused";
		uint32_t code = 0;
		sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
		sbx_text_clean(msg); /* the guest's words, shown to people */
		claim_fail(m, SBX_EXIT_UNAVAIL, "the guest refused the claim: %s", msg);
		return;
	}
	if (snap_guest_error(m, f))
		return;
	if (!f->stream && m->secrets_sent && !m->ready) {
		char msg[200] = "refused";
		uint32_t code = 0;
		sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
		sbx_text_clean(msg); /* the guest's words, shown to people */
		snprintf(m->secrets_err, sizeof m->secrets_err, "%s", msg);
		return;
	}
	if (!ex)
		return;
	char msg[256] = "the guest refused the command";
	uint32_t code = SBX_EXIT_INTERNAL;
	sbx_error_decode(f->payload, f->len, &code, msg, sizeof msg);
	sbx_text_clean(msg); /* the guest's words, shown to people */
	/* After STARTED an ERROR is only news: the guest ends the exec
	 * and reports EXIT.  Before it, the exec never ran. */
	if (ex->started || ex->done)
		return;
	if (code != SBX_EXIT_INVALID && code != SBX_EXIT_TEMPFAIL)
		code = SBX_EXIT_INTERNAL;
	if (ex->client)
		client_error(m, ex->client, ex->n, (int)code, msg);
	exec_abort(m, ex, SBX_R_SESSION_LOST);
}

/* A PONG: for a suspend, a claim, the heartbeat, and any client whose
 * PING it answers. */
static void agent_pong(struct mon *m, const struct sbx_frame *f)
{
	susp_pong(m, f->stream);
	if (m->claim.stage == CLAIM_GUEST && f->stream == m->claim.ping)
		claim_guest_answered(m);
	if (m->hb.sent && f->stream == m->hb.token) {
		m->hb.sent = 0;
		m->hb.next = sbx_mono_ns() + m->hb.interval;
		if (m->s.agent_unresponsive_ns) {
			m->s.agent_unresponsive_ns = 0;
			mon_record_save(m, NULL);
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
}

/* An install the guest's own responder refused (guest-init/pkg.c): into
 * packages.log as guest-reported, the reason in the host's words (the
 * guest says only what was asked), at a bounded rate: a guest cannot fill
 * the host's disk or the log's cap with them. */
#define PKGREP_RATE 20        /* a second */
#define PKGREP_MAX 2000       /* in all, for the monitor's life */
#define PKGLOG_CAP (4u << 20) /* the proxy's cap of packages.log (pkgcache.c) */
static void agent_pkg_refused(struct mon *m, const struct sbx_frame *f)
{
	char type[8] = "", req[SBX_PKG_REQUEST_MAX + 1] = "";
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	int rc;
	sbx_tlv_init(&it, f->payload, f->len);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &n)) == 1)
		if ((tag == SBX_T_PKG_TYPE && sbx_tlv_as_str(val, n, type, sizeof type) < 0) ||
		    (tag == SBX_T_REQUEST && sbx_tlv_as_str(val, n, req, sizeof req) < 0))
			return;
	if (rc < 0 || f->stream || m->pkglog_fd < 0 || !req[0] ||
	    (strcmp(type, "pypi") && strcmp(type, "npm") && strcmp(type, "apt")))
		return;
	uint64_t sec = sbx_mono_ns() / 1000000000ull;
	if (sec != m->pkgrep.window)
		m->pkgrep.window = sec, m->pkgrep.in_window = 0;
	if (m->pkgrep.total >= PKGREP_MAX || ++m->pkgrep.in_window > PKGREP_RATE) {
		m->pkgrep.dropped++;
		return;
	}
	m->pkgrep.total++;
	sbx_text_clean(req); /* the guest's words */
	const struct sbx_limit_packages *k = &m->s.limits.packages;
	char reason[300], ts[40];
	if (k->mode != SBX_PKG_ALLOWLIST)
		snprintf(reason, sizeof reason, "package installs are refused: packages.mode: offline in policy %s",
			 k->policy[0] ? k->policy : "defaults");
	else
		snprintf(reason, sizeof reason,
			 "package installs are refused: policy %s has no %s registry in packages.registries",
			 k->policy[0] ? k->policy : "defaults", type);
	sbx_fmt_time(sbx_now_ns(), ts, sizeof ts);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:i}", "time", ts, "session", m->s.id,
			      "kind", "request", "registry", type, "verdict", "refused", "status", 403, "reason",
			      reason, "request", req, "reported_by", "guest", "size", 0);
	if (o && m->s.tenant[0])
		json_object_set_new(o, "tenant", json_string(m->s.tenant));
	char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	struct stat st;
	if (line && fstat(m->pkglog_fd, &st) == 0 && (uint64_t)st.st_size + strlen(line) + 1 < PKGLOG_CAP) {
		size_t l = strlen(line);
		line[l] = '\n';                                 /* one write: lines never interleave with the proxy's */
		(void)sbx_write_all(m->pkglog_fd, line, l + 1); /* a record lost, the refusal stands */
	}
	free(line);
}

static void agent_frame(struct mon *m, const struct sbx_frame *f)
{
	m->guest_spoke = 1;
	/* sbx-port's connections number their streams apart from execs. */
	if (f->type >= SBX_F_PORT_CONNECT && f->type <= SBX_F_PORT_CLOSE)
		return port_agent_frame(m, f);
	if (warm_frame(m, f))
		return;
	struct exec *ex = f->stream ? exec_find(m, f->stream) : NULL;
	/* An exec that has ended (its EXIT still owed to a lagging client)
	 * hears nothing more from the guest: another EXIT would rewrite its
	 * record, append to the audit trail and grow its tail; more output
	 * would land after the end. */
	if (ex && ex->done)
		return;
	switch (f->type) {
	case SBX_F_HELLO: {
		agent_note_guest(m, f);
		if (m->ready || m->secrets_sent || m->snap.restoring || m->warm.deadline)
			break; /* a guest saying hello again (reconnect) gets nothing more */
		agent_time_sync(m, 0);
		warm_start(m); /* then secrets, then ready */
		break;
	}
	case SBX_F_SECRETS: agent_secrets_taken(m, f); break;
	case SBX_F_STARTED:
		if (ex)
			exec_started(m, ex, f);
		break;
	case SBX_F_STDOUT:
	case SBX_F_STDERR:
		if (ex)
			exec_store_output(m, ex, f->type, f->payload, f->len);
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
		else if (!f->stream && (m->guest_caps & SBX_GUEST_KEEP_EXECS))
			snap_release(m); /* a late answer: the guest holds its output */
		break;
	case SBX_F_IDENTITY: snap_identity_reply(m, f); break;
	case SBX_F_ERROR: agent_error(m, ex, f); break;
	case SBX_F_PONG: agent_pong(m, f); break;
	case SBX_F_PKG_REFUSED: agent_pkg_refused(m, f); break;
	default: break; /* unexpected from a guest: ignore, never trust */
	}
}

/* Parse whole frames out of buf; returns -1 when the stream is corrupt. */
int mon_drain_frames(struct sbx_buf *in, void (*fn)(struct mon *, void *, const struct sbx_frame *), struct mon *m,
		     void *ctx, const int *stop)
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

int mon_read_into(int fd, struct sbx_buf *b)
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

void agent_readable(struct mon *m)
{
	size_t before = m->ain.len;
	int r = mon_read_into(m->agent.fd, &m->ain);
	m->agent_rx += m->ain.len - before;
	if (mon_drain_frames(&m->ain, agent_frame_cb, m, NULL, NULL) < 0 || r <= 0) {
		/* A corrupt stream or the guest closing the port: the agent is
		 * gone; execs cannot finish.  The VMM's own exit says why. */
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->agent.fd, NULL);
		close(m->agent.fd);
		m->agent.fd = -1;
		port_agent_lost(m);
		while (m->execs)
			exec_abort(m, m->execs, SBX_R_SESSION_LOST);
	}
}
