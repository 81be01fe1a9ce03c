// grpc.health.v1 with liveness and readiness told apart by the `service` field,
// the way Kubernetes gRPC probes ask (`service: liveness`, `service: readiness`).
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  type Health,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type HealthCheckResponse,
} from "@oz0/proto/grpc/health/v1/health_pb";

export { ServingStatus };

/** The service names probes use. "" is the server as a whole (readiness). */
export const LIVENESS = "liveness";
export const READINESS = "readiness";

export class HealthRegistry {
  readonly #status = new Map<string, ServingStatus>();
  readonly #watchers = new Set<() => void>();

  constructor(serviceNames: readonly string[]) {
    this.#status.set(LIVENESS, ServingStatus.SERVING);
    this.#status.set(READINESS, ServingStatus.NOT_SERVING);
    this.#status.set("", ServingStatus.NOT_SERVING);
    for (const name of serviceNames) this.#status.set(name, ServingStatus.NOT_SERVING);
  }

  /** Mark the server (and every registered service) ready or not. */
  setReady(ready: boolean): void {
    const status = ready ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
    for (const name of this.#status.keys()) {
      if (name !== LIVENESS) this.#status.set(name, status);
    }
    this.#notify();
  }

  setStatus(service: string, status: ServingStatus): void {
    this.#status.set(service, status);
    this.#notify();
  }

  status(service: string): ServingStatus | undefined {
    return this.#status.get(service);
  }

  #notify(): void {
    for (const watcher of this.#watchers) watcher();
  }

  /** The grpc.health.v1.Health implementation. */
  service(): Partial<ServiceImpl<typeof Health>> {
    const check = (service: string): HealthCheckResponse => {
      const status = this.#status.get(service);
      if (status === undefined) {
        throw new ConnectError(
          `unknown service "${service}": ask for "", "${LIVENESS}", "${READINESS}" or a served service name`,
          Code.NotFound,
        );
      }
      return create(HealthCheckResponseSchema, { status });
    };
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const registry = this;
    return {
      check: (request) => check(request.service),
      async *watch(request, context) {
        let last: ServingStatus | undefined;
        while (!context.signal.aborted) {
          const status = registry.#status.get(request.service) ?? ServingStatus.SERVICE_UNKNOWN;
          if (status !== last) {
            last = status;
            yield create(HealthCheckResponseSchema, { status });
          }
          await new Promise<void>((resolve) => {
            const wake = (): void => {
              registry.#watchers.delete(wake);
              context.signal.removeEventListener("abort", wake);
              resolve();
            };
            registry.#watchers.add(wake);
            context.signal.addEventListener("abort", wake);
          });
        }
      },
    };
  }
}
