/* Step timings for make bench, never in normal output: with SBX_TRACE set
 * to a file name, a traced operation appends one JSON line to that file,
 * {"trace":WHAT, "total_ms":..., "steps":{STEP:ms,...}} (each step's time
 * since the step before); unset, every call is a no-op.  The monitor
 * inherits the variable from whoever started it (sbx-create or sbx-gc). */
#ifndef SBX_TRACE_H
#define SBX_TRACE_H

#include <stdint.h>

#include <jansson.h>

struct sbx_trace {
	uint64_t t0, last;
	json_t *o, *steps; /* NULL: not tracing */
};

void sbx_trace_begin(struct sbx_trace *t, const char *what);
/* begin, with the start time taken earlier (sbx_mono_ns) */
void sbx_trace_begin_at(struct sbx_trace *t, const char *what, uint64_t t0);
void sbx_trace_step(struct sbx_trace *t, const char *step);
/* Write the line (ok: whether the operation succeeded) and reset t;
 * nothing once ended. */
void sbx_trace_end(struct sbx_trace *t, int ok);
/* For _cleanup_trace_: an operation left on an early return failed. */
void sbx_trace_endp(struct sbx_trace *t);
#define _cleanup_trace_ __attribute__((cleanup(sbx_trace_endp)))
/* The trace file, opened now and kept for every later line (-1: not
 * tracing or it cannot be opened): a process about to lose its view of
 * the file system (the monitor's unprivileged half) keeps this fd. */
int sbx_trace_fd(void);

#endif
