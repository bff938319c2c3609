/* guest-init's one logger (init.h), in a file of its own: boot.c, net.c
 * and pkg.c all log, and none of them is the others' base. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "init.h"

void sbx_guest_log(const char *fmt, ...)
{
	static int kmsg_fd = -1;
	char line[1024];
	char lvl = '3';
	va_list ap;
	int n, off, fd;

	/* Callers may lead with a kernel "<N>" level; the default is KERN_ERR
	 * so the line reaches the serial log the host keeps (and would
	 * survive a `quiet` boot): this function is for things that went wrong. */
	if (fmt[0] == '<' && fmt[1] >= '0' && fmt[1] <= '7' && fmt[2] == '>') {
		lvl = fmt[1];
		fmt += 3;
	}
	off = snprintf(line, sizeof(line), "<%c>sbx-init: ", lvl);
	va_start(ap, fmt);
	n = vsnprintf(line + off, sizeof(line) - (size_t)off - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	n += off;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';

	if (getpid() != 1) {
		(void)!write(STDERR_FILENO, line + 3, (size_t)n - 3);
		return;
	}
	if (kmsg_fd < 0)
		kmsg_fd = open("/dev/kmsg", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (kmsg_fd >= 0 && write(kmsg_fd, line, (size_t)n) == n)
		return;
	/* /dev not mounted yet: the console node from the kernel's built-in
	 * initramfs is still there. */
	fd = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, line + 3, (size_t)n - 3);
		close(fd);
	}
}
