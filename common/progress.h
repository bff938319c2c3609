/* A one-line progress display for long work (snapshot save and restore of
 * large memory, template builds): what, bytes done of total, percent and
 * rate, redrawn at most 10 times a second, on a terminal only.
 *
 * "Library code never prints" still holds: this module writes only to the
 * fd its caller hands in (main() passes 2, or -1 for nothing), never picks
 * a stream of its own, and carries no diagnostics (errors stay in struct
 * sbx_err).  It never fails either: a write error turns the display off,
 * since the work matters and the display does not.  So a library function
 * that takes a struct sbx_progress * is silent unless main() asked for the
 * display, and then only while a person is watching. */
#ifndef SBX_PROGRESS_H
#define SBX_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* Nothing is drawn before the work has run this long (short work does not
 * flicker), nor more often than this. */
#define SBX_PROGRESS_INTERVAL_MS 100

struct sbx_progress {
	int fd;                     /* where to draw; -1: nowhere */
	char what[64];              /* "saving memory" */
	uint64_t total;             /* bytes; 0: unknown */
	uint64_t done;              /* bytes */
	uint64_t start_ns, last_ns; /* CLOCK_MONOTONIC; last_ns: last draw */
	int drawn;                  /* a line of ours is on the screen */
};

/* Start.  fd is drawn on only when it is a terminal, SBX_NO_PROGRESS is
 * unset or empty, and TERM is not "dumb"; otherwise p stays silent.  p may
 * be passed down to code that does not care whether anything is shown. */
void sbx_progress_begin(struct sbx_progress *p, int fd, const char *what, uint64_t total);
/* Record progress: done bytes so far.  Cheap; call it for every chunk.
 * Redraws when the interval has passed and the terminal's process group
 * is ours (not while the job is in the background). */
void sbx_progress_update(struct sbx_progress *p, uint64_t done);
/* Finish.  With ok, a line already shown is redrawn with its final figures
 * and ", done", and kept; otherwise it is erased, so the error message that
 * follows starts on a clean line.  Nothing is written if nothing was shown. */
void sbx_progress_end(struct sbx_progress *p, int ok);
/* The line as it would be drawn at now_ns (CLOCK_MONOTONIC), without the
 * terminal control bytes; returns its length (truncated to n - 1). */
size_t sbx_progress_format(const struct sbx_progress *p, uint64_t now_ns, char *buf, size_t n);

#endif
