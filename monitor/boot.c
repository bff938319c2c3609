/* sbx-monitor: booting the VM: workspace, network, the VMM, the agent. */
#include "mon.h"

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
 * never came up goes with it.  (mon_drop_workspace, priv.c, asks for it
 * from the unprivileged half.) */
void mon_workspace_release(struct mon *m, int failed)
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
void mon_guest_poweroff(struct mon *m)
{
	while (m->execs)
		exec_abort(m, m->execs, SBX_R_KILLED);
	if (m->vm_dead || !m->vm.pid || m->agent.fd < 0)
		return;
	/* A paused guest cannot sync: it runs again only to power off. */
	struct sbx_err ignored = { 0 };
	if (m->snap.paused && mon_vm_resume(m, &ignored) == 0)
		m->snap.paused = 0;
	sbx_frame_raw(&m->aout, SBX_F_SHUTDOWN, 0, NULL, 0);
	agent_flush(m);
	uint64_t deadline = sbx_mono_ns() + 10ull * 1000000000u;
	for (uint64_t now; !m->vm_dead && (now = sbx_mono_ns()) < deadline;)
		if (mon_loop_once(m, (int)((deadline - now) / 1000000u) + 1) < 0)
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
		mon_ep_mod(m, &m->agent, EPOLLIN, EPOLL_CTL_ADD);
	}
	return 0;
}

/* The disks after root and scratch, alike at a boot and a resume from
 * suspend: the session's volumes (their images at vols[i]), then its
 * workspace's disk, the one writable. */
void mon_vm_volumes(struct mon *m, struct sbx_vm_config *c, char (*vols)[1200])
{
	for (unsigned i = 0; i < m->s.nvols; i++) {
		c->vol_path[i] = vols[i];
		c->vol_guest[i] = m->s.vols[i].guest;
	}
	c->nvols = m->s.nvols;
	if (m->ws.lock_fd >= 0 && c->nvols < 8) {
		c->vol_path[c->nvols] = m->ws.disk;
		c->vol_guest[c->nvols] = SBX_WORKSPACE_GUEST;
		c->vol_rw_mask |= 1u << c->nvols;
		c->nvols++;
	}
}

/* A boot that failed keeps its whole console (the kernel's messages at
 * its full log level, guest-init's): the last 256 KiB of console.log as
 * LIB/boot-failures/ID.console, the newest 16 such files kept.  A rare
 * hang is then read, not guessed at. */
#define BOOT_FAILURES "boot-failures"
#define BOOT_FAILURES_KEEP 16
#define BOOT_CONSOLE_MAX (256 << 10)

struct aged {
	char name[80];
	time_t t;
};

static int newer_first(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;
	return x->t < y->t ? 1 : x->t > y->t ? -1 : strcmp(x->name, y->name);
}

/* The newest BOOT_FAILURES_KEEP stay (of the first 1024 read). */
static void prune_boot_failures(int dfd)
{
	_cleanup_closedir_ DIR *d = fdopendir(fcntl(dfd, F_DUPFD_CLOEXEC, 0));
	static struct aged f[1024];
	size_t n = 0;
	for (struct dirent *e; d && n < SBX_ARRAY_LEN(f) && (e = readdir(d));) {
		struct stat sb;
		if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof f[0].name &&
		    fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
			snprintf(f[n].name, sizeof f[n].name, "%s", e->d_name);
			f[n++].t = sb.st_mtime;
		}
	}
	qsort(f, n, sizeof f[0], newer_first);
	for (size_t i = BOOT_FAILURES_KEEP; i < n; i++)
		unlinkat(dfd, f[i].name, 0);
}

static void keep_console(struct mon *m)
{
	if (m->st.lib_fd < 0 || !m->s.id[0])
		return;
	_cleanup_close_ int in = openat(m->run_dfd, "console.log", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat sb;
	if (in < 0 || fstat(in, &sb) < 0 || !S_ISREG(sb.st_mode))
		return;
	if (mkdirat(m->st.lib_fd, BOOT_FAILURES, 0700) < 0 && errno != EEXIST)
		return;
	_cleanup_close_ int dfd = openat(m->st.lib_fd, BOOT_FAILURES, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char name[SBX_ID_MAX + 16];
	snprintf(name, sizeof name, "%s.console", m->s.id);
	_cleanup_close_ int out =
		dfd < 0 ? -1 : openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return;
	off_t off = sb.st_size > BOOT_CONSOLE_MAX ? sb.st_size - BOOT_CONSOLE_MAX : 0;
	static char buf[64 << 10];
	ssize_t r;
	while ((r = pread(in, buf, sizeof buf, off)) > 0 && write(out, buf, (size_t)r) == r)
		off += r;
	prune_boot_failures(dfd);
	snprintf(m->boot_console, sizeof m->boot_console, "%s/" BOOT_FAILURES "/%s", m->st.lib, name);
}

/* The VM is launched: wait for its guest agent's HELLO (or a restored
 * guest's answer), until the boot deadline; a failure's message carries
 * the console's last lines and where its whole console was kept. */
static int boot_wait(struct mon *m, const struct sbx_vm_config *c, int accept_agent, uint64_t t0, struct sbx_err *err)
{
	m->vmm.fd = m->vm.pidfd;
	mon_ep_mod(m, &m->listen, EPOLLIN, EPOLL_CTL_ADD);
	if (accept_agent)
		mon_ep_mod(m, &m->agent_listen, EPOLLIN, EPOLL_CTL_ADD);
	mon_ep_mod(m, &m->vmm, EPOLLIN, EPOLL_CTL_ADD);
	if ((m->vmev.fd = m->vm.event_fd) > 0)
		mon_ep_mod(m, &m->vmev, EPOLLIN, EPOLL_CTL_ADD);
	if (m->readyp.fd >= 0)
		mon_ep_mod(m, &m->readyp, 0, EPOLL_CTL_ADD); /* EPOLLERR: the reader closed */
	unsigned timeout_s = sbx_boot_timeout_s();
	uint64_t deadline = t0 + (uint64_t)timeout_s * 1000000000u, next_connect = 0;
	while (!m->ready && !m->vm_dead && !m->stopping && !m->secrets_err[0] && !m->snap.err[0]) {
		uint64_t now = sbx_mono_ns(), until = deadline;
		if (now >= deadline)
			break;
		warm_check(m);
		if (m->ready)
			continue;
		if (m->warm.deadline && m->warm.deadline < until)
			until = m->warm.deadline;
		/* A restored guest says no HELLO: it is told who it is now. */
		if (m->snap.restoring && !m->snap.told && m->agent.fd >= 0) {
			if (snap_identity_queue(m, NULL, NULL, m->execs != NULL) < 0)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot send the guest its identity");
			m->snap.told = 1;
		}
		if (!accept_agent && m->agent.fd < 0 && now >= next_connect) {
			/* Until the guest listens, every ~15 ms. */
			if (agent_connect(m, c, err) < 0)
				return -1;
			next_connect = now + 15000000u;
		}
		if (!accept_agent && m->agent.fd < 0 && next_connect < until)
			until = next_connect;
		mon_loop_once(m, (int)((until - now) / 1000000u) + 1);
	}
	if (m->ready) {
		sbx_trace_step(&m->boot_tr, "guest_ready");
		m->s.boot_ms = (sbx_mono_ns() - t0) / 1000000u;
		return 0;
	}
	char tail[400];
	vmmout_drain_all(m);
	keep_console(m);
	/* The tail's end is the news: short enough that the message (512
	 * bytes) keeps it with the path of the whole console. */
	size_t tn = m->boot_console[0] ? 240 : sizeof tail;
	sbx_log_tail(m->run_dfd, m->vm_dead ? "vmm.log" : "console.log", tail, tn);
	if (!tail[0])
		sbx_log_tail(m->run_dfd, "console.log", tail, tn);
	if (m->secrets_err[0])
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the guest did not take the secrets: %s", m->secrets_err);
	if (m->snap.err[0])
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the restored guest refused its new identity: %s",
				   m->snap.err);
	if (m->secrets_sent && !m->vm_dead && !m->stopping)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest did not confirm the secrets within %u s",
				   timeout_s);
	if (m->vm_dead)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VM ended during mon_boot (%s)%s%s%s%s", m->vm_end,
				   tail[0] ? ": " : "", tail, m->boot_console[0] ? "; whole console: " : "",
				   m->boot_console);
	if (m->stopping && m->killed_in_boot)
		return sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
				   "session %s was destroyed (sbx-kill) while it was being created", m->s.id);
	if (m->stopping)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "interrupted during mon_boot");
	if (m->snap.restoring)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the restored guest did not answer within %u s%s%s%s%s",
				   timeout_s, tail[0] ? "; console: " : "", tail,
				   m->boot_console[0] ? "; whole console: " : "", m->boot_console);
	/* Where it stopped: the VMM never connected the channel, or nothing
	 * (or no HELLO) came over it. */
	char chan[64];
	if (accept_agent && m->agent.fd < 0 && !m->agent_rx)
		snprintf(chan, sizeof chan, " (the VMM never connected the agent channel)");
	else
		snprintf(chan, sizeof chan, " (%llu bytes from the guest)", (unsigned long long)m->agent_rx);
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the guest agent did not answer within %u s%s%s%s%s%s", timeout_s,
			   chan, tail[0] ? "; console: " : "", tail, m->boot_console[0] ? "; whole console: " : "",
			   m->boot_console);
}

/* The template the record names, at the version it was created from. */
static int boot_template(struct mon *m, struct sbx_template *t, struct sbx_err *err)
{
	if (sbx_template_find(&m->st, m->s.tmpl_name[0] ? m->s.tmpl_name : "default", t, err) < 0)
		return -1;
	if (strcmp(t->version, m->s.tmpl_version)) {
		char spec[200];
		snprintf(spec, sizeof spec, "%s@%s", m->s.tmpl_name, m->s.tmpl_version);
		if (sbx_template_find(&m->st, spec, t, err) < 0)
			return -1;
	}
	return 0;
}

/* The session's disks: the writable one (exactly its quota: ENOSPC in
 * the guest when full, never more on the host; from a snapshot, its disk
 * as it was saved, and the execs it was running, this session's before
 * its VM runs: snapexec.c), the -v volumes' images (each copied with the
 * rights of whoever named it: caller.h), the workspace. */
static int boot_disks(struct mon *m, char scratch[1200], char vols[8][1200], struct sbx_err *err)
{
	snprintf(scratch, 1200, "%s/sessions/%s/scratch.img", m->st.lib, m->s.id);
	if (m->s.snapshot_dir[0]
		    ? snap_restore_disk(m, scratch, err) < 0
		    : sbx_disk_scratch(scratch, m->s.limits.disk_bytes ? m->s.limits.disk_bytes : 1ull << 30, err) < 0)
		return -1;
	if (m->s.snapshot_dir[0] && snap_execs_restore(m, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "disk");
	for (unsigned i = 0; i < m->s.nvols; i++) {
		snprintf(vols[i], 1200, "%s/sessions/%s/vol%u.img", m->st.lib, m->s.id, i);
		if (sbx_disk_from_dir(vols[i], m->s.vols[i].host, m->s.vols[i].uid, m->s.vols[i].gid, err) < 0)
			return -1;
	}
	return m->s.workspace[0] ? attach_workspace(m, err) : 0;
}

int mon_boot(struct mon *m, struct sbx_err *err)
{
	struct sbx_template t;
	char scratch[1200], vols[8][1200];
	if (boot_template(m, &t, err) < 0 || boot_disks(m, scratch, vols, err) < 0)
		return -1;
	const struct sbx_vmm_ops *ops = sbx_vmm_lookup(m->s.vmm[0] ? m->s.vmm : "qemu");
	if (!ops)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the record names an unknown VMM '%s'", m->s.vmm);
	/* The agent channel: the VMM connects to agent.sock (QEMU), or we
	 * connect to the VM's vsock socket once the guest listens. */
	int accept_agent = ops->agent_mode == SBX_AGENT_ACCEPT;
	if ((m->listen.fd = mon_listen_unix("monitor.sock", err)) < 0 ||
	    (accept_agent && (m->agent_listen.fd = mon_listen_unix("agent.sock", err)) < 0))
		return -1;
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
		.tsc_reliable = sbx_host_tsc_invariant(),
		.sandbox = 1,
	};
	/* Where the guest's pip and npm go (pkgcache.h). */
	char pkg_params[SBX_PKGPARAMS_MAX];
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
		.cpu_milli = m->s.snapshot_dir[0] ? 0 : mon_cpu_milli(m),
		.memory = ((uint64_t)m->s.memory_mib + 512) << 20,
		.pids = 512,
		.weight = mon_cpu_weight(m),
	};
	sbx_trace_step(&m->boot_tr, "listen");
	if (sbx_cgroup_create(m->s.id, &cl, c.cg_fds, &c.cg_nfds, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "cgroup");
	mon_vm_volumes(m, &c, vols);
	/* The proxy's listeners and the TAP are theirs once they run: the
	 * monitor keeps none of the namespace. */
	struct sbx_netns net = { -1, -1, -1, -1, -1, -1 };
	if (m->s.mac[0] && mon_start_network(m, &net, &c, err) < 0) {
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
	mon_ep_mod(m, &m->console.src, EPOLLIN, EPOLL_CTL_ADD);
	mon_ep_mod(m, &m->vmmlog.src, EPOLLIN, EPOLL_CTL_ADD);
	sbx_trace_step(&m->boot_tr, "vmmout");
	uint64_t t0 = sbx_mono_ns();
	int brc = sbx_vm_boot(&c, &m->vm, err);
	close(sbx_steal_fd(&con_w)); /* only the VMM writes them now */
	close(sbx_steal_fd(&log_w));
	sbx_netns_close(&net);
	for (int i = 0; i < c.cg_nfds; i++)
		close(c.cg_fds[i]);
	m->vm.progress = NULL;
	if (brc < 0) {
		vmmout_explain(m, err);
		return -1;
	}
	sbx_trace_step(&m->boot_tr, "vm_boot");
	if (c.restore_dir && snap_restored(m, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "resume");
	return boot_wait(m, &c, accept_agent, t0, err);
}
