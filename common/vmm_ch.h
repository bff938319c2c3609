/* Cloud Hypervisor's REST API as sbx speaks it: the request bodies and the
 * response parsers (vmm_ch_api.c), apart from the transport (vmm_ch.c,
 * libcurl on the API socket), so the unit tests build every body through
 * the code the backend uses and check it against the OpenAPI schema, and
 * feed every parser the response shapes Cloud Hypervisor documents.  The
 * backend itself is sbx_vmm_cloud_hypervisor (vmm.h). */
#ifndef SBX_VMM_CH_H
#define SBX_VMM_CH_H

#include <stddef.h>
#include <jansson.h>

#include "vmm.h"

/* The guest's vsock CID.  Hybrid vsock gives each VM its own address
 * space (no host kernel vhost), so every guest can be 3, the first CID a
 * guest may have. */
#define SBX_CH_VSOCK_CID 3

/* PUT /api/v1/vm.create: the VmConfig for c, with c's paths as the VMM sees
 * them (in-jail paths when jailed), booting with the kernel command line
 * cmdline.  Devices carry ids (root, scratch, volN, vsock0, net0) that
 * vm.counters reports and a restore matches on.  NULL: out of memory. */
json_t *sbx_ch_vm_config(const struct sbx_vm_config *c, const char *cmdline);
/* The vm.create body for a session's configuration exactly as the backend
 * sends it: c's paths as the jailed (jail set) or unjailed VMM sees them,
 * and the kernel command line every backend gives the guest. */
json_t *sbx_ch_create_body(const struct sbx_vm_config *c, int jail, struct sbx_err *err);
/* PUT vm.snapshot and vm.restore for a directory, absolute as the VMM sees
 * it.  The restored VM stays paused (resume: false). */
json_t *sbx_ch_snapshot_config(const char *dir);
json_t *sbx_ch_restore_config(const char *dir);
/* A snapshot's config.json re-pointed at this session's files: fresh (a
 * VmConfig from sbx_ch_vm_config for the new session) gives the kernel
 * and initramfs paths, each disk's path by id, the vsock socket, the
 * serial console and each NIC's TAP by id.  The snapshot and the session
 * must have the same disks and devices: 3 when they do not. */
int sbx_ch_restore_patch(json_t *snap, const json_t *fresh, struct sbx_err *err);

/* An error response's body as one line: Cloud Hypervisor sends a JSON
 * array of messages, the outermost error first (older versions: plain
 * text).  Control characters are blanked; always NUL-terminated. */
void sbx_ch_error_text(const char *body, size_t n, char *out, size_t cap);
/* GET vm.info: the VM's state ("Created", "Running", "Paused",
 * "Shutdown", "BreakPoint").  -1: not a VmInfo. */
int sbx_ch_parse_info(const char *body, size_t n, char *state, size_t cap);
/* GET vmm.ping: the version string into version, and its major number
 * (-1: none). */
int sbx_ch_parse_ping(const char *body, size_t n, char *version, size_t cap);
/* GET vm.counters (device id -> counter -> value): disks' read/write
 * bytes and ops and NICs' rx/tx bytes, summed.  -1: not VmCounters. */
int sbx_ch_parse_counters(const char *body, size_t n, struct sbx_vm_counters *c);

/* The event monitor's stream: JSON objects one after the other
 * ({"timestamp": {"secs", "nanos"}, "source", "event", "properties"},
 * pretty-printed), arriving in arbitrary pieces. */
struct sbx_ch_events {
	char buf[16384];
	size_t len;
};
/* Take n more bytes; returns the most severe enum sbx_vm_event among the
 * events completed by them (SBX_VM_EV_NONE: none that matters).  Garbage
 * is skipped up to the next object; an object larger than the buffer is
 * dropped. */
int sbx_ch_events_feed(struct sbx_ch_events *ev, const char *data, size_t n);
/* An enum sbx_vm_event's rank, 0 (none) to 3 (panic): the enum's order is
 * not its severity. */
int sbx_ch_event_severity(int k);

/* The hybrid vsock handshake's reply, as read so far: 1 a complete
 * "OK <port>\n", 0 a prefix of one (read on), -1 anything else. */
int sbx_ch_vsock_reply(const char *buf, size_t n);

#endif
