/* The VMM interface: one table of operations per backend, in its own file:
 * QEMU's microvm machine (vmm_qemu.c) and Cloud Hypervisor (vmm_ch.c).
 * vmm.c chooses between them. */
#ifndef SBX_VMM_H
#define SBX_VMM_H

#include <stddef.h>
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
	int stderr_fd;            /* >0: the VMM's stderr (and stdout unless stdout_fd),
				   * instead of log_path */
	const char *hostname;
	const char *guest_params; /* more kernel parameters for guest-init, space
				   * separated (sbx.pkg=...); NULL: none */
	unsigned vcpus, memory_mib;
	/* The writable disks' shared throttle, bytes and requests per
	 * second; 0: none.  The read-only root is the template every session
	 * reads, nearly always in the host's page cache: not throttled. */
	uint64_t disk_bps;
	unsigned disk_iops;
	enum sbx_accel accel;
	unsigned long tsc_khz; /* TCG only; 0: unknown */
	int tsc_reliable;      /* TCG only: the host TSC is invariant (tsc=reliable) */
	int probe;             /* boot to the probe marker and power off */
	int sandbox;           /* QEMU -sandbox (seccomp) */
	int cg_fds[4];         /* cgroup.procs files the VMM joins before exec */
	int cg_nfds;
	/* Network (policy network.egress: allowlist): the VMM runs in the
	 * session's network namespace and its NIC is a TAP device there. */
	int netns_fd;         /* >0: setns(2) into it before exec; 0: no network */
	const char *tap_name; /* the TAP device in that namespace; NULL: no NIC */
	int tap_fd;           /* >0: that TAP, already open (IFF_TAP|IFF_NO_PI), handed
			       * to the VMM across exec (QEMU -netdev tap,fd=N): no
			       * /dev/net/tun in the jail; 0: open tap_name */
	const char *mac;      /* the guest NIC's MAC address */
	uint64_t net_rate;    /* network.rate, bytes/s: Cloud Hypervisor's NIC rate
			       * limiter (the namespace's nftables rules hold it for
			       * every backend, netns.c); 0: none */
	/* Snapshots: start from the state ops->save wrote into this directory
	 * instead of booting; the VM comes up paused (ops->resume runs it). */
	const char *restore_dir;
	/* Set by a backend whose VMM writes and reads snapshot files itself
	 * (Cloud Hypervisor), not by callers: a directory of the session's
	 * that the jail shows writable at SBX_JAIL_DIR/state. */
	const char *state_dir;
};

struct sbx_vm {
	int pid, pidfd;
	uint64_t start_time;
	unsigned uid; /* the jailed VMM's uid (jail.h); 0: not jailed */
	const struct sbx_vmm_ops *ops;
	int ctl_fd;         /* the open control connection (QMP); -1 or 0: none yet */
	char ctl_path[108]; /* the control socket's path */
	/* Optional, set by the caller before a restoring boot or a save: how
	 * far the memory image is (bytes done of total, 0: unknown). */
	void (*progress)(void *ctx, const char *what, uint64_t done, uint64_t total);
	void *progress_ctx;
	/* Optional, set by the caller before a save: the most bytes the VMM
	 * may write for it (the guest's memory plus SBX_SAVE_DEVICE_ALLOWANCE,
	 * zstream.h), and the most the image may take on disk (a tenant's
	 * snapshot_bytes left); 0: no cap.  Past either the save fails and
	 * leaves no image.  Backends that stream the state through the
	 * caller (QEMU) honour them. */
	uint64_t save_max_in, save_max_out;
	/* The VMM's event stream (Cloud Hypervisor --event-monitor), read end,
	 * nonblocking: the caller watches it and calls ops->events; -1 or 0:
	 * none (QEMU). */
	int event_fd;
	void *priv; /* the backend's own state, freed by ops->kill */
};

/* What ops->events saw (the most severe event read). */
enum sbx_vm_event {
	SBX_VM_EV_NONE = 0,
	SBX_VM_EV_SHUTDOWN, /* the VM stopped (guest power-off): the VMM exits next */
	SBX_VM_EV_REBOOT,   /* the guest reset itself: the VMM would boot it again */
	SBX_VM_EV_PANIC,    /* the guest kernel panicked (pvpanic) */
	SBX_VM_EV_EOF,      /* the stream ended: stop watching it */
};

/* Device counters (Cloud Hypervisor vm.counters), summed over devices. */
struct sbx_vm_counters {
	uint64_t disk_read_bytes, disk_write_bytes, disk_read_ops, disk_write_ops;
	uint64_t net_rx_bytes, net_tx_bytes;
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
	int kvm_only;     /* runs no guest without KVM (no emulator) */
	int nic;          /* can give the guest the session's TAP (network.egress) */
	int panic_status; /* the VMM exits with it when the guest reports a
			   * panic (pvpanic), and prints nothing; 0: it has no
			   * such exit (Cloud Hypervisor says so in events) */
	/* Is the backend's binary installed?  69 when not. */
	int (*available)(struct sbx_err *err);
	/* Launch the VMM as a child of the caller (it dies with the caller:
	 * PR_SET_PDEATHSIG), jailed (jail.h) unless SBX_JAIL=off.  Relative
	 * paths are relative to the caller's cwd. */
	int (*boot)(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err);
	/* Stop and restart the vCPUs.  A paused VM uses no guest CPU. */
	int (*pause)(struct sbx_vm *vm, struct sbx_err *err);
	int (*resume)(struct sbx_vm *vm, unsigned timeout_ms, struct sbx_err *err); /* 0: the backend's default */
	/* Write the paused VM's memory and device state into the directory dir
	 * (absolute path; files mode 0600).  The disks are the caller's. */
	int (*save)(struct sbx_vm *vm, const char *dir, struct sbx_err *err);
	/* SBX_AGENT_CONNECT: one attempt to open the agent channel; returns a
	 * connected fd, or -1 with err->code 0 when the guest is not
	 * listening yet (try again), or -1 with err set. */
	int (*agent_connect)(struct sbx_vm *vm, const struct sbx_vm_config *cfg, struct sbx_err *err);
	/* Kill the VMM (SIGKILL through its pidfd), reap it, close the control
	 * connection.  With vm->pid 0 (already reaped) it only releases what
	 * the backend still holds. */
	void (*kill)(struct sbx_vm *vm);
	/* Optional (NULL: none).  Read what vm->event_fd has; returns an enum
	 * sbx_vm_event. */
	int (*events)(struct sbx_vm *vm);
	/* Optional (NULL: none; QEMU).  The VM's device counters. */
	int (*counters)(struct sbx_vm *vm, struct sbx_vm_counters *c, struct sbx_err *err);
};

extern const struct sbx_vmm_ops sbx_vmm_qemu;
extern const struct sbx_vmm_ops sbx_vmm_cloud_hypervisor;

/* The backend of that name ("qemu", "cloud-hypervisor"); NULL: none. */
const struct sbx_vmm_ops *sbx_vmm_lookup(const char *name);
/* The backend for a new session: $SBX_VMM when set (unknown: 3; not
 * installed, or Cloud Hypervisor without KVM: 69), else Cloud Hypervisor
 * when it is installed, the acceleration is KVM and the session needs no NIC
 * (needs_nic: it cannot attach a TAP in the jail), else QEMU (69 when not
 * installed). */
int sbx_vmm_choose(enum sbx_accel accel, int needs_nic, const struct sbx_vmm_ops **ops, struct sbx_err *err);
/* The backend the KVM probe boots with: the one a session would use if
 * KVM works ($SBX_VMM, else Cloud Hypervisor when installed, else QEMU),
 * so the probe's verdict is about the VMM that will run the guests.  NULL:
 * $SBX_VMM names no backend. */
const struct sbx_vmm_ops *sbx_vmm_for_probe(void);
/* Is bin (a name looked up in PATH, or a path) executable? */
int sbx_in_path(const char *bin);

/* The guest kernel command line for c, the same for every backend
 * (console on ttyS0, guest-init's sbx.* parameters, the TCG-only
 * tunings, $SBX_GUEST_CMDLINE).  3 when it does not fit. */
int sbx_vm_cmdline(const struct sbx_vm_config *c, char *buf, size_t n, struct sbx_err *err);
/* Start argv as the VMM of c, for the backends: a child that dies with
 * the caller (PR_SET_PDEATHSIG), in c's host cgroups and network
 * namespace, jailed when jail is set (jail.h), stdout/stderr on
 * c->stderr_fd or c->log_path (stdout on c->stdout_fd when set), a clean
 * environment, and no fd across exec but stdio and keep[].  Jailed, it is
 * PID 1 of new PID, network (loopback only, or c's netns), IPC and UTS
 * namespaces, with RLIMIT_CORE 0, RLIMIT_NOFILE and RLIMIT_FSIZE set.  Fills vm's pid, pidfd, start
 * time and uid. */
/* The jailed VMM's rlimits: open files, and the size of any file it
 * writes past its disks (console, log). */
#define SBX_VMM_NOFILE 1024
#define SBX_VMM_LOG_MAX (64ull << 20)
int sbx_vmm_spawn(const struct sbx_vm_config *c, char *const argv[], const int *keep, int nkeep, int jail,
		  struct sbx_vm *vm, struct sbx_err *err);

/* Shorthands: through cfg->ops (boot) or vm->ops (the rest); QEMU when
 * NULL. */
int sbx_vm_boot(const struct sbx_vm_config *cfg, struct sbx_vm *vm, struct sbx_err *err);
void sbx_vm_kill(struct sbx_vm *vm);
/* 69 when the backend has no such operation. */
int sbx_vm_pause(struct sbx_vm *vm, struct sbx_err *err);
int sbx_vm_resume(struct sbx_vm *vm, struct sbx_err *err);
/* ... giving up after timeout_ms (a warm-pool claim's, under the global
 * lock: a wedged VMM must not hold up every create for long). */
int sbx_vm_resume_within(struct sbx_vm *vm, unsigned timeout_ms, struct sbx_err *err);
int sbx_vm_save(struct sbx_vm *vm, const char *dir, struct sbx_err *err);

/* Acceleration: probed by a real short boot under KVM, cached per host boot
 * in LIB/accel.json.  SBX_ACCEL=tcg forces emulation. */
struct sbx_accel_info {
	enum sbx_accel accel;
	char reason[400];
	int fresh; /* probed now rather than read from the cache */
};
struct sbx_state;
int sbx_accel_get(struct sbx_state *st, const char *kernel, const char *initrd, struct sbx_accel_info *ai,
		  struct sbx_err *err);
unsigned long sbx_host_tsc_khz(void);
/* The host's TSC has a constant rate and never stops (1), or not (0). */
int sbx_host_tsc_invariant(void);

#endif
