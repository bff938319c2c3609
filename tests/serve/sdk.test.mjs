// The E2B JS SDK (tests/fixtures/e2b-sdk, pinned) against sbx-serve, as an
// agent written for E2B runs it: only E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY set (tests/t2000-serve.t starts the service).  Run with
// node --test; E2B_SDK is the SDK's module, SBX_TEMPLATE a template with
// bash (the SDK runs every command with /bin/bash -l -c).
import { test } from 'node:test'
import assert from 'node:assert/strict'

const { Sandbox, CommandExitError, AuthenticationError, SandboxNotFoundError } = await import(process.env.E2B_SDK)
const T = process.env.SBX_TEMPLATE

test('create, run, kill', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000, metadata: { job: 'sdk-test' } })
	try {
		assert.match(sbx.sandboxId, /^s-[0-9a-f]{12}$/)
		const r = await sbx.commands.run('echo hi; echo oops >&2')
		assert.equal(r.exitCode, 0)
		assert.equal(r.stdout, 'hi\n')
		assert.equal(r.stderr, 'oops\n')
		const e = await sbx.commands.run('exit 7').catch((x) => x)
		assert.ok(e instanceof CommandExitError, `a failing command throws CommandExitError (${e})`)
		assert.equal(e.exitCode, 7)
		const env = await sbx.commands.run('echo "$FOO"; pwd', { envs: { FOO: 'bar baz' }, cwd: '/tmp' })
		assert.equal(env.stdout, 'bar baz\n/tmp\n')
		const big = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" x')
		assert.equal(big.stdout.length, 3000000, 'three megabytes of output, streamed whole')
		const info = await sbx.getInfo()
		assert.equal(info.sandboxId, sbx.sandboxId)
		assert.equal(info.templateId, T)
		assert.deepEqual(info.metadata, { job: 'sdk-test' })
		assert.equal(info.state, 'running')
		const listed = await Sandbox.list().nextItems()
		assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), 'list has it')
		assert.equal(await sbx.isRunning(), true)
	} finally {
		await sbx.kill()
	}
	await assert.rejects(sbx.getInfo(), SandboxNotFoundError, 'gone once killed')
	assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill says it was not there')
})

test('connect to a running sandbox by its ID', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		const again = await Sandbox.connect(sbx.sandboxId)
		const r = await again.commands.run('echo again')
		assert.equal(r.stdout, 'again\n')
	} finally {
		await sbx.kill()
	}
})

test('a wrong API key is refused', async () => {
	await assert.rejects(
		Sandbox.create(T, { apiKey: 'e2b_' + '0'.repeat(40) }),
		AuthenticationError
	)
})
