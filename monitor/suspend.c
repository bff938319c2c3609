/* sbx-monitor: suspend to disk, resume on demand, the idle policy
 * (sbx-snapshot(1) suspend and resume, sbx-policy(5) lifecycle:).
 *
 * A suspend writes the VM's memory into the session's own directory
 * (LIB/sessions/ID/suspend/memory.zst; the disk is scratch.img, where it
 * always is) and ends the VMM: no guest RAM, no vCPU.  The monitor stays,
 * small, holding the session lock, monitor.sock and agent.sock, the exec
 * records, the clients and the secrets (in its memory only).  So "locked"
 * still means "exists", every command finds the session where it was, and
 * a resume needs no new process: the next guest operation from any client
 * (sbx-exec, sbx-cp, sbx-kill --exec) or VMCTL RESUME starts a VMM from
 * the image, and the guest carries on with its processes, files and execs
 * as they were; the agent channel is the same stream, picked up where it
 * stopped.  An exiting monitor would have to hand over the lock, the
 * sockets and running execs' state to a new one at every resume: more
 * moving parts in exactly the path that must be fast.
 *
 * Never half: the image is built in .suspend-tmp and renamed to suspend
 * before the record says "suspended"; the VMM ends only after that.  A
 * monitor killed at any point leaves an unlocked record ("running" or
 * "suspended"): sbx-ps shows it crashed and sbx-gc reclaims it and both
 * directories (snapshot.h: sbx_suspend_gc).  A save that fails (disk
 * full) removes its directory and the VM runs on as it was.
 *
 * The stream to the guest is cut cleanly: a PING goes last, nothing is
 * written after it (agent_flush stops at susp.hold_end), and the VM stops
 * once its PONG is back, so nothing sent is in flight in the VMM; what
 * clients send meanwhile waits in aout for the resumed guest. */
#include "mon.h"
#include "capacity.h"

#include <poll.h>
#include <unistd.h>

#define SUSP_DIR SBX_SUSPEND_DIR
#define SUSP_TMP SBX_SUSPEND_TMP
#define SUSP_BARRIER_NS (10ull * 1000000000u)

/* Tests kill the monitor at a named point of a suspend (t1920):
 * "save" (the image half written), "saved" (the image complete, the
 * record not yet flipped), "recorded" (the record flipped, the VMM not yet
 * gone).  Read from the monitor's environment, which sbx-create gave it. */
void susp_fault_point(const struct mon *m, const char *at)
{
	const char *f = getenv("SBX_FAULT_SUSPEND");
	/* When split, the point is in the privileged half (its image, its
	 * record): killing it is killing the monitor. */
	if (f && !strcmp(f, at) && !mon_is_child(m))
		raise(SIGKILL);
}

static void susp_reply(struct mon *m, struct client *c, unsigned op, const char *state)
{
	struct sbx_buf b = { 0 };
	size_t off = sbx_frame_begin(&b, SBX_F_VMCTL, 0);
	sbx_tlv_u32(&b, SBX_T_OP, op);
	sbx_tlv_str(&b, SBX_T_STATE, state);
	sbx_frame_end(&b, off);
	client_send(m, c, &b);
	sbx_buf_free(&b);
}

/* --- the record's state and the TTL -------------------------------------- */

void susp_note_state(struct mon *m, const char *state)
{
	mon_note_state(&m->s, state);
	susp_arm_ttl(m);
}

/* lifecycle.ttl_counts: running: the TTL timer runs only while the VM
 * does, so it is set again at each change (loop.c arms the wall-clock
 * one). */
int susp_arm_ttl(struct mon *m)
{
	if (!m->s.limits.ttl_ms || !m->s.limits.ttl_running || m->timer.fd < 0)
		return 0;
	struct itimerspec its = { 0 };
	if (!strcmp(m->s.state, "running")) {
		uint64_t now = sbx_now_ns(), ttl = m->s.limits.ttl_ms * 1000000u;
		double run, paused, susp;
		sbx_session_times(&m->s, now, &run, &paused, &susp);
		uint64_t used = (uint64_t)(run * 1e9), at = now + (used < ttl ? ttl - used : 1);
		its.it_value.tv_sec = (time_t)(at / 1000000000u);
		its.it_value.tv_nsec = (long)(at % 1000000000u);
	}
	return timerfd_settime(m->timer.fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* --- exec records ------------------------------------------------------- */

/* An exec that ran across suspends says how many and for how long. */
void susp_exec_fields(struct mon *m, const struct exec *ex, json_t *o)
{
	uint64_t now = sbx_now_ns(), ms = 0;
	unsigned n = 0, have = m->susp.niv < SBX_ARRAY_LEN(m->susp.iv) ? m->susp.niv : SBX_ARRAY_LEN(m->susp.iv);
	for (unsigned i = 0; i < have; i++) {
		uint64_t from = m->susp.iv[i].from, to = m->susp.iv[i].to ? m->susp.iv[i].to : now;
		if (to <= ex->started_ns || from >= now)
			continue;
		n++;
		ms += (to - (from > ex->started_ns ? from : ex->started_ns)) / 1000000u;
	}
	json_object_set_new(o, "suspends", json_integer(n));
	json_object_set_new(o, "suspended_ms", json_integer((json_int_t)ms));
}

/* --- suspend -------------------------------------------------------------- */

static int suspendable(struct mon *m, struct sbx_err *err)
{
	/* Its memory image would hold the secrets (/run/secrets, the
	 * guest's page cache) in a host file, which sbx never writes. */
	if (m->sec.n)
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "session %s has secrets: it cannot be suspended (its memory image would hold them "
				   "on the host's disk); pause it instead (sbx-snapshot pause)",
				   m->s.id);
	/* A forwarded connection runs over the agent channel, which a
	 * suspend ends: the guest's end of it would be lost.  A forward with
	 * none open is no obstacle: its next connection resumes the session
	 * (port.c), as an exec does. */
	if (port_connections(m))
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "session %s has %u open forwarded connection(s) (sbx-port): suspend it once they "
				   "are closed, or pause it instead",
				   m->s.id, port_connections(m));
	if (m->s.pool || m->claim.stage == CLAIM_GUEST)
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "the session is still being created");
	if (!m->vm.pid || m->agent.fd < 0)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "the guest agent is gone");
	if (m->snap.c || m->snap.saving || m->snap.identity)
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "another snapshot operation is in progress; try again");
	return 0;
}

/* Everything queued for the guest, a PING last, written and read by it. */
static int barrier(struct mon *m, struct sbx_err *err)
{
	m->susp.token = 0x10000000u | (++m->susp.n & 0x0fffffffu); /* apart from the clock's 0x20000000 */
	m->susp.ponged = 0;
	sbx_frame_raw(&m->aout, SBX_F_PING, m->susp.token, NULL, 0);
	m->susp.hold_end = m->aout.len;
	m->susp.hold = 1;
	agent_flush(m);
	uint64_t deadline = sbx_mono_ns() + SUSP_BARRIER_NS;
	while (!m->susp.ponged && !m->vm_dead && !m->stopping && m->agent.fd >= 0) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest agent did not answer within %llu s",
					   (unsigned long long)(SUSP_BARRIER_NS / 1000000000u));
		if (mon_loop_once(m, (int)((deadline - now) / 1000000u) + 1) < 0)
			break;
	}
	if (!m->susp.ponged)
		return sbx_err_set(err, SBX_EXIT_NOENT, 0, "the session ended while it was being suspended");
	return 0;
}

static void release_hold(struct mon *m)
{
	m->susp.hold = 0;
	agent_flush(m);
}

static void susp_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	(void)what, (void)done, (void)total;
	susp_fault_point(ctx, "save");
}

/* The image in .suspend-tmp, then renamed to suspend: a directory that
 * is either complete or not there.  (The privileged half's, asked for by
 * mon_susp_image.) */
int susp_write_image(struct mon *m, uint64_t *bytes, struct sbx_err *err)
{
	char dir[PATH_MAX];
	sbx_rm_rf_at(m->lib_dfd, SUSP_TMP);
	sbx_rm_rf_at(m->lib_dfd, SUSP_DIR);
	if (mkdirat(m->lib_dfd, SUSP_TMP, 0700) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", SUSP_TMP);
	snprintf(dir, sizeof dir, "%s/sessions/%s/" SUSP_TMP, m->st.lib, m->s.id);
	m->vm.progress = susp_progress;
	m->vm.progress_ctx = m;
	m->vm.save_max_in = snap_stream_max(m); /* N6: at most about memory_mib */
	int rc = sbx_vm_save(&m->vm, dir, err);
	m->vm.progress = NULL;
	m->vm.save_max_in = 0;
	_cleanup_close_ int dfd = rc == 0 ? openat(m->lib_dfd, SUSP_TMP, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	struct stat sb;
	if (rc == 0 && (dfd < 0 || fsync(dfd) < 0 || fstatat(dfd, "memory.zst", &sb, 0) < 0))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot complete the memory image");
	if (rc == 0 && (renameat(m->lib_dfd, SUSP_TMP, m->lib_dfd, SUSP_DIR) < 0 || fsync(m->lib_dfd) < 0))
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot store the memory image");
	if (rc < 0) {
		sbx_rm_rf_at(m->lib_dfd, SUSP_TMP);
		sbx_rm_rf_at(m->lib_dfd, SUSP_DIR);
		return -1;
	}
	*bytes = (uint64_t)sb.st_size;
	susp_fault_point(m, "saved");
	return 0;
}

/* The VMM and what only it used: its pidfd, pipes and agent connection.
 * The listening sockets, the console files and the aout queue stay. */
static void drop_vmm(struct mon *m)
{
	if (m->vmm.fd >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->vmm.fd, NULL);
	if (m->vmev.fd > 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->vmev.fd, NULL);
	m->vmm.fd = m->vmev.fd = -1;
	mon_vm_kill(m);
	/* What the guest wrote before it stopped (its serial, the agent). */
	vmmout_close_pipes(m);
	if (m->agent.fd >= 0) {
		mon_read_into(m->agent.fd, &m->ain); /* nothing, normally: the PONG came last */
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->agent.fd, NULL);
		close(m->agent.fd);
		m->agent.fd = -1;
	}
	m->agent_want_out = 0;
}

static int susp_suspend(struct mon *m, const char *why, struct sbx_err *err)
{
	if (m->susp.suspended)
		return 0;
	if (suspendable(m, err) < 0)
		return -1;
	uint64_t t0 = sbx_mono_ns();
	int was_paused = m->snap.paused;
	m->susp.busy = 1;
	m->susp.wake = 0;
	struct sbx_err ignored = { 0 };
	int rc = 0;
	/* A paused guest runs again only to read up to the PING. */
	if (was_paused && mon_vm_resume(m, err) < 0)
		rc = -1;
	if (rc == 0)
		rc = barrier(m, err);
	if (rc == 0)
		rc = mon_vm_pause(m, err);
	uint64_t bytes = 0;
	if (rc == 0 && mon_susp_image(m, &bytes, err) < 0) {
		rc = -1;
		if (err && err->errnum == ENOSPC) {
			char msg[sizeof err->msg];
			snprintf(msg, sizeof msg, "%s", err->msg);
			snprintf(err->msg, sizeof err->msg,
				 "no space for the memory image in %s/sessions/%s (%s); the session runs on", m->st.lib,
				 m->s.id, msg);
			err->code = SBX_EXIT_TEMPFAIL;
		}
	}
	/* The commit point: the record says it, with the image in place. */
	char before[16];
	snprintf(before, sizeof before, "%s", m->s.state);
	uint64_t since = m->s.state_since_ns, paused_ns = m->s.paused_ns;
	if (rc == 0) {
		susp_note_state(m, "suspended");
		m->s.suspends++;
		m->s.vmm_pid = 0;
		m->s.vmm_start = 0;
		if (mon_record_save(m, err) < 0) {
			mon_susp_discard(m);
			snprintf(m->s.state, sizeof m->s.state, "%s", before);
			m->s.state_since_ns = since;
			m->s.paused_ns = paused_ns;
			m->s.suspends--;
			m->s.vmm_pid = m->vm.pid;
			m->s.vmm_start = m->vm.start_time;
			susp_arm_ttl(m);
			rc = -1;
		}
	}
	if (rc < 0) {
		/* It goes on as it was: running, or paused. */
		if (m->vm.pid && !was_paused)
			mon_vm_resume(m, &ignored);
		else if (m->vm.pid)
			mon_vm_pause(m, &ignored);
		release_hold(m);
		m->susp.busy = 0;
		json_t *f = json_pack("{s:s, s:s, s:b, s:s}", "session", m->s.id, "reason", why, "ok", 0, "error",
				      err ? err->msg : "");
		mon_audit(m, "session.suspend", f, NULL);
		json_decref(f);
		return -1;
	}
	susp_fault_point(m, "recorded");
	drop_vmm(m);
	/* The network goes with the VMM (the namespace dies with its TAP
	 * and the proxy's sockets): rebuilt at resume. */
	if (m->s.mac[0]) {
		mon_stop_network(m);
		mon_record_save(m, NULL);
	}
	m->snap.paused = 0;
	m->paused_since = 0;
	m->hb.sent = 0;
	m->susp.suspended = 1;
	m->susp.idle_paused = 0;
	m->susp.since_mono = sbx_mono_ns();
	unsigned slot = m->susp.niv % SBX_ARRAY_LEN(m->susp.iv);
	m->susp.iv[slot].from = m->s.state_since_ns;
	m->susp.iv[slot].to = 0;
	m->susp.niv++;
	m->susp.busy = 0;
	unsigned running = 0;
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		running += !ex->done;
	json_t *f = json_pack("{s:s, s:s, s:b, s:I, s:I, s:i}", "session", m->s.id, "reason", why, "ok", 1,
			      "memory_bytes", (json_int_t)bytes, "suspend_ms",
			      (json_int_t)((sbx_mono_ns() - t0) / 1000000u), "execs_running", (int)running);
	mon_audit(m, "session.suspend", f, NULL);
	json_decref(f);
	return 0;
}

/* --- resume ---------------------------------------------------------------- */

/* A pipe for the VMM's output: the write end the VMM's, the read end the
 * loop's (which keeps the file open across a suspend). */
static int out_pipe(const char *name, int *rd, int *wr, struct sbx_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe for %s", name);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	*rd = p[0];
	*wr = p[1];
	return 0;
}

/* The VMM as mon_boot started it, from the image instead of the kernel:
 * the same template files, disks, shape and sockets (the guest's devices
 * must be the very same).  The privileged half's (mon_susp_vmm asks for
 * it): fds gets the console's and vmm.log's read ends (on a failure too,
 * so what the VMM said is kept) and the agent connection. */
int susp_boot_vmm(struct mon *m, int fds[3], struct sbx_err *err)
{
	fds[0] = fds[1] = fds[2] = -1;
	struct sbx_template t;
	char spec[200];
	snprintf(spec, sizeof spec, "%s@%s", m->s.tmpl_name[0] ? m->s.tmpl_name : "default", m->s.tmpl_version);
	if (sbx_template_find(&m->st, spec, &t, err) < 0)
		return -1;
	const struct sbx_vmm_ops *ops = sbx_vmm_lookup(m->s.vmm[0] ? m->s.vmm : "qemu");
	if (!ops)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record names an unknown VMM '%s'", m->s.vmm);
	int accept_agent = ops->agent_mode == SBX_AGENT_ACCEPT;
	char scratch[1200], vols[8][1200], dir[PATH_MAX], pkg_params[SBX_PKGPARAMS_MAX];
	snprintf(scratch, sizeof scratch, "%s/sessions/%s/scratch.img", m->st.lib, m->s.id);
	snprintf(dir, sizeof dir, "%s/sessions/%s/" SUSP_DIR, m->st.lib, m->s.id);
	struct sbx_vm_config c = {
		.ops = ops,
		.kernel = t.kernel,
		.initrd = t.initrd,
		.rootfs = t.rootfs,
		.scratch = scratch,
		.agent_sock = accept_agent ? "agent.sock" : NULL,
		.vsock_sock = accept_agent ? NULL : "vsock/agent.sock",
		.qmp_sock = "qmp.sock",
		.hostname = m->s.id,
		.vcpus = m->s.vcpus,
		.memory_mib = m->s.memory_mib,
		.disk_bps = m->s.limits.disk_bps,
		.disk_iops = m->s.limits.disk_iops,
		.accel = strcmp(m->s.accel, "kvm") ? SBX_ACCEL_TCG : SBX_ACCEL_KVM,
		.tsc_khz = sbx_host_tsc_khz(),
		.sandbox = 1,
		.restore_dir = dir,
	};
	sbx_pkgcache_guest_params(&m->s.limits.packages, pkg_params, sizeof pkg_params);
	c.guest_params = pkg_params;
	for (unsigned i = 0; i < m->s.nvols; i++)
		snprintf(vols[i], sizeof vols[i], "%s/sessions/%s/vol%u.img", m->st.lib, m->s.id, i);
	mon_vm_volumes(m, &c, vols);
	/* The memory load runs uncapped, as a restore's does (snap_restored). */
	struct sbx_cg_limits cl = { .memory = ((uint64_t)m->s.memory_mib + 512) << 20, .pids = 512 };
	if (sbx_cgroup_create(sbx_session_cgroup(&m->s), &cl, c.cg_fds, &c.cg_nfds, err) < 0)
		return -1;
	_cleanup_close_ int con_w = -1, log_w = -1;
	/* A fresh namespace, TAP and proxy for the NIC in the image (when
	 * split, h_susp_vmm hands the proxy's log pipe and pidfd on). */
	struct sbx_netns net = { -1, -1, -1, -1, -1, -1 };
	int rc = 0;
	if (m->s.mac[0]) {
		/* It saves the record (the proxy's pid), which take_room left
		 * saying "running": so it stays until the resume is done. */
		char was[sizeof m->s.state];
		snprintf(was, sizeof was, "%s", m->s.state);
		snprintf(m->s.state, sizeof m->s.state, "running");
		rc = mon_start_network(m, &net, &c, err);
		snprintf(m->s.state, sizeof m->s.state, "%s", was);
	}
	if (rc == 0)
		rc = out_pipe("console.log", &fds[0], &con_w, err) < 0 || out_pipe("vmm.log", &fds[1], &log_w, err) < 0
			     ? -1
			     : 0;
	c.stdout_fd = con_w;
	c.stderr_fd = log_w;
	if (rc == 0)
		rc = sbx_vm_boot(&c, &m->vm, err);
	sbx_netns_close(&net);
	for (int i = 0; i < c.cg_nfds; i++)
		close(c.cg_fds[i]);
	if (rc < 0) {
		if (m->s.mac[0])
			mon_stop_network(m);
		return -1;
	}
	if (sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), mon_cpu_milli(m), mon_cpu_weight(m)) < 0)
		rc = sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the CPU cap of the host cgroup");
	int fd = -1;
	if (rc == 0 && accept_agent) {
		/* QEMU connects as it starts, before it loads the image. */
		struct pollfd p = { .fd = m->agent_listen.fd, .events = POLLIN };
		fd = poll(&p, 1, 10000) == 1 ? accept4(m->agent_listen.fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)
					     : -1;
		if (fd < 0)
			rc = sbx_err_set(err, SBX_EXIT_UNAVAIL, errno,
					 "the resumed VMM did not connect to the agent socket");
	}
	if (rc == 0)
		rc = sbx_vm_resume(&m->vm, err);
	/* Cloud Hypervisor: we connect, once the guest's vsock listens. */
	for (uint64_t deadline = sbx_mono_ns() + 10ull * 1000000000u; rc == 0 && !accept_agent && fd < 0;) {
		struct sbx_err e = { 0 };
		if ((fd = ops->agent_connect(&m->vm, &c, &e)) >= 0)
			break;
		if (e.code || sbx_mono_ns() >= deadline)
			rc = sbx_err_set(err, e.code ? e.code : SBX_EXIT_UNAVAIL, 0, "the resumed guest's agent: %s",
					 e.code ? e.msg : "no answer in 10 s");
		else
			usleep(15000);
	}
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		sbx_vm_kill(&m->vm);
		if (m->s.mac[0])
			mon_stop_network(m);
		return -1;
	}
	fds[2] = fd;
	return 0;
}

/* A suspended session holds no room on the host (capacity.h counts it
 * not); it asks for its vCPUs and memory back as a create would, and the
 * record says "running" before the global lock is dropped, so two resumes
 * (or a create) cannot both take the last room.  75 when it does not fit:
 * it stays suspended. */
int susp_take_room(struct mon *m, struct sbx_err *err)
{
	_cleanup_close_ int g = sbx_lock_global(&m->st, err);
	if (g < 0 ||
	    sbx_capacity_admit(&m->st, m->s.tenant[0] ? m->s.tenant : NULL, m->s.vcpus, m->s.memory_mib, err) < 0)
		return -1;
	/* The record only: the time accounting follows in susp_resume. */
	struct sbx_session *r = malloc(sizeof *r);
	if (!r)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot resume");
	*r = m->s;
	snprintf(r->state, sizeof r->state, "running");
	int rc = sbx_record_save(&m->st, r, err);
	free(r);
	return rc;
}

static int susp_resume(struct mon *m, const char *why, struct sbx_err *err)
{
	if (!m->susp.suspended)
		return 0;
	uint64_t t0 = sbx_mono_ns();
	m->susp.busy = 1;
	int room = mon_susp_room(m, err);
	if (room < 0 || mon_susp_vmm(m, err) < 0) {
		if (room == 0)
			mon_record_save(m, NULL); /* suspended still */
		m->susp.busy = 0;
		sbx_err_wrap(err, "cannot resume session %s", m->s.id);
		json_t *f = json_pack("{s:s, s:s, s:s, s:b, s:s}", "session", m->s.id, "from", "disk", "reason", why,
				      "ok", 0, "error", err->msg);
		mon_audit(m, "session.resume", f, NULL);
		json_decref(f);
		return -1;
	}
	uint64_t now = sbx_mono_ns(), d = now - m->susp.since_mono;
	/* The guest's clock stood still, as it does while paused: so do the
	 * host's exec deadlines and the heartbeat. */
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		if (ex->deadline)
			ex->deadline += d;
	m->hb.sent = 0;
	m->hb.next = now + m->hb.interval;
	m->susp.suspended = 0;
	m->susp.idle_mono = 0;
	m->susp.iv[(m->susp.niv - 1) % SBX_ARRAY_LEN(m->susp.iv)].to = sbx_now_ns();
	/* What clients sent meanwhile goes now, and the guest's clock, which
	 * stood still, catches up (agent_time_sync). */
	release_hold(m);
	agent_time_sync(m, 0);
	port_rearm(m); /* connections accepted while it was away */
	susp_note_state(m, "running");
	m->s.vmm_pid = m->vm.pid;
	m->s.vmm_start = m->vm.start_time;
	m->s.resume_ms = (sbx_mono_ns() - t0) / 1000000u;
	if (m->susp.ttl_hit) {
		/* Suspended at its TTL (lifecycle.on_ttl): it gets that TTL
		 * again, from now (or what was set meanwhile). */
		struct sbx_err e = { 0 };
		m->susp.ttl_hit = 0;
		if (mon_ttl_from_now(m, m->susp.ttl_len ? m->susp.ttl_len : m->s.limits.ttl_ms, &e) < 0)
			m->expired = 1; /* no timer: it cannot run unbounded */
	}
	mon_record_save(m, NULL);
	/* Loaded: the image is of a past the guest has left. */
	mon_susp_discard(m);
	m->susp.busy = 0;
	json_t *f = json_pack("{s:s, s:s, s:s, s:b, s:I, s:I}", "session", m->s.id, "from", "disk", "reason", why, "ok",
			      1, "resume_ms", (json_int_t)m->s.resume_ms, "suspended_ms", (json_int_t)(d / 1000000u));
	mon_audit(m, "session.resume", f, NULL);
	json_decref(f);
	return 0;
}

/* A client asked for the guest while a suspend was under way: it goes
 * on at once. */
static void wake_pending(struct mon *m)
{
	struct sbx_err err = { 0 };
	if (m->susp.wake && m->susp.suspended && susp_resume(m, "on demand", &err) < 0)
		for (struct exec *ex = m->execs, *next; ex; ex = next) {
			next = ex->next;
			if (ex->client && !ex->started)
				client_error(m, ex->client, ex->n, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		}
	m->susp.wake = 0;
}

/* --- the hooks -------------------------------------------------------------- */

/* VMCTL SUSPEND, asked for by m->susp.c: run from the main loop, never
 * from inside a client's frame (the barrier runs the event loop, which
 * reads that client too). */
static void suspend_asked(struct mon *m)
{
	struct sbx_err err = { 0 };
	m->susp.want = 0;
	int rc = susp_suspend(m, "sbx-snapshot", &err);
	if (m->susp.c && rc < 0)
		client_error(m, m->susp.c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
	else if (m->susp.c)
		susp_reply(m, m->susp.c, SBX_VMCTL_SUSPEND, "suspended");
	m->susp.c = NULL;
	wake_pending(m);
}

int susp_vmctl(struct mon *m, struct client *c, unsigned op)
{
	struct sbx_err err = { 0 };
	if (m->susp.busy || m->susp.want) {
		client_error(m, c, 0, SBX_EXIT_TEMPFAIL, "the session is being suspended or resumed; try again");
		return 1;
	}
	if (op == SBX_VMCTL_SUSPEND) {
		if (m->susp.suspended)
			susp_reply(m, c, op, "suspended");
		else if (suspendable(m, &err) < 0)
			client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		else {
			m->susp.want = 1;
			m->susp.c = c;
		}
		return 1;
	}
	/* Asked for in so many words, a pause (or resume) is no longer the
	 * idle policy's to undo. */
	if (op == SBX_VMCTL_PAUSE || op == SBX_VMCTL_RESUME)
		m->susp.idle_paused = 0;
	if (!m->susp.suspended)
		return 0;
	if (op == SBX_VMCTL_RESUME) {
		if (susp_resume(m, "sbx-snapshot", &err) < 0)
			client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		else
			susp_reply(m, c, op, "running");
		return 1;
	}
	client_error(m, c, 0, SBX_EXIT_CONFLICT, "the session is suspended: resume it first (sbx-snapshot resume)");
	return 1;
}

int susp_wake_guest(struct mon *m, struct sbx_err *err)
{
	m->susp.idle_mono = 0;
	if (m->susp.busy) {
		m->susp.wake = 1; /* queued behind the PING; sent once resumed */
		return 0;
	}
	/* The idle policy's pause is undone as transparently as its suspend;
	 * a pause someone asked for stays (sbx-exec --resume). */
	if (m->susp.idle_paused && m->snap.paused && snap_set_paused(m, 0, err) < 0)
		return -1;
	m->susp.idle_paused = 0;
	if (m->susp.suspended && susp_resume(m, "on demand", err) < 0)
		return -1;
	return 0;
}

int susp_wake(struct mon *m, struct client *c, const struct sbx_frame *f)
{
	if (f->type == SBX_F_VMCTL || f->type == SBX_F_SHUTDOWN || f->type == SBX_F_CLAIM)
		return 0;
	struct sbx_err err = { 0 };
	if (susp_wake_guest(m, &err) < 0) {
		client_error(m, c, f->stream, err.code ? err.code : SBX_EXIT_INTERNAL, err.msg);
		return -1;
	}
	return 0;
}

void susp_pong(struct mon *m, uint32_t token)
{
	if (m->susp.hold && token == m->susp.token)
		m->susp.ponged = 1;
}

/* The proxy's pipe (netns.h): a byte a change, from either half.  At
 * most one read a loop turn (level-triggered: the rest comes next turn),
 * so a proxy that floods it cannot hold the loop. */
void mon_proxy_busy_read(struct mon *m)
{
	unsigned char b[512];
	ssize_t n = read(m->proxybusy.fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0)
		return mon_proxy_busy_close(m); /* gone, and its connections with it */
	for (ssize_t i = 0; i < n; i++) {
		switch (b[i]) {
		case SBX_PROXY_BUSY_NET: m->proxy_busy |= PROXY_BUSY_NET; break;
		case SBX_PROXY_IDLE_NET: m->proxy_busy &= ~PROXY_BUSY_NET; break;
		case SBX_PROXY_BUSY_PKG: m->proxy_busy |= PROXY_BUSY_PKG; break;
		case SBX_PROXY_IDLE_PKG: m->proxy_busy &= ~PROXY_BUSY_PKG; break;
		default: m->proxy_busy |= PROXY_BUSY_LIED; break;
		}
	}
}

void mon_proxy_busy_close(struct mon *m)
{
	if (m->proxybusy.fd >= 0) {
		if (m->ep >= 0)
			epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxybusy.fd, NULL);
		close(m->proxybusy.fd);
	}
	m->proxybusy.fd = -1;
	m->proxy_busy = 0;
}

/* The idle policy's notion of busy: an exec running, a client connected
 * (sbx-exec, sbx-cp, an attacher: anyone talking to the monitor), a
 * connection open through the proxy (as it says) or a forwarded one. */
static int idle_busy(const struct mon *m)
{
	if (m->nclients || m->proxy_busy || port_connections(m))
		return 1;
	for (const struct exec *ex = m->execs; ex; ex = ex->next)
		if (!ex->done)
			return 1;
	return 0;
}

/* What keeps a session from being suspended for as long as it lives or
 * until someone acts (suspendable says why): the idle policy pauses it
 * instead. */
static int never_suspends(const struct mon *m)
{
	return m->sec.n != 0;
}

static int idle_policy(const struct mon *m)
{
	return (m->s.limits.idle_pause_ms || m->s.limits.idle_suspend_ms) && !m->s.pool &&
	       m->claim.stage == CLAIM_NONE && m->ready;
}

int susp_wait_ms(struct mon *m)
{
	if (m->susp.want || m->susp.ttl_due)
		return 0;
	if (!idle_policy(m) || m->susp.suspended || m->susp.busy)
		return -1;
	uint64_t now = sbx_mono_ns();
	if (idle_busy(m)) {
		m->susp.idle_mono = 0;
		return -1; /* its end (a client gone, an exec done) wakes the loop */
	}
	if (!m->susp.idle_mono)
		m->susp.idle_mono = now;
	const struct sbx_limits *l = &m->s.limits;
	uint64_t next = 0;
	if (l->idle_pause_ms && !m->snap.paused)
		next = l->idle_pause_ms;
	else if (l->idle_suspend_ms && never_suspends(m) && !m->snap.paused)
		next = l->idle_suspend_ms; /* paused then, not suspended */
	else if (l->idle_suspend_ms && !never_suspends(m))
		next = l->idle_suspend_ms;
	if (!next)
		return -1;
	uint64_t at = m->susp.idle_mono + next * 1000000u;
	return at <= now ? 0 : (int)((at - now) / 1000000u) + 1;
}

int susp_ttl(struct mon *m)
{
	if (!m->s.limits.ttl_suspend || m->s.pool)
		return -1;
	if (m->susp.suspended) {
		m->susp.ttl_hit = 1; /* suspended already (idle): it stays so */
		return 0;
	}
	/* What cannot be suspended ends, as without the key (a session with
	 * secrets: sbx-policy(5)); the refusal is in the audit trail. */
	struct sbx_err err = { 0 };
	if (suspendable(m, &err) < 0) {
		json_t *f = json_pack("{s:s, s:s, s:b, s:s}", "session", m->s.id, "reason", "ttl", "ok", 0, "error",
				      err.msg);
		mon_audit(m, "session.suspend", f, NULL);
		json_decref(f);
		return -1;
	}
	m->susp.ttl_due = 1;
	return 0;
}

/* lifecycle.on_ttl: suspend, from the main loop as an idle suspend is. */
static void ttl_suspend(struct mon *m)
{
	struct sbx_err err = { 0 };
	m->susp.ttl_due = 0;
	if (m->susp.suspended) {
		m->susp.ttl_hit = 1;
		return;
	}
	if (susp_suspend(m, "ttl", &err) < 0) {
		m->expired = 1; /* it ends, as without the key (audited) */
		return;
	}
	m->susp.ttl_hit = 1;
	/* A client following a running exec would wait for as long as the
	 * session sleeps: it is told, and let go; the exec runs on when the
	 * session does, its output on disk for --attach. */
	for (struct exec *ex = m->execs; ex; ex = ex->next) {
		if (ex->done || !ex->client || ex->client->dead)
			continue;
		char msg[300];
		snprintf(msg, sizeof msg,
			 "session %s was suspended at its TTL (lifecycle.on_ttl: suspend); exec %s runs on when it is "
			 "resumed: sbx-exec --attach %s %s",
			 m->s.id, ex->id, ex->id, m->s.id);
		client_error(m, ex->client, ex->n, SBX_EXIT_UNAVAIL, msg);
		ex->client->dead = 1;
	}
	wake_pending(m);
}

void susp_tick(struct mon *m)
{
	if (m->susp.ttl_due && !m->susp.busy)
		return ttl_suspend(m);
	if (m->susp.want && !m->susp.busy)
		return suspend_asked(m);
	if (susp_wait_ms(m) != 0)
		return;
	const struct sbx_limits *l = &m->s.limits;
	uint64_t idle_ms = (sbx_mono_ns() - m->susp.idle_mono) / 1000000u;
	struct sbx_err err = { 0 };
	if (l->idle_suspend_ms && idle_ms >= l->idle_suspend_ms && never_suspends(m)) {
		if (!m->snap.paused && snap_set_paused(m, 1, &err) == 0)
			m->susp.idle_paused = 1;
		else
			m->susp.idle_mono = sbx_mono_ns(); /* again after another idle period */
		return;
	}
	if (l->idle_suspend_ms && idle_ms >= l->idle_suspend_ms) {
		if (susp_suspend(m, "idle", &err) < 0)
			m->susp.idle_mono = sbx_mono_ns(); /* tried; again after another idle period */
		wake_pending(m);
		return;
	}
	if (l->idle_pause_ms && idle_ms >= l->idle_pause_ms && !m->snap.paused) {
		if (snap_set_paused(m, 1, &err) == 0)
			m->susp.idle_paused = 1;
		else
			m->susp.idle_mono = sbx_mono_ns();
	}
}

/* The session ends while suspended (TTL): its image is of no use. */
void susp_discard(struct mon *m)
{
	mon_susp_discard(m);
	m->susp.suspended = 0;
}
