/* guest-init early userspace: everything between the kernel handing PID 1
 * the initramfs and the agent owning the virtio-serial port.
 *
 * Under TCG every syscall and every byte to the 8250 costs real time, so the
 * happy path prints nothing, polls in small steps instead of fixed sleeps,
 * and does no work the agent does not need. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "init.h"
#include "proto.h"

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

#define MODULE_DIR "/lib/modules"
#define NEWROOT "/newroot"
#define WAIT_ROOT_MS 10000
#define WAIT_PORT_MS 10000
#define POLL_MS 5

/* sbx.debug=1: timestamps of each boot phase on the console, for tuning
 * (add printk.devkmsg=on, or the kernel drops all but ~10 of the lines);
 * sbx.debug=2: each logged as it is reached, for a boot that stops. */
static int boot_debug;

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* sbx.debug=1 phase timestamps are kept in memory and logged once the port
 * is open, so that the serial output does not distort what it measures. */
static struct {
	const char *what;
	struct timespec ts;
} phases[48];
static unsigned nphases;

static void phase(const char *what)
{
	if (boot_debug == 2) {
		struct timespec ts;
		clock_gettime(CLOCK_BOOTTIME, &ts);
		sbx_guest_log("%5ld.%03ld %s", (long)ts.tv_sec, ts.tv_nsec / 1000000L, what);
		return;
	}
	if (!boot_debug || nphases >= sizeof(phases) / sizeof(phases[0]))
		return;
	phases[nphases].what = what;
	clock_gettime(CLOCK_BOOTTIME, &phases[nphases++].ts);
}

static void phase_flush(void)
{
	for (unsigned i = 0; i < nphases; i++)
		sbx_guest_log("%5ld.%03ld %s", (long)phases[i].ts.tv_sec, phases[i].ts.tv_nsec / 1000000L,
			      phases[i].what);
	nphases = 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- power -------------------------------------------------------------- */

void sbx_guest_poweroff(void)
{
	sync();
	reboot(RB_POWER_OFF);
	/* Only reached if not PID 1 or without CAP_SYS_BOOT: nothing sane to
	 * return to, and PID 1 exiting would panic the kernel. */
	for (;;)
		pause();
}

/* ---- command line ------------------------------------------------------- */

static int is_proc_mounted(void)
{
	struct statfs sf;

	return statfs("/proc", &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}

static int valid_hostname(const char *s, size_t n)
{
	if (n == 0 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '-'))
			return 0;
	}
	return 1;
}

static int valid_root(const char *s, size_t n)
{
	if (n <= 5 || n >= sizeof(((struct sbx_guest_cfg *)0)->root) || strncmp(s, "/dev/", 5) != 0)
		return 0;
	for (size_t i = 5; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
		      c == '_' || (c == '/' && s[i - 1] != '/') || (c == '.' && s[i - 1] != '.')))
			return 0;
	}
	return 1;
}

void sbx_guest_cmdline(struct sbx_guest_cfg *cfg)
{
	char buf[4096];
	ssize_t n;
	int fd;

	memset(cfg, 0, sizeof(*cfg));
	strcpy(cfg->hostname, "sbx");
	strcpy(cfg->root, "/dev/vda");

	/* Our sbx.* parameters contain a dot, so the kernel treats them as
	 * module options and hands them neither to argv nor to envp:
	 * /proc/cmdline is the only place they exist, and main() asks for
	 * them before sbx_guest_boot() has mounted anything. */
	if (getpid() == 1 && !is_proc_mounted()) {
		mkdir("/proc", 0555);
		if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			sbx_guest_log("mount /proc: %s", strerror(errno));
	}
	fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		sbx_guest_log("/proc/cmdline: %s", strerror(errno));
		return;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';

	for (char *p = buf; *p;) {
		size_t len;
		char *tok;

		while (*p == ' ' || *p == '\n' || *p == '\t')
			p++;
		tok = p;
		while (*p && *p != ' ' && *p != '\n' && *p != '\t')
			p++;
		len = (size_t)(p - tok);
		if (len == 0)
			break;

		if (len == 11 && !strncmp(tok, "sbx.probe=1", 11)) {
			cfg->probe = 1;
		} else if (len == 11 && (!strncmp(tok, "sbx.debug=1", 11) || !strncmp(tok, "sbx.debug=2", 11))) {
			boot_debug = tok[10] - '0';
		} else if (len > 13 && !strncmp(tok, "sbx.hostname=", 13)) {
			if (valid_hostname(tok + 13, len - 13)) {
				memcpy(cfg->hostname, tok + 13, len - 13);
				cfg->hostname[len - 13] = '\0';
			} else {
				sbx_guest_log("ignoring invalid sbx.hostname");
			}
		} else if (len == 9 && !strncmp(tok, "sbx.net=1", 9)) {
			cfg->net = 1;
		} else if (len == 13 && !strncmp(tok, "sbx.scratch=1", 13)) {
			cfg->scratch = 1;
		} else if (len > 9 && !strncmp(tok, "sbx.vol", 7) && tok[7] >= '0' && tok[7] <= '7' && tok[8] == '=') {
			/* The host validated the path; still refuse what could
			 * escape: relative paths and "..". */
			size_t pl = len - 9;
			char *dst = cfg->vols[tok[7] - '0'];
			if (pl < sizeof(cfg->vols[0]) && tok[9] == '/' && !memmem(tok + 9, pl, "..", 2)) {
				memcpy(dst, tok + 9, pl);
				dst[pl] = '\0';
			} else {
				sbx_guest_log("ignoring invalid sbx.vol");
			}
		} else if (len > 10 && len <= 13 && !strncmp(tok, "sbx.volrw=", 10)) {
			/* Which volumes the host attached writable (decimal
			 * mask); only those are mounted read-write. */
			unsigned v = 0;
			size_t i = 10;
			while (i < len && tok[i] >= '0' && tok[i] <= '9')
				v = v * 10 + (unsigned)(tok[i++] - '0');
			if (i == len && v <= 255)
				cfg->vol_rw = v;
			else
				sbx_guest_log("ignoring invalid sbx.volrw");
		} else if (sbx_guest_pkg_param(cfg, tok, len)) {
			/* sbx.pkg*: pkg.c */
		} else if (len > 9 && !strncmp(tok, "sbx.root=", 9)) {
			if (valid_root(tok + 9, len - 9)) {
				memcpy(cfg->root, tok + 9, len - 9);
				cfg->root[len - 9] = '\0';
			} else {
				sbx_guest_log("ignoring invalid sbx.root");
			}
		}
	}
}

/* ---- boot steps ----------------------------------------------------------- */

static int do_mount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
	if (mount(src, dst, type, flags, data) == 0)
		return 0;
	if (errno == ENOENT && mkdir(dst, 0755) == 0 && mount(src, dst, type, flags, data) == 0)
		return 0;
	sbx_guest_log("mount %s on %s (%s): %s", src, dst, type ? type : "-", strerror(errno));
	return -1;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;
	int e;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static void probe_and_poweroff(void)
{
	static const char msg[] = SBX_PROBE_MARKER "\n";
	int fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		fd = open("/dev/ttyS0", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, msg, sizeof(msg) - 1);
		/* The host reads the marker off the serial line; make sure it
		 * left the UART before the machine goes away. */
		tcdrain(fd);
		close(fd);
	}
	sbx_guest_poweroff();
}

/* The kernel opened fds 0-2 on its built-in /dev/console; should that have
 * failed, later opens would land on 0-2 and be clobbered by the agent's
 * stdio plumbing in children. */
static void ensure_std_fds(void)
{
	for (int i = 0; i < 3; i++) {
		if (fcntl(i, F_GETFD) >= 0)
			continue;
		int fd = open("/dev/null", O_RDWR | O_NOCTTY);
		if (fd >= 0 && fd != i) {
			dup2(fd, i);
			close(fd);
		}
	}
}

/* Any PCI device at all?  QEMU's microvm has none (virtio-mmio); Cloud
 * Hypervisor's devices are all PCI. */
static int have_pci(void)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *de;
	int found = 0;

	while (d && !found && (de = readdir(d)) != NULL)
		found = de->d_name[0] != '.';
	if (d)
		closedir(d);
	return found;
}

/* Modules that only drive PCI devices: under TCG each load costs
 * milliseconds, so a VM without PCI skips them.  pvpanic itself is not
 * one: QEMU's microvm has an ISA pvpanic (pvpanic-mmio), which tells the
 * host of a panic where the console cannot be believed. */
static int pci_only(const char *m)
{
	return strstr(m, "pci") != NULL;
}

static void load_modules(void)
{
	char buf[4096];
	ssize_t n;
	int dfd, fd, pci = have_pci();

	dfd = open(MODULE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fd = dfd < 0 ? -1 : openat(dfd, "order", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		sbx_guest_log(MODULE_DIR "/order: %s", strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';

	for (char *line = buf, *next; *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if (!*line || *line == '#' || strchr(line, '/'))
			continue;
		if (!pci && pci_only(line)) {
			unlinkat(dfd, line, 0);
			continue;
		}
		int mfd = openat(dfd, line, O_RDONLY | O_CLOEXEC);
		if (mfd < 0) {
			sbx_guest_log("module %s: %s", line, strerror(errno));
			continue;
		}
		if (syscall(SYS_finit_module, mfd, "", 0) < 0 && errno != EEXIST)
			sbx_guest_log("finit_module %s: %s", line, strerror(errno));
		close(mfd);
		phase(line); /* points into buf: only valid until the flush below */
		/* The initramfs is never freed (rootfs cannot be unmounted);
		 * dropping the loaded images gives their pages back. */
		unlinkat(dfd, line, 0);
	}
	unlinkat(dfd, "order", 0);
	close(dfd);
	phase_flush();
}

static int wait_for_path(const char *path, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	struct stat st;

	for (;;) {
		if (stat(path, &st) == 0)
			return 0;
		if (now_ms() >= deadline)
			return -1;
		sleep_ms(POLL_MS);
	}
}

/* A virtio disk by its serial (the host names them: sbx-root, sbx-scratch,
 * sbx-volN), so nothing depends on the order devices are probed in. */
static int find_disk(const char *serial, char *dev, size_t cap, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	for (;;) {
		DIR *d = opendir("/sys/block");
		struct dirent *de;
		while (d && (de = readdir(d))) {
			char p[300], s[64];
			if (strncmp(de->d_name, "vd", 2))
				continue;
			snprintf(p, sizeof(p), "/sys/block/%s/serial", de->d_name);
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd >= 0 ? read(fd, s, sizeof(s) - 1) : -1;
			if (fd >= 0)
				close(fd);
			if (n <= 0)
				continue;
			s[n] = '\0';
			s[strcspn(s, "\n")] = '\0';
			if (!strcmp(s, serial)) {
				snprintf(dev, cap, "/dev/%s", de->d_name);
				closedir(d);
				return wait_for_path(dev, 1000);
			}
		}
		if (d)
			closedir(d);
		if (now_ms() >= deadline)
			return -1;
		sleep_ms(POLL_MS);
	}
}

/* The session's root: the template disk, read-only and shared by every
 * session, under an overlay whose writable layer is the session's scratch
 * disk.  Every write lands on scratch, whose size is the disk quota. */
static int mount_overlay_root(void)
{
	char root[64], scratch[64];
	if (find_disk("sbx-root", root, sizeof(root), WAIT_ROOT_MS) < 0 ||
	    find_disk("sbx-scratch", scratch, sizeof(scratch), WAIT_ROOT_MS) < 0) {
		sbx_guest_log("root or scratch disk did not appear");
		return -1;
	}
	mkdir("/lower", 0755);
	mkdir("/upper", 0755);
	/* noauto_da_alloc: a rename over a file does not start that file's
	 * writeback.  That guard is for a crash, and scratch does not
	 * outlive its guest (a save pauses it first); under TCG the flush
	 * cost each replace of /etc/hosts or a config file 10-20 ms. */
	if (mount(root, "/lower", "ext4", MS_RDONLY | MS_NOATIME, "noload") < 0 ||
	    mount(scratch, "/upper", "ext4", MS_NOATIME, "noinit_itable,noauto_da_alloc") < 0) {
		sbx_guest_log("mount root/scratch: %s", strerror(errno));
		return -1;
	}
	mkdir("/upper/root", 0755);
	mkdir("/upper/work", 0755);
	/* xino: the layers are two file systems, so without it a directory's
	 * d_ino from readdir and its st_ino from stat disagree, and programs
	 * that key on inode numbers (git's index, rsync, build tools) go
	 * wrong.  ext4's 32-bit inode numbers leave the high bits free. */
	if (mount("overlay", NEWROOT, "overlay", MS_NOATIME,
		  "lowerdir=/lower,upperdir=/upper/root,workdir=/upper/work,xino=on") < 0 &&
	    mount("overlay", NEWROOT, "overlay", MS_NOATIME,
		  "lowerdir=/lower,upperdir=/upper/root,workdir=/upper/work") < 0) {
		sbx_guest_log("mount overlay: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The name /etc/hosts is still to say; "": it says the current one. */
static char hosts_pending[65];

void sbx_guest_hosts_flush(void)
{
	if (!hosts_pending[0])
		return;
	/* gethostbyname(gethostname()) must answer without DNS (most
	 * sessions have none).  Written whole; when it cannot be
	 * overwritten in place (below), written aside and renamed into
	 * place. */
	char buf[320];
	int n = snprintf(buf, sizeof(buf),
			 "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n"
			 "ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
			 hosts_pending);
	hosts_pending[0] = '\0';
	if (n <= 0 || (size_t)n >= sizeof(buf))
		return;
	/* A restore's or a claim's new name is as long as the one the file
	 * holds (session IDs are, and pool members' IDs are made as long),
	 * so the file is overwritten where it is: in a restored VM every
	 * kernel path runs for the first time, and under TCG a create, chmod
	 * and rename on the overlay is ~22 ms of QEMU's time in each restore,
	 * the write in place ~2 (serial restores, 18 each, QEMU's CPU time
	 * until 1 s after ready, p50: 102 ms renaming, 80 in place, 78 with
	 * no write at all).  Nothing reads the file meanwhile: a new identity
	 * is applied before any exec of the session runs. */
	struct stat st;
	int fd = open("/etc/hosts", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == n &&
	    pwrite(fd, buf, (size_t)n, 0) == n) {
		close(fd);
		return;
	}
	if (fd >= 0)
		close(fd);
	fd = open("/etc/.hosts.sbx", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || write(fd, buf, (size_t)n) != n || fchmod(fd, 0644) < 0 || close(fd) < 0 ||
	    rename("/etc/.hosts.sbx", "/etc/hosts") < 0) {
		sbx_guest_log("/etc/hosts: %s", strerror(errno));
		unlink("/etc/.hosts.sbx");
	}
}

void sbx_guest_set_hostname(const char *name, int defer)
{
	if (sethostname(name, strlen(name)) < 0)
		sbx_guest_log("sethostname: %s", strerror(errno));
	snprintf(hosts_pending, sizeof(hosts_pending), "%s", name);
	if (!defer)
		sbx_guest_hosts_flush();
}

static int switch_root(const char *dev)
{
	static const char *const moves[] = { "/dev", "/proc", "/sys" };
	char dst[64];

	mkdir(NEWROOT, 0755);
	if (!dev) {
		if (mount_overlay_root() < 0)
			return -1;
	} else if (mount(dev, NEWROOT, "ext4", MS_NOATIME, NULL) < 0) {
		sbx_guest_log("mount %s on " NEWROOT ": %s", dev, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		snprintf(dst, sizeof(dst), NEWROOT "%s", moves[i]);
		if (do_mount(moves[i], dst, NULL, MS_MOVE, NULL) < 0)
			return -1;
	}
	/* What switch_root(8) does minus the exec: PID 1 keeps running from
	 * the initramfs copy of itself, which stays mapped. */
	if (chdir(NEWROOT) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0) {
		sbx_guest_log("switch root: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* guest-init itself at SBX_GUEST_TOOL_PATH for the execs that run its
 * tools (sbx-serve's WatchDir): a bind of the initramfs copy PID 1 runs
 * from, which no path of the new root reaches otherwise; read-only, and
 * no copy of the bytes.  A guest without it only lacks the tools. */
static void tool_bind(void)
{
	int fd;

	mkdir("/run/sbx", 0755);
	if ((fd = open(SBX_GUEST_TOOL_PATH, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0755)) < 0) {
		sbx_guest_log("create " SBX_GUEST_TOOL_PATH ": %s", strerror(errno));
		return;
	}
	close(fd);
	if (mount("/proc/self/exe", SBX_GUEST_TOOL_PATH, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, SBX_GUEST_TOOL_PATH, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		sbx_guest_log("bind guest-init on " SBX_GUEST_TOOL_PATH ": %s", strerror(errno));
}

static void setup_newroot(void)
{
	const unsigned long nse = MS_NOSUID | MS_NODEV | MS_NOEXEC;

	mkdir("/dev/pts", 0755);
	mkdir("/dev/shm", 01777);
	do_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5");
	do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	do_mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	phase("pts, shm, run mounted");
	tool_bind();
	phase("guest-init bound");
	/* Shell idioms (<(...), /dev/stdin) need these; devtmpfs lacks them. */
	symlink("/proc/self/fd", "/dev/fd");
	symlink("/proc/self/fd/0", "/dev/stdin");
	symlink("/proc/self/fd/1", "/dev/stdout");
	symlink("/proc/self/fd/2", "/dev/stderr");

	/* favordynmods: cgroup changes stop waiting for RCU grace periods
	 * (milliseconds under TCG) at a small cost to fork and exit.  Older
	 * kernels reject the option with EINVAL. */
	mkdir("/sys/fs/cgroup", 0755);
	int cg = mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nse, "nsdelegate,favordynmods");
	if (cg < 0 && errno == EINVAL)
		cg = do_mount("cgroup2", "/sys/fs/cgroup", "cgroup2", nse, "nsdelegate");
	else if (cg < 0)
		sbx_guest_log("mount cgroup2 on /sys/fs/cgroup: %s", strerror(errno));
	phase("cgroup2 mounted");
	if (cg == 0 && write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu +memory +pids") < 0) {
		/* Enable what we can: per-exec limits degrade, execs still run. */
		static const char *const ctl[] = { "+memory", "+pids", "+cpu" };
		for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++)
			if (write_file("/sys/fs/cgroup/cgroup.subtree_control", ctl[i]) < 0)
				sbx_guest_log("cgroup controller %s: %s", ctl[i] + 1, strerror(errno));
	}
}

static void setup_loopback(void)
{
	struct ifreq ifr;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0) {
		sbx_guest_log("socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0 ||
	    (ifr.ifr_flags |= IFF_UP | IFF_RUNNING, ioctl(s, SIOCSIFFLAGS, &ifr) < 0))
		sbx_guest_log("lo up: %s", strerror(errno));
	/* The kernel gives an up loopback 127.0.0.1/8 by itself; only set it
	 * when missing, since rewriting it tears down and re-adds routes. */
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFADDR, &ifr) < 0 || sin->sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
		memset(&ifr, 0, sizeof(ifr));
		strcpy(ifr.ifr_name, "lo");
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
			sbx_guest_log("lo 127.0.0.1: %s", strerror(errno));
		sin = (struct sockaddr_in *)&ifr.ifr_netmask;
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(0xff000000u);
		if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
			sbx_guest_log("lo netmask: %s", strerror(errno));
	}
	close(s);
}

/* Is there a vsock device with a CID of its own (Cloud Hypervisor)?  The
 * vsock modules load on every VMM and make /dev/vsock; without a device
 * the local CID is VMADDR_CID_ANY. */
static int have_vsock(void)
{
	unsigned int cid = VMADDR_CID_ANY;
	int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
		cid = VMADDR_CID_ANY;
	close(fd);
	return cid != VMADDR_CID_ANY && cid > VMADDR_CID_HOST;
}

static int vsock_listen(void)
{
	struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_port = SBX_AGENT_VSOCK_PORT, .svm_cid = VMADDR_CID_ANY };
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0) {
		sbx_guest_log("vsock port %u: %s", SBX_AGENT_VSOCK_PORT, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Where the host reaches the agent: a vsock device (*vsock set), or the
 * virtio-serial port named sbx.agent (its path in dev).  The port node
 * appears when the device probes, but its name arrives in a later control
 * message from QEMU, so poll the name, not the node. */
static int find_agent_port(char *dev, size_t cap, int *vsock)
{
	long deadline = now_ms() + WAIT_PORT_MS;

	for (;;) {
		if ((*vsock = have_vsock()))
			return 0;
		DIR *d = opendir("/sys/class/virtio-ports");
		struct dirent *de;

		while (d && (de = readdir(d)) != NULL) {
			char path[PATH_MAX], name[64];
			ssize_t n;
			int fd;

			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			n = read(fd, name, sizeof(name) - 1);
			close(fd);
			if (n <= 0)
				continue;
			name[n] = '\0';
			name[strcspn(name, "\n")] = '\0';
			if (strcmp(name, SBX_AGENT_PORT_NAME) == 0) {
				snprintf(dev, cap, "/dev/%s", de->d_name);
				closedir(d);
				return 0;
			}
		}
		if (d)
			closedir(d);
		if (now_ms() >= deadline)
			return -1;
		sleep_ms(POLL_MS);
	}
}

/* mkdir -p inside the new root. */
static void mkdirs(const char *path)
{
	char p[128];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

/* A workspace whose policy grants more than it had: the host extended
 * the image file and nothing else, since e2fsprogs run as root on the
 * host over an image the guest wrote is a way to attack the host
 * (security review, finding 5).  The guest grows its own mounted ext4 to
 * the disk's size online, with the kernel's resize ioctl; on a disk of the
 * file system's size it changes nothing. */
#define SBX_EXT4_IOC_RESIZE_FS _IOW('f', 16, unsigned long long)
static void grow_online(const char *dev, const char *mnt)
{
	int d = open(dev, O_RDONLY | O_CLOEXEC);
	unsigned long long bytes = 0;
	int r = d < 0 ? -1 : ioctl(d, BLKGETSIZE64, &bytes);
	if (d >= 0)
		close(d);
	struct statfs sf;
	if (r < 0 || statfs(mnt, &sf) < 0 || sf.f_bsize <= 0) {
		sbx_guest_log("cannot size %s: %s", dev, strerror(errno));
		return;
	}
	unsigned long long blocks = bytes / (unsigned long long)sf.f_bsize;
	int m = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (m < 0 || ioctl(m, SBX_EXT4_IOC_RESIZE_FS, &blocks) < 0)
		sbx_guest_log("cannot grow %s to %llu blocks: %s", mnt, blocks, strerror(errno));
	if (m >= 0)
		close(m);
}

/* The writable volume (the workspace) as mounted, for a save to unmount
 * and the restored or saved guest to mount again (sbx_guest_ws_*). */
static char ws_dev[64], ws_dir[PATH_MAX];
static int ws_down;

/* A save is about to copy this VM's memory, from which other sessions
 * start against the workspace's image as it will be then: no file system
 * state of it may be in the image.  Unmounted (sync, the bdev's cache
 * dropped with its last close), mounted again by sbx_guest_ws_up.  0 with
 * nothing to do; -1 with errno (EBUSY: a process holds files there). */
int sbx_guest_ws_down(void)
{
	if (!ws_dev[0] || ws_down)
		return 0;
	sync();
	if (umount(ws_dir) < 0)
		return -1;
	ws_down = 1;
	return 0;
}

/* After the save (the source goes on) or in a restored guest (the host
 * attached the workspace as it is now): its file system read afresh. */
void sbx_guest_ws_up(void)
{
	if (!ws_down)
		return;
	ws_down = 0;
	if (mount(ws_dev, ws_dir, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "discard") < 0)
		sbx_guest_log("mount %s on %s again: %s", ws_dev, ws_dir, strerror(errno));
}

/* Host directories the session reads (-v HOST:GUEST:ro), each an ext4
 * image the host built without a loop mount; read-only, no devices, no
 * setuid.  A workspace (sbx.volrw) is the one writable kind: its journal
 * is replayed and kept, since its contents outlive the session. */
static int mount_volumes(const struct sbx_guest_cfg *cfg)
{
	for (int i = 0; i < 8; i++) {
		char serial[16], dev[64];
		if (!cfg->vols[i][0])
			continue;
		snprintf(serial, sizeof(serial), "sbx-vol%d", i);
		/* A session the user asked a volume for does not come up
		 * without it: the host's create fails with this message. */
		if (find_disk(serial, dev, sizeof(dev), WAIT_ROOT_MS) < 0) {
			sbx_guest_log("volume disk %s did not appear", serial);
			return -1;
		}
		mkdirs(cfg->vols[i]);
		int rw = (cfg->vol_rw >> i) & 1;
		if (mount(dev, cfg->vols[i], "ext4", (rw ? 0 : MS_RDONLY) | MS_NOSUID | MS_NODEV | MS_NOATIME,
			  rw ? "discard" : "noload") < 0) {
			sbx_guest_log("mount %s on %s: %s", dev, cfg->vols[i], strerror(errno));
			return -1;
		}
		if (rw) {
			grow_online(dev, cfg->vols[i]);
			snprintf(ws_dev, sizeof(ws_dev), "%s", dev);
			snprintf(ws_dir, sizeof(ws_dir), "%s", cfg->vols[i]);
		}
	}
	return 0;
}

int sbx_guest_boot(const struct sbx_guest_cfg *cfg)
{
	const unsigned long nse = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	char port[PATH_MAX];
	int fd, vsock;

	phase("init entered");
	umask(022);
	if (do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") < 0)
		return -1;
	if (!is_proc_mounted() && do_mount("proc", "/proc", "proc", nse, NULL) < 0)
		return -1;
	ensure_std_fds();
	if (cfg->probe)
		probe_and_poweroff();
	phase("dev proc mounted");
	if (do_mount("sysfs", "/sys", "sysfs", nse, NULL) < 0)
		return -1;

	load_modules();
	phase("modules loaded");
	if (!cfg->scratch && wait_for_path(cfg->root, WAIT_ROOT_MS) < 0) {
		sbx_guest_log("root device %s did not appear", cfg->root);
		return -1;
	}
	if (switch_root(cfg->scratch ? NULL : cfg->root) < 0)
		return -1;
	phase("root switched");
	setup_newroot();
	phase("new root set up");
	if (mount_volumes(cfg) < 0)
		return -1;
	sbx_guest_set_hostname(cfg->hostname, 0);
	phase("hostname set");
	setup_loopback();
	sbx_guest_packages(cfg);
	phase("packages configured");
	/* A session whose NIC does not come up fails its create: its policy
	 * asked for the network. */
	if (cfg->net && sbx_guest_net_up() < 0)
		return -1;
	phase("system up");

	if (find_agent_port(port, sizeof(port), &vsock) < 0) {
		sbx_guest_log("no vsock device and no virtio-serial port named " SBX_AGENT_PORT_NAME);
		return -1;
	}
	if (vsock) {
		/* The agent accepts the host's connections itself. */
		fd = vsock_listen();
		phase("agent listening on vsock");
		phase_flush();
		return fd;
	}
	/* The node is created by devtmpfs asynchronously to the sysfs entry. */
	if (wait_for_path(port, 1000) < 0 || (fd = open(port, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)) < 0) {
		sbx_guest_log("open %s: %s", port, strerror(errno));
		return -1;
	}
	phase("agent port open");
	return fd;
}

/* A phase of the agent's start (its first HELLO): logged, and with the
 * boot's phases flushed after it. */
void sbx_guest_phase(const char *what)
{
	phase(what);
	phase_flush();
}
