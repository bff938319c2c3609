/* Cloud Hypervisor's API as sbx speaks it (common/vmm_ch.h), without a
 * Cloud Hypervisor: the request bodies the backend sends, built through its
 * own code, and its parsers fed the documented response shapes in
 * tests/fixtures/cloud-hypervisor (see the README there).  TAP.
 *   test-vmm-ch              the checks
 *   test-vmm-ch --dump DIR   write every request body to DIR/NAME.json, and
 *                            DIR/index (NAME.json and the schema it must
 *                            satisfy per line), for tests/t0020-ch-api.t */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"
#include "vmm_ch.h"

#include "tap.h"

static const char *str(json_t *o, const char *path)
{
	/* "a.b.c", array index as a number: "disks.0.path" */
	char buf[128];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *v = o;
	for (char *save, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
		v = json_is_array(v) ? json_array_get(v, strtoul(k, NULL, 10)) : json_object_get(v, k);
	return json_is_string(v) ? json_string_value(v) : json_is_true(v) ? "true" : json_is_false(v) ? "false" : NULL;
}

static long long num(json_t *o, const char *path)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *v = o;
	for (char *save, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
		v = json_is_array(v) ? json_array_get(v, strtoul(k, NULL, 10)) : json_object_get(v, k);
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static int is(const char *got, const char *want)
{
	return got && want && !strcmp(got, want);
}

/* The configurations the monitor and the KVM probe give the backend. */
static struct sbx_vm_config probe_cfg(void)
{
	return (struct sbx_vm_config){ .ops = &sbx_vmm_cloud_hypervisor,
				       .kernel = "/var/lib/sbx/templates/d@1/vmlinux",
				       .initrd = "/var/lib/sbx/templates/d@1/initrd.cpio",
				       .hostname = "probe",
				       .vcpus = 1,
				       .memory_mib = 128,
				       .accel = SBX_ACCEL_KVM,
				       .probe = 1,
				       .stdout_fd = 5 };
}

static struct sbx_vm_config session_cfg(const char *id)
{
	static char scratch[2][128];
	static int k;
	char *s = scratch[k++ % 2];
	snprintf(s, sizeof scratch[0], "/var/lib/sbx/sessions/%s/scratch.img", id);
	return (struct sbx_vm_config){ .ops = &sbx_vmm_cloud_hypervisor,
				       .kernel = "/var/lib/sbx/templates/d@1/vmlinux",
				       .initrd = "/var/lib/sbx/templates/d@1/initrd.cpio",
				       .rootfs = "/var/lib/sbx/templates/d@1/rootfs.ext4",
				       .scratch = s,
				       .vsock_sock = "vsock/agent.sock",
				       .qmp_sock = "qmp.sock",
				       .console_path = "console.log",
				       .log_path = "vmm.log",
				       .hostname = id,
				       .vcpus = 2,
				       .memory_mib = 512,
				       .accel = SBX_ACCEL_KVM };
}

static void add_vols(struct sbx_vm_config *c)
{
	static const char *const img[] = { "/var/lib/sbx/sessions/x/vol0.img", "/var/lib/sbx/sessions/x/vol1.img",
					   "/var/lib/sbx/workspaces/w/disk.img" };
	static const char *const at[] = { "/data", "/opt/tools", "/workspace/project" };
	for (unsigned i = 0; i < 3; i++) {
		c->vol_path[i] = img[i];
		c->vol_guest[i] = at[i];
	}
	c->nvols = 3;
	c->vol_rw_mask = 1u << 2;
	c->disk_bps = 64ull << 20;
	c->disk_iops = 2000;
}

struct body {
	const char *name, *schema;
	json_t *j;
};

/* Every request body the backend sends, through its own code. */
static size_t bodies(struct body *b)
{
	struct sbx_err e = { 0 };
	size_t k = 0;
	struct sbx_vm_config c = probe_cfg();
	b[k++] = (struct body){ "vm.create-probe", "/vm.create", sbx_ch_create_body(&c, 1, &e) };
	c = session_cfg("s-0123456789ab");
	b[k++] = (struct body){ "vm.create-session", "/vm.create", sbx_ch_create_body(&c, 1, &e) };
	add_vols(&c);
	b[k++] = (struct body){ "vm.create-volumes", "/vm.create", sbx_ch_create_body(&c, 1, &e) };
	c = session_cfg("s-0123456789ab");
	c.guest_params = "sbx.pkg=1";
	b[k++] = (struct body){ "vm.create-unjailed", "/vm.create", sbx_ch_create_body(&c, 0, &e) };
	c.tap_name = "sbx0";
	c.mac = "52:54:00:12:34:56";
	c.netns_fd = 7;
	c.net_rate = 32ull << 20;
	b[k++] = (struct body){ "vm.create-network", "/vm.create", sbx_ch_create_body(&c, 0, &e) };
	b[k++] = (struct body){ "vm.snapshot", "/vm.snapshot", sbx_ch_snapshot_config("/sbx/state") };
	b[k++] = (struct body){ "vm.restore", "/vm.restore", sbx_ch_restore_config("/sbx/state") };
	/* A restore's config.json: session A's snapshot re-pointed at B. */
	struct sbx_vm_config a = session_cfg("s-aaaaaaaaaaaa"), bb = session_cfg("s-bbbbbbbbbbbb");
	add_vols(&a);
	add_vols(&bb);
	json_t *snap = sbx_ch_create_body(&a, 0, &e), *fresh = sbx_ch_create_body(&bb, 0, &e);
	if (sbx_ch_restore_patch(snap, fresh, &e) < 0) {
		json_decref(snap);
		snap = NULL;
	}
	json_decref(fresh);
	b[k++] = (struct body){ "restore-config", "#/components/schemas/VmConfig", snap };
	return k;
}

static int dump(const char *dir)
{
	struct body b[16];
	size_t nb = bodies(b);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/index", dir);
	FILE *idx = fopen(path, "w");
	int rc = idx ? 0 : 1;
	for (size_t i = 0; i < nb && idx; i++) {
		snprintf(path, sizeof path, "%s/%s.json", dir, b[i].name);
		if (!b[i].j || json_dump_file(b[i].j, path, JSON_INDENT(2)) < 0) {
			fprintf(stderr, "test-vmm-ch: cannot build or write %s\n", b[i].name);
			rc = 1;
		}
		fprintf(idx, "%s.json %s\n", b[i].name, b[i].schema);
		json_decref(b[i].j);
	}
	if (idx && fclose(idx) != 0)
		rc = 1;
	return rc;
}

static void check_bodies(void)
{
	struct body b[16];
	size_t nb = bodies(b);
	int all = 1;
	for (size_t i = 0; i < nb; i++)
		all &= b[i].j != NULL;
	ok(all && nb == 8, "every request body builds");
	json_t *p = b[0].j, *s = b[1].j, *v = b[2].j, *u = b[3].j, *net = b[4].j;

	ok(is(str(p, "payload.kernel"), "/sbx/kernel") && is(str(p, "payload.initramfs"), "/sbx/initrd") &&
		   strstr(str(p, "payload.cmdline"), " sbx.probe=1") && num(p, "cpus.boot_vcpus") == 1 &&
		   num(p, "cpus.max_vcpus") == 1 && num(p, "memory.size") == 128ll << 20,
	   "probe: the jail's kernel and initramfs, 1 vCPU, 128 MiB, the probe marker asked for");
	ok(is(str(p, "serial.mode"), "Tty") && is(str(p, "console.mode"), "Off") && !json_object_get(p, "disks") &&
		   !json_object_get(p, "vsock"),
	   "probe: serial on the VMM's stdout, no virtio console, no disks, no vsock");

	const char *cl = str(s, "payload.cmdline");
	ok(cl && strstr(cl, "console=ttyS0 ") && strstr(cl, " sbx.hostname=s-0123456789ab") &&
		   strstr(cl, " sbx.scratch=1") && !strstr(cl, "tsc_early_khz") && !strstr(cl, "mitigations=off"),
	   "session: the shared command line, no TCG-only tunings under KVM");
	ok(is(str(s, "disks.0.id"), "root") && is(str(s, "disks.0.path"), "/sbx/rootfs.img") &&
		   is(str(s, "disks.0.readonly"), "true") && is(str(s, "disks.0.serial"), "sbx-root") &&
		   is(str(s, "disks.0.image_type"), "Raw"),
	   "session: the template disk read-only, serial sbx-root, raw");
	ok(is(str(s, "disks.1.id"), "scratch") && is(str(s, "disks.1.path"), "/sbx/scratch.img") &&
		   is(str(s, "disks.1.readonly"), "false") && is(str(s, "disks.1.serial"), "sbx-scratch") &&
		   is(str(s, "disks.1.image_type"), "Raw") && json_array_size(json_object_get(s, "disks")) == 2,
	   "session: the scratch disk writable, serial sbx-scratch, raw (no format probing of guest data)");
	ok(num(s, "vsock.cid") == SBX_CH_VSOCK_CID && is(str(s, "vsock.socket"), "vsock/agent.sock") &&
		   is(str(s, "serial.mode"), "File") && is(str(s, "serial.file"), "console.log") &&
		   json_is_true(json_object_get(s, "pvpanic")) && is(str(s, "rng.src"), "/dev/urandom"),
	   "session: vsock, serial to console.log, pvpanic, rng");
	ok(num(s, "cpus.boot_vcpus") == 2 && num(s, "memory.size") == 512ll << 20 && !json_object_get(s, "net"),
	   "session: vCPUs and memory, no NIC");

	cl = str(v, "payload.cmdline");
	ok(json_array_size(json_object_get(v, "disks")) == 5 && is(str(v, "disks.2.path"), "/sbx/vol0.img") &&
		   is(str(v, "disks.2.serial"), "sbx-vol0") && is(str(v, "disks.2.readonly"), "true") &&
		   is(str(v, "disks.3.readonly"), "true") && is(str(v, "disks.4.serial"), "sbx-vol2") &&
		   is(str(v, "disks.4.readonly"), "false"),
	   "volumes: read-only ones and a writable workspace, by serial");
	ok(cl && strstr(cl, " sbx.vol0=/data") && strstr(cl, " sbx.vol2=/workspace/project") &&
		   strstr(cl, " sbx.volrw=4"),
	   "volumes: where the guest mounts them, and which is writable");
	ok(is(str(v, "rate_limit_groups.0.id"), "sbx") &&
		   num(v, "rate_limit_groups.0.rate_limiter_config.bandwidth.size") == 64ll << 20 &&
		   num(v, "rate_limit_groups.0.rate_limiter_config.bandwidth.refill_time") == 1000 &&
		   num(v, "rate_limit_groups.0.rate_limiter_config.ops.size") == 2000 &&
		   is(str(v, "disks.1.rate_limit_group"), "sbx") && is(str(v, "disks.4.rate_limit_group"), "sbx") &&
		   !json_object_get(json_array_get(json_object_get(v, "disks"), 0), "rate_limit_group") &&
		   !json_object_get(json_array_get(json_object_get(v, "disks"), 2), "rate_limit_group"),
	   "volumes: the writable disks share one rate limit group, the read-only ones are not in it");
	ok(!json_object_get(s, "rate_limit_groups") && !str(s, "disks.1.rate_limit_group"),
	   "session without a disk throttle: no rate limit group");

	ok(is(str(u, "disks.1.path"), "/var/lib/sbx/sessions/s-0123456789ab/scratch.img") &&
		   is(str(u, "payload.kernel"), "/var/lib/sbx/templates/d@1/vmlinux") &&
		   strstr(str(u, "payload.cmdline"), " sbx.pkg=1"),
	   "unjailed: the host's paths, the guest parameters passed on");
	ok(is(str(net, "net.0.tap"), "sbx0") && is(str(net, "net.0.mac"), "52:54:00:12:34:56") &&
		   is(str(net, "net.0.id"), "net0") &&
		   !json_object_get(json_array_get(json_object_get(net, "net"), 0), "ip"),
	   "network: the TAP by name and the MAC, no host-side IP for the VMM to set");
	ok(num(net, "net.0.rate_limiter_config.bandwidth.size") == 32ll << 20 &&
		   num(net, "net.0.rate_limiter_config.bandwidth.refill_time") == 1000 &&
		   !str(net, "net.0.rate_limiter_config.ops"),
	   "network: network.rate as the NIC's bandwidth bucket, refilled each second");

	ok(is(str(b[5].j, "destination_url"), "file:///sbx/state") && json_object_size(b[5].j) == 1,
	   "vm.snapshot: destination_url file:// of the state directory");
	ok(is(str(b[6].j, "source_url"), "file:///sbx/state") && is(str(b[6].j, "resume"), "false"),
	   "vm.restore: source_url, and the VM stays paused");

	json_t *r = b[7].j;
	ok(r && is(str(r, "disks.1.path"), "/var/lib/sbx/sessions/s-bbbbbbbbbbbb/scratch.img") &&
		   strstr(str(r, "payload.cmdline"), "s-aaaaaaaaaaaa") && is(str(r, "disks.4.readonly"), "false"),
	   "restore: the snapshot's disks re-pointed at the new session, the rest kept");

	struct sbx_err e = { 0 };
	struct sbx_vm_config c = session_cfg("s-0123456789ab");
	char huge[1100];
	memset(huge, 'x', sizeof huge - 1);
	huge[sizeof huge - 1] = 0;
	c.guest_params = huge;
	json_t *tl = sbx_ch_create_body(&c, 1, &e);
	ok(!tl && e.code == SBX_EXIT_INVALID && strstr(e.msg, "too long"), "a command line that does not fit: 3");

	/* A snapshot whose disks differ from the session's is refused. */
	struct sbx_vm_config a = session_cfg("s-aaaaaaaaaaaa"), bb = session_cfg("s-bbbbbbbbbbbb");
	add_vols(&a);
	json_t *snap = sbx_ch_create_body(&a, 0, &e), *fresh = sbx_ch_create_body(&bb, 0, &e);
	memset(&e, 0, sizeof e);
	ok(sbx_ch_restore_patch(snap, fresh, &e) < 0 && e.code == SBX_EXIT_INVALID && strstr(e.msg, "vol0"),
	   "restore: a snapshot with a disk the session lacks: 3");
	json_decref(snap);
	memset(&e, 0, sizeof e);
	json_t *junk = json_pack("{s:i}", "cpus", 1);
	ok(sbx_ch_restore_patch(junk, fresh, &e) < 0 && e.code == SBX_EXIT_INVALID, "restore: not a VmConfig: 3");
	json_decref(junk);
	json_decref(fresh);
	for (size_t i = 0; i < SBX_ARRAY_LEN(b) && i < 8; i++)
		json_decref(b[i].j);
}

static char fixdir[PATH_MAX];

static char *fixture(const char *name, size_t *len)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", fixdir, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *buf = malloc(1 << 20);
	*len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	if (buf)
		buf[*len] = 0;
	return buf;
}

static int find_fixtures(const char *argv0)
{
	const char *env = getenv("SBX_CH_FIXTURES");
	char exe[PATH_MAX];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[l > 0 ? l : 0] = 0;
	const char *cands[] = { env, "tests/fixtures/cloud-hypervisor", NULL };
	char rel[PATH_MAX + 64];
	char *slash = strrchr(exe, '/');
	if (slash) { /* B/tests/test-vmm-ch -> B/../tests/fixtures: for B=build in the tree */
		*slash = 0;
		snprintf(rel, sizeof rel, "%s/../../tests/fixtures/cloud-hypervisor", exe);
		cands[2] = rel;
	}
	(void)argv0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(cands); i++) {
		char probe[PATH_MAX + 64];
		if (!cands[i])
			continue;
		snprintf(probe, sizeof probe, "%s/vm.info.json", cands[i]);
		if (access(probe, R_OK) == 0) {
			snprintf(fixdir, sizeof fixdir, "%s", cands[i]);
			return 0;
		}
	}
	return -1;
}

static void check_responses(void)
{
	size_t len;
	char out[512], state[32];
	char *t = fixture("error-boot.json", &len);
	sbx_ch_error_text(t, len, out, sizeof out);
	ok(t && !strcmp(out, "Error from API: The VM could not boot: VM is not created"),
	   "error body (JSON array, outermost first) as one line");
	free(t);
	t = fixture("error-legacy.txt", &len);
	sbx_ch_error_text(t, len, out, sizeof out);
	ok(t && !strcmp(out, "VmCreate(VmAlreadyCreated)"), "error body of older releases (Debug text) kept as is");
	free(t);
	t = fixture("error-micro-http.txt", &len);
	sbx_ch_error_text(t, len, out, sizeof out);
	ok(t && strstr(out, "Unsupported header name") && !strchr(out, '\n'), "micro_http's error: one line");
	free(t);
	sbx_ch_error_text("", 0, out, sizeof out);
	ok(!strcmp(out, "(no details)"), "empty error body");
	char small[16];
	sbx_ch_error_text("[\"a very long message indeed\"]", 30, small, sizeof small);
	ok(strlen(small) == sizeof small - 1, "a long error is cut to the buffer, NUL-terminated");

	t = fixture("vm.info.json", &len);
	ok(t && sbx_ch_parse_info(t, len, state, sizeof state) == 0 && !strcmp(state, "Running"),
	   "vm.info: the state of a real answer (nulls and keys the schema lacks included)");
	free(t);
	ok(sbx_ch_parse_info("{\"state\":\"Paused\"}", 18, state, sizeof state) < 0 &&
		   sbx_ch_parse_info("nonsense", 8, state, sizeof state) < 0,
	   "vm.info: not a VmInfo is refused");

	char version[32];
	t = fixture("vmm.ping.json", &len);
	ok(t && sbx_ch_parse_ping(t, len, version, sizeof version) == 44 && !strcmp(version, "44.0.0") &&
		   sbx_ch_parse_ping("{\"version\":\"v34.1\"}", 19, version, sizeof version) == 34 &&
		   sbx_ch_parse_ping("{}", 2, version, sizeof version) == -1,
	   "vmm.ping: the version and its major number");
	free(t);

	struct sbx_vm_counters c;
	t = fixture("vm.counters.json", &len);
	ok(t && sbx_ch_parse_counters(t, len, &c) == 0 && c.disk_read_bytes == 12582912 + 65536 + 4096 &&
		   c.disk_write_bytes == 1048576 && c.disk_read_ops == 493 && c.disk_write_ops == 31 &&
		   c.net_rx_bytes == 1500 && c.net_tx_bytes == 640,
	   "vm.counters: disks and NICs summed");
	free(t);
	ok(sbx_ch_parse_counters("{\"a\":1}", 7, &c) < 0 &&
		   sbx_ch_parse_counters("{\"a\":{\"rx_bytes\":\"1\"}}", 22, &c) < 0 &&
		   sbx_ch_parse_counters("[]", 2, &c) < 0,
	   "vm.counters: not a map of counter maps is refused");

	static struct sbx_ch_events ev;
	t = fixture("events-panic.txt", &len);
	ok(t && sbx_ch_events_feed(&ev, t, len) == SBX_VM_EV_PANIC && ev.len == 0, "events: guest/panic seen");
	int worst = SBX_VM_EV_NONE;
	for (size_t i = 0; t && i < len; i++) {
		int k = sbx_ch_events_feed(&ev, t + i, 1);
		if (k == SBX_VM_EV_PANIC || (k != SBX_VM_EV_NONE && worst == SBX_VM_EV_NONE))
			worst = k;
	}
	ok(worst == SBX_VM_EV_PANIC, "events: the same, a byte at a time");
	free(t);
	t = fixture("events-poweroff.txt", &len);
	ok(t && sbx_ch_events_feed(&ev, t, len) == SBX_VM_EV_SHUTDOWN, "events: a power-off is vm/shutdown");
	free(t);
	const char *garbage = "}}nonsense{\"x\":}\n{\"source\":\"vm\",\"event\":\"rebooting\",\"properties\":null}";
	ok(sbx_ch_events_feed(&ev, garbage, strlen(garbage)) == SBX_VM_EV_REBOOT, "events: garbage skipped");
	const char *half = "{\"source\":\"guest\",\"event\":";
	ok(sbx_ch_events_feed(&ev, half, strlen(half)) == SBX_VM_EV_NONE && ev.len == strlen(half) &&
		   sbx_ch_events_feed(&ev, "\"panic\"}", 8) == SBX_VM_EV_PANIC,
	   "events: an object split across reads");
	static char big[40000];
	memset(big, ' ', sizeof big);
	big[0] = '{';
	big[1] = '"';
	sbx_ch_events_feed(&ev, big, sizeof big);
	ok(ev.len < sizeof ev.buf &&
		   sbx_ch_events_feed(&ev, "{\"source\":\"vm\",\"event\":\"shutdown\"}", 34) == SBX_VM_EV_SHUTDOWN,
	   "events: an object larger than the buffer is dropped, the stream goes on");

	ok(sbx_ch_vsock_reply("OK 1073741824\n", 14) == 1 && sbx_ch_vsock_reply("OK 1024\n", 8) == 1,
	   "vsock: OK <port> accepted");
	ok(sbx_ch_vsock_reply("O", 1) == 0 && sbx_ch_vsock_reply("OK ", 3) == 0 && sbx_ch_vsock_reply("OK 12", 5) == 0,
	   "vsock: a prefix asks for more");
	ok(sbx_ch_vsock_reply("OK\n", 3) < 0 && sbx_ch_vsock_reply("ERR", 3) < 0 &&
		   sbx_ch_vsock_reply("OK 12x", 6) < 0 && sbx_ch_vsock_reply("OK \n", 4) < 0 &&
		   sbx_ch_vsock_reply("OK 123456789012", 15) < 0,
	   "vsock: anything else, or a port too long, refused");
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--dump"))
		return dump(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: test-vmm-ch [--dump DIR]\n");
		return 2;
	}
	check_bodies();
	if (find_fixtures(argv[0]) < 0) {
		ok(0, "the fixtures (tests/fixtures/cloud-hypervisor; SBX_CH_FIXTURES) are found");
	} else {
		check_responses();
	}
	printf("1..%d\n", n);
	return failed ? 1 : 0;
}
