/* QEMU microvm backend: virtio-mmio devices, virtio-serial agent port,
 * QMP for control. */
#include "vmm.h"
#include "jail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "state.h"

#define QEMU_BIN "qemu-system-x86_64"

static const char *qemu_bin(void)
{
	const char *e = getenv("SBX_QEMU");
	return e && *e ? e : QEMU_BIN;
}

static int qemu_available(struct sbx_err *err)
{
	if (!sbx_in_path(qemu_bin()))
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0,
				   "no VMM: %s is not installed (apt-get install qemu-system-x86)", qemu_bin());
	return 0;
}

struct argv {
	char *v[96];
	char store[8192];
	size_t n, used;
};

static void add(struct argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct argv *a, const char *fmt, ...)
{
	if (a->n + 1 >= SBX_ARRAY_LEN(a->v))
		return;
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(a->store + a->used, sizeof a->store - a->used, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= sizeof a->store - a->used)
		return;
	a->v[a->n++] = a->store + a->used;
	a->v[a->n] = NULL;
	a->used += (size_t)w + 1;
}

/* QEMU's option syntax would need ',' doubled; refuse instead.  Checked on
 * the host paths, which the jail's fixed paths hide from the argv. */
static int check_paths(const struct sbx_vm_config *c, struct sbx_err *err)
{
	const char *paths[10] = { c->rootfs, c->scratch };
	for (unsigned i = 0; i < c->nvols && i < 8; i++)
		paths[2 + i] = c->vol_path[i];
	for (size_t i = 0; i < SBX_ARRAY_LEN(paths); i++)
		if (paths[i] && strchr(paths[i], ','))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "disk path may not contain ',': %s", paths[i]);
	return 0;
}

static int build_argv(const struct sbx_vm_config *c, int qmp_fd, struct argv *a, struct sbx_err *err)
{
	memset(a, 0, sizeof *a);
	add(a, "%s", qemu_bin());
	/* microvm without the legacy PIT and PIC.  Keep the RTC: without it the
	 * guest kernel waits 1 s for it, twice. */
	add(a, "-M");
	add(a, "microvm,pit=off,pic=off,isa-serial=on");
	add(a, "-accel");
	/* A bounded translation cache (the default is 1 GiB) keeps TCG's
	 * memory within the host cgroup's allowance. */
	add(a, "%s", c->accel == SBX_ACCEL_KVM ? "kvm" : "tcg,tb-size=256");
	add(a, "-cpu");
	add(a, "%s", c->accel == SBX_ACCEL_KVM ? "host" : "max");
	add(a, "-smp");
	add(a, "%u", c->vcpus ? c->vcpus : 1);
	add(a, "-m");
	add(a, "%u", c->memory_mib ? c->memory_mib : 256);
	add(a, "-nodefaults");
	add(a, "-no-user-config");
	add(a, "-nographic");
	add(a, "-no-reboot");
	if (c->sandbox) {
		add(a, "-sandbox");
		add(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	}
	add(a, "-serial");
	if (c->console_path)
		add(a, "file:%s", c->console_path);
	else
		add(a, "stdio");
	add(a, "-kernel");
	add(a, "%s", c->kernel);
	add(a, "-initrd");
	add(a, "%s", c->initrd);
	char cmdline[1024];
	int w = snprintf(cmdline, sizeof cmdline,
			 "console=ttyS0 reboot=t panic=-1 quiet %scryptomgr.notests "
			 "random.trust_cpu=on 8250.nr_uarts=1 sbx.hostname=%s%s",
			 /* TCG models no speculation, so the mitigations only cost;
			  * under KVM they keep guest users apart and stay on. */
			 c->accel == SBX_ACCEL_TCG ? "mitigations=off nokaslr " : "",
			 c->hostname ? c->hostname : "sbx", c->probe ? " sbx.probe=1" : "");
	if (c->accel == SBX_ACCEL_TCG && c->tsc_khz)
		snprintf(cmdline + w, sizeof cmdline - (size_t)w, " tsc_early_khz=%lu", c->tsc_khz);
	size_t cl = strlen(cmdline);
	if (c->scratch)
		cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " sbx.scratch=1");
	for (unsigned i = 0; i < c->nvols && i < 8; i++)
		cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " sbx.vol%u=%s", i, c->vol_guest[i]);
	/* A debugging aid: extra kernel parameters (sbx.debug=1 logs boot phases). */
	const char *extra = getenv("SBX_GUEST_CMDLINE");
	if (extra && *extra && !c->probe)
		cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, " %s", extra);
	if (cl >= sizeof cmdline - 1)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "kernel command line too long");
	add(a, "-append");
	add(a, "%s", cmdline);
	/* Disks carry serials; the guest finds them by serial, not by order. */
	if (c->rootfs) {
		add(a, "-drive");
		add(a, "file=%s,format=raw,if=none,id=root0,readonly=on", c->rootfs);
		add(a, "-device");
		add(a, "virtio-blk-device,drive=root0,serial=sbx-root");
	}
	if (c->scratch) {
		add(a, "-drive");
		/* cache=unsafe: scratch dies with the session; honouring guest
		 * flushes would only slow every write. */
		add(a, "file=%s,format=raw,if=none,id=scratch0,cache=unsafe,discard=unmap", c->scratch);
		add(a, "-device");
		add(a, "virtio-blk-device,drive=scratch0,serial=sbx-scratch");
	}
	for (unsigned i = 0; i < c->nvols && i < 8; i++) {
		add(a, "-drive");
		add(a, "file=%s,format=raw,if=none,id=vol%u,readonly=on", c->vol_path[i], i);
		add(a, "-device");
		add(a, "virtio-blk-device,drive=vol%u,serial=sbx-vol%u", i, i);
	}
	add(a, "-device");
	add(a, "virtio-rng-device");
	if (c->agent_sock) {
		add(a, "-device");
		add(a, "virtio-serial-device,max_ports=2");
		add(a, "-chardev");
		add(a, "socket,id=ag,path=%s", c->agent_sock);
		add(a, "-device");
		add(a, "virtserialport,chardev=ag,name=sbx.agent");
	}
	if (qmp_fd >= 0) {
		add(a, "-chardev");
		add(a, "socket,id=qmp,fd=%d,server=on,wait=off", qmp_fd);
		add(a, "-mon");
		add(a, "chardev=qmp,mode=control");
	}
	if (a->n + 1 >= SBX_ARRAY_LEN(a->v) || a->used >= sizeof a->store - 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "VMM command line too long");
	return 0;
}

/* The QMP socket is made here, by the caller, and handed to QEMU as a
 * listening fd (as libvirt does): a jailed VMM cannot create files in the
 * session's runtime directory, and must not be able to. */
static int listen_qmp(const char *path, struct sbx_err *err)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof a.sun_path)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "QMP socket path too long: %s", path);
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(path, 0600) < 0 || listen(fd, 4) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, e, "cannot listen on %s", path);
	}
	return fd;
}

/* In the forked child: become the VMM.  Returns only on failure, with the
 * exit status; messages go to stderr, which is the VMM log by then. */
static int child(const struct sbx_vm_config *c, char **argv, int parent, int logfd, int qmp_fd, int jail)
{
	/* The VMM must not outlive its monitor: no orphan VMs. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		return 127;
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
	if (jail) {
		struct sbx_err e = { 0 };
		if (sbx_jail_enter(c, parent, &e) < 0) {
			dprintf(2, "cannot jail the VMM: %s\n", e.msg);
			return 126;
		}
	}
	/* Exactly stdio and the QMP socket cross the exec: an inherited
	 * directory fd would be a way out of the jail. */
	if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) < 0) {
		dprintf(2, "cannot mark fds close-on-exec: %s\n", strerror(errno));
		return 126;
	}
	if (qmp_fd >= 0 && fcntl(qmp_fd, F_SETFD, 0) < 0)
		return 126;
	/* A clean environment: the caller's may hold secrets (policy
	 * secrets come from_env), and QEMU needs none of it. */
	char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
	execvpe(argv[0], argv, env);
	dprintf(2, "cannot execute %s: %s\n", argv[0], strerror(errno));
	return 127;
}

static int qemu_boot(const struct sbx_vm_config *c, struct sbx_vm *vm, struct sbx_err *err)
{
	struct argv a;
	struct sbx_vm_config view;
	int jail = sbx_jail_enabled(err);
	if (jail < 0 || check_paths(c, err) < 0)
		return -1;
	/* The argv names what QEMU sees: in-jail paths when jailed. */
	if (jail)
		sbx_jail_view(c, &view);
	_cleanup_close_ int qmp_fd = c->qmp_sock ? listen_qmp(c->qmp_sock, err) : -1;
	if (c->qmp_sock && qmp_fd < 0)
		return -1;
	if (build_argv(jail ? &view : c, qmp_fd, &a, err) < 0)
		return -1;
	_cleanup_close_ int logfd = -1;
	if (c->log_path) {
		logfd = open(c->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (logfd < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s", c->log_path);
	}
	int parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the VMM");
	if (pid == 0)
		_exit(child(c, a.v, parent, logfd, qmp_fd, jail));
	vm->pid = pid;
	vm->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	vm->start_time = sbx_proc_start_time(pid);
	vm->uid = jail ? SBX_JAIL_UID_BASE + (unsigned)pid : 0;
	vm->ops = &sbx_vmm_qemu;
	vm->ctl_fd = -1;
	snprintf(vm->ctl_path, sizeof vm->ctl_path, "%s", c->qmp_sock ? c->qmp_sock : "");
	return 0;
}

static void qemu_kill(struct sbx_vm *vm)
{
	if (vm->ctl_fd > 0) {
		close(vm->ctl_fd);
		vm->ctl_fd = -1;
	}
	if (vm->pid <= 0)
		return;
	if (vm->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, vm->pidfd, SIGKILL, NULL, 0);
	else
		kill(vm->pid, SIGKILL);
	while (waitpid(vm->pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	vm->pid = 0;
	vm->pidfd = -1;
}

const struct sbx_vmm_ops sbx_vmm_qemu = {
	.name = "qemu",
	.agent_mode = SBX_AGENT_ACCEPT,
	.available = qemu_available,
	.boot = qemu_boot,
	.kill = qemu_kill,
};
