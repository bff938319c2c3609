/* Unit tests for the progress display (TAP): it draws on a terminal (a
 * pty here), at most once per interval, and writes nothing at all to a
 * pipe, to fd -1, or when the user opted out. */
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "progress.h"
#include "util.h"

#include "tap.h"

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Whatever is waiting on fd (non-blocking), NUL-terminated. */
static size_t drain(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	for (;;) {
		ssize_t r = read(fd, buf + got, cap - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	buf[got] = 0;
	return got;
}

/* Run one display on fd: begin, a first update at once (too early to
 * draw), one after the interval, a burst within the next interval, end. */
static void run(int fd, int ok_end)
{
	struct sbx_progress p;
	sbx_progress_begin(&p, fd, "saving memory", 1000);
	sbx_progress_update(&p, 100);
	sleep_ms(SBX_PROGRESS_INTERVAL_MS + 30);
	sbx_progress_update(&p, 500);
	for (int i = 0; i < 100; i++)
		sbx_progress_update(&p, 500 + (uint64_t)i % 3);
	sbx_progress_update(&p, 1000);
	sbx_progress_end(&p, ok_end);
}

static int count(const char *s, const char *sub)
{
	int c = 0;
	for (const char *q = s; (q = strstr(q, sub)); q += strlen(sub))
		c++;
	return c;
}

int main(void)
{
	char buf[8192];
	unsetenv("SBX_NO_PROGRESS");
	setenv("TERM", "xterm", 1);

	/* The line itself. */
	struct sbx_progress p;
	sbx_progress_begin(&p, -1, "copying", 3u << 20);
	p.done = 3u << 19;
	size_t len = sbx_progress_format(&p, p.start_ns + 2000000000u, buf, sizeof buf);
	ok(len == strlen(buf) && !strcmp(buf, "copying: 1.5 MiB / 3.0 MiB (50%), 768.0 KiB/s"),
	   "what, done / total (percent), average rate");
	p.total = 0;
	p.done = 1000;
	sbx_progress_format(&p, p.start_ns + 1000000000u, buf, sizeof buf);
	ok(!strcmp(buf, "copying: 1000 B, 1000 B/s"), "an unknown total has no total and no percent");
	p.total = 10;
	p.done = 20;
	sbx_progress_format(&p, p.start_ns, buf, sizeof buf);
	ok(!strcmp(buf, "copying: 20 B / 10 B (100%)"), "percent stops at 100, no rate at time 0");
	ok(sbx_progress_format(&p, p.start_ns, buf, 8) == 7 && strlen(buf) == 7, "a short buffer truncates");
	char longname[200];
	memset(longname, 'w', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	sbx_progress_begin(&p, -1, longname, 0);
	ok(strlen(p.what) == sizeof p.what - 1, "a long label is cut to fit");

	/* On a terminal. */
	int m, s;
	if (openpty(&m, &s, NULL, NULL, NULL) < 0) {
		printf("1..0 # SKIP no pty: %s\n", strerror(errno));
		return 0;
	}
	fcntl(m, F_SETFL, O_NONBLOCK);
	struct sbx_progress q;
	sbx_progress_begin(&q, s, "saving memory", 1000);
	sbx_progress_update(&q, 10);
	ok(drain(m, buf, sizeof buf) == 0, "nothing drawn before the first interval has passed");
	sbx_progress_end(&q, 1);
	ok(drain(m, buf, sizeof buf) == 0, "work shorter than the interval never draws, not even at the end");

	run(s, 1);
	drain(m, buf, sizeof buf);
	ok(strstr(buf, "\rsaving memory: 500 B / 1000 B (50%)") != NULL,
	   "draws what, done / total and percent on a tty");
	ok(strstr(buf, "\033[K") != NULL, "erases the rest of the line");
	ok(count(buf, "\r") >= 2 && count(buf, "(50%)") == 1, "a burst of updates within the interval draws once");
	ok(strstr(buf, "(100%)") && strstr(buf, ", done") && strchr(buf, '\n'),
	   "ends with the final figures, done and a newline");

	run(s, 0);
	drain(m, buf, sizeof buf);
	size_t bl = strlen(buf);
	ok(bl >= 4 && !strcmp(buf + bl - 4, "\r\033[K") && !strstr(buf, "done"), "a failure erases the line");

	setenv("SBX_NO_PROGRESS", "1", 1);
	run(s, 1);
	ok(drain(m, buf, sizeof buf) == 0, "SBX_NO_PROGRESS=1: nothing on a tty");
	setenv("SBX_NO_PROGRESS", "", 1);
	run(s, 1);
	ok(drain(m, buf, sizeof buf) > 0, "SBX_NO_PROGRESS empty: draws");
	unsetenv("SBX_NO_PROGRESS");
	setenv("TERM", "dumb", 1);
	run(s, 1);
	ok(drain(m, buf, sizeof buf) == 0, "TERM=dumb: nothing");
	setenv("TERM", "xterm", 1);

	/* A narrow terminal: the line is cut, never wrapped. */
	struct winsize ws = { .ws_row = 24, .ws_col = 20 };
	ioctl(s, TIOCSWINSZ, &ws);
	run(s, 1);
	drain(m, buf, sizeof buf);
	int longest = 0;
	for (char *l = strtok(buf, "\r\n"); l; l = strtok(NULL, "\r\n")) {
		char *e = strstr(l, "\033[K");
		int w = e ? (int)(e - l) : (int)strlen(l);
		longest = w > longest ? w : longest;
	}
	ok(longest > 0 && longest <= 19, "a line fits a 20-column terminal");
	close(s);
	close(m);

	/* Not a terminal: not one byte. */
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return 1;
	run(pfd[1], 1);
	run(pfd[1], 0);
	close(pfd[1]);
	ok(drain(pfd[0], buf, sizeof buf) == 0, "nothing at all written to a pipe");
	close(pfd[0]);
	int dn = open("/dev/null", O_WRONLY | O_CLOEXEC);
	run(dn, 1);
	close(dn);
	run(-1, 1);
	ok(1, "/dev/null and fd -1 are silent and harmless");

	printf("1..%d\n", n);
	return failed ? 1 : 0;
}
