/* Built static on the host by t1700-guest.t and copied into sessions: what
 * programs in the guest rely on, checked from inside, the same on every
 * template (busybox has no C compiler).
 *   guest-check dino DIR...   d_ino of every getdents64 entry == its st_ino
 *   guest-check services      getservbyname("http"), getprotobyname("tcp")
 *   guest-check hostname      gethostname() resolves
 * Prints what differs; exits 1 if anything does. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct linux_dirent64 {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int dino(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), bad = 0, seen = 0;
	char buf[32768];
	struct stat self;
	if (fd < 0 || fstat(fd, &self) < 0) {
		perror(dir);
		return 1;
	}
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			off += d->d_reclen;
			if (!strcmp(d->d_name, ".."))
				continue; /* the parent's: may be another mount's */
			struct stat st;
			/* A mount point's stat is the mounted root's, as on any
			 * Linux: only entries of this file system compare. */
			if (fstatat(fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != self.st_dev)
				continue;
			seen++;
			if (st.st_ino != d->d_ino) {
				printf("%s/%s: d_ino %llu, st_ino %llu\n", dir, d->d_name, d->d_ino,
				       (unsigned long long)st.st_ino);
				bad = 1;
			}
		}
	}
	close(fd);
	printf("%s: %d entries\n", dir, seen);
	return bad;
}

int main(int argc, char **argv)
{
	int bad = 0;
	if (argc >= 3 && !strcmp(argv[1], "dino")) {
		for (int i = 2; i < argc; i++)
			bad |= dino(argv[i]);
	} else if (argc == 2 && !strcmp(argv[1], "now")) {
		/* CLOCK_REALTIME in ms (busybox date has no %N) */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		printf("%lld\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
	} else if (argc == 2 && !strcmp(argv[1], "services")) {
		struct servent *s = getservbyname("http", "tcp");
		struct protoent *p = getprotobyname("tcp");
		printf("http %d tcp %d\n", s ? ntohs(s->s_port) : -1, p ? p->p_proto : -1);
		bad = !s || !p;
	} else if (argc == 2 && !strcmp(argv[1], "hostname")) {
		char h[256];
		struct addrinfo hints = { .ai_family = AF_INET }, *res = NULL;
		if (gethostname(h, sizeof h) < 0 || getaddrinfo(h, NULL, &hints, &res) != 0) {
			printf("%s: does not resolve\n", h);
			return 1;
		}
		char a[64];
		getnameinfo(res->ai_addr, res->ai_addrlen, a, sizeof a, NULL, 0, NI_NUMERICHOST);
		printf("%s %s\n", h, a);
		freeaddrinfo(res);
	} else {
		fprintf(stderr, "usage: guest-check dino DIR... | services | hostname\n");
		return 2;
	}
	return bad;
}
