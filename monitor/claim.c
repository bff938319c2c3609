/* sbx-monitor: warm pool (pool.h): the member's side of a claim. */
#include "mon.h"
#include "trace.h"

/* SBX_TRACE (trace.h): the claim's steps, for make bench.  One claim per
 * monitor, so one trace. */
static struct sbx_trace trace;

/* --- warm pool (pool.h): the member's side of a claim ------------------ */

/* Ready and pooled: stop the vCPUs, so a member waiting costs no CPU.  A
 * backend that cannot pause leaves it running. */
void claim_pool_park(struct mon *m)
{
	struct sbx_err e = { 0 };
	if (mon_vm_pause(m, &e) == 0)
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

int claim_wait_ms(const struct mon *m)
{
	if (m->claim.stage != CLAIM_GUEST)
		return -1;
	uint64_t now = sbx_mono_ns();
	return now >= m->claim.deadline ? 0 : (int)((m->claim.deadline - now) / 1000000u) + 1;
}

void claim_fail(struct mon *m, int code, const char *fmt, ...)
{
	if (m->claim.stage != CLAIM_GUEST)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->claim.err, sizeof m->claim.err, fmt, ap);
	va_end(ap);
	m->claim.code = code;
	m->claim.stage = CLAIM_FAILED;
	sbx_trace_end(&trace, 0);
	m->stopping = 1; /* destroyed, then sbx-create boots the session cold */
}

/* A claim that did not complete: the session is gone by now (destroyed
 * under its new ID); say so in the trail and to sbx-create. */
void claim_abandoned(struct mon *m)
{
	if (m->claim.stage == CLAIM_GUEST) { /* stopped by sbx-kill or a signal */
		snprintf(m->claim.err, sizeof m->claim.err, "session %s was destroyed while it was being created",
			 m->s.id);
		m->claim.code = SBX_EXIT_CONFLICT;
	}
	/* Half renamed (the runtime directory's rename failed and could not
	 * be undone): the member's old name went too (mon_destroy). */
	json_t *f = json_pack("{s:s, s:b, s:i, s:s, s:b, s:s}", "session", m->s.id, "ok", 0, "code", m->claim.code,
			      "error", m->claim.err, "from_pool", 1, "member", m->claim.from);
	mon_audit(m, "session.create", f, NULL);
	json_decref(f);
	if (m->claim.c) {
		client_error(m, m->claim.c, 0, m->claim.code, m->claim.err);
		m->claim.c = NULL;
	}
}

void claim_check_deadline(struct mon *m)
{
	if (m->claim.stage == CLAIM_GUEST && sbx_mono_ns() >= m->claim.deadline)
		claim_fail(m, SBX_EXIT_UNAVAIL, "the guest did not answer within %u ms of the claim",
			   SBX_CLAIM_TIMEOUT_MS);
}

/* Everything the guest was sent has been acted on (its PONG follows the
 * answers to the identity and the secrets): the session is ready. */
void claim_guest_answered(struct mon *m)
{
	struct sbx_err err = { 0 };
	if (m->snap.identity) /* answered in order: IDENTITY before the PONG */
		return claim_fail(m, SBX_EXIT_UNAVAIL, "the guest did not take its new identity");
	if (m->sec.n && !m->claim.secrets_ok)
		return claim_fail(m, SBX_EXIT_INTERNAL, "the guest did not take the secrets");
	sbx_trace_step(&trace, "guest_answer");
	snprintf(m->s.state, sizeof m->s.state, "running");
	m->s.ready_ns = sbx_now_ns();
	m->s.claim_ms = (sbx_mono_ns() - m->claim.t0) / 1000000u;
	m->output_cap = m->s.limits.output_cap;
	m->output_session_cap = m->s.limits.output_session_cap;
	if (m->s.limits.ttl_ms && mon_arm_ttl(m) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot arm the session TTL");
	if (mon_record_save(m, &err) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "%s", err.msg);
	sbx_trace_step(&trace, "record_save");
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", m->s.tmpl_name, m->s.tmpl_version);
	json_t *cf = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:s, s:I}", "session", m->s.id,
			       "template", tmpl, "vcpus", (int)m->s.vcpus, "memory_mib", (int)m->s.memory_mib, "accel",
			       m->s.accel, "vmm", m->s.vmm, "boot_ms", (json_int_t)m->s.boot_ms, "ttl_s",
			       (json_int_t)(m->s.limits.ttl_ms / 1000), "disk_bytes",
			       (json_int_t)m->s.limits.disk_bytes, "volumes", (json_int_t)0, "from_pool", 1, "member",
			       m->claim.from, "claim_ms", (json_int_t)m->s.claim_ms);
	if (cf && m->sec.n) {
		json_t *names = json_array(); /* names only, never values */
		for (unsigned i = 0; i < m->sec.n; i++)
			json_array_append_new(names, json_string(m->sec.s[i].name));
		json_object_set_new(cf, "secrets", names);
	}
	/* Fail closed, as for a cold mon_boot: a session that cannot be audited is
	 * not handed out. */
	int rc = mon_audit(m, "session.create", cf, &err);
	json_decref(cf);
	if (rc < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot write the audit trail: %s", err.msg);
	sbx_trace_step(&trace, "audit");
	m->claim.stage = CLAIM_DONE;
	if (m->claim.c) {
		struct sbx_buf b = { 0 };
		sbx_frame_raw(&b, SBX_F_CLAIMED, 0, NULL, 0);
		client_send(m, m->claim.c, &b);
		sbx_buf_free(&b);
		m->claim.c = NULL;
	}
	sbx_trace_step(&trace, "reply");
	sbx_trace_end(&trace, 1);
}

/* A member with a NIC (its TAP in a bare namespace) serves only sessions
 * with one (sbx_pool_member_fits): the namespace is finished and the proxy
 * started from the session's record and policy.  Fail closed: a session
 * is never handed out half networked; the claim fails, the member is
 * destroyed. */
static int claim_network(struct mon *m)
{
	struct sbx_err e = { 0 };
	int rc = mon_claim_network(m, &e);
	if (rc < 0) {
		claim_fail(m, SBX_EXIT_UNAVAIL, "%s", e.msg);
		return -1;
	}
	if (rc > 0)
		sbx_trace_step(&trace, "network");
	return 0;
}

/* What a claim adds to the guest's IDENTITY (snap_identity_queue): the
 * session's package policy, which guest-init writes pip.conf and npmrc
 * from as a boot does from the kernel command line; not when it is the
 * member's own (a plain create's), which the guest has already, unless the
 * member was restored from a snapshot (its guest has the files of the
 * session that was saved): pkg, or NULL. */
static const char *claim_pkg(const struct mon *m, const char *pkg)
{
	return strcmp(pkg, m->claim.pkg) || m->s.snapshot[0] ? pkg : NULL;
}

/* The PING whose PONG says the guest has taken everything sent before it. */
static void claim_ping(struct mon *m)
{
	m->claim.ping = 0x80000000u | (++m->next_ping & 0x7fffffffu);
	sbx_frame_raw(&m->aout, SBX_F_PING, m->claim.ping, "claim", 5);
	agent_flush(m);
}

/* Before the commit, so that the guest's part (a millisecond or more of
 * guest kernel work under TCG: the clock, the hostname, the reseed) runs
 * while the commit renames: the VM at a session's CPU weight, running
 * again, and given its new identity (the session's ID as its hostname,
 * the host's clock, fresh randomness, the session's package policy).  No
 * secret yet: those go only to a committed session.  With none to send,
 * the claim's PING goes now too.  From here the member is never pooled
 * again: a claim that fails destroys it.  -1 (why) when the guest cannot
 * be started. */
static int claim_guest_start(struct mon *m, const char *id, const struct sbx_session *ns, char *why, size_t n)
{
	struct sbx_err e = { 0 };
	m->claim.touched = 1;
	/* The member's cap with a session's weight; the session's own cap
	 * follows the commit (claim_host). */
	if (mon_cg_set_cpu(m) < 0) {
		snprintf(why, n, "cannot set the CPU weight of the host cgroup: %s", strerror(errno));
		return -1;
	}
	if (m->pool_paused) {
		if (mon_vm_resume_within(m, SBX_CLAIM_RESUME_MS, &e) < 0) {
			snprintf(why, n, "cannot resume the VM: %s", e.msg);
			return -1;
		}
		m->pool_paused = 0;
	}
	sbx_trace_step(&trace, "resume");
	if (m->agent.fd < 0) {
		snprintf(why, n, "the guest agent is gone");
		return -1;
	}
	char pkg[sizeof m->claim.pkg];
	sbx_pkgcache_guest_params(&ns->limits.packages, pkg, sizeof pkg);
	if (snap_identity_queue(m, id, claim_pkg(m, pkg), 0) < 0) {
		snprintf(why, n, "cannot send the guest its identity");
		return -1;
	}
	if (!m->sec.n)
		claim_ping(m);
	sbx_trace_step(&trace, "identity_sent");
	return 0;
}

/* After the commit: the host side of the session's policy (its CPU cap,
 * its network), then the secrets and the PING that follows them, if the
 * PING has not gone with the identity. */
static void claim_host(struct mon *m)
{
	if (mon_cg_set_cpu(m) < 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "cannot set the CPU cap of the host cgroup: %s",
				  strerror(errno));
	sbx_trace_step(&trace, "cgroup_cpu");
	if (claim_network(m) < 0)
		return;
	if (m->agent.fd < 0)
		return claim_fail(m, SBX_EXIT_UNAVAIL, "the guest agent is gone");
	if (m->sec.n) {
		if (sbx_buf_reserve(&m->aout, m->sec.frame_len) < 0)
			return claim_fail(m, SBX_EXIT_INTERNAL, "out of memory");
		sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
		m->secrets_sent = 1;
		claim_ping(m);
	}
}

/* CLAIM from sbx-create, which holds the global lock and has checked that
 * the new ID is free.  The commit is the directories' rename.  A claim
 * refused before the guest is touched (malformed, not fitting, the
 * secrets not read) leaves the member as it was; from the guest's start
 * on, a failure destroys the member (before the commit: under its own
 * name, and sbx-create tries another member or boots cold), and after the
 * commit the session is finished or destroyed, whether or not sbx-create
 * is still there. */
void claim_begin(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	uint64_t t0 = sbx_mono_ns();
	if (!m->s.pool || !m->ready || m->claim.stage || m->claim.touched || m->stopping || m->vm_dead)
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
		if (tag == SBX_T_RECORD && !rec && (rec = malloc((size_t)n + 1)) &&
		    sbx_tlv_as_str(v, n, rec, (size_t)n + 1) == 0)
			continue;
		if (tag == SBX_T_CLAIM_FLAGS && sbx_tlv_as_u32(v, n, &flags) == 0)
			continue;
		if (tag == SBX_T_POLICY && !pol && (pol = malloc((size_t)n + 1)) &&
		    sbx_tlv_as_str(v, n, pol, (size_t)n + 1) == 0)
			continue;
		r = -1;
		break;
	}
	/* The ID is checked once here, where it comes off the socket: the
	 * record's parse holds it to the ID allowlist (record.c), and the
	 * steps below take it as checked. */
	struct sbx_session ns;
	if (r < 0 || !rec || !pol || sbx_pool_member_id(id) || sbx_record_parse(rec, id, &ns) < 0)
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
	sbx_trace_begin_at(&trace, "claim.member", t0);
	sbx_trace_step(&trace, "parse");
	/* The package policy the guest has (claim_pkg), taken
	 * here: the commit may run in the privileged half, whose copy of
	 * the monitor is not this one. */
	sbx_pkgcache_guest_params(&m->s.limits.packages, m->claim.pkg, sizeof m->claim.pkg);
	char why[256] = "";
	int code = SBX_EXIT_UNAVAIL;
	int rc = claim_guest_start(m, id, &ns, why, sizeof why);
	if (rc == 0) {
		code = SBX_EXIT_INTERNAL;
		rc = mon_claim_commit(m, id, rec, pol, &code, why, sizeof why);
	}
	if (rc < 0) {
		/* Not committed, holding no secret; its guest has another
		 * identity now, so it goes (sbx-create tries another member,
		 * or boots the session cold; sbx-gc refills the pool). */
		sbx_secrets_free(&m->sec);
		sbx_trace_end(&trace, 0);
		snprintf(m->claim.err, sizeof m->claim.err, "%s", why);
		m->stopping = 1;
		return client_error(m, c, 0, code, why);
	}
	if (mon_is_child(m)) /* its steps were the privileged half's */
		sbx_trace_step(&trace, "commit");
	m->claim.stage = CLAIM_GUEST;
	m->claim.t0 = t0;
	m->claim.deadline = t0 + (uint64_t)SBX_CLAIM_TIMEOUT_MS * 1000000u;
	if (rc > 0)
		return claim_fail(m, SBX_EXIT_INTERNAL, "%s", why);
	m->claim.c = c;
	struct sbx_buf b = { 0 };
	sbx_frame_raw(&b, SBX_F_CLAIM, 0, NULL, 0);
	client_send(m, c, &b);
	sbx_buf_free(&b);
	claim_host(m);
}

/* The commit (claim_begin's, or the privileged half's for it): 0 when it
 * is done (m->s is the claimed session's record, as saved), 1 when it is
 * done but the session cannot be (why; only destroying it is left), -1
 * when nothing changed (code, why).  The request's record; what only this
 * monitor knows, from its own. */
int claim_commit(struct mon *m, const char *id, const char *rec, const char *pol, int *code, char *why, size_t n)
{
	/* Checked again here: when the monitor is split, this is the
	 * privileged half, and the request came from the unprivileged one.
	 * The record's parse holds the ID to the allowlist (record.c). */
	struct sbx_session ns;
	if (sbx_pool_member_id(id) || sbx_record_parse(rec, id, &ns) < 0 || !sbx_pool_member_fits(&m->s, &ns)) {
		*code = SBX_EXIT_INVALID;
		snprintf(why, n, "malformed claim");
		return -1;
	}
	/* The request's record; what only this monitor knows, from its own.
	 * The host cgroups follow the ID where the kernel lets them (v1);
	 * where it does not (v2), the record keeps their name. */
	snprintf(m->claim.from, sizeof m->claim.from, "%s", m->s.id);
	const char *from = m->claim.from;
	char cg[SBX_ID_MAX + 1];
	snprintf(cg, sizeof cg, "%s", sbx_session_cgroup(&m->s));
	int cg_renamed = sbx_cgroup_rename(cg, id) == 0;
	sbx_trace_step(&trace, "cgroup_rename");
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
	snprintf(ns.mac, sizeof ns.mac, "%s", m->s.mac); /* the VM's NIC is the member's */
	/* The commit, in an order that never shows a record of one ID under
	 * the other's name: the new record and policy written aside, both
	 * directories renamed (RENAME_NOREPLACE: an ID that exists after all
	 * is refused, not overwritten), the two files moved into place. */
	_cleanup_free_ char *txt = sbx_record_text(&ns);
	*code = SBX_EXIT_INTERNAL;
	int rc = claim_write_aside(m, ".claim.json", txt);
	if (rc == 0)
		rc = claim_write_aside(m, ".claim-policy.json", pol);
	sbx_trace_step(&trace, "write_aside");
	if (rc == 0 && renameat2(m->st.sessions_fd, from, m->st.sessions_fd, id, RENAME_NOREPLACE) < 0) {
		*code = errno == EEXIST ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL;
		rc = -1;
	} else if (rc == 0 && renameat2(m->st.rsessions_fd, from, m->st.rsessions_fd, id, RENAME_NOREPLACE) < 0) {
		*code = errno == EEXIST ? SBX_EXIT_CONFLICT : SBX_EXIT_INTERNAL;
		rc = -1;
		if (renameat2(m->st.sessions_fd, id, m->st.sessions_fd, from, RENAME_NOREPLACE) < 0) {
			m->s = ns; /* half renamed: only destroying is left */
			snprintf(why, n, "cannot rename the runtime directory");
			return 1;
		}
	}
	if (rc < 0) {
		unlinkat(m->lib_dfd, ".claim.json", 0);
		unlinkat(m->lib_dfd, ".claim-policy.json", 0);
		if (cg_renamed)
			sbx_cgroup_rename(id, cg);
		snprintf(why, n, "cannot take the session's ID");
		return -1;
	}
	sbx_trace_step(&trace, "rename_dirs");
	int unmoved = renameat(m->lib_dfd, ".claim.json", m->lib_dfd, "session.json") == 0 ? 0 : errno;
	if (!unmoved && renameat(m->lib_dfd, ".claim-policy.json", m->lib_dfd, "policy.json") < 0)
		unmoved = errno;
	sbx_trace_step(&trace, "rename_files");
	m->s = ns;
	mon_title(m);
	if (unmoved) {
		snprintf(why, n, "cannot write the session record: %s", strerror(unmoved));
		return 1;
	}
	return 0;
}
