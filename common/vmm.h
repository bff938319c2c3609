/* The VMM interface.  One file per backend; today QEMU's microvm machine
 * (vmm_qemu.c).  Cloud Hypervisor slots in behind the same calls. */
#ifndef SBX_VMM_H
#define SBX_VMM_H

#include <stdint.h>
#include "err.h"

enum sbx_accel { SBX_ACCEL_TCG = 0, SBX_ACCEL_KVM = 1 };

struct sbx_vm_config {
	const char *kernel, *initrd;
	const char *rootfs;       /* template root disk, attached read-only; NULL: none (probe) */
	const char *scratch;      /* the session's writable disk (raw, quota-sized) */
	const char *vol_path[8];  /* read-only volumes: image ... */
	const char *vol_guest[8]; /* ... and where the guest mounts it */
	unsigned nvols;
	const char *agent_sock;   /* unix socket the monitor listens on; NULL: none */
	const char *qmp_sock;     /* created by sbx_vm_boot, passed as an fd; NULL: none */
	const char *console_path; /* serial console to this file; NULL: stdout */
	const char *log_path;     /* VMM stdout/stderr; NULL: inherit */
	int stdout_fd;            /* >0: the VMM's stdout (serial when console_path is NULL) */
	const char *hostname;
	unsigned vcpus, memory_mib;
	enum sbx_accel accel;
	unsigned long tsc_khz;    /* TCG only; 0: unknown */
	int probe;                /* boot to the probe marker and power off */
	int sandbox;              /* QEMU -sandbox (seccomp) */
	int cg_fds[4];            /* cgroup.procs files the VMM joins before exec */
	int cg_nfds;
};

struct sbx_vm {
	int pid, pidfd;
	uint64_t start_time;
	unsigned uid; /* the jailed VMM's uid (jail.h); 0: not jailed */
};

const char *sbx_vmm_name(void);
/* Is the backend's binary installed?  69 when not. */
int sbx_vmm_available(struct sbx_err *err);
/* Launch the VMM as a child of the caller (it dies with the caller:
 * PR_SET_PDEATHSIG), jailed (jail.h) unless SBX_JAIL=off.  Relative paths
 * are relative to the caller's cwd. */
int sbx_vm_boot(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err);
/* Kill the VMM (SIGKILL through its pidfd) and reap it. */
void sbx_vm_kill(struct sbx_vm *vm);

/* Acceleration: probed by a real short boot under KVM, cached per host boot
 * in LIB/accel.json.  SBX_ACCEL=tcg forces emulation. */
struct sbx_accel_info {
	enum sbx_accel accel;
	char reason[200];
	int fresh; /* probed now rather than read from the cache */
};
struct sbx_state;
int sbx_accel_get(struct sbx_state *st, const char *kernel, const char *initrd, struct sbx_accel_info *ai,
		  struct sbx_err *err);
unsigned long sbx_host_tsc_khz(void);

#endif
