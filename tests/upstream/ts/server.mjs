#!/usr/bin/env node
// Test upstream for Turnstile: the ticket desk of plugins/tickets (server.py) written again with
// the official MCP TypeScript SDK 1.x (McpServer + StreamableHTTPServerTransport over node:http,
// stateful sessions: one transport and one McpServer per session). Turnstile gates it with the
// same binding (plugins/tickets/tickets.upstream.toml, with `url = ` instead of `command = `).
//
// It knows nothing about workflows. Each tools/call Turnstile forwards carries
// `_meta["dev.turnstile/instance"] = {workflow, state, handle?}`; the desk keeps one ticket per
// handle ("default" without one), in memory, shared by every session of the process.
//
// Tools: open(title), assign(assignee), resolve(note) (resolves at once: no elicitation here),
// fail(reason) (always an isError result), slow(seconds), reopen(), status(), purge(). Every
// result's structuredContent carries the process id as "pid".
//
// Usage: node server.mjs [--port N] [--host 127.0.0.1]
//   --port 0 (the default) picks a free port. Once listening, prints exactly one line on stdout:
//   http://HOST:PORT/mcp. Logs go to stderr.
// Environment:
//   TICKETS_CALL_LOG=PATH     append one JSON line per tools/call received, before it runs:
//                             {"tool", "arguments", "meta" (the whole params._meta), "pid"}
//   TICKETS_SLOW_START_MS=N   wait N ms before listening
// Setup: npm install (in this folder; @modelcontextprotocol/sdk pinned to 1.32.2).

import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import process from 'node:process';
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const INSTANCE_META_KEY = 'dev.turnstile/instance';
const PID = process.pid;
const MAX_BODY = 4 * 1024 * 1024;

function parseArgs(argv) {
    const opts = { port: 0, host: '127.0.0.1' };
    for (let i = 0; i < argv.length; i++) {
        const value = argv[i + 1];
        if (argv[i] === '--port' && value !== undefined) (opts.port = Number(value)), i++;
        else if (argv[i] === '--host' && value !== undefined) (opts.host = value), i++;
        else {
            console.error(`usage: node server.mjs [--port N] [--host HOST] (not ${argv[i]})`);
            process.exit(2);
        }
    }
    if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
        console.error(`--port: ${opts.port} is not a port`);
        process.exit(2);
    }
    return opts;
}
const OPTS = parseArgs(process.argv.slice(2));
const log = (...args) => console.error('tickets-ts:', ...args);

// ---------------------------------------------------------------------------------------------
// The desk: tickets by handle ("default" for calls without one).
const tickets = new Map();
let numbers = 0;

/** `_meta["dev.turnstile/instance"]` of the request being handled. In the TS SDK the tool
 * callback's second argument (RequestHandlerExtra) carries the request's `params._meta` as
 * `extra._meta`, passed through as sent (extra keys included). */
function instanceOf(extra) {
    const instance = extra?._meta?.[INSTANCE_META_KEY];
    return instance && typeof instance === 'object' ? instance : {};
}
function ticketKey(extra) {
    const handle = instanceOf(extra).handle;
    return handle ? String(handle) : 'default';
}

function ok(data) {
    const structured = { ...data, pid: PID };
    return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
}
function refused(text, data = {}) {
    return {
        content: [{ type: 'text', text }],
        structuredContent: { error: text, ...data, pid: PID },
        isError: true
    };
}
const noTicket = key => refused(`no ticket is open for '${key}': call open first`, { key });

/** One McpServer per session (the SDK's server is bound to one transport). */
function newDesk() {
    const mcp = new McpServer({ name: 'tickets-ts', version: '0.1.0' });

    mcp.registerTool(
        'open',
        {
            description: 'Open a new ticket with this title (replaces any ticket of this instance).',
            inputSchema: { title: z.string().describe('What the ticket is about') }
        },
        async ({ title }, extra) => {
            const key = ticketKey(extra);
            const ticket = { ticket: `T-${++numbers}`, title, status: 'open', assignee: null, note: null, key };
            tickets.set(key, ticket);
            return ok({ ticket: ticket.ticket, title, status: 'open' });
        }
    );

    mcp.registerTool(
        'assign',
        {
            description: 'Assign the open ticket to someone.',
            inputSchema: { assignee: z.string().describe('Who takes the ticket') }
        },
        async ({ assignee }, extra) => {
            const key = ticketKey(extra);
            const ticket = tickets.get(key);
            if (!ticket) return noTicket(key);
            ticket.assignee = assignee;
            ticket.status = 'assigned';
            return ok({ ticket: ticket.ticket, assignee });
        }
    );

    mcp.registerTool(
        'resolve',
        {
            description: 'Resolve the ticket, with an optional note.',
            inputSchema: { note: z.string().default('').describe('How it was resolved') }
        },
        async ({ note }, extra) => {
            const key = ticketKey(extra);
            const ticket = tickets.get(key);
            if (!ticket) return noTicket(key);
            ticket.status = 'resolved';
            ticket.note = note;
            return ok({ ticket: ticket.ticket, status: 'resolved' });
        }
    );

    mcp.registerTool(
        'fail',
        {
            description: 'Ask the desk for something it always refuses (answers an isError result).',
            inputSchema: { reason: z.string().default('') }
        },
        async ({ reason }) => refused(`the desk refused: ${reason || 'no reason given'}`)
    );

    mcp.registerTool(
        'slow',
        {
            description: 'Take this many seconds to answer.',
            inputSchema: { seconds: z.number().describe('How long to take') }
        },
        async ({ seconds }, extra) => {
            await sleep(Math.max(0, seconds) * 1000, undefined, { signal: extra.signal }).catch(() => {});
            return ok({ slept: seconds });
        }
    );

    mcp.registerTool(
        'reopen',
        { description: 'Reopen the resolved ticket.', inputSchema: {} },
        async (_args, extra) => {
            const key = ticketKey(extra);
            const ticket = tickets.get(key);
            if (!ticket) return noTicket(key);
            ticket.status = 'open';
            return ok({ ticket: ticket.ticket, status: 'open' });
        }
    );

    mcp.registerTool(
        'status',
        {
            description: 'The ticket of this instance, or {"ticket": null} if none was opened.',
            inputSchema: {},
            annotations: { readOnlyHint: true }
        },
        async (_args, extra) => {
            const key = ticketKey(extra);
            const ticket = tickets.get(key);
            return ok(ticket ? { ...ticket } : { ticket: null, key });
        }
    );

    mcp.registerTool(
        'purge',
        { description: 'Delete every ticket of every instance.', inputSchema: {}, annotations: { destructiveHint: true } },
        async () => {
            const purged = tickets.size;
            tickets.clear();
            return ok({ purged });
        }
    );

    return mcp;
}

// ---------------------------------------------------------------------------------------------
// The call log: one JSON line per tools/call, written when the request arrives (before the SDK
// validates its arguments or runs the tool). appendFileSync is one write(2) in O_APPEND mode, so
// the lines of several processes appending to one file do not interleave.
const CALL_LOG = process.env.TICKETS_CALL_LOG || null;
function logCalls(body) {
    if (!CALL_LOG) return;
    for (const message of Array.isArray(body) ? body : [body]) {
        if (message?.method !== 'tools/call') continue;
        const params = message.params ?? {};
        const line = JSON.stringify({
            tool: params.name,
            arguments: params.arguments ?? {},
            meta: params._meta ?? {},
            pid: PID
        });
        appendFileSync(CALL_LOG, line + '\n');
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP: /mcp, one transport (and one McpServer) per session.
const sessions = new Map(); // session id -> transport

function sendJson(res, status, body, headers = {}) {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
}
const rpcError = (res, status, code, message) => sendJson(res, status, { jsonrpc: '2.0', error: { code, message }, id: null });

async function readJson(req) {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
        size += chunk.length;
        if (size > MAX_BODY) throw Object.assign(new Error('request body too large'), { status: 413 });
        chunks.push(chunk);
    }
    try {
        return JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
        throw Object.assign(new Error('Parse error: the body is not JSON'), { status: 400, code: -32700 });
    }
}

async function handlePost(req, res) {
    let body;
    try {
        body = await readJson(req);
    } catch (e) {
        return rpcError(res, e.status ?? 400, e.code ?? -32600, e.message);
    }
    const sid = req.headers['mcp-session-id'];
    let transport = sid ? sessions.get(sid) : undefined;
    if (!transport) {
        if (sid) return rpcError(res, 404, -32001, 'Session not found');
        if (!isInitializeRequest(body)) return rpcError(res, 400, -32000, 'Bad Request: no valid session id');
        const mcp = newDesk();
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: id => {
                sessions.set(id, transport);
                log(`session ${id} opened (${sessions.size} live)`);
            }
        });
        transport.onclose = () => {
            const id = transport.sessionId;
            if (id && sessions.delete(id)) log(`session ${id} closed (${sessions.size} live)`);
            mcp.close().catch(() => {});
        };
        await mcp.connect(transport);
    }
    logCalls(body);
    await transport.handleRequest(req, res, body);
}

async function handleSession(req, res) {
    const sid = req.headers['mcp-session-id'];
    const transport = sid ? sessions.get(sid) : undefined;
    if (!transport) {
        return sid ? rpcError(res, 404, -32001, 'Session not found') : rpcError(res, 400, -32000, 'Bad Request: no session id');
    }
    await transport.handleRequest(req, res);
}

const httpServer = createServer(async (req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    try {
        if (path !== '/mcp') return sendJson(res, 404, { error: 'not found: the endpoint is /mcp' });
        if (req.method === 'POST') return await handlePost(req, res);
        if (req.method === 'GET' || req.method === 'DELETE') return await handleSession(req, res);
        return sendJson(res, 405, { error: 'method not allowed' }, { allow: 'GET, POST, DELETE' });
    } catch (e) {
        log(`error handling ${req.method} ${path}:`, e);
        if (!res.headersSent) rpcError(res, 500, -32603, 'Internal server error');
        else res.end();
    }
});
// Answers are small and many: do not let them wait for a delayed ACK.
httpServer.on('connection', socket => socket.setNoDelay(true));
httpServer.on('error', e => {
    console.error(`tickets-ts: ${e.message}`);
    process.exit(1);
});

const slowStart = Number(process.env.TICKETS_SLOW_START_MS || 0);
if (slowStart > 0) {
    log(`slow start: waiting ${slowStart} ms`);
    await sleep(slowStart);
}
httpServer.listen(OPTS.port, OPTS.host, () => {
    const { port } = httpServer.address();
    const host = OPTS.host.includes(':') ? `[${OPTS.host}]` : OPTS.host;
    process.stdout.write(`http://${host}:${port}/mcp\n`);
    log(`serving Streamable HTTP at http://${host}:${port}/mcp (pid ${PID})`);
});

async function shutdown(signal) {
    log(`${signal}: closing ${sessions.size} sessions`);
    for (const transport of sessions.values()) await transport.close().catch(() => {});
    httpServer.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 1000).unref();
}
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('SIGTERM', () => shutdown('SIGTERM'));
