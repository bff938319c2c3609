#include "progress.h"
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#define INTERVAL_NS ((uint64_t)SBX_PROGRESS_INTERVAL_MS * 1000000u)

/* The opt-outs are read once per display: a terminal that cannot move its
 * cursor back (TERM=dumb, an editor's shell buffer) would get one line per
 * redraw, and scripts that capture a terminal session want none. */
static int wanted(int fd)
{
	const char *no = getenv("SBX_NO_PROGRESS"), *term = getenv("TERM");
	if (fd < 0 || (no && *no) || (term && !strcmp(term, "dumb")))
		return 0;
	return isatty(fd);
}

void sbx_progress_begin(struct sbx_progress *p, int fd, const char *what, uint64_t total)
{
	memset(p, 0, sizeof *p);
	p->fd = wanted(fd) ? fd : -1;
	snprintf(p->what, sizeof p->what, "%s", what ? what : "");
	p->total = total;
	p->start_ns = p->last_ns = sbx_mono_ns();
}

/* 1023 B, 1.0 KiB, 12.3 MiB: binary units, as sizes are everywhere else. */
static void fmt_bytes(double v, char *buf, size_t n)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	size_t u = 0;
	while (v >= 1024 && u + 1 < SBX_ARRAY_LEN(unit)) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%.0f B", v);
	else
		snprintf(buf, n, "%.1f %s", v, unit[u]);
}

size_t sbx_progress_format(const struct sbx_progress *p, uint64_t now_ns, char *buf, size_t n)
{
	char done[32], total[32], rate[32];
	double secs = now_ns > p->start_ns ? (double)(now_ns - p->start_ns) / 1e9 : 0;
	fmt_bytes((double)p->done, done, sizeof done);
	/* The average since the start: steadier than the last interval's. */
	if (secs > 0)
		fmt_bytes((double)p->done / secs, rate, sizeof rate);
	int len;
	if (p->total) {
		uint64_t pct = p->done >= p->total ? 100 : p->done * 100 / p->total;
		fmt_bytes((double)p->total, total, sizeof total);
		len = snprintf(buf, n, "%s: %s / %s (%u%%)%s%s%s", p->what, done, total, (unsigned)pct,
			       secs > 0 ? ", " : "", secs > 0 ? rate : "", secs > 0 ? "/s" : "");
	} else {
		len = snprintf(buf, n, "%s: %s%s%s%s", p->what, done, secs > 0 ? ", " : "", secs > 0 ? rate : "",
			       secs > 0 ? "/s" : "");
	}
	if (len < 0)
		return 0;
	return (size_t)len < n ? (size_t)len : n - 1;
}

/* Are we the terminal's foreground job?  A job in the background would
 * scribble over whatever runs in front (or be stopped by SIGTTOU under
 * tostop).  Not knowing (not our controlling terminal) counts as yes. */
static int foreground(int fd)
{
	pid_t fg = tcgetpgrp(fd);
	return fg < 0 || fg == getpgrp();
}

static void put(struct sbx_progress *p, const char *s, size_t n)
{
	if (sbx_write_all(p->fd, s, n) < 0)
		p->fd = -1; /* the display is not worth failing the work for */
}

static void draw(struct sbx_progress *p, uint64_t now, const char *suffix)
{
	char line[256], out[300];
	size_t n = sbx_progress_format(p, now, line, sizeof line);
	size_t sl = strlen(suffix);
	if (sl < sizeof line - n) {
		memcpy(line + n, suffix, sl + 1);
		n += sl;
	}
	/* One line, never wrapped: a wrapped line cannot be redrawn by \r. */
	struct winsize ws;
	if (ioctl(p->fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && n > (size_t)ws.ws_col - 1)
		n = (size_t)ws.ws_col - 1;
	/* \r to the line's start, the text, then erase what a longer
	 * previous line left to its right. */
	int len = snprintf(out, sizeof out, "\r%.*s\033[K", (int)n, line);
	put(p, out, (size_t)len);
	p->drawn = 1;
	p->last_ns = now;
}

void sbx_progress_update(struct sbx_progress *p, uint64_t done)
{
	p->done = done;
	if (p->fd < 0)
		return;
	uint64_t now = sbx_mono_ns();
	if (now - p->last_ns < INTERVAL_NS || !foreground(p->fd))
		return;
	draw(p, now, "");
}

void sbx_progress_end(struct sbx_progress *p, int ok)
{
	if (p->fd >= 0 && p->drawn) {
		if (ok) {
			draw(p, sbx_mono_ns(), ", done");
			put(p, "\n", 1);
		} else {
			put(p, "\r\033[K", 4);
		}
	}
	p->fd = -1;
	p->drawn = 0;
}
