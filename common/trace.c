#include "trace.h"
#include "util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

static int kept = -1; /* sbx_trace_fd's */

void sbx_trace_begin_at(struct sbx_trace *t, const char *what, uint64_t t0)
{
	memset(t, 0, sizeof *t);
	const char *f = getenv("SBX_TRACE");
	if (!f || !*f)
		return;
	t->t0 = t->last = t0;
	t->o = json_pack("{s:s}", "trace", what);
	t->steps = json_object();
	if (!t->o || !t->steps) {
		json_decref(t->o);
		json_decref(t->steps);
		t->o = t->steps = NULL;
	}
}

void sbx_trace_begin(struct sbx_trace *t, const char *what)
{
	sbx_trace_begin_at(t, what, sbx_mono_ns());
}

void sbx_trace_step(struct sbx_trace *t, const char *step)
{
	if (!t->o)
		return;
	uint64_t now = sbx_mono_ns();
	json_object_set_new(t->steps, step, json_real((double)(now - t->last) / 1e6));
	t->last = now;
}

void sbx_trace_end(struct sbx_trace *t, int ok)
{
	if (!t->o)
		return;
	const char *f = getenv("SBX_TRACE");
	json_object_set_new(t->o, "ok", json_boolean(ok));
	json_object_set_new(t->o, "total_ms", json_real((double)(sbx_mono_ns() - t->t0) / 1e6));
	json_object_set_new(t->o, "steps", t->steps);
	char *s = json_dumps(t->o, JSON_COMPACT);
	json_decref(t->o);
	t->o = t->steps = NULL;
	int fd = kept >= 0 ? kept : f ? open(f, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
	if (fd >= 0 && s) {
		size_t n = strlen(s);
		s[n] = '\n'; /* one write: lines from several processes never mix */
		if (write(fd, s, n + 1) < 0) {
			/* a debug aid: nothing to report */
		}
	}
	if (fd >= 0 && fd != kept)
		close(fd);
	free(s);
}

void sbx_trace_endp(struct sbx_trace *t)
{
	sbx_trace_end(t, 0);
}

int sbx_trace_fd(void)
{
	const char *f = getenv("SBX_TRACE");
	if (kept < 0 && f && *f)
		kept = open(f, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	return kept;
}
