/* sbx-monitor: set-up, the loop, the end of a session. */
#include "mon.h"
#include "pkgrules.h"

#include <malloc.h>
#include <sys/prctl.h>
#include <sys/resource.h>

void mon_ep_mod(struct mon *m, struct src *s, uint32_t ev, int op)
{
	struct epoll_event e = { .events = ev, .data.ptr = s };
	epoll_ctl(m->ep, op, s->fd, &e);
}

/* --- set-up, the loop, the end ----------------------------------------- */

int mon_listen_unix(const char *name, struct sbx_err *err)
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
 * trace, so look further back than the tail shown in messages.  Read
 * through the monitor's own fd of console.log (the unprivileged half
 * cannot open the file). */
static int console_says_panic(const struct vmmout *o)
{
	int fd = o->fd;
	if (fd < 0)
		return 0;
	static char buf[65536];
	struct stat sb;
	off_t end = fstat(fd, &sb) == 0 ? sb.st_size : 0;
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
	if (!mon_vm_reap(m, &status))
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
	else if (console_says_panic(&m->console))
		snprintf(m->vm_end, sizeof m->vm_end, "console reported a panic");
	else if (WIFSIGNALED(status))
		snprintf(m->vm_end, sizeof m->vm_end, "VMM killed by signal %d", WTERMSIG(status));
	else if (WEXITSTATUS(status) && !m->vm_shutdown)
		snprintf(m->vm_end, sizeof m->vm_end, "VMM exited with status %d", WEXITSTATUS(status));
	else
		snprintf(m->vm_end, sizeof m->vm_end, "guest powered off");
}

/* The VMM's own account (Cloud Hypervisor's event monitor).  A panic or a
 * reset ends the session here, since that VMM would mon_boot the guest again
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
	mon_vm_kill(m); /* closes the pidfd: it leaves the epoll set */
	m->vmm.fd = -1;
	m->vm_dead = 1;
	vmmout_drain_all(m);
	snprintf(m->vm_end, sizeof m->vm_end, "%s",
		 ev == SBX_VM_EV_PANIC             ? "guest panic"
		 : console_says_panic(&m->console) ? "console reported a panic"
						   : "guest rebooted");
}

/* The session's proxy on the listeners of n, its stderr kept as
 * proxy.log (kept open across a suspend, so its cap holds over the
 * session's life); its pid and start time in m->s (the caller saves the
 * record). */
static int spawn_proxy(struct mon *m, const struct sbx_netns *n, struct sbx_err *err)
{
	_cleanup_close_ int log = -1;
	int parent = m->priv.role == PRIV_ROLE_PARENT;
	if (parent) {
		/* The unprivileged half's loop reads the log and keeps its file
		 * (priv.c hands them over): the file only if it has none yet,
		 * never truncating the one it writes. */
		if ((m->priv.proxylog_child
			     ? vmmout_pipe(&m->proxylog, "proxy.log", &log, err)
			     : vmmout_open(m->lib_dfd, &m->proxylog, "proxy.log", PROXY_LOG_CAP, &log, err)) < 0)
			return -1;
	} else if (m->proxylog.fd >= 0) { /* kept across a suspend */
		if (vmmout_reopen(m, &m->proxylog, &log, err) < 0)
			return -1;
	} else if (vmmout_open(m->lib_dfd, &m->proxylog, "proxy.log", PROXY_LOG_CAP, &log, err) < 0) {
		return -1;
	} else {
		mon_ep_mod(m, &m->proxylog.src, EPOLLIN, EPOLL_CTL_ADD);
	}
	uint64_t start = 0;
	mon_proxy_busy_close(m); /* a proxy before this one's (the parent's: handed over) */
	if (sbx_netns_spawn_proxy(m->s.id, n, log, &m->proxy_pid, &m->proxy.fd, &start, &m->proxybusy.fd, err) < 0)
		return -1;
	if (!parent) {
		mon_ep_mod(m, &m->proxy, EPOLLIN, EPOLL_CTL_ADD);
		mon_ep_mod(m, &m->proxybusy, EPOLLIN, EPOLL_CTL_ADD);
	}
	m->s.proxy_pid = m->proxy_pid;
	m->s.proxy_start = start;
	m->s.net_lost[0] = 0; /* a resume's or a claim's new proxy: the network is back */
	return 0;
}

/* A session with a NIC (its record has a MAC): its namespace, then its
 * proxy, before the VMM; the VMM gets the TAP and the namespace.  The
 * proxy's pid and start time go into the record at once, so sbx-kill and
 * sbx-gc can end a proxy whose monitor died.  A warm-pool member gets a
 * bare namespace instead (the TAP alone: nothing behind it), which its
 * claim finishes (mon_attach_network); the monitor keeps it for that.  Its
 * guest configures eth0 at boot as any: the gateway answers from then.
 *
 * The one place a session's egress plumbing is built for a VM booted with
 * its NIC or one whose NIC is in a memory image (a restore, a resume from
 * suspend): every namespace is laid out alike (netns.h: the same addresses
 * and gateway MAC), so the guest's own network configuration works
 * unchanged in a fresh one.  A restore of a snapshot, or a resume, gets a
 * new namespace (nothing names them, so none can be taken), a new TAP and
 * a new proxy; connections open before are gone (the guest sees resets). */
int mon_start_network(struct mon *m, struct sbx_netns *n, struct sbx_vm_config *c, struct sbx_err *err)
{
	if (m->s.pool) {
		if (sbx_netns_create_bare(n, err) < 0)
			return -1;
		if ((m->bare_netns = fcntl(n->netns_fd, F_DUPFD_CLOEXEC, 3)) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot keep the network namespace");
	} else if (sbx_netns_create(n, m->s.limits.net_rate, err) < 0 || spawn_proxy(m, n, err) < 0 ||
		   sbx_record_save(&m->st, &m->s, err) < 0) {
		return -1;
	}
	c->netns_fd = n->netns_fd;
	c->tap_fd = n->tap_fd;
	c->tap_name = SBX_NET_TAP;
	c->mac = m->s.mac;
	c->net_rate = m->s.limits.net_rate;
	return 0;
}

/* Egress for a VM whose NIC exists already: its TAP in netns_fd, a bare
 * namespace (sbx_netns_create_bare) the VMM holds.  The namespace gets
 * what sbx_netns_create gives a new one (address, rules, listeners) and
 * the session's proxy is started on them, from the record and policy.json
 * under m->s.id (the caller saves the record).  -1: err set, nothing
 * started (the namespace may be half configured: the caller ends the VM). */
int mon_attach_network(struct mon *m, int netns_fd, struct sbx_err *err)
{
	struct sbx_netns n;
	if (sbx_netns_complete(netns_fd, m->s.limits.net_rate, &n, err) < 0)
		return -1;
	int rc = spawn_proxy(m, &n, err);
	sbx_netns_close(&n); /* the proxy's now */
	return rc;
}

/* A suspend: the proxy ends (the namespace goes with it and the VMM's
 * TAP), proxy.log stays open for the next one; no host resources but
 * the disk are held for the network.  The record forgets the proxy. */
void mon_stop_network(struct mon *m)
{
	mon_proxy_stop(m);
	vmmout_drain(m, &m->proxylog);
	if (m->proxylog.src.fd >= 0) {
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxylog.src.fd, NULL);
		close(m->proxylog.src.fd);
		m->proxylog.src.fd = -1;
	}
	m->s.proxy_pid = 0;
	m->s.proxy_start = 0;
}

int mon_loop_once(struct mon *m, int timeout_ms)
{
	struct epoll_event ev[32];
	/* Whatever was queued for the guest goes before we sleep: a frame
	 * queued without a flush is sent now, not at some later wake-up. */
	if (m->aout_off < m->aout.len)
		agent_flush(m);
	int n = epoll_wait(m->ep, ev, 32, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	for (int i = 0; i < n; i++) {
		struct src *s = ev[i].data.ptr;
		switch (s->kind) {
		case SRC_LISTEN: client_accept(m); break;
		case SRC_AGENT_LISTEN: {
			int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd >= 0 && m->agent.fd < 0) {
				m->agent.fd = fd;
				mon_ep_mod(m, &m->agent, EPOLLIN, EPOLL_CTL_ADD);
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
		case SRC_VMM: on_vmm_exit(m); break;
		case SRC_PROXY: mon_proxy_reap(m); break;
		case SRC_PROXY_BUSY: mon_proxy_busy_read(m); break;
		case SRC_VMEV: on_vm_event(m); break;
		case SRC_PORT_LISTEN:
		case SRC_PORT_CONN: port_event(m, s, ev[i].events); break;
		case SRC_DEAD: break; /* closed by an earlier event of this turn */
		case SRC_VMMOUT:
			vmmout_drain(m, s == &m->console.src  ? &m->console
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
			if (read(s->fd, &x, sizeof x) == sizeof x && m->ready && susp_ttl(m) < 0)
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
	port_tick(m);
	port_reap(m);
	if (m->spare.want && m->spare.on && m->ready && !m->stopping && !m->vm_dead)
		exec_spare_make(m);
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

static int setup(struct mon *m, const struct sbx_monitor_args *a, struct sbx_err *err)
{
	/* Before the secrets: the monitor holds them (and every exec's stdin)
	 * in memory for the session's life, so a crash writes no core file,
	 * and it is not dumpable (no ptrace, no /proc/PID/mem, environ or fd
	 * for anyone without CAP_SYS_PTRACE).  Its children inherit both until
	 * they exec; the VMM's and the proxy's jails set their own. */
	struct rlimit none = { 0, 0 };
	if (setrlimit(RLIMIT_CORE, &none) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot turn off core dumps");
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
	m->pkglog_fd = openat(m->lib_dfd, "packages.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	m->ep = epoll_create1(EPOLL_CLOEXEC);
	sigset_t set;
	mon_signals(&set);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	m->sig.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (m->ep < 0 || m->sig.fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set up the event loop");
	mon_ep_mod(m, &m->sig, EPOLLIN, EPOLL_CTL_ADD);
	m->s.monitor_pid = getpid();
	m->s.monitor_start = sbx_proc_start_time(getpid());
	/* Known from the start, so sbx-kill can end a monitor stuck in mon_boot. */
	return sbx_record_save(&m->st, &m->s, err);
}

/* The TTL counts from creation, on the wall clock, so it also holds across
 * a suspended host. */
int mon_arm_ttl(struct mon *m)
{
	m->timer.fd = timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK);
	if (m->timer.fd < 0)
		return -1;
	uint64_t at = m->s.created_ns + m->s.limits.ttl_ms * 1000000u;
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at / 1000000000u),
						.tv_nsec = (long)(at % 1000000000u) } };
	if (timerfd_settime(m->timer.fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
		return -1;
	mon_ep_mod(m, &m->timer, EPOLLIN, EPOLL_CTL_ADD);
	m->susp.ttl_len = m->s.limits.ttl_ms; /* as created (or claimed) */
	return 0;
}

int mon_ttl_from_now(struct mon *m, uint64_t left_ms, struct sbx_err *err)
{
	uint64_t now = sbx_now_ns(), was = m->s.limits.ttl_ms;
	m->s.limits.ttl_ms = (now > m->s.created_ns ? (now - m->s.created_ns) / 1000000u : 0) + left_ms;
	int rc;
	if (m->timer.fd < 0) {
		rc = mon_arm_ttl(m);
	} else {
		uint64_t at = m->s.created_ns + m->s.limits.ttl_ms * 1000000u;
		struct itimerspec its = { .it_value = { .tv_sec = (time_t)(at / 1000000000u),
							.tv_nsec = (long)(at % 1000000000u) } };
		rc = timerfd_settime(m->timer.fd, TFD_TIMER_ABSTIME, &its, NULL);
	}
	if (rc < 0 && !err->code)
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the session's timer");
	if (rc < 0 || mon_record_save(m, err) < 0) {
		m->s.limits.ttl_ms = was;
		return -1;
	}
	m->susp.ttl_len = left_ms;
	return 0;
}

/* VMCTL TTL: the session ends left_ms from now.  The timer is set again
 * (made, for a session that had no TTL) and the record follows. */
void mon_set_ttl(struct mon *m, struct client *c, uint64_t left_ms)
{
	struct sbx_err err = { 0 };
	if (!left_ms || left_ms > SBX_TTL_LEFT_MAX_MS)
		return client_error(m, c, 0, SBX_EXIT_INVALID, "a time left out of range");
	if (m->s.limits.ttl_running)
		return client_error(m, c, 0, SBX_EXIT_CONFLICT,
				    "the session's TTL counts its running time (lifecycle.ttl_counts), not the clock");
	if (mon_ttl_from_now(m, left_ms, &err) < 0)
		return client_error(m, c, 0, err.code ? err.code : SBX_EXIT_INTERNAL,
				    err.msg[0] ? err.msg : "cannot set the session's timer");
	/* Set while suspended at its TTL: this is the TTL it runs with. */
	m->susp.ttl_hit = 0;
	snap_reply(m, c, SBX_VMCTL_TTL);
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
	port_end(m, "session ended");
	mon_proxy_stop(m);
	mon_proxy_busy_close(m);
	exec_spare_drop(m);
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
	int fds[] = { m->bare_netns, m->listen.fd, m->agent_listen.fd, m->agent.fd,  m->sig.fd,  m->timer.fd,
		      m->ep,         m->lib_dfd,   m->run_dfd,         m->execs_dfd, m->priv.fd, m->priv.child_pidfd,
		      m->pkglog_fd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
		if (fds[i] > 0)
			close(fds[i]);
	if (m->vm.pidfd >= 0)
		close(m->vm.pidfd);
	m->vm.pidfd = -1;
	if (m->vm.ops && !mon_is_child(m))
		sbx_vm_kill(&m->vm); /* what the backend still holds (the VMM is gone) */
	sbx_state_close(&m->st);
}

/* The end of a session asked for (sbx-kill) or due (its TTL): a
 * workspace's filesystem is synced by a guest power-off first, then the
 * VM goes and its execs end as killed. */
static void stop_vm(struct mon *m)
{
	if (mon_has_workspace(m))
		mon_guest_poweroff(m);
	mon_vm_kill(m);
	mon_drop_workspace(m, 0);
	while (m->execs)
		exec_abort(m, m->execs, SBX_R_KILLED);
}

/* Every source closed, every fd -1, before anything can fail. */
static void mon_init(struct mon *m, const struct sbx_monitor_args *a)
{
	m->listen = (struct src){ SRC_LISTEN, -1 };
	m->agent_listen = (struct src){ SRC_AGENT_LISTEN, -1 };
	m->agent = (struct src){ SRC_AGENT, -1 };
	m->vmm = (struct src){ SRC_VMM, -1 };
	m->sig = (struct src){ SRC_SIGNAL, -1 };
	m->timer = (struct src){ SRC_TIMER, -1 };
	m->readyp = (struct src){ SRC_READY, a->ready_fd };
	m->proxy = (struct src){ SRC_PROXY, -1 };
	m->proxybusy = (struct src){ SRC_PROXY_BUSY, -1 };
	m->spare.dfd = m->spare.out = m->spare.err = -1;
	m->spare.want = 1;
	m->vmev = (struct src){ SRC_VMEV, -1 };
	m->console = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m->vmmlog = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m->proxylog = (struct vmmout){ .src = { SRC_VMMOUT, -1 }, .fd = -1 };
	m->vm.pidfd = -1;
	m->bare_netns = -1;
	m->ws.lock_fd = m->ws.dir_fd = -1;
	m->priv.fd = m->priv.child_pidfd = -1;

	/* A suspend's compressor and a resume's reader each take a few MiB
	 * and give them back.  With glibc's sliding mmap threshold the first
	 * free raises the threshold, the next ones come from the heap and
	 * stay in the RSS of a monitor that then sits suspended for hours
	 * (one session suspended six times: 4.4 MiB after the first, 6.8
	 * from the second on; with this, 4.4-4.6 throughout, and 200 such
	 * monitors are the density bench).  A fixed threshold keeps blocks
	 * from 128 KiB up mapped, and unmapped when freed; execs and output
	 * streams measured no different (A/B, 150 execs, 7 streams of 32
	 * MiB).  Set before the privileged half is forked: it inherits it. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	/* Inherited without O_CLOEXEC so they survive our exec; the VMM must
	 * not hold the session lock or the readiness pipe. */
	fcntl(a->lock_fd, F_SETFD, FD_CLOEXEC);
	if (a->ready_fd >= 0)
		fcntl(a->ready_fd, F_SETFD, FD_CLOEXEC);
	if (a->secrets_fd >= 0)
		fcntl(a->secrets_fd, F_SETFD, FD_CLOEXEC);
}

/* session.create, with what the session got: a session that cannot be
 * audited is not handed out. */
static int audit_create(struct mon *m, struct sbx_err *err)
{
	char tmpl[140];
	snprintf(tmpl, sizeof tmpl, "%s@%s", m->s.tmpl_name, m->s.tmpl_version);
	json_t *cf = json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:I, s:I, s:I, s:I}", "session", m->s.id, "template",
			       tmpl, "vcpus", (int)m->s.vcpus, "memory_mib", (int)m->s.memory_mib, "accel", m->s.accel,
			       "vmm", m->s.vmm, "boot_ms", (json_int_t)m->s.boot_ms, "ttl_s",
			       (json_int_t)(m->s.limits.ttl_ms / 1000), "disk_bytes",
			       (json_int_t)m->s.limits.disk_bytes, "volumes", (json_int_t)m->s.nvols);
	if (cf && m->s.snapshot[0])
		json_object_set_new(cf, "from_snapshot", json_string(m->s.snapshot));
	json_t *pr = cf ? sbx_pkgrules_audit_json(&m->s.limits.packages) : NULL;
	if (pr) /* which lock governs this session's installs */
		json_object_set_new(cf, "packages", pr);
	if (cf && m->s.snapshot[0] && m->execs) /* running, kept from the snapshot */
		json_object_set_new(cf, "execs", snap_execs_ids(m));
	if (cf && m->sec.n) {
		json_t *names = json_array(); /* names only, never values */
		for (unsigned i = 0; i < m->sec.n; i++)
			json_array_append_new(names, json_string(m->sec.s[i].name));
		json_object_set_new(cf, "secrets", names);
	}
	int crc = mon_audit(m, "session.create", cf, err);
	json_decref(cf);
	if (crc < 0) {
		sbx_err_wrap(err, "cannot write the audit trail");
		err->code = SBX_EXIT_INTERNAL;
		return -1;
	}
	return 0;
}

/* Set up, boot (or restore), arm the TTL, write the record and the
 * session.create: the session is ready, or -1 with err. */
static int mon_start(struct mon *m, const struct sbx_monitor_args *a, struct sbx_err *err)
{
	sbx_trace_begin(&m->boot_tr, "boot.monitor");
	if (setup(m, a, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "setup");
	/* The policy's cap as it is, 0 included (keep no output); before the
	 * boot: a restore's running execs may speak before it is ready. */
	m->output_cap = m->s.limits.output_cap;
	m->output_session_cap = m->s.limits.output_session_cap;
	if (mon_boot(m, err) < 0)
		return -1;
	/* A warm-pool member waits for a claim, paused (pool.h). */
	snprintf(m->s.state, sizeof m->s.state, m->s.pool ? "pooled" : "running");
	m->s.ready_ns = m->s.state_since_ns = sbx_now_ns();
	if (m->s.limits.ttl_ms && mon_arm_ttl(m) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot arm the session TTL");
	m->s.vmm_pid = m->vm.pid;
	m->s.vmm_start = m->vm.start_time;
	if (mon_record_save(m, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "record_save");
	if (m->s.pool) {
		/* No session.create for a member: it is nobody's session until
		 * a claim makes it one. */
		claim_pool_park(m);
		return 0;
	}
	if (audit_create(m, err) < 0)
		return -1;
	sbx_trace_step(&m->boot_tr, "audit");
	return 0;
}

/* The unwind of a session that never became ready: nothing was handed
 * out, so nothing of it stays but its failed session.create. */
static int mon_failed(struct mon *m, const struct sbx_monitor_args *a, struct sbx_err *err)
{
	sbx_trace_end(&m->boot_tr, 0);
	if (m->vm.pid)
		sbx_vm_kill(&m->vm);
	mon_drop_workspace(m, 1);
	if (m->st.lib_fd >= 0 && m->s.id[0]) {
		json_t *ff = json_pack("{s:s, s:b, s:i, s:s}", "session", m->s.id, "ok", 0, "code", err->code, "error",
				       err->msg);
		mon_audit(m, "session.create", ff, NULL);
		json_decref(ff);
	}
	if (m->st.sessions_fd >= 0 && m->s.id[0])
		mon_destroy(m, 0);
	report(a->ready_fd, err);
	ack_shutdowns(m);
	return err->code ? err->code : SBX_EXIT_INTERNAL;
}

/* The session's life: the guest, its clients, execs, deadlines, until it
 * is stopped, its VM ends or its TTL expires. */
static void mon_run(struct mon *m)
{
	const char *hbe = getenv("SBX_AGENT_PING_MS");
	m->hb.interval = (hbe && atoi(hbe) > 0 ? (uint64_t)atoi(hbe) : AGENT_PING_MS) * 1000000u;
	while (!m->stopping && !m->vm_dead && !m->expired) {
		int w = claim_wait_ms(m), x = exec_wait_ms(m), h = mon_heartbeat_wait_ms(m);
		if (x >= 0 && (w < 0 || x < w))
			w = x;
		if (h >= 0 && (w < 0 || h < w))
			w = h;
		if ((h = susp_wait_ms(m)) >= 0 && (w < 0 || h < w))
			w = h;
		if (mon_loop_once(m, w) < 0)
			break;
		claim_check_deadline(m);
		exec_deadlines(m);
		mon_heartbeat(m);
		susp_tick(m);
	}
	port_end(m, "session ended"); /* before the record says it ended */
}

/* Stopped (sbx-kill, or a claim that failed): the VM goes, and so does
 * everything of the session, with its session.destroy. */
static void finish_stopped(struct mon *m)
{
	stop_vm(m);
	uint64_t cpu = 0, peak = 0;
	mon_cg_usage(m, &cpu, &peak);
	/* A claim that did not complete leaves the member's old runtime
	 * directory behind too (claim_abandoned says so). */
	int left = mon_destroy(m, m->claim.stage == CLAIM_FAILED || m->claim.stage == CLAIM_GUEST);
	if (m->claim.stage == CLAIM_FAILED) {
		claim_abandoned(m); /* its session.create ok:false is the record */
		ack_shutdowns(m);
		return;
	}
	if (m->claim.stage == CLAIM_GUEST)
		claim_abandoned(m); /* sbx-kill came first: sbx-create exits 5 */
	/* A member whose claim failed before its commit goes under its own
	 * name, saying why. */
	int unclaimed = m->claim.touched && m->claim.stage == CLAIM_NONE;
	json_t *df = json_pack("{s:s, s:s, s:f, s:f, s:s}", "session", m->s.id, "reason",
			       unclaimed ? "claim-failed" : "sbx-kill", "duration_s",
			       (double)(sbx_now_ns() - m->s.created_ns) / 1e9, "cpu_s", (double)cpu / 1e9, "cleanup",
			       left ? "incomplete" : "complete");
	if (df && unclaimed)
		json_object_set_new(df, "error", json_string(m->claim.err));
	mon_audit(m, "session.destroy", df, NULL);
	json_decref(df);
	ack_shutdowns(m); /* after the record: sbx-kill returns on this */
}

/* How the session ended, in one of four ways. */
static void mon_finish(struct mon *m)
{
	if (m->expired && !m->stopping && !m->vm_dead) {
		/* TTL: the VM goes, the record and the output stay so the user
		 * sees what happened; sbx-kill (or sbx-gc) removes them. */
		stop_vm(m);
		char why[64];
		snprintf(why, sizeof why, "ttl of %llu s expired", (unsigned long long)(m->s.limits.ttl_ms / 1000));
		susp_discard(m);
		mon_end(m, "expired", why);
		return;
	}
	if (m->stopping) {
		finish_stopped(m);
		return;
	}
	if (m->claim.stage == CLAIM_GUEST) {
		/* Never half a claimed session: it goes, sbx-create boots cold. */
		claim_fail(m, SBX_EXIT_UNAVAIL, "the VM ended during the claim (%s)", m->vm_end);
		mon_destroy(m, 1);
		claim_abandoned(m);
		return;
	}
	/* The VM ended on its own: keep the record and the output so the user
	 * can see what happened; sbx-kill (or sbx-gc) reclaims the rest. */
	while (m->execs)
		exec_abort(m, m->execs, SBX_R_SESSION_LOST);
	mon_drop_workspace(m, 0);
	int crashed = strcmp(m->vm_end, "guest powered off") != 0;
	mon_end(m, crashed ? "crashed" : "stopped", m->vm_end);
}

int sbx_monitor_main(const struct sbx_monitor_args *a)
{
	struct mon m = { 0 };
	struct sbx_err err = { 0 };
	int rc = 0;
	mon_init(&m, a);
	if (mon_start(&m, a, &err) < 0) {
		rc = mon_failed(&m, a, &err);
		goto out;
	}
	sbx_trace_end(&m.boot_tr, 1); /* before the split: one line, the parent's */
	/* From here on, the guest and the clients are the unprivileged
	 * half's (priv.c); this process, when split, only answers it. */
	switch (mon_priv_start(&m, a->lock_fd, &err)) {
	case -1: rc = mon_failed(&m, a, &err); goto out;
	case 1: /* the child */ break;
	default:
		report(a->ready_fd, NULL);
		if (m.readyp.fd >= 0 && m.ep >= 0)
			epoll_ctl(m.ep, EPOLL_CTL_DEL, m.readyp.fd, NULL);
		if (m.readyp.fd >= 0)
			close(m.readyp.fd);
		m.readyp.fd = -1;
	}
	m.spare.on = 1; /* execs/ is this process's (the child's, when split) */
	if (m.priv.role == PRIV_ROLE_PARENT) {
		rc = mon_priv_serve(&m);
		goto out;
	}
	mon_run(&m);
	mon_finish(&m);
out:
	mon_drop_workspace(&m, rc != 0);
	int child = mon_priv_exit(&m, rc); /* the child's last word: the parent exits with it */
	mon_free(&m);
	/* The child ends with _exit: nothing of its own is left to flush
	 * (every record and audit append is written and synced as it goes),
	 * and exit()'s handlers include LeakSanitizer's check in a sanitizer
	 * build, which stops the process's threads through a ptrace helper
	 * thread the child's seccomp filter kills, and then waits for it in
	 * a sched_yield loop forever (seen: every session of the ASan pass
	 * left a child spinning, 100 of them at once).  The parent's own
	 * leak check still runs. */
	if (child)
		_exit(rc);
	return rc;
}

void mon_title(struct mon *m)
{
	setproctitle("-sbx-monitor --id %s", m->s.id);
}
