// Loopback ports for the servers we start: ask the kernel for free ones.
// All listeners stay open until every port is chosen, or the kernel may hand
// the same port out twice (a broker's PLAINTEXT and CONTROLLER listeners once
// got one port between them that way).
import { createServer, type Server } from "node:net";

function listenOnFreePort(): Promise<{ server: Server; port: number }> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      resolve({ server, port: typeof address === "object" && address ? address.port : 0 });
    });
  });
}

/** `count` distinct free loopback ports. */
export async function freePorts(count: number): Promise<number[]> {
  const held: { server: Server; port: number }[] = [];
  try {
    for (let i = 0; i < count; i++) held.push(await listenOnFreePort());
    return held.map((h) => h.port);
  } finally {
    await Promise.all(held.map((h) => new Promise<void>((resolve) => h.server.close(() => resolve()))));
  }
}

export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}
