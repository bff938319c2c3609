/* Backend selection and the calls shared by every backend. */
#include "vmm.h"
#include "jail.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/sched.h>

/* The backends, in order of preference: the first that can run this
 * session is taken (Cloud Hypervisor when there is KVM and no NIC, else
 * QEMU).  A new VMM is one file and one entry here; what each can do is
 * in its ops (kvm_only, nic). */
static const struct sbx_vmm_ops *const backends[] = { &sbx_vmm_cloud_hypervisor, &sbx_vmm_qemu };

const struct sbx_vmm_ops *sbx_vmm_lookup(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_LEN(backends); i++)
		if (name && !strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

/* "qemu, cloud-hypervisor": the names, for messages. */
static const char *backend_names(char *buf, size_t n)
{
	size_t len = 0;
	buf[0] = 0;
	for (size_t i = SBX_ARRAY_LEN(backends); i-- > 0 && len < n;)
		len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", backends[i]->name);
	return buf;
}

/* Why ops cannot run this session (NULL: it can), with err set when its
 * binary is missing. */
static const char *unfit(const struct sbx_vmm_ops *ops, enum sbx_accel accel, int needs_nic, struct sbx_err *err)
{
	if (ops->available(err) < 0)
		return "is not installed";
	if (ops->kvm_only && accel != SBX_ACCEL_KVM)
		return "needs KVM, and this host runs guests under TCG";
	if (needs_nic && !ops->nic)
		return "cannot give a session a network interface (policy network.egress)";
	return NULL;
}

int sbx_vmm_choose(enum sbx_accel accel, int needs_nic, const struct sbx_vmm_ops **ops, struct sbx_err *err)
{
	const char *want = getenv("SBX_VMM"), *why;
	char names[128];
	if (want && *want) {
		*ops = sbx_vmm_lookup(want);
		if (!*ops)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "SBX_VMM=%.40s: no such VMM backend (%s)", want,
					   backend_names(names, sizeof names));
		struct sbx_err avail = { 0 };
		/* Asked for by name, a backend without a NIC still boots: its boot
		 * says why it cannot attach one (vmm_ch.c). */
		if ((why = unfit(*ops, accel, 0, &avail))) {
			if (avail.code) {
				*err = avail;
				return -1;
			}
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "SBX_VMM=%s %s", want, why);
		}
		return 0;
	}
	struct sbx_err last = { 0 };
	for (size_t i = 0; i < SBX_ARRAY_LEN(backends); i++) {
		struct sbx_err e = { 0 };
		if (!unfit(backends[i], accel, needs_nic, &e)) {
			*ops = backends[i];
			return 0;
		}
		if (e.code)
			last = e; /* the last one tried (the most general) says why */
	}
	if (last.code) {
		*err = last;
		return -1;
	}
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "no VMM backend (%s) can run this session here",
			   backend_names(names, sizeof names));
}

const struct sbx_vmm_ops *sbx_vmm_for_probe(void)
{
	const char *want = getenv("SBX_VMM");
	if (want && *want)
		return sbx_vmm_lookup(want);
	/* The most preferred one installed: the probe finds out about KVM. */
	for (size_t i = 0; i < SBX_ARRAY_LEN(backends); i++) {
		struct sbx_err ignored = { 0 };
		if (backends[i]->available(&ignored) == 0)
			return backends[i];
	}
	return backends[SBX_ARRAY_LEN(backends) - 1];
}

int sbx_in_path(const char *bin)
{
	if (strchr(bin, '/'))
		return access(bin, X_OK) == 0;
	const char *path = getenv("PATH");
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
	for (char *save, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char p[4200];
		snprintf(p, sizeof p, "%s/%s", d, bin);
		if (access(p, X_OK) == 0)
			return 1;
	}
	return 0;
}

unsigned long sbx_host_tsc_khz(void)
{
	/* Under TCG the guest must be told the TSC rate (tsc_early_khz) or about
	 * one boot in three hangs calibrating it (design.md, QEMU). */
	_cleanup_free_ char *s = sbx_read_small_at(AT_FDCWD, "/sys/devices/system/cpu/cpu0/tsc_freq_khz", 64, NULL);
	if (s && strtoul(s, NULL, 10) > 0)
		return strtoul(s, NULL, 10);
	_cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];
	while (f && fgets(line, sizeof line, f)) {
		double mhz;
		if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 0)
			return (unsigned long)(mhz * 1000.0 + 0.5);
	}
	return 0;
}

int sbx_host_tsc_invariant(void)
{
	/* constant_tsc and nonstop_tsc: the rate never changes and the counter
	 * never stops, so a TCG guest's TSC (QEMU derives it from the host's)
	 * keeps time. */
	_cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
	char line[4096];
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "flags", 5))
			return strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
	return 0;
}

int sbx_vm_boot(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err)
{
	const struct sbx_vmm_ops *ops = cfg->ops ? cfg->ops : &sbx_vmm_qemu;
	return ops->boot(cfg, vm, err);
}

void sbx_vm_kill(struct sbx_vm *vm)
{
	const struct sbx_vmm_ops *ops = vm->ops ? vm->ops : &sbx_vmm_qemu;
	ops->kill(vm);
}

static const struct sbx_vmm_ops *vm_ops(const struct sbx_vm *vm)
{
	return vm->ops ? vm->ops : &sbx_vmm_qemu;
}

int sbx_vm_pause(struct sbx_vm *vm, struct sbx_err *err)
{
	if (!vm_ops(vm)->pause)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the %s backend cannot pause a VM", vm_ops(vm)->name);
	return vm_ops(vm)->pause(vm, err);
}

int sbx_vm_resume_within(struct sbx_vm *vm, unsigned timeout_ms, struct sbx_err *err)
{
	if (!vm_ops(vm)->resume)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the %s backend cannot resume a VM", vm_ops(vm)->name);
	return vm_ops(vm)->resume(vm, timeout_ms, err);
}

int sbx_vm_resume(struct sbx_vm *vm, struct sbx_err *err)
{
	return sbx_vm_resume_within(vm, 0, err);
}

int sbx_vm_save(struct sbx_vm *vm, const char *dir, struct sbx_err *err)
{
	if (!vm_ops(vm)->save)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the %s backend cannot save a VM", vm_ops(vm)->name);
	return vm_ops(vm)->save(vm, dir, err);
}

/* Append to a bounded string; *len may pass n, which the caller checks
 * once at the end (never writes past n). */
static void cat(char *buf, size_t n, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void cat(char *buf, size_t n, size_t *len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int w = *len < n ? vsnprintf(buf + *len, n - *len, fmt, ap) : 0;
	va_end(ap);
	*len += w > 0 ? (size_t)w : 0;
}

int sbx_vm_cmdline(const struct sbx_vm_config *c, char *buf, size_t n, struct sbx_err *err)
{
	size_t len = 0;
	/* Not quiet: a boot's whole console (the kernel at its full log
	 * level) is what a boot that never answers leaves to read
	 * (LIB/boot-failures); measured here, it costs a TCG boot nothing
	 * measurable (2057 against 2185 ms, six boots each, interleaved). */
	cat(buf, n, &len,
	    "console=ttyS0 reboot=t panic=-1 %scryptomgr.notests random.trust_cpu=on "
	    "8250.nr_uarts=1 sbx.hostname=%s%s",
	    /* TCG models no speculation, so the mitigations only cost; under
	     * KVM they keep guest users apart and stay on. */
	    c->accel == SBX_ACCEL_TCG ? "mitigations=off nokaslr " : "", c->hostname ? c->hostname : "sbx",
	    c->probe ? " sbx.probe=1" : "");
	if (c->accel == SBX_ACCEL_TCG && c->tsc_khz)
		cat(buf, n, &len, " tsc_early_khz=%lu", c->tsc_khz);
	/* Under TCG with 2 vCPUs the clocksource watchdog, starved, marks the
	 * TSC unstable and the guest falls back to jiffies, which lose time
	 * under load (44 s in 35 minutes, issue 17).  The TSC QEMU gives a TCG
	 * guest follows the host's, which is invariant here: trust it. */
	if (c->accel == SBX_ACCEL_TCG && c->tsc_reliable)
		cat(buf, n, &len, " tsc=reliable");
	if (c->scratch)
		cat(buf, n, &len, " sbx.scratch=1");
	for (unsigned i = 0; i < c->nvols && i < 8; i++)
		cat(buf, n, &len, " sbx.vol%u=%s", i, c->vol_guest[i]);
	if (c->vol_rw_mask & ((1u << (c->nvols < 8 ? c->nvols : 8)) - 1))
		cat(buf, n, &len, " sbx.volrw=%u", c->vol_rw_mask & 0xffu);
	if (c->guest_params && *c->guest_params && !c->probe)
		cat(buf, n, &len, " %s", c->guest_params);
	if ((c->tap_fd > 0 || c->tap_name) && !c->probe)
		cat(buf, n, &len, " sbx.net=1"); /* guest-init configures eth0 (netns.h) */
	/* A debugging aid: extra kernel parameters (sbx.debug=1 logs boot phases). */
	const char *extra = getenv("SBX_GUEST_CMDLINE");
	if (extra && *extra && !c->probe)
		cat(buf, n, &len, " %s", extra);
	if (len >= n)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "kernel command line too long");
	return 0;
}

/* Is the process behind pidfd still running?  A pidfd polls readable once
 * it has exited. */
static int alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	return poll(&p, 1, 0) == 0;
}

/* The largest file the jailed VMM may write: its writable disks are
 * created at their quota and never grow, so the biggest of them, or the
 * log budget for its console and stderr, whichever is larger.  A write
 * past it fails (SIGXFSZ ends the VMM): a guest cannot make the VMM fill
 * the host's disks. */
static rlim_t fsize_budget(const struct sbx_vm_config *c)
{
	rlim_t max = SBX_VMM_LOG_MAX;
	struct stat st;
	if (c->scratch && stat(c->scratch, &st) == 0 && (rlim_t)st.st_size > max)
		max = (rlim_t)st.st_size;
	for (unsigned i = 0; i < c->nvols && i < 8; i++)
		if ((c->vol_rw_mask & (1u << i)) && stat(c->vol_path[i], &st) == 0 && (rlim_t)st.st_size > max)
			max = (rlim_t)st.st_size;
	return max;
}

/* The jailed VMM's own namespaces (made by clone3 in sbx_vmm_spawn) are
 * set up here, as root, before the jail: loopback up in the new network
 * namespace (the only interface it has; a session with egress replaces
 * it with its own netns below), a hostname that says nothing of the
 * host's, and the rlimits.  Hand-written ioctl: libnl would pull a
 * library into every VMM child for one flag. */
static int ns_setup(const struct sbx_vm_config *c)
{
	if (sethostname("sbx-vmm", 7) < 0)
		return -1;
	if (c->netns_fd <= 0) {
		int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct ifreq ifr = { 0 };
		snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
		int r = s < 0 ? -1 : ioctl(s, SIOCGIFFLAGS, &ifr);
		if (r == 0) {
			ifr.ifr_flags |= IFF_UP;
			r = ioctl(s, SIOCSIFFLAGS, &ifr);
		}
		if (s >= 0)
			close(s);
		if (r < 0)
			return -1;
	}
	rlim_t fsize = fsize_budget(c);
	struct rlimit core = { 0, 0 }, nofile = { SBX_VMM_NOFILE, SBX_VMM_NOFILE }, fs = { fsize, fsize };
	if (setrlimit(RLIMIT_CORE, &core) < 0 || setrlimit(RLIMIT_NOFILE, &nofile) < 0 ||
	    setrlimit(RLIMIT_FSIZE, &fs) < 0)
		return -1;
	return 0;
}

/* In the cloned child: become the VMM.  Returns only on failure, with the
 * exit status; messages go to stderr, which is the VMM log by then.  With
 * jail, the child is PID 1 of a new PID namespace (and has new network,
 * IPC and UTS namespaces), so it learns its host pid, which names its
 * uid, from the parent over sync. */
static int child(const struct sbx_vm_config *c, char *const argv[], const int *keep, int nkeep, int parent_pidfd,
		 int sync, int logfd, int jail)
{
	/* The VMM must not outlive its monitor: no orphan VMs.  Armed before
	 * the read, so a parent that dies after it is caught by the signal,
	 * and one that died before by the pidfd. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	pid_t host_pid;
	if (read(sync, &host_pid, sizeof host_pid) != sizeof host_pid || !alive(parent_pidfd))
		return 127;
	close(sync);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0)
		dup2(devnull, 0);
	if (logfd >= 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
	}
	if (c->stdout_fd > 0)
		dup2(c->stdout_fd, 1);
	/* Join the host cgroups before running a single VMM instruction, and
	 * while still root: cgroup.procs is root's. */
	for (int i = 0; i < c->cg_nfds; i++)
		if (write(c->cg_fds[i], "0", 1) != 1) {
			dprintf(2, "cannot join the host cgroup: %s\n", strerror(errno));
			return 126;
		}
	if (jail && ns_setup(c) < 0) {
		dprintf(2, "cannot set up the VMM's namespaces: %s\n", strerror(errno));
		return 126;
	}
	if (c->netns_fd > 0 && setns(c->netns_fd, CLONE_NEWNET) < 0) {
		dprintf(2, "cannot enter the session's network namespace: %s\n", strerror(errno));
		return 126;
	}
	if (jail) {
		struct sbx_err e = { 0 };
		if (sbx_jail_enter(c, host_pid, parent_pidfd, &e) < 0) {
			dprintf(2, "cannot jail the VMM: %s\n", e.msg);
			return 126;
		}
	}
	/* Exactly stdio and keep[] cross the exec: an inherited directory fd
	 * would be a way out of the jail. */
	if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0) {
		dprintf(2, "cannot mark fds close-on-exec: %s\n", strerror(errno));
		return 126;
	}
	for (int i = 0; i < nkeep; i++)
		if (keep[i] >= 0 && fcntl(keep[i], F_SETFD, 0) < 0)
			return 126;
	/* The session's TAP (netns.h), opened by the monitor: the jailed VMM
	 * has no /dev/net/tun. */
	if (c->tap_fd > 0 && fcntl(c->tap_fd, F_SETFD, 0) < 0)
		return 126;
	/* A clean environment: the caller's may hold secrets (policy secrets
	 * come from_env), and the VMM needs none of it. */
	char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
	execvpe(argv[0], argv, env);
	dprintf(2, "cannot execute %s: %s\n", argv[0], strerror(errno));
	return 127;
}

int sbx_vmm_spawn(const struct sbx_vm_config *c, char *const argv[], const int *keep, int nkeep, int jail,
		  struct sbx_vm *vm, struct sbx_err *err)
{
	_cleanup_close_ int logfd = -1;
	if (c->log_path && c->stderr_fd <= 0) {
		logfd = open(c->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (logfd < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", c->log_path);
	}
	_cleanup_close_ int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (self < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open a pidfd of the monitor");
	/* A socket pair rather than a pipe: MSG_NOSIGNAL, so a child that
	 * died first cannot SIGPIPE the monitor. */
	int sync[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a socket pair");
	/* clone3, not fork: the jailed VMM starts in new PID, network, IPC and
	 * UTS namespaces (as Firecracker's jailer with --new-pid-ns), and the
	 * pidfd comes with the pid, with no window for reuse.  No stack: the
	 * child returns here on a copy of ours, as after fork (the callers are
	 * single-threaded). */
	int pidfd = -1;
	struct clone_args ca = {
		.flags = CLONE_PIDFD | (jail ? CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS : 0),
		.pidfd = (uintptr_t)&pidfd,
		.exit_signal = SIGCHLD,
	};
	pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
	if (pid < 0) {
		int e = errno;
		close(sync[0]);
		close(sync[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot start the VMM");
	}
	if (pid == 0) {
		close(sync[1]);
		_exit(child(c, argv, keep, nkeep, self, sync[0], c->stderr_fd > 0 ? c->stderr_fd : logfd, jail));
	}
	close(sync[0]);
	ssize_t w = send(sync[1], &pid, sizeof pid, MSG_NOSIGNAL);
	int e = errno;
	close(sync[1]);
	if (w != sizeof pid) {
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
		waitpid(pid, NULL, 0);
		close(pidfd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot start the VMM");
	}
	vm->pid = pid;
	vm->pidfd = pidfd;
	vm->start_time = sbx_proc_start_time(pid);
	vm->uid = jail ? SBX_JAIL_UID_BASE + (unsigned)pid : 0;
	return 0;
}
