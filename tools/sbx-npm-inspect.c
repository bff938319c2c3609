/* sbx-npm-inspect FILE [N]: the package cache's install-script check
 * (proxy/npmtgz.h) of an npm tarball, N times (default 1), for make bench
 * (scripts/bench-npm.sh): one JSON line, the verdict and each run's
 * milliseconds.  Exit 0 whatever the verdict; 1 when FILE cannot be opened. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "npmtgz.h"

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: sbx-npm-inspect FILE [N]\n");
		return 2;
	}
	int n = argc == 3 ? atoi(argv[2]) : 1, fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || n < 1) {
		perror(argv[1]);
		return 1;
	}
	char why[300] = "";
	int r = 0;
	printf("{\"ms\": [");
	for (int i = 0; i < n; i++) {
		double t0 = now_ms();
		r = sbx_npm_tgz_scripts(fd, why, sizeof why);
		printf("%s%.3f", i ? ", " : "", now_ms() - t0);
	}
	json_t *w = json_string(why);
	char *ws = json_dumps(w, JSON_ENCODE_ANY);
	printf("], \"verdict\": %d, \"why\": %s}\n", r, ws ? ws : "\"\"");
	free(ws);
	json_decref(w);
	close(fd);
	return 0;
}
