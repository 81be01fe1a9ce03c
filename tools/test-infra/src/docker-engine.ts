// Whether a Docker engine answers here, so testcontainers can be used; on our
// CI machines none does and the launchers run the real servers directly.
import { request } from "node:http";

export function dockerEngineAnswers(timeoutMs = 1_000): Promise<boolean> {
  const host = process.env.DOCKER_HOST;
  const socketPath = host?.startsWith("unix://")
    ? host.slice("unix://".length)
    : host
      ? undefined
      : "/var/run/docker.sock";
  const url = host && !socketPath ? new URL(host.replace(/^tcp:/, "http:")) : undefined;
  return new Promise((resolve) => {
    const req = request(
      socketPath
        ? { socketPath, path: "/_ping", timeout: timeoutMs }
        : { host: url?.hostname, port: url?.port, path: "/_ping", timeout: timeoutMs },
      (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      },
    );
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}
