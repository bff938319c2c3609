// sbx-serve's figures for make bench (scripts/bench-serve.sh runs this):
//   tti RUNS        create -> commands.run('echo hi') -> kill, ms each
//   exec SANDBOX N  commands.run('true') on a live sandbox, ms each
//   stream SANDBOX MIB  MiB/s of commands.run('head -c MIB MiB of zeros')
//   clients N       N clients at once, each create -> run -> kill:
//                   {ok, throttled (429), errors: [messages]}
// One JSON value on stdout.  E2B_SDK names the SDK's module; E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY as for any E2B code; SBX_TEMPLATE the
// template.
const { Sandbox, RateLimitError } = await import(process.env.E2B_SDK)
const T = process.env.SBX_TEMPLATE
const [what, a, b] = process.argv.slice(2)
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6
const now = () => process.hrtime.bigint()

async function tti() {
	const t0 = now()
	const s = await Sandbox.create(T, { timeoutMs: 600_000 })
	const r = await s.commands.run('echo hi')
	if (r.stdout !== 'hi\n') throw new Error(`echo said ${JSON.stringify(r.stdout)}`)
	await s.kill()
	return ms(t0)
}

let out
if (what === 'tti') {
	out = []
	for (let i = 0; i < Number(a); i++) out.push(await tti())
} else if (what === 'exec' || what === 'stream') {
	const s = await Sandbox.connect(a)
	if (what === 'exec') {
		out = []
		for (let i = 0; i < Number(b); i++) {
			const t0 = now()
			await s.commands.run('true')
			out.push(ms(t0))
		}
	} else {
		const t0 = now(), c0 = process.cpuUsage()
		const r = await s.commands.run(`head -c ${Number(b)}M /dev/zero`)
		const c = process.cpuUsage(c0)
		// The client's own CPU: the SDK decodes each envelope's JSON and
		// base64 (useBinaryFormat: false) in JavaScript.
		out = { mib_s: (r.stdout.length / 1048576) / (ms(t0) / 1000), client_cpu_s: (c.user + c.system) / 1e6 }
	}
} else if (what === 'clients') {
	const res = await Promise.allSettled(Array.from({ length: Number(a) }, () => tti()))
	out = { ok: 0, throttled: 0, errors: [], ms: [] }
	for (const r of res) {
		if (r.status === 'fulfilled') {
			out.ok++
			out.ms.push(r.value)
		} else if (r.reason instanceof RateLimitError) out.throttled++
		else out.errors.push(String(r.reason).slice(0, 200))
	}
}
console.log(JSON.stringify(out))
