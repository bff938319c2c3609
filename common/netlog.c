/* Reading a session's connection log (LIB/sessions/ID/net.log, written by
 * its proxy) for sbx-ps --net.  On its own, so sbx-ps links neither the
 * proxy nor libcurl and libxml2 with it. */
#include "egress.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

int sbx_netlog_read(struct sbx_state *st, const char *id, json_t **out, struct sbx_err *err)
{
	*out = NULL;
	if (sbx_session_visible(st, id, err) < 0)
		return -1;
	_cleanup_close_ int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0)
		return errno == ENOENT ? sbx_err_set(err, SBX_EXIT_NOENT, 0, "no such session: %s", id)
				       : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open session %s", id);
	json_t *arr = json_array();
	if (!arr)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	int fd = openat(dfd, "net.log", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_fclose_ FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
	if (fd >= 0 && !f)
		close(fd);
	char *line = NULL;
	size_t cap = 0;
	/* A line torn by a crash, or one that is not ours, is skipped. */
	while (f && getline(&line, &cap, f) > 0) {
		json_t *o = json_loads(line, 0, NULL);
		if (json_is_object(o))
			json_array_append_new(arr, o);
		else
			json_decref(o);
	}
	free(line);
	*out = arr;
	return 0;
}
