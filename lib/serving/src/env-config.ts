// Reading a service's configuration from its environment, validated. Each
// reader gives undefined when the variable is unset or empty, the value when
// it is well formed, and otherwise throws an EnvConfigError that names the
// variable, the form it expects and what it got, so a service refuses to
// start saying what to fix (`OZ0_PORT=x` is refused, never read as NaN).
// A service's `configFromEnv(env)` is built from these and tested with plain
// objects for `env`.

/** A variable of the environment that does not have the form its service expects. */
export class EnvConfigError extends Error {
  constructor(
    readonly variable: string,
    readonly expected: string,
    readonly got: string,
  ) {
    super(`${variable} must be ${expected}; got ${JSON.stringify(got)}`);
    this.name = "EnvConfigError";
  }
}

type Env = Readonly<Record<string, string | undefined>>;

function raw(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value ? value : undefined;
}

/** A string as it is set (trimmed); undefined when unset or empty. */
export function envString(env: Env, name: string): string | undefined {
  return raw(env, name);
}

/** A whole number, at least `min` (default 0) and at most `max` when given. `unit` names what it counts, for the message. */
export function envInteger(
  env: Env,
  name: string,
  options: { min?: number; max?: number; unit?: string } = {},
): number | undefined {
  const value = raw(env, name);
  if (value === undefined) return undefined;
  const min = options.min ?? 0;
  const number = /^[+-]?\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(number) || number < min || (options.max !== undefined && number > options.max)) {
    const range = options.max !== undefined ? `from ${min} to ${options.max}` : `at least ${min}`;
    throw new EnvConfigError(name, `a whole number${options.unit ? ` of ${options.unit}` : ""}, ${range}`, value);
  }
  return number;
}

/** A decimal number (`0.5`, `168`), at least `min` (default 0). `unit` names what it counts, for the message. */
export function envNumber(env: Env, name: string, options: { min?: number; unit?: string } = {}): number | undefined {
  const value = raw(env, name);
  if (value === undefined) return undefined;
  const min = options.min ?? 0;
  const number = /^[+-]?(\d+(\.\d*)?|\.\d+)$/.test(value) ? Number(value) : Number.NaN;
  if (!(number >= min))
    throw new EnvConfigError(name, `a number${options.unit ? ` of ${options.unit}` : ""}, at least ${min}`, value);
  return number;
}

/** A TCP port: 0 (pick a free one) to 65535. */
export function envPort(env: Env, name: string): number | undefined {
  const value = raw(env, name);
  if (value === undefined) return undefined;
  const port = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!(port <= 65_535)) throw new EnvConfigError(name, "a port number from 0 (any free port) to 65535", value);
  return port;
}

/** An http or https URL. */
export function envUrl(env: Env, name: string): string | undefined {
  const value = raw(env, name);
  if (value === undefined) return undefined;
  refuseUnexpanded(name, value);
  if (!isHttpUrl(value))
    throw new EnvConfigError(name, "an http:// or https:// URL, such as http://127.0.0.1:7701", value);
  return value;
}

/**
 * A comma-separated list, each item trimmed, every one `valid`; empty when
 * unset (or, with `nonEmpty`, refused). `expected` says the form, for the error.
 */
export function envList(
  env: Env,
  name: string,
  options: { valid(item: string): boolean; expected: string; nonEmpty?: boolean },
): string[] {
  const value = raw(env, name);
  if (value === undefined) return [];
  const items = value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (!items.every((item) => options.valid(item)) || (options.nonEmpty && items.length === 0))
    throw new EnvConfigError(name, options.expected, value);
  return items;
}

/** Comma-separated http or https URLs; empty when unset. */
export function envUrlList(env: Env, name: string): string[] {
  refuseUnexpanded(name, raw(env, name) ?? "");
  return envList(env, name, { valid: isHttpUrl, expected: "comma-separated http:// or https:// URLs" });
}

/** One of `values`. */
export function envOneOf<T extends string>(env: Env, name: string, values: readonly T[]): T | undefined {
  const value = raw(env, name);
  if (value === undefined) return undefined;
  if (!(values as readonly string[]).includes(value))
    throw new EnvConfigError(name, `one of ${values.join(", ")}`, value);
  return value as T;
}

/**
 * Kubernetes leaves `$(VAR)` as it is when the pod has no VAR, and URL takes
 * `$(events_service_host)` for a host name: the first call would fail, far
 * from the cause.
 */
function refuseUnexpanded(name: string, value: string): void {
  if (/\$\([A-Za-z_][A-Za-z0-9_]*\)/.test(value))
    throw new EnvConfigError(
      name,
      "an http:// or https:// URL with every $(VAR) filled in (Kubernetes leaves a variable the pod lacks as it is: a Service made after the pod has no *_SERVICE_HOST in it; restart the pod)",
      value,
    );
}

function isHttpUrl(value: string): boolean {
  try {
    const url = new URL(value);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}

/**
 * For a service's `main.ts`: its configuration read by `read` (its
 * `configFromEnv`), or, when a variable is malformed, the EnvConfigError's
 * message on stderr after the program's name and exit code 2, before anything
 * starts. Any other error is the caller's.
 */
export function configFromEnvOrExit<T>(program: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof EnvConfigError)) throw error;
    process.stderr.write(`${program}: ${error.message}\n`);
    process.exit(2);
  }
}
