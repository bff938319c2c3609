/* The raw floor for `make bench`: the same QEMU, kernel, initramfs and
 * disk overlay sbx-create uses, launched directly (no sbx-create, no
 * monitor) until the agent's HELLO; then PING and EXEC `true` round trips
 * straight on the agent channel, and 32 MiB of output streamed back
 * (SBX_FLOOR_STREAMS runs, 3), and BOOTS pause + cont + PING (a claim's
 * floor); then, with RESTORES, the raw restore
 * floor: that VM saved (the same VMM operations and files a snapshot
 * has), and QEMU -incoming restores of it, each with its disk unpacked,
 * until the agent answers a PING.  Prints one JSON object.  The restore
 * and rate subcommands do the same with a snapshot sbx saved (see
 * saved_vm_main). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disk.h"
#include "zstream.h"
#include "proto.h"
#include "template.h"
#include "util.h"
#include "vmm.h"

static int read_frame(int fd, struct sbx_buf *in, struct sbx_frame *f, size_t *used, int timeout_ms)
{
	for (;;) {
		if (in->len >= SBX_FRAME_HDR) {
			if (sbx_frame_hdr_get(in->data, f, SBX_FRAME_MAX) < 0)
				return -1;
			if (in->len - SBX_FRAME_HDR >= f->len) {
				f->payload = in->data + SBX_FRAME_HDR;
				*used = SBX_FRAME_HDR + f->len;
				return 0;
			}
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, timeout_ms) <= 0)
			return -1;
		uint8_t tmp[65536];
		ssize_t r = read(fd, tmp, sizeof tmp);
		if (r <= 0)
			return -1;
		sbx_buf_put(in, tmp, (size_t)r);
	}
}

/* The VMM's connection to the agent socket l, or -1 once it has not come
 * in timeout_ms or the VMM ended (a VMM that failed must not hang the
 * bench: its vmm.log says why). */
static int accept_agent(int l, const struct sbx_vm *vm, int timeout_ms)
{
	struct pollfd p[2] = { { .fd = l, .events = POLLIN }, { .fd = vm->pidfd, .events = POLLIN } };
	if (poll(p, vm->pidfd >= 0 ? 2 : 1, timeout_ms) <= 0 || !(p[0].revents & POLLIN))
		return -1;
	return accept4(l, NULL, NULL, SOCK_CLOEXEC);
}

static void consume(struct sbx_buf *in, size_t n)
{
	memmove(in->data, in->data + n, in->len - n);
	in->len -= n;
}

static int boot_once(const struct sbx_template *t, const char *dir, struct sbx_vm *vm, int *agent, double *ms)
{
	char ov[700];
	struct sbx_err derr = { 0 };
	snprintf(ov, sizeof ov, "%s/scratch.img", dir);
	unlink(ov);
	if (sbx_disk_scratch(ov, 1ull << 30, &derr) < 0) {
		fprintf(stderr, "floor: %s\n", derr.msg);
		return -1;
	}
	if (chdir(dir) < 0)
		return -1;
	unlink("agent.sock");
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "agent.sock" };
	if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0)
		return -1;
	struct sbx_vm_config c = { .kernel = t->kernel,
				   .initrd = t->initrd,
				   .rootfs = t->rootfs,
				   .scratch = ov,
				   .agent_sock = "agent.sock",
				   .qmp_sock = "qmp.sock",
				   .console_path = "console.log",
				   .log_path = "vmm.log",
				   .hostname = "floor",
				   .vcpus = 1,
				   .memory_mib = 256,
				   .accel = SBX_ACCEL_TCG,
				   .tsc_khz = sbx_host_tsc_khz(),
				   .tsc_reliable = sbx_host_tsc_invariant(),
				   .sandbox = 1 };
	const char *acc = getenv("SBX_FLOOR_ACCEL");
	if (acc && !strcmp(acc, "kvm"))
		c.accel = SBX_ACCEL_KVM;
	struct sbx_err err = { 0 };
	uint64_t t0 = sbx_mono_ns();
	if (sbx_vm_boot(&c, vm, &err) < 0) {
		fprintf(stderr, "floor: %s\n", err.msg);
		return -1;
	}
	*agent = accept_agent(l, vm, 60000);
	close(l);
	if (*agent < 0) {
		fprintf(stderr, "floor: the VMM did not connect to the agent socket (see %s/vmm.log)\n", dir);
		return -1;
	}
	struct sbx_buf in = { 0 };
	struct sbx_frame f;
	size_t used;
	int rc = read_frame(*agent, &in, &f, &used, 60000);
	*ms = (double)(sbx_mono_ns() - t0) / 1e6;
	sbx_buf_free(&in);
	return rc == 0 && f.type == SBX_F_HELLO ? 0 : -1;
}

static int remove_dir(const char *dir)
{
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : 1;
}

/* Save vm (idle, no exec running) into dir/snap as a snapshot holds it. */
static int save_vm(struct sbx_vm *vm, const char *dir, double *ms)
{
	char snap[700], ov[700];
	struct sbx_err err = { 0 };
	snprintf(snap, sizeof snap, "%s/snap", dir);
	snprintf(ov, sizeof ov, "%s/scratch.img", dir);
	mkdir(snap, 0700);
	uint64_t t0 = sbx_mono_ns();
	int dfd = open(snap, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || sbx_vm_pause(vm, &err) < 0 || sbx_vm_save(vm, snap, &err) < 0 ||
	    sbx_zdisk_pack(ov, dfd, "scratch.zst", 0, NULL, NULL, &err) < 0) {
		fprintf(stderr, "floor: save: %s\n", err.msg);
		return -1;
	}
	*ms = (double)(sbx_mono_ns() - t0) / 1e6;
	close(dfd);
	return 0;
}

/* One restore: disk unpacked, QEMU -incoming, cont, PING answered (*ms);
 * then one raw EXEC `true` answered, the restored guest's first (*exec_ms,
 * from the same start: what a resume's first exec is measured against).
 * With keep, no EXEC: the VM is left running in *keep (what sbx-create -s
 * hands over), for the caller to kill. */
static int restore_once(const struct sbx_template *t, const char *dir, double *ms, double *exec_ms, double *load_ms,
			struct sbx_vm *keep)
{
	char snap[700], ov[700];
	struct sbx_err err = { 0 };
	uint64_t size;
	snprintf(snap, sizeof snap, "%s/snap", dir);
	snprintf(ov, sizeof ov, "%s/scratch.img", dir);
	unlink(ov);
	if (chdir(dir) < 0)
		return -1;
	unlink("agent.sock");
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "agent.sock" };
	if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0)
		return -1;
	struct sbx_vm_config c = { .kernel = t->kernel,
				   .initrd = t->initrd,
				   .rootfs = t->rootfs,
				   .scratch = ov,
				   .agent_sock = "agent.sock",
				   .qmp_sock = "qmp.sock",
				   .console_path = "console.log",
				   .log_path = "vmm.log",
				   .hostname = "floor",
				   .vcpus = 1,
				   .memory_mib = 256,
				   .accel = SBX_ACCEL_TCG,
				   .tsc_khz = sbx_host_tsc_khz(),
				   .tsc_reliable = sbx_host_tsc_invariant(),
				   .sandbox = 1,
				   .restore_dir = snap };
	const char *acc = getenv("SBX_FLOOR_ACCEL");
	if (acc && !strcmp(acc, "kvm"))
		c.accel = SBX_ACCEL_KVM;
	struct sbx_vm vm = { 0 };
	uint64_t t0 = sbx_mono_ns();
	int dfd = open(snap, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || sbx_zdisk_unpack(dfd, "scratch.zst", ov, &size, &err) < 0 || sbx_vm_boot(&c, &vm, &err) < 0) {
		fprintf(stderr, "floor: restore: %s\n", err.msg);
		return -1;
	}
	*load_ms = (double)(sbx_mono_ns() - t0) / 1e6; /* loaded, paused: sbx's disk + vm_boot steps */
	if (sbx_vm_resume(&vm, &err) < 0) {
		fprintf(stderr, "floor: restore: %s\n", err.msg);
		return -1;
	}
	close(dfd);
	int agent = accept_agent(l, &vm, 60000);
	close(l);
	if (agent < 0) {
		fprintf(stderr, "floor: the restored VMM did not connect to the agent socket (see %s/vmm.log)\n", dir);
		sbx_vm_kill(&vm);
		return -1;
	}
	struct sbx_buf in = { 0 }, out = { 0 };
	struct sbx_frame f;
	size_t used;
	/* A guest saved by sbx holds what it sends until the host gives it
	 * its identity (guest-init's hold_release), as sbx-create -s does: a
	 * hostname as long as the saved one's (so /etc/hosts is written in
	 * place, as a default restore's is), a seed, the time. */
	uint8_t seed[64] = { 0 };
	arc4random_buf(seed, sizeof seed);
	size_t off = sbx_frame_begin(&out, SBX_F_IDENTITY, 0);
	sbx_tlv_str(&out, SBX_T_HOSTNAME, "s-00000000f100");
	sbx_tlv_put(&out, SBX_T_SEED, seed, sizeof seed);
	sbx_tlv_u64(&out, SBX_T_TIME_NS, sbx_now_ns());
	sbx_frame_end(&out, off);
	sbx_frame_raw(&out, SBX_F_PING, 7, "ping", 4);
	sbx_write_all(agent, out.data, out.len);
	int rc;
	do /* whatever the guest had queued (its IDENTITY answer too), then the PONG */
		rc = read_frame(agent, &in, &f, &used, 60000);
	while (rc == 0 && f.type != SBX_F_PONG && (consume(&in, used), 1));
	*ms = (double)(sbx_mono_ns() - t0) / 1e6;
	if (rc == 0 && keep) {
		sbx_buf_free(&in);
		sbx_buf_free(&out);
		*keep = vm; /* its agent connection goes with this process */
		return 0;
	}
	if (rc == 0) {
		char *av[] = { "true", NULL };
		struct sbx_exec_req r = { .argv = av, .argc = 1 };
		consume(&in, used);
		sbx_buf_reset(&out);
		sbx_exec_req_encode(&out, 1000, &r);
		sbx_write_all(agent, out.data, out.len);
		do
			rc = read_frame(agent, &in, &f, &used, 60000);
		while (rc == 0 && f.type != SBX_F_EXIT && f.type != SBX_F_ERROR && (consume(&in, used), 1));
		*exec_ms = (double)(sbx_mono_ns() - t0) / 1e6;
	}
	sbx_buf_free(&in);
	sbx_buf_free(&out);
	close(agent);
	sbx_vm_kill(&vm);
	return rc;
}

/* Raw restores C at a time, PER each in turn, each left running as
 * sbx-create -s leaves its session (the rate bench.sh holds sbx-create -s
 * to; the sessions there are destroyed after the clock stops, and these
 * VMs are too): C processes, each in a directory of its own beside the
 * saved VM they share, each saying on a pipe when its last restore was
 * answered.  Restores per second over the wall time, or -1. */
static double restore_rate(const struct sbx_template *t, const char *dir, int c, int per)
{
	int p[2];
	if (per > 16 || pipe2(p, O_CLOEXEC) < 0)
		return -1;
	uint64_t t0 = sbx_mono_ns(), end = t0;
	pid_t pids[64];
	int n = 0, failed = 0;
	for (int w = 0; w < c && w < 64; w++) {
		char wd[700], link[720];
		snprintf(wd, sizeof wd, "%s/w%d", dir, w);
		snprintf(link, sizeof link, "%s/snap", wd);
		mkdir(wd, 0700);
		unlink(link);
		pid_t pid = symlink("../snap", link) < 0 ? -1 : fork();
		if (pid < 0) {
			failed = 1;
			break;
		}
		if (pid == 0) {
			struct sbx_vm vms[16];
			int k = 0;
			double ms, ems, lms;
			while (k < per && restore_once(t, wd, &ms, &ems, &lms, &vms[k]) == 0)
				k++;
			uint64_t done = k == per ? sbx_mono_ns() : 0;
			(void)!write(p[1], &done, sizeof done);
			while (k > 0)
				sbx_vm_kill(&vms[--k]);
			_exit(0);
		}
		pids[n++] = pid;
	}
	close(p[1]);
	uint64_t done;
	for (int i = 0; i < n; i++) {
		if (read(p[0], &done, sizeof done) != (ssize_t)sizeof done || !done)
			failed = 1;
		else if (done > end)
			end = done;
	}
	close(p[0]);
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
	return failed || end <= t0 ? -1 : (double)(n * per) / ((double)(end - t0) / 1e9);
}

static void template_paths(struct sbx_template *t, const char *dir)
{
	snprintf(t->kernel, sizeof t->kernel, "%s/vmlinux", dir);
	snprintf(t->initrd, sizeof t->initrd, "%s/initrd.cpio", dir);
	snprintf(t->rootfs, sizeof t->rootfs, "%s/rootfs.ext4", dir);
}

/* `restore` and `rate`: the raw floor of a snapshot sbx saved itself (its
 * memory.zst and scratch.zst, the files sbx-create -s restores), so that
 * bench.sh can take one sbx-create -s and one raw restore of the same
 * saved VM in turn: the machine's drift over a run then falls on both.
 * restore: one restore, answered and then its first raw EXEC, one JSON
 * object {restore_ms, restore_load_ms, restore_exec_ms}.  rate: C at a
 * time, PER each, left running until the last is answered, {rate}. */
static int saved_vm_main(int argc, char **argv)
{
	int rate = !strcmp(argv[1], "rate");
	if (argc != (rate ? 6 : 4)) {
		fprintf(stderr, "usage: sbx-bench-floor restore TEMPLATE-DIR SNAPSHOT-DIR\n"
				"       sbx-bench-floor rate TEMPLATE-DIR SNAPSHOT-DIR C PER\n");
		return 2;
	}
	struct sbx_template t = { 0 };
	template_paths(&t, argv[2]);
	char dir[] = "/tmp/sbx-floor.XXXXXX", link[64];
	if (!mkdtemp(dir))
		return 1;
	snprintf(link, sizeof link, "%s/snap", dir);
	if (argv[3][0] != '/' || symlink(argv[3], link) < 0) {
		fprintf(stderr, "floor: the snapshot directory must be an absolute path\n");
		remove_dir(dir);
		return 2;
	}
	int rc = 1;
	if (rate) {
		double r = restore_rate(&t, dir, atoi(argv[4]), atoi(argv[5]));
		if (r >= 0) {
			printf("{\"rate\":%.3f}\n", r);
			rc = 0;
		}
	} else {
		double ms, ems, lms;
		if (restore_once(&t, dir, &ms, &ems, &lms, NULL) == 0) {
			printf("{\"restore_ms\":%.2f,\"restore_load_ms\":%.2f,\"restore_exec_ms\":%.2f}\n", ms, lms,
			       ems);
			rc = 0;
		}
	}
	if (rc)
		fprintf(stderr, "floor: %s of %s failed (console and VMM logs: %s)\n", argv[1], argv[3], dir);
	else
		remove_dir(dir);
	return rc;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && (!strcmp(argv[1], "restore") || !strcmp(argv[1], "rate")))
		return saved_vm_main(argc, argv);
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: sbx-bench-floor TEMPLATE-DIR BOOTS PINGS EXECS [RESTORES]\n"
				"       sbx-bench-floor restore|rate ...\n");
		return 2;
	}
	struct sbx_template t = { 0 };
	template_paths(&t, argv[1]);
	int boots = atoi(argv[2]), pings = atoi(argv[3]), execs = atoi(argv[4]);
	char dir[] = "/tmp/sbx-floor.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	printf("{\"boot_ms\":[");
	struct sbx_vm vm = { 0 };
	int agent = -1;
	for (int i = 0; i < boots; i++) {
		double ms;
		if (boot_once(&t, dir, &vm, &agent, &ms) < 0) {
			fprintf(stderr, "floor: boot failed\n");
			return 1;
		}
		printf("%s%.2f", i ? "," : "", ms);
		if (i + 1 < boots) {
			close(agent);
			sbx_vm_kill(&vm);
		}
	}
	struct sbx_buf in = { 0 }, out = { 0 };
	struct sbx_frame f;
	size_t used;
	printf("],\"ping_us\":[");
	for (int i = 0; i < pings; i++) {
		sbx_buf_reset(&out);
		sbx_frame_raw(&out, SBX_F_PING, 0, "ping", 4);
		uint64_t t0 = sbx_mono_ns();
		sbx_write_all(agent, out.data, out.len);
		if (read_frame(agent, &in, &f, &used, 10000) < 0)
			return 1;
		consume(&in, used);
		printf("%s%.1f", i ? "," : "", (double)(sbx_mono_ns() - t0) / 1e3);
	}
	printf("],\"exec_true_ms\":[");
	char *av[] = { "true", NULL };
	for (int i = 0; i < execs; i++) {
		struct sbx_exec_req r = { .argv = av, .argc = 1 };
		sbx_buf_reset(&out);
		sbx_exec_req_encode(&out, (uint32_t)i + 1, &r);
		uint64_t t0 = sbx_mono_ns();
		sbx_write_all(agent, out.data, out.len);
		for (;;) {
			if (read_frame(agent, &in, &f, &used, 10000) < 0)
				return 1;
			int type = f.type;
			consume(&in, used);
			if (type == SBX_F_EXIT || type == SBX_F_ERROR)
				break;
		}
		printf("%s%.2f", i ? "," : "", (double)(sbx_mono_ns() - t0) / 1e6);
	}
	/* The raw output stream: what the agent and the VMM move from the
	 * guest to the host with nobody else in the way, in MB/s (10^6).  The
	 * producer is dd in 64 KiB blocks, which costs the guest little
	 * (busybox head -c alone makes ~30 MB/s under TCG). */
	printf("],\"stream_mb_s\":[");
	char *hv[] = { "dd", "if=/dev/zero", "bs=65536", "count=512", NULL };
	int streams = getenv("SBX_FLOOR_STREAMS") ? atoi(getenv("SBX_FLOOR_STREAMS")) : 3;
	for (int i = 0; i < streams; i++) {
		struct sbx_exec_req r = { .argv = hv, .argc = 4 };
		sbx_buf_reset(&out);
		sbx_exec_req_encode(&out, (uint32_t)(execs + i) + 1, &r);
		uint64_t t0 = sbx_mono_ns(), bytes = 0;
		sbx_write_all(agent, out.data, out.len);
		for (;;) {
			if (read_frame(agent, &in, &f, &used, 60000) < 0)
				return 1;
			int type = f.type;
			if (type == SBX_F_STDOUT)
				bytes += f.len;
			consume(&in, used);
			if (type == SBX_F_EXIT || type == SBX_F_ERROR)
				break;
		}
		double secs = (double)(sbx_mono_ns() - t0) / 1e9;
		if (bytes != 33554432u) {
			fprintf(stderr, "floor: stream: %llu bytes, not 32 MiB\n", (unsigned long long)bytes);
			return 1;
		}
		printf("%s%.2f", i ? "," : "", (double)bytes / 1e6 / secs);
	}
	/* A pool claim's floor: a paused VM's cont and one PING answered. */
	printf("],\"cont_ping_ms\":[");
	for (int i = 0; i < boots; i++) {
		struct sbx_err perr = { 0 };
		if (sbx_vm_pause(&vm, &perr) < 0) {
			fprintf(stderr, "floor: pause: %s\n", perr.msg);
			return 1;
		}
		sbx_buf_reset(&out);
		sbx_frame_raw(&out, SBX_F_PING, 0, "ping", 4);
		uint64_t t0 = sbx_mono_ns();
		if (sbx_vm_resume(&vm, &perr) < 0) {
			fprintf(stderr, "floor: resume: %s\n", perr.msg);
			return 1;
		}
		sbx_write_all(agent, out.data, out.len);
		if (read_frame(agent, &in, &f, &used, 10000) < 0)
			return 1;
		consume(&in, used);
		printf("%s%.2f", i ? "," : "", (double)(sbx_mono_ns() - t0) / 1e6);
	}
	printf("]");
	/* Saved with its agent connected, as a session is: a guest that saw
	 * its host go would come back waiting for a new one. */
	int restores = argc == 6 ? atoi(argv[5]) : 0;
	double save_ms = 0;
	if (restores > 0 && save_vm(&vm, dir, &save_ms) < 0) {
		sbx_vm_kill(&vm);
		remove_dir(dir);
		return 1;
	}
	close(agent);
	sbx_vm_kill(&vm);
	if (restores > 0) {
		double ms[64], ems[64], lms[64];
		if (restores > 64)
			restores = 64;
		for (int i = 0; i < restores; i++)
			if (restore_once(&t, dir, &ms[i], &ems[i], &lms[i], NULL) < 0) {
				fprintf(stderr, "floor: restore failed (console and VMM log: %s)\n", dir);
				return 1;
			}
		char img[700];
		struct stat st;
		snprintf(img, sizeof img, "%s/snap/memory.zst", dir);
		printf(",\"save_ms\":%.2f,\"memory_zst_bytes\":%lld,\"restore_ms\":[", save_ms,
		       stat(img, &st) == 0 ? (long long)st.st_size : -1LL);
		for (int i = 0; i < restores; i++)
			printf("%s%.2f", i ? "," : "", ms[i]);
		printf("],\"restore_load_ms\":[");
		for (int i = 0; i < restores; i++)
			printf("%s%.2f", i ? "," : "", lms[i]);
		printf("],\"restore_exec_ms\":[");
		for (int i = 0; i < restores; i++)
			printf("%s%.2f", i ? "," : "", ems[i]);
		printf("]");
	}
	printf("}\n");
	return remove_dir(dir);
}
