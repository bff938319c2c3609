/* guest-init: PID 1 of every sbx guest.  Two halves:
 *  boot.c   - early userspace: mounts, module loading, root disk, switch
 *             root, cgroup2, hostname, loopback, finding the agent port;
 *  agent*.c - the agent (agent.h): frames from the host (common/proto.h),
 *             execs in their own cgroup, output, timeouts, reaping.
 * main.c glues them; run outside a VM (`guest-init --agent-fd N`) it serves
 * the agent alone on an inherited fd, which the host-side tests use. */
#ifndef SBX_GUEST_INIT_H
#define SBX_GUEST_INIT_H

#include <stddef.h>

struct sbx_guest_cfg {
	int probe;         /* sbx.probe=1: print SBX_PROBE_MARKER on the console, power off */
	char hostname[65]; /* sbx.hostname= */
	char root[64];     /* sbx.root=, default /dev/vda */
	int scratch;       /* sbx.scratch=1: root is the read-only template disk
			    * (serial sbx-root) under an overlay whose upper
			    * layer is the session's scratch disk (sbx-scratch) */
	char vols[8][128]; /* sbx.volN=/guest/path: disk sbx-volN, mounted read-only */
	int net;           /* sbx.net=1: a NIC to the session's proxy (net.c) */
	unsigned vol_rw;   /* sbx.volrw=MASK: bit N, volume N is writable (a workspace) */
	/* Package installs (pkg.c): sbx.pkg=, sbx.pkgpolicy=, sbx.pkgreg=P,N,
	 * sbx.npmscripts=deny */
	char pkg[24]; /* "offline", the cache's URL, or "" (leave pip and npm alone) */
	char pkg_policy[64];
	unsigned pkg_pypi, pkg_npm;
	int npm_no_scripts; /* sbx.npmscripts=deny: npm's ignore-scripts */
	/* sbx.apt=SUITE/COMP[+COMP][!],... (the cache's apt entries in order;
	 * '!': the archive a policy named, whose keys the guest lacks) or
	 * sbx.apt=- (apt is refused here); "": leave apt's sources alone */
	char apt[400];
};

#define SBX_PROBE_MARKER "SBX-PROBE-OK"
#define SBX_AGENT_PORT_NAME "sbx.agent"
#define SBX_GUEST_USER_UID 1000u
#define SBX_GUEST_USER_GID 1000u

/* The read end of the package responder's reports (pkg.c): lines
 * "TYPE METHOD TARGET", non-blocking; -1 until a responder runs. */
extern int sbx_guest_pkg_report_fd;

/* Parse /proc/cmdline into cfg (defaults filled). */
void sbx_guest_cmdline(struct sbx_guest_cfg *cfg);
/* Bring the system up as PID 1 and return the agent's fd: the virtio-serial
 * port, opened O_RDWR|O_CLOEXEC|O_NONBLOCK, or a listening vsock socket
 * (port SBX_AGENT_VSOCK_PORT) where the VMM has vsock instead; -1 on a
 * fatal error (already logged). */
int sbx_guest_boot(const struct sbx_guest_cfg *cfg);
/* The workspace unmounted for a save, and mounted again after it. */
int sbx_guest_ws_down(void);
void sbx_guest_ws_up(void);
/* Set the hostname and make it resolve (127.0.1.1 in /etc/hosts, as
 * Debian's installer does): at boot, and when a claim or restore gives the
 * VM its session's name.  defer: /etc/hosts is written at the next
 * sbx_guest_hosts_flush, which the agent calls once its answer is on its
 * way and before it acts on any frame but a PING or the secrets, so the
 * file's replace (milliseconds under TCG) is off a claim's path and no
 * command sees the old name. */
void sbx_guest_set_hostname(const char *name, int defer);
/* /etc/hosts names the host name a deferred sbx_guest_set_hostname set
 * (a no-op when it does already). */
void sbx_guest_hosts_flush(void);
/* Serve the host on fd until SHUTDOWN (on a listening socket: each host
 * that connects, one at a time, a new one replacing the old); as PID 1,
 * SHUTDOWN syncs and powers off.  Returns only in --agent-fd mode, or -1
 * on a fatal error. */
int sbx_agent_run(int fd, int is_pid1);
/* sbx.net=1: eth0, its route and /etc/resolv.conf (net.c), in the new
 * root; -1 when something failed (already logged). */
int sbx_guest_net_up(void);
/* pkg.c: take one sbx.pkg* kernel parameter (1), or say it is none (0). */
int sbx_guest_pkg_param(struct sbx_guest_cfg *cfg, const char *tok, size_t len);
/* pkg.c: take a space-separated list of sbx.pkg* parameters (a claim's
 * IDENTITY); -1 on a word that is none. */
int sbx_guest_pkg_params(struct sbx_guest_cfg *cfg, const char *s);
/* pkg.c: write /etc/pip.conf and npmrc for the session's package policy,
 * and start the local responder for what it refuses. */
void sbx_guest_packages(const struct sbx_guest_cfg *cfg);
/* Log one line to the console (/dev/kmsg as PID 1, stderr otherwise). */
void sbx_guest_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A boot phase (sbx.debug=1 or 2 on the kernel command line), and every
 * phase so far logged (boot.c). */
void sbx_guest_phase(const char *what);
/* `guest-init --watch [--recursive] PATH` (watch.c): path's changes as
 * records on stdout until EOF on stdin; the exit status. */
int sbx_guest_watch(const char *path, int recursive);
/* Power off now (PID 1) after sync; never returns. */
void sbx_guest_poweroff(void) __attribute__((noreturn));

#endif
