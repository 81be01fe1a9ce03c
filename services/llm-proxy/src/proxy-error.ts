// Errors of the proxy's domain modules, with a code the RPC handlers and the
// HTTP handler map to a status. Messages never carry a secret.

export type ProxyErrorCode =
  | "invalid_argument"
  | "not_found"
  | "kek_invalid"
  | "kek_mismatch"
  | "unauthenticated"
  | "permission_denied"
  | "budget_exhausted"
  | "model_calls_exhausted"
  | "price_unknown";

export class ProxyError extends Error {
  readonly code: ProxyErrorCode;

  constructor(code: ProxyErrorCode, message: string) {
    super(message);
    this.name = "ProxyError";
    this.code = code;
  }
}
