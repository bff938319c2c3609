/* libFuzzer target: the monitor's request decoder (monitor/privmsg.c),
 * which the privileged half runs on whatever its unprivileged half sends. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > PRIV_MSG_MAX)
		return 0;
	uint8_t *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	struct priv_msg m;
	if (priv_decode(buf, size, size + 1, &m) == 0)
		for (int t = 1; t < PT_MAX; t++)
			if (m.str[t] && strlen(m.str[t]) > size)
				abort(); /* a string past the message */
	free(buf);
	return 0;
}
