// A TCP relay a test can break: cut() drops every connection and refuses new
// ones (a broken stream, a dead peer); silence() keeps the connections open
// but stops forwarding (a silent network: nothing errors, nothing arrives).
import net from "node:net";

export class TcpRelay {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  #refusing = false;

  constructor(target: { host: string; port: number }) {
    this.#server = net.createServer((client) => {
      if (this.#refusing) return client.destroy();
      const upstream = net.connect(target.port, target.host);
      for (const [a, b] of [
        [client, upstream],
        [upstream, client],
      ] as const) {
        this.#sockets.add(a);
        a.pipe(b);
        a.on("error", () => b.destroy());
        a.on("close", () => {
          this.#sockets.delete(a);
          b.destroy();
        });
      }
    });
  }

  /** Listens on a loopback port; returns it. */
  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return (this.#server.address() as net.AddressInfo).port;
  }

  cut(): void {
    this.#refusing = true;
    for (const s of this.#sockets) s.destroy();
  }

  resume(): void {
    this.#refusing = false;
  }

  silence(): void {
    for (const s of this.#sockets) {
      s.unpipe();
      s.pause();
    }
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}
