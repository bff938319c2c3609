/* The peer of a unix socket: sbx's own root or not (peer.h). */
#include "peer.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The peer's pidfd: the socket's own (Linux 6.5), else one by its pid. */
static int peer_pidfd(int sock, pid_t pid)
{
	int pfd = -1;
	socklen_t sl = sizeof pfd;
	if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pfd, &sl) == 0)
		return pfd;
	if (errno != ENOPROTOOPT && errno != EINVAL)
		return -1;
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* CapEff from /proc/PID/status under dfd. */
static int cap_eff(int dfd, uint64_t *caps)
{
	_cleanup_close_ int fd = openat(dfd, "status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	_cleanup_fclose_ FILE *f = fdopen(fd, "r");
	if (!f)
		return -1;
	fd = -1;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		unsigned long long v;
		if (sscanf(line, "CapEff: %llx", &v) == 1) {
			*caps = v;
			return 0;
		}
	}
	return errno = ENODATA, -1;
}

int sbx_peer_check(int sock, struct sbx_err *err)
{
	struct ucred cr;
	socklen_t sl = sizeof cr;
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &sl) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the peer's credentials");
	if (cr.uid != geteuid())
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "peer uid %u is not %u", (unsigned)cr.uid,
				   (unsigned)geteuid());
	if (cr.pid <= 0) /* in a PID namespace we do not see */
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "the peer's process is not visible here");
	_cleanup_close_ int pfd = peer_pidfd(sock, cr.pid);
	if (pfd < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot open the peer's process %d", (int)cr.pid);
	char path[32];
	snprintf(path, sizeof path, "/proc/%d", (int)cr.pid);
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat mine, its;
	uint64_t caps = 0;
	if (dfd < 0 || fstatat(dfd, "ns/user", &its, 0) < 0 || stat("/proc/self/ns/user", &mine) < 0 ||
	    (cr.uid == 0 && cap_eff(dfd, &caps) < 0))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read process %d", (int)cr.pid);
	/* What was read is the peer's only if the peer still holds its pid. */
	if (syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "the peer's process %d is gone", (int)cr.pid);
	if (its.st_dev != mine.st_dev || its.st_ino != mine.st_ino)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "process %d is in another user namespace", (int)cr.pid);
	if (cr.uid == 0 && !(caps & (1ull << CAP_SYS_ADMIN)))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "process %d does not hold CAP_SYS_ADMIN", (int)cr.pid);
	return 0;
}
