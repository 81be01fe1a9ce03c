#!/usr/bin/env node
// Runs INSIDE bubblewrap, as the command bwrap starts, when the session has
// an LLM endpoint. The sandbox has its own network namespace (loopback
// only), so the harness reaches the LLM proxy through this forwarder: it
// listens on 127.0.0.1:<port> inside the namespace and pipes each connection
// to a Unix socket bind-mounted from the node, which the sandbox service
// connects to the real proxy. Then it runs the harness with the same stdio.
//
//   node sandbox-entry.mjs <port>=<unix socket> [...] -- <harness command...>
//
// It shares the harness's process group, so the sandbox's SIGTERM reaches
// both; it ignores it and leaves when the harness does, with its status.
import { spawn } from "node:child_process";
import net from "node:net";

const separator = process.argv.indexOf("--");
const forwards = process.argv.slice(2, separator < 0 ? undefined : separator);
const command = separator < 0 ? [] : process.argv.slice(separator + 1);

function fail(message: string): never {
  process.stderr.write(`oz0 sandbox entry: ${message}\n`);
  process.exit(127);
}

if (command.length === 0) fail("no harness command after --");

const servers: net.Server[] = [];

async function listen(spec: string): Promise<void> {
  const at = spec.indexOf("=");
  const port = Number(spec.slice(0, at));
  const socketPath = spec.slice(at + 1);
  if (at < 0 || !Number.isInteger(port) || socketPath === "") fail(`bad forward ${JSON.stringify(spec)}; expected <port>=<socket>`);
  const server = net.createServer((inbound) => {
    const outbound = net.connect(socketPath);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
    inbound.on("error", () => outbound.destroy());
    outbound.on("error", () => inbound.destroy());
  });
  servers.push(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
}

async function main(): Promise<void> {
  try {
    await Promise.all(forwards.map(listen));
  } catch (error) {
    fail(`cannot listen for the LLM forwarder: ${(error as Error).message}`);
  }
  // The harness gets SIGTERM from the group signal itself; the entry stays
  // until the harness has written its result and gone.
  process.on("SIGTERM", () => {});
  process.on("SIGINT", () => {});
  const [file, ...args] = command;
  const child = spawn(file as string, args, { stdio: "inherit" });
  child.on("error", (error: NodeJS.ErrnoException) => fail(`cannot start ${JSON.stringify(file)}: ${error.code ?? error.message}`));
  child.on("exit", (code, signal) => {
    for (const server of servers) server.close();
    if (signal !== null) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}

main().catch((error: unknown) => fail((error as Error).message));
