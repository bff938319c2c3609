/* Backend selection and the calls shared by every backend. */
#include "vmm.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const struct sbx_vmm_ops *const backends[] = { &sbx_vmm_qemu };

const struct sbx_vmm_ops *sbx_vmm_lookup(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_LEN(backends); i++)
		if (name && !strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

int sbx_vmm_choose(enum sbx_accel accel, const struct sbx_vmm_ops **ops, struct sbx_err *err)
{
	const char *want = getenv("SBX_VMM");
	if (want && *want) {
		*ops = sbx_vmm_lookup(want);
		if (!*ops)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "SBX_VMM=%.40s: no such VMM backend", want);
		return (*ops)->available(err);
	}
	/* Cloud Hypervisor needs KVM; under TCG only QEMU can run a guest. */
	const struct sbx_vmm_ops *ch = sbx_vmm_lookup("cloud-hypervisor");
	struct sbx_err ignored = { 0 };
	if (ch && accel == SBX_ACCEL_KVM && ch->available(&ignored) == 0) {
		*ops = ch;
		return 0;
	}
	*ops = &sbx_vmm_qemu;
	return (*ops)->available(err);
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
	 * one boot in three hangs calibrating it (host-facts.md). */
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
