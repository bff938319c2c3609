/* sbx-monitor: snapshots: pause, resume, save, a fresh identity (snapshot.h). */
#include "mon.h"

/* Its PONG is nobody's (apart from the suspend's 0x1..., the clock's
 * 0x2...). */
#define SNAP_WS_PING 0x30000000u

/* --- snapshots: pause, resume, save, a fresh identity (snapshot.h) -------- */

#define SNAP_QUIESCE_NS (30ull * 1000000000u)
#define SNAP_RINSE_FRAMES 5 /* of SBX_FRAME_MAX bytes: see snap_save_begin */

void snap_reply(struct mon *m, struct client *c, unsigned op)
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
int snap_set_paused(struct mon *m, int paused, struct sbx_err *err)
{
	if (m->snap.paused == paused)
		return 0;
	if ((paused ? mon_vm_pause(m, err) : mon_vm_resume(m, err)) < 0)
		return -1;
	json_t *f = json_pack("{s:s}", "session", m->s.id);
	int rc = mon_audit(m, paused ? "session.pause" : "session.resume", f, err);
	json_decref(f);
	if (rc < 0) {
		struct sbx_err ignored = { 0 };
		if (paused)
			mon_vm_resume(m, &ignored);
		else
			mon_vm_pause(m, &ignored);
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
		agent_time_sync(m, 0); /* ... and the guest's clock must catch up */
	}
	m->snap.paused = paused;
	susp_note_state(m, paused ? "paused" : "running"); /* and the time spent in the last */
	mon_record_save(m, NULL);
	return 0;
}

/* A fresh identity for the guest: the hostname (default the session ID),
 * the host's wall clock, and randomness to mix in and reseed from.  For a
 * restored VM, VMCTL IDENTITY and a warm-pool claim.  Queued and flushed;
 * the guest answers with IDENTITY (snap_identity_reply), or an ERROR on
 * stream 0 (snap_guest_error). */
int snap_identity_queue(struct mon *m, const char *hostname, const char *pkg, int keep)
{
	uint8_t seed[64];
	if (getrandom(seed, sizeof seed, 0) != (ssize_t)sizeof seed)
		return -1;
	size_t off = sbx_frame_begin(&m->aout, SBX_F_IDENTITY, 0);
	sbx_tlv_str(&m->aout, SBX_T_HOSTNAME, hostname && *hostname ? hostname : m->s.id);
	sbx_tlv_put(&m->aout, SBX_T_SEED, seed, sizeof seed);
	sbx_tlv_u64(&m->aout, SBX_T_TIME_NS, sbx_now_ns());
	if (pkg) /* a claim's (claim_pkg) */
		sbx_tlv_str(&m->aout, SBX_T_PKG, pkg);
	/* Running execs stay, under their streams; the next is ours to say. */
	if (keep)
		sbx_tlv_u32(&m->aout, SBX_T_NEXT_STREAM, m->next_exec + 1);
	sbx_frame_end(&m->aout, off);
	explicit_bzero(seed, sizeof seed);
	if (keep)
		snap_execs_flow_off(m);
	if (m->aout.oom)
		return -1;
	m->snap.identity = 1;
	agent_flush(m);
	return 0;
}

void snap_identity_reply(struct mon *m, const struct sbx_frame *f)
{
	if (!m->snap.identity || f->stream)
		return;
	m->snap.identity = 0;
	agent_note_guest(m, f);
	if (m->snap.c && m->snap.op == SBX_VMCTL_IDENTITY) {
		snap_reply(m, m->snap.c, SBX_VMCTL_IDENTITY);
		m->snap.c = NULL;
		m->snap.op = 0;
	}
	/* A restore: like a mon_boot's HELLO, ready now, or once the secrets
	 * (this session's own; the snapshot has none) are in place. */
	if (m->snap.restoring && !m->ready && !m->secrets_sent)
		agent_secrets_then_ready(m);
}

/* A paused session runs while its guest prepares for a save (only the
 * agent can: no exec is running); when the save does not happen after
 * all, it is stopped again. */
static void snap_repause(struct mon *m)
{
	struct sbx_err ignored = { 0 };
	if (m->snap.paused)
		mon_vm_pause(m, &ignored);
}

/* The secrets again after a save wiped them from the guest. */
static void snap_secrets_back(struct mon *m)
{
	if (!m->sec.n || m->agent.fd < 0 || sbx_buf_reserve(&m->aout, m->sec.frame_len) < 0)
		return;
	sbx_buf_put(&m->aout, m->sec.frame, m->sec.frame_len);
	agent_flush(m);
}

/* The guest held everything after its QUIESCE answer (SBX_QUIESCE_KEEP):
 * the save is done (or did not happen), so it may send on.  Also for an
 * answer that came after we gave up waiting for it. */
void snap_release(struct mon *m)
{
	if (m->agent.fd < 0)
		return;
	size_t off = sbx_frame_begin(&m->aout, SBX_F_QUIESCE, 0);
	sbx_tlv_u32(&m->aout, SBX_T_FLAGS, SBX_QUIESCE_RELEASE);
	sbx_frame_end(&m->aout, off);
	agent_flush(m);
}

/* An ERROR on stream 0 answering our QUIESCE or IDENTITY: 1 when it was. */
int snap_guest_error(struct mon *m, const struct sbx_frame *f)
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

/* The most a save or suspend of this VM may read from its VMM: the
 * guest's memory and the device-state allowance (N6). */
uint64_t snap_stream_max(const struct mon *m)
{
	return ((uint64_t)m->s.memory_mib << 20) + SBX_SAVE_DEVICE_ALLOWANCE;
}

/* The bytes of the regular files in directory dfd (what a VMM's save
 * wrote there: memory.zst for QEMU, Cloud Hypervisor's own files). */
static uint64_t dir_bytes(int dfd)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	uint64_t n = 0;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	struct dirent *e;
	struct stat sb;
	while ((e = readdir(d)))
		if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
			n += (uint64_t)sb.st_size;
	closedir(d);
	return n;
}

/* The stopped VM's state and its disk into m->snap.dir (snap_dir_ok
 * checked it): the save's own part, which the privileged half does for the
 * unprivileged one (mon_snap_write).  Memory and disk together stay
 * within max_bytes (the tenant's snapshot_bytes left; 0: no cap): the
 * quota is checked again once the snapshot is complete, but a write past
 * it must stop while it runs, not after. */
int snap_write(struct mon *m, sbx_zprogress progress, void *ctx, uint64_t max_bytes, const char *execs,
	       struct sbx_err *err)
{
	m->vm.progress = progress;
	m->vm.progress_ctx = ctx;
	m->vm.save_max_in = snap_stream_max(m);
	m->vm.save_max_out = max_bytes;
	int rc = sbx_vm_save(&m->vm, m->snap.dir, err);
	m->vm.save_max_in = m->vm.save_max_out = 0;
	_cleanup_close_ int dfd = rc == 0 ? open(m->snap.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
	if (rc == 0 && dfd < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open the snapshot directory");
	uint64_t left = 0;
	if (rc == 0 && max_bytes) {
		uint64_t mem = dir_bytes(dfd);
		left = mem < max_bytes ? max_bytes - mem : 0;
		if (!left)
			rc = sbx_err_set(
				err, SBX_EXIT_TEMPFAIL, EDQUOT,
				"the memory image took all of the tenant's snapshot_bytes left (%llu bytes): the "
				"save was stopped",
				(unsigned long long)max_bytes);
	}
	if (rc == 0) {
		char scratch[1200];
		snprintf(scratch, sizeof scratch, "%s/sessions/%s/scratch.img", m->st.lib, m->s.id);
		rc = sbx_zdisk_pack(scratch, dfd, "scratch.zst", left, progress, ctx, err);
		if (rc < 0 && err && err->errnum == EDQUOT)
			sbx_err_set(
				err, SBX_EXIT_TEMPFAIL, EDQUOT,
				"the snapshot passed the tenant's snapshot_bytes left (%llu bytes) while its disk was "
				"saved: the save was stopped",
				(unsigned long long)max_bytes);
	}
	/* The running execs' records (snapexec.c), within what is left. */
	uint64_t eb = 0;
	if (rc == 0 && execs)
		rc = snap_execs_write(m, dfd, execs, &eb, err);
	if (rc == 0 && execs && max_bytes && dir_bytes(dfd) > max_bytes)
		rc = sbx_err_set(err, SBX_EXIT_TEMPFAIL, EDQUOT,
				 "the snapshot passed the tenant's snapshot_bytes left (%llu bytes) with the running "
				 "execs' output: the save was stopped",
				 (unsigned long long)max_bytes);
	m->vm.progress = NULL;
	return rc;
}

/* The guest is quiet (no exec, no secret): stop the VM, write its state
 * and its disk (the VMM flushed it when it stopped), and let it go on as
 * it was, running or paused.  Synchronous: nothing else can happen to a stopped VM,
 * and new execs are refused meanwhile. */
void snap_save_run(struct mon *m)
{
	struct client *c = m->snap.c;
	struct sbx_err err = { 0 };
	int was_paused = m->snap.paused; /* then resumed only for the quiesce */
	int rc = mon_vm_pause(m, &err);
	/* The execs' records as they are now: the guest's answer was the
	 * last thing it said, so they hold exactly what it sent before it
	 * (the rest waits in the image). */
	int none = 1;
	_cleanup_free_ char *execs = snap_execs_state(m, &none);
	if (rc == 0 && !none && !execs)
		rc = sbx_err_set(&err, SBX_EXIT_INTERNAL, ENOMEM, "cannot record the running execs");
	if (rc == 0)
		rc = mon_snap_write(m, snap_progress, execs, &err);
	struct sbx_err rerr = { 0 };
	if (!was_paused && mon_vm_resume(m, &rerr) < 0) {
		/* Still stopped: say so rather than pretend. */
		m->snap.paused = 1;
		snprintf(m->s.state, sizeof m->s.state, "paused");
		mon_record_save(m, NULL);
		if (rc == 0) {
			err = rerr;
			rc = -1;
		}
	}
	snap_secrets_back(m);
	if (m->snap.keep)
		snap_release(m);
	/* The guest mounts its workspace again at the next frame it reads
	 * (guest-init: on_quiesce): one now, not at the next exec. */
	if (m->s.workspace[0]) {
		sbx_frame_raw(&m->aout, SBX_F_PING, SNAP_WS_PING, NULL, 0);
		agent_flush(m);
	}
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
int snap_dir_ok(struct mon *m, const char *rel)
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
	    strstr(part[2], "..") ||
	    strspn(part[2], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-") != strlen(part[2]))
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

static void snap_save_begin(struct mon *m, struct client *c, const char *rel, uint64_t max_bytes)
{
	/* As a suspend (suspend.c): the memory image would hold the
	 * secrets.  The guest wipes /run/secrets for a save, but not a copy
	 * kept by a root process, one outside exec tracking or a variable
	 * bound to one (-e), and a snapshot published as a template would
	 * hand them to every session restored from it (review r3, N9). */
	if (m->sec.n) {
		char msg[SBX_ID_MAX + 160];
		snprintf(msg, sizeof msg,
			 "session %s has secrets: it cannot be saved (its memory image would hold them on the host's "
			 "disk)",
			 m->s.id);
		return client_error(m, c, 0, SBX_EXIT_CONFLICT, msg);
	}
	/* A NIC is: a restore gets a fresh namespace, TAP and proxy for the
	 * same device and MAC (loop.c: mon_start_network).  So is a
	 * workspace, by name: the guest unmounts it for the save (QUIESCE)
	 * and mounts it again after, as a restore re-attaches it.  Volumes
	 * are copies of host directories made at boot, which a restore
	 * could not make again as they were. */
	if (m->s.nvols)
		return client_error(m, c, 0, SBX_EXIT_CONFLICT,
				    "a session with volumes (-v) cannot be saved: they are copies of host directories "
				    "made at its boot, which a restore could not make again as they were");
	if (m->agent.fd < 0)
		return client_error(m, c, 0, SBX_EXIT_INTERNAL, "the guest agent is gone");
	/* Running execs stay running, in the source and in every copy
	 * (snapexec.c), with a guest-init that can hold its output across
	 * the save (SBX_GUEST_KEEP_EXECS); an older one cannot. */
	unsigned running = 0;
	char first[16] = "";
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done && running++ == 0)
			snprintf(first, sizeof first, "%s", ex->id);
	m->snap.keep = (m->guest_caps & SBX_GUEST_KEEP_EXECS) != 0;
	if (running && !m->snap.keep) {
		char msg[300];
		snprintf(msg, sizeof msg,
			 "%u exec%s still running (%s%s) and this session's guest-init cannot keep them across a save "
			 "(its template predates it): wait for them or end them (sbx-kill --exec), then save",
			 running, running > 1 ? "s are" : " is", first, running > 1 ? ", ..." : "");
		return client_error(m, c, 0, SBX_EXIT_CONFLICT, msg);
	}
	if (mon_snap_dir(m, rel) < 0)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "not a snapshot directory of this session's tenant");
	struct sbx_err err = { 0 };
	if (m->snap.paused && mon_vm_resume(m, &err) < 0)
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
	m->snap.max_bytes = max_bytes;
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
	size_t qoff = sbx_frame_begin(&m->aout, SBX_F_QUIESCE, 0);
	if (m->snap.keep)
		sbx_tlv_u32(&m->aout, SBX_T_FLAGS, SBX_QUIESCE_KEEP);
	sbx_frame_end(&m->aout, qoff);
	agent_flush(m);
}

/* A guest that never answered a QUIESCE does not keep the session busy. */
void snap_check_deadline(struct mon *m)
{
	if (!m->snap.saving || sbx_mono_ns() < m->snap.deadline)
		return;
	m->snap.saving = 0;
	snap_repause(m);
	snap_secrets_back(m);
	if (m->snap.keep) /* behind the QUIESCE: should it answer late, it does not hold */
		snap_release(m);
	if (m->snap.c)
		client_error(m, m->snap.c, 0, SBX_EXIT_UNAVAIL, "the guest did not get ready for the save in time");
	m->snap.c = NULL;
	m->snap.op = 0;
}

/* VMCTL from a client (sbx-snapshot, sbx-exec --resume). */
void mon_vmctl(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	uint16_t tag;
	const uint8_t *v;
	uint32_t n, op = 0;
	uint64_t max_bytes = 0, ttl_ms = 0;
	char path[400] = "", host[SBX_ID_MAX + 1] = "";
	struct sbx_err err = { 0 };
	sbx_tlv_init(&it, f->payload, f->len);
	int rc;
	while ((rc = sbx_tlv_next(&it, &tag, &v, &n)) == 1) {
		if ((tag == SBX_T_OP && sbx_tlv_as_u32(v, n, &op) == 0) ||
		    (tag == SBX_T_MAX_BYTES && sbx_tlv_as_u64(v, n, &max_bytes) == 0) ||
		    (tag == SBX_T_TTL_MS && sbx_tlv_as_u64(v, n, &ttl_ms) == 0) ||
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
	if (op == SBX_VMCTL_TTL) /* any time: it touches nothing of the VM */
		return mon_set_ttl(m, c, ttl_ms);
	if (m->snap.c || m->snap.saving || m->snap.identity)
		return client_error(m, c, 0, SBX_EXIT_TEMPFAIL, "another snapshot operation is in progress; try again");
	if (susp_vmctl(m, c, op)) /* suspend, and what a suspended session may do */
		return;
	switch (op) {
	case SBX_VMCTL_PAUSE:
	case SBX_VMCTL_RESUME:
		if (snap_set_paused(m, op == SBX_VMCTL_PAUSE, &err) < 0)
			return client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		return snap_reply(m, c, op);
	case SBX_VMCTL_SAVE: return snap_save_begin(m, c, path, max_bytes);
	case SBX_VMCTL_IDENTITY:
		if (m->snap.paused)
			return client_error(m, c, 0, SBX_EXIT_CONFLICT, "the session is paused: resume it first");
		/* An older guest-init drops all exec state with a new identity;
		 * one that can keep them does (SBX_GUEST_KEEP_EXECS). */
		for (struct exec *ex = m->execs; ex; ex = ex->next)
			if (!ex->done && !(m->guest_caps & SBX_GUEST_KEEP_EXECS))
				return client_error(m, c, 0, SBX_EXIT_CONFLICT,
						    "execs are running: a new identity would end them");
		if (m->agent.fd < 0 ||
		    snap_identity_queue(m, host, NULL, (m->guest_caps & SBX_GUEST_KEEP_EXECS) != 0) < 0)
			return client_error(m, c, 0, SBX_EXIT_INTERNAL, "cannot send the guest its identity");
		m->snap.c = c;
		m->snap.op = op;
		return;
	}
}

/* A restore's progress, for sbx-create to draw: lines on the readiness
 * pipe before the verdict, at most 10 a second. */
void snap_boot_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	struct mon *m = ctx;
	uint64_t now = sbx_mono_ns();
	if (done == 0 || done == total) /* SBX_TRACE: the VMM started; the image sent */
		sbx_trace_step(&m->boot_tr, done == 0 ? "vmm_spawn" : "pump");
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
int snap_restored(struct mon *m, struct sbx_err *err)
{
	/* The CPU cap, held back while the VMM loaded the memory (mon_boot). */
	if (sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), mon_cpu_milli(m), mon_cpu_weight(m)) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the CPU cap of the host cgroup");
	if (sbx_vm_resume(&m->vm, err) < 0)
		return -1;
	m->snap.restoring = 1;
	return 0;
}

/* The session's disk as it was saved. */
int snap_restore_disk(struct mon *m, const char *scratch, struct sbx_err *err)
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
