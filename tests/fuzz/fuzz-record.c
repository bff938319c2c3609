/* libFuzzer target: the session record reader (session.json).  Records
 * are written by sbx itself, but a disk error, an editor or an attacker
 * with access to the state directory can leave anything there; every
 * command must survive reading it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *txt = malloc(size + 1);
	if (!txt)
		return 0;
	memcpy(txt, data, size);
	txt[size] = 0;
	struct sbx_session s;
	if (sbx_record_parse(txt, "s-0123456789ab", &s) == 0) {
		/* Whatever it accepted must be bounded, NUL-terminated text. */
		if (strnlen(s.state, sizeof s.state) == sizeof s.state ||
		    strnlen(s.tmpl_name, sizeof s.tmpl_name) == sizeof s.tmpl_name || s.nvols > 8)
			abort();
	}
	free(txt);
	return 0;
}
