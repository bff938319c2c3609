/* The VMM interface: one table of operations per backend, in its own file:
 * QEMU's microvm machine (vmm_qemu.c) and Cloud Hypervisor (vmm_ch.c).
 * vmm.c chooses between them. */
#ifndef SBX_VMM_H
#define SBX_VMM_H

#include <stdint.h>
#include "err.h"

enum sbx_accel { SBX_ACCEL_TCG = 0, SBX_ACCEL_KVM = 1 };

struct sbx_vmm_ops;

struct sbx_vm_config {
	const struct sbx_vmm_ops *ops; /* the backend; NULL: QEMU */
	const char *kernel, *initrd;
	const char *rootfs;       /* template root disk, attached read-only; NULL: none (probe) */
	const char *scratch;      /* the session's writable disk (raw, quota-sized) */
	const char *vol_path[8];  /* volumes: image ... */
	const char *vol_guest[8]; /* ... and where the guest mounts it */
	unsigned nvols;
	unsigned vol_rw_mask;     /* bit i: volume i is writable (a workspace) */
	const char *agent_sock;   /* SBX_AGENT_ACCEPT backends: unix socket the monitor
				   * listens on and the VMM connects to; NULL: none */
	const char *vsock_sock;   /* SBX_AGENT_CONNECT backends: the VMM's hybrid vsock
				   * socket, which the monitor connects to */
	const char *qmp_sock;     /* control socket: QMP (made by the caller's boot and
				   * passed as an fd) or Cloud Hypervisor's API socket */
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
	/* Network (policy network.egress: allowlist): the VMM runs in the
	 * session's network namespace and its NIC is a TAP device there. */
	int netns_fd;             /* >0: setns(2) into it before exec; 0: no network */
	const char *tap_name;     /* the TAP device in that namespace; NULL: no NIC */
	const char *mac;          /* the guest NIC's MAC address */
	/* Snapshots: start from the state ops->save wrote into this directory
	 * instead of booting; the VM comes up paused (ops->resume runs it). */
	const char *restore_dir;
};

struct sbx_vm {
	int pid, pidfd;
	uint64_t start_time;
	unsigned uid; /* the jailed VMM's uid (jail.h); 0: not jailed */
	const struct sbx_vmm_ops *ops;
	int ctl_fd;           /* the open control connection (QMP); -1 or 0: none yet */
	char ctl_path[108];   /* the control socket's path */
};

enum sbx_agent_mode {
	SBX_AGENT_ACCEPT = 0,  /* the VMM connects to cfg->agent_sock (QEMU virtio-serial) */
	SBX_AGENT_CONNECT = 1, /* the monitor connects through ops->agent_connect
				* (Cloud Hypervisor's hybrid vsock) */
};

/* One backend.  Every call returns 0, or -1 with err filled. */
struct sbx_vmm_ops {
	const char *name; /* as recorded in session.json's "vmm" */
	enum sbx_agent_mode agent_mode;
	/* Is the backend's binary installed?  69 when not. */
	int (*available)(struct sbx_err *err);
	/* Launch the VMM as a child of the caller (it dies with the caller:
	 * PR_SET_PDEATHSIG), jailed (jail.h) unless SBX_JAIL=off.  Relative
	 * paths are relative to the caller's cwd. */
	int (*boot)(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err);
	/* Stop and restart the vCPUs.  A paused VM uses no guest CPU. */
	int (*pause)(struct sbx_vm *vm, struct sbx_err *err);
	int (*resume)(struct sbx_vm *vm, struct sbx_err *err);
	/* Write the paused VM's memory and device state into the directory dir
	 * (absolute path; files mode 0600).  The disks are the caller's. */
	int (*save)(struct sbx_vm *vm, const char *dir, struct sbx_err *err);
	/* SBX_AGENT_CONNECT: one attempt to open the agent channel; returns a
	 * connected fd, or -1 with err->code 0 when the guest is not
	 * listening yet (try again), or -1 with err set. */
	int (*agent_connect)(struct sbx_vm *vm, const struct sbx_vm_config *cfg, struct sbx_err *err);
	/* Kill the VMM (SIGKILL through its pidfd), reap it, close the control
	 * connection. */
	void (*kill)(struct sbx_vm *vm);
};

extern const struct sbx_vmm_ops sbx_vmm_qemu;

/* The backend of that name ("qemu", "cloud-hypervisor"); NULL: none. */
const struct sbx_vmm_ops *sbx_vmm_lookup(const char *name);
/* The backend for a new session: $SBX_VMM when set (unknown: 3; not
 * installed: 69), else Cloud Hypervisor when it is installed and the
 * acceleration is KVM, else QEMU (69 when not installed). */
int sbx_vmm_choose(enum sbx_accel accel, const struct sbx_vmm_ops **ops, struct sbx_err *err);
/* Is bin (a name looked up in PATH, or a path) executable? */
int sbx_in_path(const char *bin);

/* Shorthands: through cfg->ops (boot) or vm->ops (the rest); QEMU when
 * NULL. */
int sbx_vm_boot(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err);
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
