/* libFuzzer target: config.json of an OCI bundle (sbx-oci reads what an
 * engine copied from an image, or what a Slurm user wrote), its
 * linux.resources and mounts included, and a process.json (exec
 * --process) when the input's first byte is 'P'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_oci_spec s;
	struct sbx_err err = { 0 };
	if (size && data[0] == 'P') {
		if (sbx_oci_process_parse((const char *)data + 1, size - 1, &s, &err) == 0) {
			if (!s.argc || s.args[s.argc] || s.rows > 65535 || s.cols > 65535 ||
			    s.nrlimits > SBX_OCI_RLIMITS_MAX)
				abort();
			sbx_oci_spec_free(&s);
		} else if (err.code != SBX_EXIT_INVALID && err.code != SBX_EXIT_INTERNAL) {
			abort();
		}
		return 0;
	}
	if (sbx_oci_spec_parse((const char *)data, size, &s, &err) == 0) {
		/* What was accepted holds the bounds the exec request relies on. */
		size_t bytes = 0;
		if (!s.argc || s.argc > SBX_OCI_ARGS_MAX || s.envc > SBX_OCI_ENV_MAX || s.args[s.argc] ||
		    (s.env && s.env[s.envc]) || !s.root[0] || (s.cwd[0] && s.cwd[0] != '/') ||
		    s.uid > SBX_OCI_UID_MAX || s.gid > SBX_OCI_UID_MAX || !json_is_object(s.annotations))
			abort();
		for (size_t i = 0; i < s.argc; i++)
			bytes += strlen(s.args[i]) + 1;
		for (size_t i = 0; i < s.envc; i++) {
			if (!strchr(s.env[i], '=') || s.env[i][0] == '=')
				abort();
			bytes += strlen(s.env[i]) + 1;
		}
		if (bytes > SBX_OCI_ARGV_BYTES)
			abort();
		/* A shape a policy file could give, or none. */
		const struct sbx_oci_resources *r = &s.res;
		if ((r->memory && (r->memory < (64ull << 20) || r->memory > (64ull << 30) || r->memory % (1u << 20))) ||
		    (r->cpu_milli && (r->cpu_milli < 50 || r->cpu_milli > 64000)) || !r->vcpus != !r->cpu_milli ||
		    r->vcpus > 64 || (r->vcpus && r->vcpus * 1000 < r->cpu_milli) || r->pids > 1048576 ||
		    s.rows > 65535 || s.cols > 65535 || s.nrlimits > SBX_OCI_RLIMITS_MAX)
			abort();
		for (unsigned i = 0; i < s.nrlimits; i++)
			if (s.rlimits[i].resource >= SBX_OCI_RLIMITS_MAX || s.rlimits[i].soft > s.rlimits[i].hard)
				abort();
		sbx_oci_spec_free(&s);
	} else if ((err.code != SBX_EXIT_INVALID && err.code != SBX_EXIT_INTERNAL) || !err.msg[0]) {
		abort();
	}
	return 0;
}
