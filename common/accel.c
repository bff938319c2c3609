/* Is hardware virtualization usable?  /dev/kvm existing proves nothing:
 * paravirtual KVM inside cloud VMs (kvm_pvm) exposes it and then cannot run
 * a stock guest kernel.  So boot the real kernel under KVM to a marker, and
 * remember the answer until the host reboots. */
#include "vmm.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include <jansson.h>

#define PROBE_MARKER "SBX-PROBE-OK"
#define PROBE_TIMEOUT_MS 20000

/* The probe VMM's own stderr goes to LIB/accel-probe.log, not to the
 * user's terminal: what it said ends up in the verdict's reason, said once
 * in sbx's words (the create's TCG notice, accel.json, sbx-ps --capacity). */
#define PROBE_LOG "accel-probe.log"

static int probe_kvm(struct sbx_state *st, const struct sbx_vmm_ops *ops, const char *kernel, const char *initrd,
		     char *why, size_t n)
{
	char log[700];
	snprintf(log, sizeof log, "%s/" PROBE_LOG, st->lib);
	unlinkat(st->lib_fd, PROBE_LOG, 0);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(why, n, "cannot make a pipe: %s", strerror(errno));
		return 0;
	}
	struct sbx_vm_config c = { .ops = ops,
				   .kernel = kernel,
				   .initrd = initrd,
				   .hostname = "probe",
				   .vcpus = 1,
				   .memory_mib = 128,
				   .accel = SBX_ACCEL_KVM,
				   .probe = 1,
				   .stdout_fd = p[1],
				   .log_path = log };
	struct sbx_vm vm = { 0 };
	struct sbx_err e = { 0 };
	if (sbx_vm_boot(&c, &vm, &e) < 0) {
		close(p[0]);
		close(p[1]);
		snprintf(why, n, "%s", e.msg);
		return 0;
	}
	close(p[1]);
	char buf[8192];
	size_t got = 0;
	int ok = 0;
	uint64_t deadline = sbx_mono_ns() + (uint64_t)PROBE_TIMEOUT_MS * 1000000u;
	for (;;) {
		uint64_t now = sbx_mono_ns();
		if (now >= deadline) {
			snprintf(why, n, "KVM guest gave no sign of life within %d s", PROBE_TIMEOUT_MS / 1000);
			break;
		}
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		if (poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1) <= 0)
			continue;
		ssize_t r = read(p[0], buf + got, sizeof buf - 1 - got);
		if (r <= 0) {
			snprintf(why, n, "KVM guest died before the probe marker (%s)",
				 got ? "see its console" : "no console output");
			break;
		}
		got += (size_t)r;
		buf[got] = 0;
		if (strstr(buf, PROBE_MARKER)) {
			ok = 1;
			break;
		}
		if (got > sizeof buf / 2) { /* keep the tail: the marker may straddle */
			memmove(buf, buf + got - 64, 64);
			got = 64;
		}
	}
	close(p[0]);
	sbx_vm_kill(&vm);
	if (!ok) {
		char said[200];
		sbx_log_tail(st->lib_fd, PROBE_LOG, said, sizeof said);
		size_t l = strlen(why);
		if (*said && l + 3 < n)
			snprintf(why + l, n - l, ": %s", said);
	}
	return ok;
}

/* The cached verdict for this boot and probing VMM, if there is one: 1
 * and ai filled.  A verdict without "vmm" was QEMU's. */
static int read_cache(struct sbx_state *st, const char *boot, const char *vmm, struct sbx_accel_info *ai)
{
	_cleanup_free_ char *txt = sbx_read_small_at(st->lib_fd, "accel.json", 65536, NULL);
	json_t *c = txt ? json_loads(txt, 0, NULL) : NULL;
	const char *cb = json_string_value(json_object_get(c, "boot_id"));
	const char *ca = json_string_value(json_object_get(c, "accel"));
	const char *cr = json_string_value(json_object_get(c, "reason"));
	const char *cv = json_string_value(json_object_get(c, "vmm"));
	int hit = cb && ca && !strcmp(cb, boot) && !strcmp(cv ? cv : "qemu", vmm);
	if (hit) {
		ai->accel = strcmp(ca, "kvm") ? SBX_ACCEL_TCG : SBX_ACCEL_KVM;
		snprintf(ai->reason, sizeof ai->reason, "%s", cr ? cr : "");
	}
	json_decref(c);
	return hit;
}

int sbx_accel_get(struct sbx_state *st, const char *kernel, const char *initrd, struct sbx_accel_info *ai,
		  struct sbx_err *err)
{
	_cleanup_close_ int g = -1;
	memset(ai, 0, sizeof *ai);
	/* Probed with the VMM that will run the guests: KVM that boots a
	 * guest under one VMM need not under another.  A misspelt SBX_VMM is
	 * refused before a probe is spent on it. */
	const struct sbx_vmm_ops *ops = sbx_vmm_for_probe();
	if (!ops)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "SBX_VMM=%.40s: no such VMM backend (qemu, cloud-hypervisor)", getenv("SBX_VMM"));
	const char *force = getenv("SBX_ACCEL");
	if (force && !strcmp(force, "tcg")) {
		ai->accel = SBX_ACCEL_TCG;
		snprintf(ai->reason, sizeof ai->reason, "forced by SBX_ACCEL=tcg");
		return 0;
	}
	if (force && *force && strcmp(force, "kvm"))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "SBX_ACCEL must be 'kvm' or 'tcg', not '%s'", force);
	int kfd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kfd < 0) {
		ai->accel = SBX_ACCEL_TCG;
		snprintf(ai->reason, sizeof ai->reason, "/dev/kvm is not usable (%s)", strerror(errno));
		goto out;
	}
	close(kfd);
	char boot[40] = "";
	sbx_boot_id(boot, sizeof boot);
	if (read_cache(st, boot, ops->name, ai))
		goto out;
	/* Probe under the global lock and look again: concurrent first creates
	 * after a reboot must not each boot a probe VM. */
	g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	if (read_cache(st, boot, ops->name, ai))
		goto out;
	ai->fresh = 1;
	char why[sizeof ai->reason - 40] = "";
	if (probe_kvm(st, ops, kernel, initrd, why, sizeof why)) {
		ai->accel = SBX_ACCEL_KVM;
		snprintf(ai->reason, sizeof ai->reason, "KVM probe booted a guest (%s)", ops->name);
	} else {
		ai->accel = SBX_ACCEL_TCG;
		snprintf(ai->reason, sizeof ai->reason, "%s (KVM probe with %s)", why, ops->name);
	}
	char when[40];
	sbx_fmt_time(sbx_now_ns(), when, sizeof when);
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s}", "schema", 1, "boot_id", boot, "accel",
			      ai->accel == SBX_ACCEL_KVM ? "kvm" : "tcg", "reason", ai->reason, "probed", when, "vmm",
			      ops->name);
	char *s = o ? json_dumps(o, JSON_INDENT(1)) : NULL;
	if (s)
		sbx_atomic_write_at(st->lib_fd, "accel.json", s, strlen(s), 0644, NULL);
	free(s);
	json_decref(o);
out:
	if (force && !strcmp(force, "kvm") && ai->accel != SBX_ACCEL_KVM)
		return sbx_err_set(err, SBX_EXIT_UNAVAIL, 0, "KVM required (SBX_ACCEL=kvm) but unavailable: %s",
				   ai->reason);
	return 0;
}
