/* libFuzzer target: what sbx reads from Cloud Hypervisor (common/vmm_ch.h).
 * The VMM parses guest-controlled device state all day and is jailed as if
 * already compromised, so its API answers, its event stream and the vsock
 * handshake are hostile input too; so is a snapshot's config.json. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm_ch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *txt = (const char *)data;
	char out[64], state[16];
	struct sbx_vm_counters c;
	sbx_ch_error_text(txt, size, out, sizeof out);
	if (strnlen(out, sizeof out) == sizeof out)
		abort();
	sbx_ch_parse_info(txt, size, state, sizeof state);
	sbx_ch_parse_counters(txt, size, &c);
	sbx_ch_parse_ping(txt, size, out, sizeof out);
	sbx_ch_vsock_reply(txt, size);

	/* The event stream in pieces whose sizes the input picks. */
	static struct sbx_ch_events ev;
	memset(&ev, 0, sizeof ev);
	for (size_t off = 0, step = size ? (size_t)data[0] % 97 + 1 : 1; off < size; off += step) {
		int k = sbx_ch_events_feed(&ev, txt + off, size - off < step ? size - off : step);
		if (k < SBX_VM_EV_NONE || k > SBX_VM_EV_EOF || ev.len > sizeof ev.buf)
			abort();
	}

	/* A snapshot's config.json re-pointed at a session. */
	json_t *snap = json_loadb(txt, size, 0, NULL);
	if (snap) {
		struct sbx_vm_config cfg = { .kernel = "/sbx/kernel",
					     .initrd = "/sbx/initrd",
					     .rootfs = "/sbx/rootfs.img",
					     .scratch = "/sbx/scratch.img",
					     .vsock_sock = "vsock/agent.sock",
					     .console_path = "console.log",
					     .hostname = "s-0123456789ab",
					     .vcpus = 1,
					     .memory_mib = 256,
					     .accel = SBX_ACCEL_KVM };
		struct sbx_err e = { 0 };
		json_t *fresh = sbx_ch_create_body(&cfg, 0, &e);
		if (fresh && sbx_ch_restore_patch(snap, fresh, &e) == 0) {
			char *s = json_dumps(snap, JSON_COMPACT);
			free(s);
		}
		json_decref(fresh);
		json_decref(snap);
	}
	return 0;
}
