// The test side of fixtures/hooks/hold.mjs: a command hook that connects to the port its call's command names
// (`hold PORT`) and holds the call, and the job's lock, until it is killed.
import net from "node:net";

/** A port the `hold` hook connects to once it runs: `hook` is its connection, which closes when the hook is killed. */
export async function holdingHook(): Promise<{ port: number; hook: Promise<net.Socket>; close: () => void }> {
  const hookRuns = Promise.withResolvers<net.Socket>();
  const server = net.createServer((socket) => hookRuns.resolve(socket.on("error", () => undefined)));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as net.AddressInfo).port, hook: hookRuns.promise, close: () => server.close() };
}
