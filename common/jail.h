/* The VMM's jail: a VMM parses guest-controlled device state all day, so
 * it runs as if already compromised.  In the VMM child, just before exec:
 * a private mount namespace whose root is an empty read-only tmpfs holding
 * only what the VMM needs, a per-VMM unprivileged uid/gid, no
 * capabilities, no_new_privs, and a seccomp filter under the VMM's own
 * (QEMU's -sandbox, Cloud Hypervisor's per-thread filters). */
#ifndef SBX_JAIL_H
#define SBX_JAIL_H

#include <sys/types.h>

#include "err.h"
#include "vmm.h"

/* Jail uids are SBX_JAIL_UID_BASE + the VMM's pid: unique among live VMMs
 * by construction, far above login and subuid ranges. */
#define SBX_JAIL_UID_BASE 0x5b000000u

/* Fixed paths inside the jail. */
#define SBX_JAIL_DIR "/sbx"
#define SBX_JAIL_RUN "/sbx/run" /* the VMM's cwd: agent.sock, console.log */

/* Is the jail on?  SBX_JAIL=off turns it off (a debugging aid); any value
 * but "on" or "off" is an error, so a typo cannot silently disable it. */
int sbx_jail_enabled(struct sbx_err *err);

/* The configuration as the VMM sees it from inside the jail: disks at
 * fixed paths under SBX_JAIL_DIR, sockets and console by name in its cwd.
 * Pointers in *in point to static strings or into *host. */
void sbx_jail_view(const struct sbx_vm_config *host, struct sbx_vm_config *in);

/* Enter the jail for the VMM described by c (host paths), in the cloned
 * child, as root, already in its own namespaces (vmm.c).  host_pid is its
 * pid on the host, which names its uid.  On return the process is
 * unprivileged and filtered; PR_SET_PDEATHSIG, which a uid change clears,
 * is re-armed and parent_pidfd checked for a monitor that died meanwhile.
 * Any failure returns -1: the caller must not exec. */
int sbx_jail_enter(const struct sbx_vm_config *c, pid_t host_pid, int parent_pidfd, struct sbx_err *err);
/* The jail's seccomp filter alone, for another process that parses guest
 * bytes (the egress proxy) once it has no_new_privs. */
int sbx_jail_filter(struct sbx_err *err);
/* The same for a confined template build step (confine.h): chroot
 * allowed, mounts and namespaces answered with EPERM. */
int sbx_jail_filter_build(struct sbx_err *err);

/* For a process of sbx's own that handles hostile bytes without exec'ing
 * anything (the monitor's unprivileged half), as root, in this order:
 * sbx_jail_namespaces gives it new mount (an empty read-only root, the
 * host's detached: it works through the fds it opened before), network
 * (loopback only, down), IPC and UTS namespaces (hostname named);
 * sbx_jail_self then takes uid and gid id with no groups, drops every
 * capability, re-arms PR_SET_PDEATHSIG (checking parent_pidfd), sets
 * no_new_privs, makes it not dumpable, verifies there is no way back, and
 * installs the seccomp filter above. */
int sbx_jail_namespaces(const char *hostname, struct sbx_err *err);
/* For a process of sbx's own that reads the host's system files but needs
 * nothing else of the host (the egress proxy: the resolver's configuration,
 * libraries, CA certificates), as root: a new mount namespace whose root
 * is a read-only tmpfs holding read-only, nosuid, nodev, non-recursive
 * binds of /etc and /usr, /bin, /sbin and /lib* as the host has them, and
 * of the one file /etc/resolv.conf resolves to when that is elsewhere: no
 * /run, no /proc.  No other mount is copied (none is kept alive, no other
 * tenant's path shows); state is reached through fds opened before. */
int sbx_jail_system_root(struct sbx_err *err);
/* After sbx_jail_system_root, still root: n small files (at most 1 MiB in
 * all) in a read-only directory /NAME of the new root, for programs run
 * from the jail that take only paths (the package cache's gpgv and its
 * keyrings).  Files name[i] hold data[i]. */
int sbx_jail_system_files(const char *name, const char *const *names, const char *const *data, const size_t *len,
			  unsigned n, struct sbx_err *err);
/* Both keep a sanitized build's report file (make asan), which the runtime
 * would open by path at its first report.  For a child forked after the
 * root is gone: sbx_jail_report_spare, before, opens a file for it (-1:
 * none, and always -1 in a plain build), which the child passes to
 * sbx_jail_report_use and the parent closes. */
int sbx_jail_report_spare(void);
void sbx_jail_report_use(int fd);
/* 1 in a sanitized build (make asan), whose runtime reserves terabytes of
 * address space: an RLIMIT_AS there would fail its every allocation. */
int sbx_jail_sanitized(void);
int sbx_jail_self(uid_t id, int parent_pidfd, struct sbx_err *err);

#endif
