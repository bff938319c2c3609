/* sbx-oci's terminals (oci.h): runc's console socket.  The engine
 * (conmon, the containerd shim) listens on a unix socket and names it
 * with --console-socket; the runtime makes a pty and sends its master
 * there, and the container's process gets the other side.  Here that
 * side is the holder's: it carries bytes to and from the guest's own
 * pty (sbx-exec -t's), which is the container's terminal. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "oci.h"
#include "util.h"

/* Connect to the socket at path.  A path too long for sun_path is
 * reached through its directory's fd, as /proc/self/fd/N/NAME. */
static int console_connect(const char *path, struct sbx_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int dfd = -1;
	if (strlen(path) >= sizeof sa.sun_path) {
		char d[SBX_OCI_PATH_MAX + 1], b[SBX_OCI_PATH_MAX + 1];
		snprintf(d, sizeof d, "%s", path);
		snprintf(b, sizeof b, "%s", path);
		if ((dfd = open(dirname(d), O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot open --console-socket's directory");
		if (snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/%s", dfd, basename(b)) >=
		    (int)sizeof sa.sun_path)
			return sbx_err_set(err, SBX_EXIT_INVALID, ENAMETOOLONG, "cannot use --console-socket");
	} else {
		snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot connect to --console-socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(fd);
		return sbx_err_set(err, SBX_EXIT_INVALID, e, "cannot connect to --console-socket %.200s", path);
	}
	return fd;
}

static int send_fd(int sock, int fd, const char *name)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = { .iov_base = (void *)name, .iov_len = strlen(name) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	ssize_t n;
	while ((n = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n == (ssize_t)iov.iov_len ? 0 : -1;
}

int sbx_oci_console(const char *sock, unsigned rows, unsigned cols, struct sbx_err *err)
{
	_cleanup_close_ int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	char name[64];
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof name))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a terminal");
	_cleanup_close_ int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	struct termios t;
	if (s < 0 || tcgetattr(s, &t) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a terminal");
	/* Raw: the guest's pty echoes, edits lines, turns ^C into SIGINT and
	 * \n into \r\n; done here too it would be done twice. */
	cfmakeraw(&t);
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	if (tcsetattr(s, TCSANOW, &t) < 0 || ((rows || cols) && ioctl(s, TIOCSWINSZ, &ws) < 0))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a terminal");
	_cleanup_close_ int c = console_connect(sock, err);
	if (c < 0)
		return -1;
	/* runc sends the master's name with it; the engines ignore it. */
	if (send_fd(c, m, "/dev/ptmx") < 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "cannot send the terminal to --console-socket %.200s",
				   sock);
	int r = s;
	s = -1;
	return r;
}
