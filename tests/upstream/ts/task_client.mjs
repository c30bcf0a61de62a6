// A client of Turnstile written with the official TypeScript SDK 1.x (the version
// package-lock.json pins), as tests/tasks.rs runs it: it takes a migration to `backed_up`, then
// runs `migration.apply` the way the SDK runs a tool that works as a task, reading only what a
// 2025-11-25 server declares (its `capabilities.tasks`, each tool's `execution.taskSupport`).
//
//   node task_client.mjs URL
//
// URL is a Turnstile server's /mcp with the migration plugin, in handle mode (`--state-handle-key
// handle`). Prints one line of JSON: what the SDK saw. Anything the SDK prints goes to stderr,
// where the test reads it.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = process.argv[2];
if (!url) {
  console.error('usage: node task_client.mjs URL');
  process.exit(2);
}

// Strict: the SDK refuses to ask for a task unless the server declared it runs calls as tasks.
const client = new Client({ name: 'ts-task-client', version: '0.1.0' }, { enforceStrictCapabilities: true });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const structured = (result, tool) => {
  if (result.isError) {
    throw new Error(`${tool} failed: ${JSON.stringify(result)}`);
  }
  return result.structuredContent;
};
const listed = async (handle) => (await client.listTools({ _meta: { handle } })).tools;

const { handle } = structured(await client.callTool({ name: 'migration.dry_run', arguments: {} }), 'migration.dry_run');
await listed(handle);
structured(await client.callTool({ name: 'migration.backup', arguments: { handle } }), 'migration.backup');
const tools = await listed(handle);
const apply = tools.find((tool) => tool.name === 'migration.apply');
const status = tools.find((tool) => tool.name === 'migration.status');

// The SDK refuses, itself, a plain call of a tool that runs only as a task.
const args = { handle, confirm: true };
let plainRefusal = null;
try {
  await client.callTool({ name: 'migration.apply', arguments: args });
} catch (error) {
  plainRefusal = error.message;
}

// And asks for a task on its own, the tool being known to run as one.
const seen = [];
let result = null;
let error = null;
for await (const message of client.experimental.tasks.callToolStream({ name: 'migration.apply', arguments: args })) {
  seen.push(message.type === 'taskStatus' ? `taskStatus:${message.task.status}` : message.type);
  if (message.type === 'result') result = message.result;
  if (message.type === 'error') error = message.error.message;
}
const after = structured(await client.callTool({ name: 'migration.status', arguments: { handle } }), 'migration.status');

console.log(JSON.stringify({
  declared: client.getServerCapabilities()?.tasks ?? null,
  applyExecution: apply?.execution ?? null,
  statusExecution: status?.execution ?? null,
  plainRefusal,
  seen: [...new Set(seen)],
  resultIsError: result?.isError ?? null,
  relatedTask: result?._meta?.['io.modelcontextprotocol/related-task']?.taskId ?? null,
  error,
  stateAfter: after?.state ?? null,
}));
await client.close();
