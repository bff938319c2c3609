/* QEMU microvm backend: virtio-mmio devices, virtio-serial agent port,
 * QMP for control. */
#include "vmm.h"
#include "jail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "zstream.h"

#include <jansson.h>

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

/* The throttle of every writable disk (resources.disk_bps, disk_iops), ""
 * for none.  QEMU's block layer counts the guest's requests before any
 * host cache, so it holds under cache=unsafe, where the host's blkio
 * throttling (cgroup v1) misses buffered writeback.  One group: the
 * session's disks share the rate rather than each getting it. */
static void qemu_throttle(const struct sbx_vm_config *c, char *out, size_t n)
{
	size_t k = 0;
	*out = 0;
	if (c->disk_bps)
		k += (size_t)snprintf(out + k, n - k, ",throttling.bps-total=%llu", (unsigned long long)c->disk_bps);
	if (c->disk_iops && k < n)
		k += (size_t)snprintf(out + k, n - k, ",throttling.iops-total=%u", c->disk_iops);
	if (k && k < n)
		snprintf(out + k, n - k, ",throttling.group=sbx");
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

/* The machine: accelerator, CPU, memory, console, kernel and its command
 * line (the same for every backend, vmm.c). */
static int add_machine(struct argv *a, const struct sbx_vm_config *c, struct sbx_err *err)
{
	/* microvm without the legacy PIT and PIC.  Keep the RTC: without it the
	 * guest kernel waits 1 s for it, twice. */
	add(a, "-M");
	add(a, "microvm,pit=off,pic=off,isa-serial=on");
	add(a, "-accel");
	/* A bounded translation cache (the default is 1 GiB) keeps TCG's
	 * memory within the host cgroup's allowance. */
	add(a, "%s", c->accel == SBX_ACCEL_KVM ? "kvm" : "tcg,tb-size=256");
	add(a, "-cpu");
	/* Under TCG the guest is told it has no ERMS/FSRM: with them its
	 * kernel copies and clears with `rep movsb`/`stosb`, which TCG runs as
	 * one loop turn a byte, and without them with `rep movsq`/`stosq`,
	 * eight bytes a turn.  Every pipe, socket, page-cache and agent-port
	 * copy in the guest pays that (measured here: a 128 MiB pipe 2.06 s
	 * -> 0.64 s, the output stream to the host 45 -> 130 MB/s).  The
	 * instructions still work either way, so a snapshot saved under one
	 * CPU model restores under the other. */
	add(a, "%s", c->accel == SBX_ACCEL_KVM ? "host" : "max,-erms,-fsrm");
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
	if (sbx_vm_cmdline(c, cmdline, sizeof cmdline, err) < 0)
		return -1;
	add(a, "-append");
	add(a, "%s", cmdline);
	return 0;
}

/* The disks, with their serials (the guest finds them by serial, not by
 * order), and the session's I/O throttle on the writable ones. */
static void add_disks(struct argv *a, const struct sbx_vm_config *c)
{
	char throttle[160];
	qemu_throttle(c, throttle, sizeof throttle);
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
		add(a, "file=%s,format=raw,if=none,id=scratch0,cache=unsafe,discard=unmap%s", c->scratch, throttle);
		add(a, "-device");
		add(a, "virtio-blk-device,drive=scratch0,serial=sbx-scratch");
	}
	for (unsigned i = 0; i < c->nvols && i < 8; i++) {
		add(a, "-drive");
		if (c->vol_rw_mask & (1u << i))
			/* A workspace outlives the session: guest flushes reach the
			 * host file (cache=writeback honours them; never unsafe). */
			add(a, "file=%s,format=raw,if=none,id=vol%u,cache=writeback,discard=unmap%s", c->vol_path[i], i,
			    throttle);
		else
			add(a, "file=%s,format=raw,if=none,id=vol%u,readonly=on", c->vol_path[i], i);
		add(a, "-device");
		add(a, "virtio-blk-device,drive=vol%u,serial=sbx-vol%u", i, i);
	}
}

/* The other devices: entropy, panic, the NIC, the agent's port, the QMP
 * socket and, for a restore, the incoming state. */
static void add_devices(struct argv *a, const struct sbx_vm_config *c, int qmp_fd, int incoming_fd)
{
	add(a, "-device");
	add(a, "virtio-rng-device");
	/* The guest kernel's own word that it panicked (its pvpanic driver),
	 * which the console's text is not: QEMU then exits with status 1
	 * (ops->panic_status) and says nothing on stderr. */
	add(a, "-device");
	add(a, "pvpanic");
	add(a, "-action");
	add(a, "panic=exit-failure");
	/* The session's NIC (netns.h): its TAP by fd when the monitor opened
	 * it (the jail has no /dev/net/tun), else by name in the namespace. */
	if (c->tap_fd > 0 || c->tap_name) {
		add(a, "-netdev");
		if (c->tap_fd > 0)
			add(a, "tap,id=n0,fd=%d", c->tap_fd);
		else
			add(a, "tap,id=n0,ifname=%s,script=no,downscript=no", c->tap_name);
		add(a, "-device");
		add(a, "virtio-net-device,netdev=n0%s%s", c->mac ? ",mac=" : "", c->mac ? c->mac : "");
	}
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
	if (incoming_fd >= 0) {
		/* A restore: the state comes from the monitor through a pipe
		 * (exec: migration would need a shell, which -sandbox
		 * spawn=deny forbids), and the VM stays paused until resumed. */
		add(a, "-S");
		add(a, "-incoming");
		add(a, "fd:%d", incoming_fd);
	}
}

static int build_argv(const struct sbx_vm_config *c, int qmp_fd, int incoming_fd, struct argv *a, struct sbx_err *err)
{
	memset(a, 0, sizeof *a);
	add(a, "%s", qemu_bin());
	if (add_machine(a, c, err) < 0)
		return -1;
	add_disks(a, c);
	add_devices(a, c, qmp_fd, incoming_fd);
	if (a->n + 1 >= SBX_ARRAY_LEN(a->v) || a->used >= sizeof a->store - 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "VMM command line too long");
	return 0;
}

/* The QMP socket is made here, by the caller, and handed to QEMU as a
 * listening fd (as libvirt does): a jailed VMM cannot create files in the
 * session's runtime directory, and must not be able to. */
static int listen_qmp(const char *path, struct sbx_err *err)
{
	int fd = sbx_listen_unix(path, SOCK_STREAM, 0600, 4);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno,
				   errno == ENAMETOOLONG ? "QMP socket path too long: %s" : "cannot listen on %s",
				   path);
	return fd;
}

/* --- QMP ------------------------------------------------------------------
 * A small synchronous client: one command at a time, its answer awaited
 * with a deadline, asynchronous events skipped.  QEMU is as untrusted as
 * the guest it runs, so a line is capped and a connection that misbehaves
 * is closed. */

#define QMP_LINE_MAX (64u << 10)
#define QMP_TIMEOUT_MS 10000u

static void qmp_close(struct sbx_vm *vm)
{
	if (vm->ctl_fd > 0)
		close(vm->ctl_fd);
	vm->ctl_fd = -1;
}

/* One line (up to and with its '\n') into buf, NUL-terminated.  Peeks
 * first, so nothing past the line is taken from the socket. */
static int qmp_line(struct sbx_vm *vm, char *buf, uint64_t deadline, struct sbx_err *err)
{
	for (;;) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not answer on its control socket");
		struct pollfd p = { .fd = vm->ctl_fd, .events = POLLIN };
		int r = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
		if (r < 0 && errno != EINTR)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot wait for the VMM");
		if (r <= 0)
			continue;
		ssize_t n = recv(vm->ctl_fd, buf, QMP_LINE_MAX, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return sbx_err_set(err, SBX_EXIT_UNAVAIL, n < 0 ? errno : 0,
					   "the VMM closed its control socket");
		char *nl = memchr(buf, '\n', (size_t)n);
		if (!nl) {
			if ((size_t)n >= QMP_LINE_MAX)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
						   "the VMM sent an overlong control message");
			usleep(1000); /* the rest of the line is on its way */
			continue;
		}
		size_t len = (size_t)(nl - buf) + 1;
		if (recv(vm->ctl_fd, buf, len, 0) != (ssize_t)len)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read from the VMM");
		buf[len] = 0;
		return 0;
	}
}

static int qmp_send(struct sbx_vm *vm, const char *text, int pass_fd, struct sbx_err *err)
{
	/* Commands are short: one sendmsg carries the fd with its command. */
	size_t len = strlen(text);
	ssize_t w;
	while ((w = sbx_sendmsg_fds(vm->ctl_fd, text, len, &pass_fd, pass_fd >= 0, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (w != (ssize_t)len)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, errno, "cannot send to the VMM's control socket");
	return 0;
}

/* Send one command (a JSON line) and wait for its answer; the "return"
 * value goes to *ret when asked for (the caller decrefs).  -2: QEMU
 * refused it; -1: the connection is broken or out of step. */
static int qmp_exchange(struct sbx_vm *vm, const char *cmd, int pass_fd, json_t **ret, uint64_t deadline,
			struct sbx_err *err)
{
	_cleanup_free_ char *line = malloc(QMP_LINE_MAX + 1);
	if (!line)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	if (qmp_send(vm, cmd, pass_fd, err) < 0)
		return -1;
	for (;;) {
		if (qmp_line(vm, line, deadline, err) < 0)
			return -1;
		json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(o)) {
			json_decref(o);
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the VMM sent a malformed control message");
		}
		json_t *r = json_object_get(o, "return"), *e = json_object_get(o, "error");
		if (e) {
			const char *d = json_string_value(json_object_get(e, "desc"));
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the VMM refused: %.300s", d ? d : "(no reason)");
			json_decref(o);
			return -2; /* a refusal: the stream is still in step */
		}
		if (r) {
			if (ret)
				*ret = json_incref(r);
			json_decref(o);
			return 0;
		}
		json_decref(o); /* an event, or the greeting: not ours */
	}
}

/* The control connection, opened once and kept: QEMU serves one QMP
 * client per socket at a time. */
static int qmp_connect(struct sbx_vm *vm, struct sbx_err *err)
{
	if (vm->ctl_fd > 0)
		return 0;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (!vm->ctl_path[0] || strlen(vm->ctl_path) >= sizeof a.sun_path)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "this VM has no control socket");
	snprintf(a.sun_path, sizeof a.sun_path, "%s", vm->ctl_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, e, "cannot reach the VMM's control socket");
	}
	vm->ctl_fd = fd;
	_cleanup_free_ char *line = malloc(QMP_LINE_MAX + 1);
	uint64_t deadline = sbx_mono_ns() + QMP_TIMEOUT_MS * 1000000ull;
	if (!line || qmp_line(vm, line, deadline, err) < 0 || !strstr(line, "\"QMP\"") ||
	    qmp_exchange(vm, "{\"execute\":\"qmp_capabilities\"}\n", -1, NULL, deadline, err) < 0) {
		if (line && err && !err->msg[0])
			sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the VMM's control socket did not greet");
		qmp_close(vm);
		return -1;
	}
	return 0;
}

static int qmp_call(struct sbx_vm *vm, const char *cmd, int pass_fd, json_t **ret, unsigned timeout_ms,
		    struct sbx_err *err)
{
	if (qmp_connect(vm, err) < 0)
		return -1;
	int rc = qmp_exchange(vm, cmd, pass_fd, ret, sbx_mono_ns() + (uint64_t)timeout_ms * 1000000u, err);
	/* A timeout or a broken line leaves the stream out of step: start
	 * over next time. */
	if (rc == -1)
		qmp_close(vm);
	return rc < 0 ? -1 : 0;
}

static int qemu_pause(struct sbx_vm *vm, struct sbx_err *err)
{
	return qmp_call(vm, "{\"execute\":\"stop\"}\n", -1, NULL, QMP_TIMEOUT_MS, err);
}

static int qemu_resume(struct sbx_vm *vm, unsigned timeout_ms, struct sbx_err *err)
{
	/* After a save QEMU has handed its disks over (inactivated them, as
	 * for a migration); cont takes them back. */
	return qmp_call(vm, "{\"execute\":\"cont\"}\n", -1, NULL, timeout_ms ? timeout_ms : QMP_TIMEOUT_MS, err);
}

#define SAVE_TIMEOUT_NS (600ull * 1000000000u)

/* Read the migration stream from the pipe until QEMU closes it,
 * compressing it into out, within the caller's caps (N6: a compromised
 * VMM must not make the monitor's root half fill LIB). */
static int save_stream(struct sbx_vm *vm, int rd, int out, struct sbx_err *err)
{
	int rc = sbx_zsave(rd, out, vm->pidfd, sbx_mono_ns() + SAVE_TIMEOUT_NS, vm->save_max_in, vm->save_max_out,
			   vm->progress, vm->progress_ctx, err);
	if (rc < 0 && err && err->errnum == EFBIG)
		sbx_err_set(err, SBX_EXIT_INTERNAL, EFBIG,
			    "the VMM wrote more than the guest's memory and %llu MiB of device state (%llu MiB): "
			    "that is no memory image, the save was stopped",
			    SBX_SAVE_DEVICE_ALLOWANCE >> 20, (unsigned long long)(vm->save_max_in >> 20));
	else if (rc < 0 && err && err->errnum == EDQUOT)
		sbx_err_set(err, SBX_EXIT_TEMPFAIL, EDQUOT,
			    "the memory image passed the %llu bytes it may take (the tenant's snapshot_bytes left): "
			    "the save was stopped",
			    (unsigned long long)vm->save_max_out);
	return rc;
}

/* The migration's verdict, once QEMU has closed the stream. */
static int save_verdict(struct sbx_vm *vm, struct sbx_err *err)
{
	uint64_t deadline = sbx_mono_ns() + 30ull * 1000000000u;
	while (sbx_mono_ns() < deadline) {
		json_t *r = NULL;
		if (qmp_call(vm, "{\"execute\":\"query-migrate\"}\n", -1, &r, QMP_TIMEOUT_MS, err) < 0)
			return -1;
		const char *st = json_string_value(json_object_get(r, "status"));
		char why[300];
		snprintf(why, sizeof why, "%s", json_string_value(json_object_get(r, "error-desc")) ?: "");
		int done = st && !strcmp(st, "completed");
		int failed = !st || !strcmp(st, "failed") || !strcmp(st, "cancelled");
		json_decref(r);
		if (done)
			return 0;
		if (failed)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the VMM could not save the VM%s%s",
					   why[0] ? ": " : "", why);
		usleep(2000);
	}
	return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not finish saving in time");
}

static int qemu_save(struct sbx_vm *vm, const char *dir, struct sbx_err *err)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/memory.zst", dir) >= (int)sizeof path)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "snapshot path too long");
	_cleanup_close_ int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", path);
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe");
	fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* fewer wake-ups; the default is fine too */
	/* The VM is stopped: nothing changes under the copy, so no downtime
	 * limit matters, only how fast QEMU may write. */
	int rc = qmp_call(vm,
			  "{\"execute\":\"migrate-set-parameters\",\"arguments\":{\"max-bandwidth\":1099511627776}}\n",
			  -1, NULL, QMP_TIMEOUT_MS, err);
	/* QEMU's end of the pipe, by SCM_RIGHTS: a jailed QEMU under
	 * -sandbox spawn=deny can neither open files nor run zstd itself. */
	if (rc == 0)
		rc = qmp_call(vm, "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"sbx-save\"}}\n", p[1], NULL,
			      QMP_TIMEOUT_MS, err);
	close(p[1]);
	if (rc == 0)
		rc = qmp_call(vm, "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"fd:sbx-save\"}}\n", -1, NULL,
			      QMP_TIMEOUT_MS, err);
	if (rc == 0)
		rc = save_stream(vm, p[0], out, err);
	close(p[0]);
	if (rc == 0)
		rc = save_verdict(vm, err);
	if (rc < 0) {
		struct sbx_err ignored = { 0 };
		qmp_call(vm, "{\"execute\":\"migrate_cancel\"}\n", -1, NULL, QMP_TIMEOUT_MS, &ignored);
		unlink(path);
	}
	return rc;
}

/* The last line of the VMM's log, for messages that say why. */
static void log_last(const char *path, char *out, size_t n)
{
	out[0] = 0;
	_cleanup_close_ int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	char buf[512];
	off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	if (end <= 0)
		return;
	off_t start = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
	ssize_t r = pread(fd, buf, sizeof buf - 1, start);
	if (r <= 0)
		return;
	buf[r] = 0;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == '\r'))
		buf[--r] = 0;
	char *nl = strrchr(buf, '\n');
	snprintf(out, n, "%s", nl ? nl + 1 : buf);
}

/* The VM's run state ("running", "paused", "inmigrate", ...). */
static int qmp_status(struct sbx_vm *vm, char *status, size_t n, struct sbx_err *err)
{
	json_t *r = NULL;
	if (qmp_call(vm, "{\"execute\":\"query-status\"}\n", -1, &r, QMP_TIMEOUT_MS, err) < 0)
		return -1;
	const char *s = json_string_value(json_object_get(r, "status"));
	snprintf(status, n, "%s", s ? s : "");
	json_decref(r);
	return 0;
}

/* A restore: feed the saved state into QEMU's -incoming pipe, then wait
 * until QEMU has loaded all of it (state "paused": it runs with -S).
 * Resuming earlier is accepted by QEMU (it starts the VM once loaded) but
 * loses what reaches the agent port meanwhile: the port's device state
 * is not loaded yet. */
static int restore_load(const struct sbx_vm_config *c, struct sbx_vm *vm, int mem, int wr, struct sbx_err *err)
{
	uint64_t deadline = sbx_mono_ns() + 120ull * 1000000000u;
	int rc = sbx_zpump(mem, wr, vm->pidfd, deadline, vm->progress, vm->progress_ctx, err);
	close(wr); /* EOF: the stream is complete */
	char st[32] = "inmigrate";
	for (unsigned wait = 200; rc == 0 && !strcmp(st, "inmigrate");) {
		if (sbx_mono_ns() >= deadline) {
			rc = sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not load the snapshot in time");
			break;
		}
		rc = qmp_status(vm, st, sizeof st, err);
		if (rc == 0 && !strcmp(st, "inmigrate")) {
			usleep(wait);
			wait = wait < 5000 ? wait * 2 : wait;
		}
	}
	if (rc == 0 && strcmp(st, "paused"))
		rc = sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "the VMM did not load the snapshot (state %s)", st);
	if (rc < 0 && err) {
		char last[300], msg[sizeof err->msg];
		usleep(50000); /* QEMU says why before it exits */
		log_last(c->log_path, last, sizeof last);
		snprintf(msg, sizeof msg, "%s", err->msg);
		snprintf(err->msg, sizeof err->msg, "cannot restore the snapshot: %s%s%.300s", msg,
			 last[0] ? "; VMM: " : "", last);
	}
	return rc;
}

static void qemu_kill(struct sbx_vm *vm);

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
	/* A restore: the memory image, and the pipe QEMU reads it from. */
	_cleanup_close_ int mem = -1, inc_r = -1, inc_w = -1;
	if (c->restore_dir) {
		char path[PATH_MAX];
		int p[2];
		if (!c->qmp_sock)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "a restore needs the control socket");
		snprintf(path, sizeof path, "%s/memory.zst", c->restore_dir);
		mem = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (mem < 0)
			return sbx_err_set(err, errno == ENOENT ? SBX_EXIT_NOENT : SBX_EXIT_INTERNAL, errno,
					   "cannot open the snapshot's memory image %s", path);
		if (pipe2(p, O_CLOEXEC) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe");
		inc_r = p[0];
		inc_w = p[1];
		fcntl(inc_w, F_SETFL, O_NONBLOCK);
		fcntl(inc_w, F_SETPIPE_SZ, 1 << 20); /* fewer wake-ups; the default is fine too */
	}
	if (build_argv(jail ? &view : c, qmp_fd, inc_r, &a, err) < 0)
		return -1;
	/* Exactly stdio, the QMP socket, a restore's state pipe and the TAP
	 * cross the exec (vmm.c). */
	int keep[] = { qmp_fd, inc_r, c->tap_fd > 0 ? c->tap_fd : -1 };
	if (sbx_vmm_spawn(c, a.v, keep, 3, jail, vm, err) < 0)
		return -1;
	vm->ops = &sbx_vmm_qemu;
	vm->ctl_fd = -1;
	snprintf(vm->ctl_path, sizeof vm->ctl_path, "%s", c->qmp_sock ? c->qmp_sock : "");
	if (c->restore_dir) {
		close(inc_r);
		inc_r = -1;
		int rc = restore_load(c, vm, mem, sbx_steal_fd(&inc_w), err);
		if (rc < 0) {
			qemu_kill(vm);
			return -1;
		}
	}
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
	.nic = 1,
	.panic_status = 1,
	.available = qemu_available,
	.boot = qemu_boot,
	.pause = qemu_pause,
	.resume = qemu_resume,
	.save = qemu_save,
	.kill = qemu_kill,
};
